"""What the connect examples share: command-line settings and a ledger file standing in for payments."""

import argparse
import json
import os
import time
from pathlib import Path

# reviewer: begin
from reviewer_gate import ReviewerClient

# reviewer: end


def parse_settings(prog: str, description: str, *, port: int | None = None) -> argparse.Namespace:
    """`port`: the example is a server (A2A) listening on loopback, by default on that port."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    if port is not None:
        parser.add_argument("--port", type=int, default=port)
    parser.add_argument("--reviewer-url", default=os.environ.get("REVIEWER_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--audience", required=True, help="this agent's audience as registered in Reviewer")
    parser.add_argument("--tenant", help="this agent's tenant slug: decisions for another tenant are refused")
    parser.add_argument("--agent-slug", help="this agent's slug in Reviewer, named in its requests")
    parser.add_argument(
        "--ledger", default="refunds.jsonl", help="JSON Lines file the refunds are written to"
    )
    parser.add_argument("--order", default="1182")
    parser.add_argument("--amount", default="40.00")
    args = parser.parse_args()
    args.api_token = os.environ.get("REVIEWER_API_TOKEN") or parser.error("set REVIEWER_API_TOKEN")
    return args


# reviewer: begin
def client_from(args: argparse.Namespace) -> ReviewerClient:
    return ReviewerClient(
        reviewer_url=args.reviewer_url,
        api_token=args.api_token,
        audience=args.audience,
        tenant=args.tenant,
        agent=args.agent_slug,
    )


# reviewer: end


class Ledger:
    """The side effect: one JSON line per refund, keyed by the decision id (the idempotency key)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def refund(self, order_id: str, amount: str, *, idempotency_key: str) -> str:
        for entry in self.entries():
            if entry["idempotency_key"] == idempotency_key:
                return entry["transaction_id"]  # a retry with the same key refunds nothing twice
        transaction_id = f"tx-{idempotency_key[:8]}"
        entry = {
            "order_id": order_id,
            "amount": amount,
            "idempotency_key": idempotency_key,
            "transaction_id": transaction_id,
            "at": time.time(),
        }
        with self.path.open("a") as ledger:
            ledger.write(json.dumps(entry) + "\n")
        return transaction_id

    def entries(self) -> list[dict]:
        return [json.loads(line) for line in self.path.read_text().splitlines()] if self.path.exists() else []
