"""What the agent proposes: a refund read from the user's text, and the approval request that shows it.

The `action` is the frozen operation the agent will execute if, and only if, Reviewer approves it;
everything else in the request (summary, consequences, diff, evidence) is there for the reviewer.
"""

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation

from reviewer_gate import gate

AGENT_VERSION = "refund-agent@1"
REFUND_TOOL = "payments.refund"
DEFAULT_PRINCIPAL = {"id": "requester", "display": "Demo requester"}

_CURRENCY_SYMBOLS = {"€": "EUR", "$": "USD", "£": "GBP"}
_AMOUNT = r"(\d{1,3}(?:,\d{3})+(?:\.\d{1,2})?|\d+(?:\.\d{1,2})?)"
_CODE_THEN_AMOUNT = re.compile(rf"\b([A-Z]{{3}})\s?{_AMOUNT}")
_AMOUNT_THEN_CODE = re.compile(rf"{_AMOUNT}\s?([A-Z]{{3}})\b")
_SYMBOL_THEN_AMOUNT = re.compile(rf"([€$£])\s?{_AMOUNT}")
# "order 1182", "order #A-77", "order no. 5": the id must contain a digit, so "ordered" never matches.
_ORDER = re.compile(
    r"\border\b\s*(?:#|no\.?|number)?\s*([A-Za-z0-9-]{0,40}\d[A-Za-z0-9-]{0,40})", re.IGNORECASE
)


@dataclass(frozen=True)
class RefundAsk:
    order_id: str
    amount: str  # two decimals, as a string: amounts never travel as numbers
    currency: str
    text: str  # the user's words, quoted to the reviewer as evidence


class UnreadableRequest(ValueError):
    """The text does not name one order, one amount and one currency."""


def _normalized_amount(raw: str) -> str:
    try:
        amount = Decimal(raw.replace(",", ""))
    except InvalidOperation as error:
        raise UnreadableRequest(f"{raw!r} is not an amount") from error
    if amount <= 0:
        raise UnreadableRequest("the amount must be positive")
    return f"{amount.quantize(Decimal('0.01'))}"


def _amount_and_currency(text: str) -> tuple[str, str]:
    if match := _CODE_THEN_AMOUNT.search(text):
        return _normalized_amount(match.group(2)), match.group(1)
    if match := _AMOUNT_THEN_CODE.search(text):
        return _normalized_amount(match.group(1)), match.group(2)
    if match := _SYMBOL_THEN_AMOUNT.search(text):
        return _normalized_amount(match.group(2)), _CURRENCY_SYMBOLS[match.group(1)]
    raise UnreadableRequest("no amount with a currency (write e.g. 'EUR 40.00')")


def parse_refund_request(text: str) -> RefundAsk:
    """Read "Please refund EUR 40.00 for order 1182 (...)". Raises UnreadableRequest."""
    text = text.strip()
    if not text:
        raise UnreadableRequest("the message has no text")
    order = _ORDER.search(text)
    if not order:
        raise UnreadableRequest("no order number (write e.g. 'order 1182')")
    amount, currency = _amount_and_currency(text)
    return RefundAsk(order_id=order.group(1), amount=amount, currency=currency, text=text)


def refund_action(ask: RefundAsk) -> dict:
    return {
        "tool": REFUND_TOOL,
        "arguments": {"order_id": ask.order_id, "amount": ask.amount, "currency": ask.currency},
        "target": f"order:{ask.order_id}",
    }


def principal_from(*metadata_dicts: dict) -> dict:
    """The principal named in the message (or request) metadata, else the demo requester."""
    for metadata in metadata_dicts:
        principal = metadata.get("principal") if isinstance(metadata, dict) else None
        if isinstance(principal, dict) and isinstance(principal.get("id"), str) and principal["id"]:
            display = str(principal.get("display") or principal["id"])
            return {"id": _capped(principal["id"], 200), "display": _capped(display, 200)}
    return dict(DEFAULT_PRINCIPAL)


def _capped(text: str, limit: int) -> str:
    """Reviewer refuses over-long fields (excerpts 2000, titles 200 characters): shorten, never fail."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def build_approval_request(
    ask: RefundAsk,
    *,
    principal: dict,
    refunded_before: str | None,
    ttl_seconds: int,
    now: datetime | None = None,
) -> dict:
    """The request of DESIGN.md "A2A contract" step 1 for one refund."""
    action = refund_action(ask)
    money = f"{ask.currency} {ask.amount}"
    if refunded_before is None:
        before, after = "unknown", f"unknown + {ask.amount}"
    else:
        before, after = refunded_before, f"{Decimal(refunded_before) + Decimal(ask.amount):.2f}"
    now = now or datetime.now(UTC)
    return {
        "request_id": str(uuid.uuid4()),
        "summary": f"Refund {money} for order {ask.order_id}",
        "action": action,
        "action_digest": gate.action_digest(action),
        "principal": principal,
        "agent_version": AGENT_VERSION,
        "consequences": {
            "effect": f"Refund {money} to the customer of order {ask.order_id}",
            "amount": ask.amount,
            "currency": ask.currency,
            "reversible": False,
            "data_leaves": "none",
        },
        "diff": [{"field": "order.refunded_amount", "before": before, "after": after}],
        "evidence": [
            {
                "title": _capped(f"Request from {principal['display']}", 200),
                "url": f"https://shop.example/orders/{ask.order_id}",
                "excerpt": _capped(ask.text, 2000),
            }
        ],
        "expires_at": _rfc3339(now + timedelta(seconds=ttl_seconds)),
    }


def answer_request(previous: dict, *, question: str, ttl_seconds: int, now: datetime | None = None) -> dict:
    """The new request that answers a reviewer's `needs_info` question on the same task.

    The action (and so its digest) stays the same: an answer adds facts, it never changes the deal.
    """
    arguments = previous["action"]["arguments"]
    answer = (
        f"The refund is exactly {arguments['currency']} {arguments['amount']} "
        f"for order {arguments['order_id']}, "
        f"as asked by {previous['principal']['display']} ({previous['principal']['id']}); "
        "the agent's only evidence is the request quoted above."
    )
    now = now or datetime.now(UTC)
    request = dict(previous)
    request.update(
        {
            "request_id": str(uuid.uuid4()),
            "supersedes": previous["request_id"],
            "evidence": [
                *previous.get("evidence", []),
                {
                    "title": "Answer to the reviewer's question",
                    "url": f"https://shop.example/orders/{arguments['order_id']}",
                    "excerpt": _capped(
                        f"Question: {question or '(no question text)'}\nAnswer: {answer}", 2000
                    ),
                },
            ],
            "expires_at": _rfc3339(now + timedelta(seconds=ttl_seconds)),
        }
    )
    return request
