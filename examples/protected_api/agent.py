"""An agent calling the protected refund API (examples/protected_api/refund_api.py).

    REVIEWER_API_TOKEN=... python -m examples.protected_api.agent --api-url http://127.0.0.1:8300 \\
        --client-id refund-bot --order 1182 --amount 740.00

It calls the API as any client would, with one addition: `TransactionAuthorization`, an `httpx.Auth`
that meets the API's challenge by relaying it to Reviewer, waits while people decide, and sends the
request once more with Reviewer's token. Without it the API answers 401 and refunds nothing; with it,
only the refund people approved runs, once.
"""

import argparse
import os

import httpx

# reviewer: begin
from reviewer_gate.tac import TransactionAuthorization, TransactionAuthorizationError

# reviewer: end


# reviewer: begin
def refund(api_url: str, order: str, amount: str, *, auth: httpx.Auth | None, api_key: str) -> httpx.Response:
    # reviewer: end
    """POST the refund; `auth` meets the challenge (None: the API's 401 comes back as it is)."""
    return httpx.post(
        f"{api_url}/refunds/{order}",
        json={"amount": amount, "currency": "EUR"},
        headers={"X-Api-Key": api_key},
        # reviewer: begin
        auth=auth,
        # reviewer: end
        timeout=30,  # each send; the wait for people between them is TransactionAuthorization's max_wait
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api-url", default="http://127.0.0.1:8300")
    parser.add_argument("--reviewer-url", default="http://127.0.0.1:8000")
    parser.add_argument("--client-id", required=True, help="the agent's registration slug")
    parser.add_argument("--api-key", default="carol-key", help="the API key the refund API knows")
    parser.add_argument("--order", default="1182")
    parser.add_argument("--amount", default="740.00")
    settings = parser.parse_args()
    # reviewer: begin
    auth = TransactionAuthorization(
        settings.reviewer_url, client_id=settings.client_id, client_secret=os.environ["REVIEWER_API_TOKEN"]
    )
    try:
        answer = refund(
            settings.api_url, settings.order, settings.amount, auth=auth, api_key=settings.api_key
        )
    except TransactionAuthorizationError as refused:
        raise SystemExit(f"not approved: {refused}") from refused
    # reviewer: end
    print(answer.status_code, answer.text)


if __name__ == "__main__":
    main()
