"""Command line and environment settings of the refund agent (every flag has a REFUND_AGENT_* twin)."""

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from a2a.utils import AGENT_CARD_WELL_KNOWN_PATH


@dataclass(frozen=True)
class AgentSettings:
    host: str
    port: int
    public_url: str  # how callers reach this agent; the agent card advertises it
    reviewer_url: str
    api_token: str | None
    issuer: str  # Reviewer's `iss`: its public base URL
    audience: str  # this agent's `aud` in Reviewer; by default its agent card URL
    tenant: str | None  # its tenant's slug in Reviewer: decisions for another tenant are refused
    agent_slug: str | None  # its registration's slug, named in every request (ListTasks adopts by it)
    jwks_url: str
    state_dir: Path
    ledger: Path
    downstream_url: str | None
    approval_ttl_seconds: int
    interrupted_task_timeout: float | None
    log_level: str
    rest_intake: bool = True  # also POST /api/v1/proposals when parking (the push and ListTasks remain)

    @property
    def card_url(self) -> str:
        return self.public_url + AGENT_CARD_WELL_KNOWN_PATH


def _env(name: str, default=None):
    return os.environ.get(f"REFUND_AGENT_{name}", default)


def parse_settings(argv: list[str] | None = None) -> AgentSettings:
    parser = argparse.ArgumentParser(
        prog="python -m examples.refund_agent",
        description="Demo A2A refund agent that asks Reviewer for approval before each refund.",
    )
    parser.add_argument("--host", default=_env("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(_env("PORT", "8001")))
    parser.add_argument(
        "--public-url", default=_env("PUBLIC_URL"), help="base URL callers use (default http://HOST:PORT)"
    )
    parser.add_argument("--reviewer-url", default=_env("REVIEWER_URL", "http://127.0.0.1:8000"))
    parser.add_argument(
        "--api-token",
        default=_env("API_TOKEN"),
        help="this agent's Reviewer API token (proposals, consume, outcome)",
    )
    parser.add_argument("--issuer", default=_env("ISSUER"), help="Reviewer's iss (default: --reviewer-url)")
    parser.add_argument(
        "--audience", default=_env("AUDIENCE"), help="aud this agent accepts (default: its agent card URL)"
    )
    parser.add_argument(
        "--tenant",
        default=_env("TENANT"),
        help="this agent's tenant slug in Reviewer (checked in each decision)",
    )
    parser.add_argument(
        "--agent-slug",
        default=_env("AGENT_SLUG"),
        help="this agent's slug in Reviewer, named in its requests (Reviewer's ListTasks adopts only those)",
    )
    parser.add_argument(
        "--jwks-url", default=_env("JWKS_URL"), help="default: REVIEWER_URL/.well-known/jwks.json"
    )
    parser.add_argument(
        "--state-dir",
        default=_env("STATE_DIR", ".refund-agent"),
        help="task store, asked requests and used decisions (SQLite files)",
    )
    parser.add_argument(
        "--ledger", default=_env("LEDGER"), help="JSON Lines ledger (default STATE_DIR/ledger.jsonl)"
    )
    parser.add_argument(
        "--downstream-url",
        default=_env("DOWNSTREAM_URL"),
        help="refund through this payments service instead of the ledger file",
    )
    parser.add_argument(
        "--approval-ttl",
        type=int,
        default=int(_env("APPROVAL_TTL", "86400")),
        help="seconds until an approval request expires",
    )
    parser.add_argument(
        "--interrupted-task-timeout",
        type=float,
        default=float(_env("INTERRUPTED_TASK_TIMEOUT", "300")),
        help="seconds a parked task keeps its in-memory state; 0 keeps it forever",
    )
    parser.add_argument("--log-level", default=_env("LOG_LEVEL", "info"))
    parser.add_argument(
        "--no-rest-intake",
        action="store_true",
        default=_env("NO_REST_INTAKE", "") not in ("", "0", "false"),
        help="do not POST parked requests to Reviewer: it learns of them by push or by listing tasks",
    )
    args = parser.parse_args(argv)

    public_url = (args.public_url or f"http://{args.host}:{args.port}").rstrip("/")
    reviewer_url = args.reviewer_url.rstrip("/")
    state_dir = Path(args.state_dir).resolve()
    return AgentSettings(
        host=args.host,
        port=args.port,
        public_url=public_url,
        reviewer_url=reviewer_url,
        api_token=args.api_token or None,
        issuer=(args.issuer or reviewer_url).rstrip("/"),
        audience=args.audience or public_url + AGENT_CARD_WELL_KNOWN_PATH,
        tenant=args.tenant or None,
        agent_slug=args.agent_slug or None,
        jwks_url=args.jwks_url or f"{reviewer_url}/.well-known/jwks.json",
        state_dir=state_dir,
        ledger=Path(args.ledger).resolve() if args.ledger else state_dir / "ledger.jsonl",
        downstream_url=args.downstream_url.rstrip("/") if args.downstream_url else None,
        approval_ttl_seconds=args.approval_ttl,
        interrupted_task_timeout=args.interrupted_task_timeout or None,
        log_level=args.log_level,
        rest_intake=not args.no_rest_intake,
    )
