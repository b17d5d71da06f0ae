"""Plain REST: any Python agent asks Reviewer before a refund, with `reviewer_gate.ReviewerClient`.

REVIEWER_API_TOKEN=... python -m examples.connect.rest_refund --audience urn:agent:rest-demo
"""

from examples.connect.common import Ledger, client_from, parse_settings

# reviewer: begin
from reviewer_gate import NotApproved, ReviewerClient

# reviewer: end


# reviewer: begin
def refund_with_approval(client: ReviewerClient, ledger: Ledger, order_id: str, amount: str) -> str:
    # reviewer: end
    """Ask, wait, verify, consume; then refund once with the decision id as key, and report."""
    # reviewer: begin
    action = {
        "tool": "payments.refund",
        "arguments": {"order_id": order_id, "amount": amount, "currency": "EUR"},
    }
    try:
        approval = client.request_approval(
            action,
            summary=f"Refund EUR {amount} for order {order_id}",
            principal={"id": "requester", "display": "Rita Requester"},
            consequences={"amount": amount, "currency": "EUR", "reversible": False},
            ttl_seconds=3600,
        )
    except NotApproved as refusal:
        return f"not refunded ({refusal.code}): {refusal.reason}"
    arguments = approval.action["arguments"]  # a reviewer may have edited the amount
    try:
        transaction_id = ledger.refund(
            arguments["order_id"], arguments["amount"], idempotency_key=approval.idempotency_key
        )
    except Exception as error:
        approval.report("unknown", detail=repr(error))  # it may have happened: reconcile by key, never re-ask
        raise
    approval.report("succeeded", transaction_id=transaction_id)
    # reviewer: end
    return f"refunded EUR {arguments['amount']} for order {arguments['order_id']}: {transaction_id}"


if __name__ == "__main__":
    settings = parse_settings("python -m examples.connect.rest_refund", __doc__.splitlines()[0])
    print(
        refund_with_approval(client_from(settings), Ledger(settings.ledger), settings.order, settings.amount)
    )
