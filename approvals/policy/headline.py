"""Reviewer's own headline of an action: what it does, how much, to what and to whom, written from the
canonical arguments (what the digest binds and what runs), never from the agent's summary. The page's
heading, "What happens", the queue row, chat messages and e-mails lead with it; the agent's summary is
shown after it as the agent's words, quoted, with `summary_mismatch()` beside it when the two differ.

The amount always names its currency: the arguments' (what the digest binds), else the one the
proposal's consequences state (an adapter's tool description, ToolDescription(currency=...)), which
the headline names as not part of the approved action. The target is spelled as the target's history
spells it (`history.target_identity`: "order:1500" whether the agent wrote `order_id:1500`,
`order_id=1500` or only the argument), so one target reads the same on every line.

A value that mixes scripts (a look-alike recipient such as "pаypal.com" with a Cyrillic "а") or holds
hidden characters is flagged in the headline itself: `Headline.warnings` says so in words, and the
HTML form (the `agent_text` filter over each part) marks it where it stands.

Pure Python over the action dict: the web pages, the notifications and the chat messages call it alike.
"""

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from approvals.policy.history import target_identity, target_value
from lib import agent_text

# Arguments that name who receives what the action sends, in the order they are tried.
RECIPIENT_ARGUMENTS = ("recipient", "to", "email", "payee", "beneficiary", "destination", "iban", "account")
PART_CAP = 200
# An amount as agents write it in prose: "EUR 4.00", "4.00 EUR", "€4.00", "$ 1,850.00".
_CURRENCY = r"(?:[A-Z]{3}|[€$£¥])"
_FIGURE = r"\d[\d,']*(?:\.\d+)?"
_AMOUNT_IN_TEXT = re.compile(
    rf"(?P<pre>{_CURRENCY})\s?(?P<a>{_FIGURE})|(?P<b>{_FIGURE})\s?(?P<post>{_CURRENCY})(?![A-Za-z])"
)
_SYMBOLS = {"€": "EUR", "$": "USD", "£": "GBP", "¥": "JPY"}


def _text(value) -> str:
    if value is None or isinstance(value, dict | list):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)[:PART_CAP]


def money(amount, currency=None) -> str:
    """An amount as a reviewer reads it: the currency first, then the figure with thousands grouping and
    the decimals the agent sent ("EUR 1,850.00"). A value that is not a number is shown as it came."""
    text = _text(amount)
    try:
        figure = format(Decimal(text.strip()), ",f")
    except (InvalidOperation, ValueError):
        figure = text
    return f"{_text(currency or '')} {figure}".strip()


def _verb(tool: str) -> str:
    """ "payments.refund" -> "Refund"; "files.delete_tree" -> "Delete tree"."""
    last = (tool or "").rsplit(".", 1)[-1].replace("_", " ").replace("-", " ").strip()
    return last[:1].upper() + last[1:] if last else "Run"


@dataclass(frozen=True)
class Headline:
    tool: str
    verb: str
    amount: str = ""
    target: str = ""
    recipient: str = ""
    warnings: list[str] = field(default_factory=list)
    # Set when the amount's currency is not in the arguments but stated beside them ("EUR (stated by
    # the tool description, not part of the approved action)"): shown with the amount wherever it is.
    currency_note: str = ""

    @property
    def text(self) -> str:
        """One line of plain text ("Refund EUR 4,000.00 · order:1500 · to billing@example.com"), hidden
        characters written out as [U+XXXX]: for chat messages, e-mails and page titles."""
        parts = [f"{self.verb} {self.amount}".strip()]
        if self.target:
            parts.append(self.target)
        if self.recipient:
            parts.append(f"to {self.recipient}")
        return agent_text.visible(" · ".join(parts))

    @property
    def flagged(self) -> bool:
        return bool(self.warnings)


def _first(arguments: dict, names) -> str:
    for name in names:
        value = _text(arguments.get(name))
        if value.strip():
            return value
    return ""


def amount_currency(arguments: dict, consequences: dict | None = None) -> tuple[str, str]:
    """The currency of the action's amount and, when the digest does not bind it, a note saying so:
    the arguments' `currency`, else the consequences' (an adapter puts its tool description's there),
    else none. ("EUR", "") or ("EUR", "EUR (stated by ..., not part of the approved action)")."""
    bound = _text(arguments.get("currency")).strip()
    if bound:
        return bound, ""
    consequences = consequences or {}
    stated = _text(consequences.get("currency")).strip()
    if not stated:
        return "", ""
    # The adapters (reviewer_gate's ToolDescription) name the tool in the consequences they write.
    source = "the tool description" if consequences.get("tool") else "the agent"
    return stated, f"{stated} (stated by {source}, not part of the approved action)"


def action_headline(action: dict, consequences: dict | None = None) -> Headline:
    """Reviewer's headline of an action (its tool, `target` and arguments, as the digest binds them);
    `consequences`: the proposal's, for a currency the arguments do not name."""
    tool = _text(action.get("tool"))
    arguments = action.get("arguments") or {}
    amount = arguments.get("amount")
    recipient = _first(arguments, RECIPIENT_ARGUMENTS)
    target = target_identity(action)[:PART_CAP]
    if recipient and target.rpartition(":")[2] == target_value(recipient):
        target = ""  # the recipient is the target ("to": an address): named once
    currency, currency_note = amount_currency(arguments, consequences)
    has_amount = bool(_text(amount).strip())
    shown_amount = money(amount, currency) if has_amount else ""
    warnings = []
    for what, value in (
        ("tool", tool),
        ("amount", shown_amount),
        ("target", _text(action.get("target")) or target),  # as the agent wrote it, before normalizing
        ("recipient", recipient),
    ):
        warnings += [f"The {what}: {note}" for note in agent_text.warnings(value)]
    return Headline(
        tool=tool,
        verb=_verb(tool),
        amount=shown_amount,
        target=target,
        recipient=recipient,
        warnings=warnings,
        currency_note=currency_note if has_amount else "",
    )


def _decimal(figure: str) -> Decimal | None:
    try:
        return Decimal(figure.replace(",", "").replace("'", ""))
    except InvalidOperation:
        return None


def summary_mismatch(summary: str, action: dict, consequences: dict | None = None) -> str:
    """What the agent's words say that the action does not: an amount or currency other than the
    arguments' ("The agent's words name EUR 4.00; the action moves EUR 4,000.00"), or "" when they
    agree or name no amount. Reads the summary and the consequences' `amount`/`currency`."""
    arguments = action.get("arguments") or {}
    bound = _decimal(_text(arguments.get("amount"))) if _text(arguments.get("amount")).strip() else None
    if bound is None:
        return ""
    currency = _text(arguments.get("currency")).strip().upper()
    claims = []
    for match in _AMOUNT_IN_TEXT.finditer(summary or ""):
        code = match.group("pre") or match.group("post")
        value = _decimal(match.group("a") or match.group("b"))
        claims.append((_SYMBOLS.get(code, code), value, match.group(0)))
    consequences = consequences or {}
    if _text(consequences.get("amount")).strip():
        stated = _decimal(_text(consequences.get("amount")))
        stated_currency = _text(consequences.get("currency")).strip().upper() or currency
        claims.append((stated_currency, stated, money(consequences.get("amount"), stated_currency)))
    wrong = [
        shown for code, value, shown in claims if value != bound or (currency and code and code != currency)
    ]
    if not wrong:
        return ""
    named = ", ".join(dict.fromkeys(wrong))
    return f"The agent's words name {named}; the action moves {money(arguments.get('amount'), currency)}"
