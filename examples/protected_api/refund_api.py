"""A refund API that requires Reviewer's decision itself, whoever calls it (docs/protect-an-api.md).

    python -m reviewer_gate.resource jwk refund-api-key.pem        # makes the key, prints its public JWK
    manage.py register_resource --tenant acme --slug refund-api --name "Refund API" \\
        --audience http://127.0.0.1:8300 --jwk-file refund-api.jwk --type refund=payments.refund
    REVIEWER_GATE_API_TOKEN=... python -m examples.protected_api.refund_api --port 8300 \\
        --reviewer-url http://127.0.0.1:8000 --key-file refund-api-key.pem

The service is the API owner's FastAPI app: `refund` refunds whatever reaches it. The one addition is
the middleware: `POST /refunds/{order_id}` answers 401 with a transaction authorization challenge
unless the request carries a Reviewer decision for exactly this refund (order, amount, currency), which
the middleware verifies, consumes online and reports on. No agent can skip the step: the check runs in
the service, not in the agent. Callers are known by their API key (`X-Api-Key`); the key's owner is the
principal people see.
"""

import argparse
import os
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request

from reviewer_gate.resource import (
    ProtectedRequest,
    ResourceGuard,
    ResourceKey,
    ReviewerGateMiddleware,
    Route,
    api_key_caller,
    authorization_detail,
)


def describe_refund(audience: str):
    """What a request to POST /refunds/{order_id} would do, read from the request itself."""

    def describe(request: ProtectedRequest) -> dict[str, Any]:
        body = request.json_object()
        return authorization_detail(
            "refund",
            target=f"{audience}/orders/{request.path_params['order_id']}",
            amount=body["amount"],
            currency=body["currency"],
            order_id=request.path_params["order_id"],
        )

    return describe


def build_app(
    *,
    audience: str,
    reviewer_url: str,
    api_token: str,
    key: ResourceKey,
    callers: dict[str, str],
    ledger: list,
) -> tuple[FastAPI, ResourceGuard]:
    """(the service with its guard, the guard); `ledger` stands in for the payment provider."""
    app = FastAPI()

    @app.post("/refunds/{order_id}")
    async def refund(order_id: str, request: Request) -> dict[str, str]:
        body = await request.json()
        ledger.append({"order_id": order_id, "amount": body["amount"], "currency": body["currency"]})
        return {"refunded": body["amount"], "currency": body["currency"], "order_id": order_id}

    guard = ResourceGuard(
        routes=[Route("POST", "/refunds/{order_id}", describe_refund(audience), tool="payments.refund")],
        audience=audience,
        reviewer_url=reviewer_url,
        api_token=api_token,
        key=key,
        caller=api_key_caller("X-Api-Key", callers),
    )
    app.add_middleware(ReviewerGateMiddleware, guard=guard)
    return app, guard


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8300)
    parser.add_argument("--reviewer-url", default="http://127.0.0.1:8000")
    parser.add_argument("--key-file", default="refund-api-key.pem")
    parser.add_argument("--caller", action="append", default=["carol-key=carol"], help="API key=principal")
    settings = parser.parse_args()
    callers = dict(pair.split("=", 1) for pair in settings.caller)
    app, _guard = build_app(
        audience=f"http://127.0.0.1:{settings.port}",
        reviewer_url=settings.reviewer_url,
        api_token=os.environ["REVIEWER_GATE_API_TOKEN"],
        key=ResourceKey.from_file(Path(settings.key_file), create=True),
        callers=callers,
        ledger=[],
    )
    uvicorn.run(app, host="127.0.0.1", port=settings.port)


if __name__ == "__main__":
    main()
