"""What an adapter tells the reviewers about a tool call: a `ToolDescription` per tool.

A proposal is read by a person deciding whether money moves or files go. `refund {"amount": "22.00",
"order_id": "7002"}` on behalf of "LangGraph graph" tells them little, and a tool named `refund`
matches no `payments.*` policy. A description fixes that, per tool:

    refund = ToolDescription(
        name="payments.refund",                      # what Reviewer's policies match
        summary="Refund {currency} {amount} for order {order_id}",
        consequences="Money goes back to the customer's card",
        target="order_id",                           # what the call acts on (the target's history)
        currency="EUR",                              # when the arguments name none
        reversible=False,                            # R3: the tenant default asks two admins
        principal=lambda context: {"id": context["user_id"], "display": context["user_name"]},
    )

Every field is optional; without one the defaults come from the tool itself: its name, the first line
of its description, its arguments in the order its schema lists them, `currency` and `amount` put
together, a target from the usual key arguments (`order_id`, `account_id`, ...). `principal` is
called with the run's context (LangGraph: the RunnableConfig; Agents SDK: the run context; MCP: the
calling client's identity) and returns `{"id", "display"}`.

A description that cannot work (a template naming no argument of the tool, an oversized text, a
target the tool does not take) is refused when the adapter is built, with `ToolDescriptionError`
naming the field: never at the moment a call needs its approval.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

SUMMARY_MAX = 500  # Reviewer refuses a longer summary (the proposal's column)
TEXT_MAX = 2000  # consequences, and a tool's description as shown
NAME_MAX = 200  # Reviewer's tool column
# Arguments that name what a call acts on, in the order they are tried (Reviewer's own list of
# key arguments starts the same way: approvals/history.py).
TARGET_ARGUMENTS = (
    "order_id",
    "invoice_id",
    "account_id",
    "customer_id",
    "recipient",
    "path",
    "file",
    "url",
    "id",
)


class ToolDescriptionError(ValueError):
    """A description that cannot describe its tool; `field` names what is wrong."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class ToolDescription:
    name: str | None = None
    summary: str | None = None
    consequences: str | None = None
    target: str | None = None
    currency: str | None = None
    reversible: bool | None = None
    principal: Callable[[Any], Mapping[str, str]] | None = None

    def checked(self, tool_name: str, arguments: tuple[str, ...] | None = None) -> ToolDescription:
        """This description, refused now if it cannot work for the tool (`arguments`: the names its
        schema lists, when known)."""
        if self.name is not None and not (0 < len(self.name) <= NAME_MAX):
            raise ToolDescriptionError("name", f"the tool name to send is 1 to {NAME_MAX} characters")
        for field, text, limit in (
            ("summary", self.summary, SUMMARY_MAX),
            ("consequences", self.consequences, TEXT_MAX),
        ):
            if text is None:
                continue
            if len(text) > limit:
                raise ToolDescriptionError(field, f"{len(text)} characters; at most {limit}")
            try:
                named = {name for _, name, _, _ in string.Formatter().parse(text) if name}
            except ValueError as error:
                raise ToolDescriptionError(field, f"not a template: {error}") from error
            unknown = sorted(named - {"currency", "tool"} - set(arguments or named))
            if unknown:
                raise ToolDescriptionError(
                    field, f"names {', '.join(unknown)}, which {tool_name} does not take"
                )
        if self.target is not None and arguments is not None and self.target not in arguments:
            raise ToolDescriptionError("target", f"{tool_name} takes no argument {self.target!r}")
        if self.currency is not None and not (len(self.currency) == 3 and self.currency.isalpha()):
            raise ToolDescriptionError("currency", "an ISO 4217 code such as EUR")
        if self.principal is not None and not callable(self.principal):
            raise ToolDescriptionError("principal", "a function of the run's context")
        return self

    def request_fields(
        self,
        tool_name: str,
        arguments: Mapping[str, Any],
        *,
        tool_text: str = "",
        argument_order: tuple[str, ...] = (),
        context: Any = None,
        default_principal: Mapping[str, str] | None = None,
        effect: str = "",
    ) -> dict[str, Any]:
        """`action`, `summary`, `consequences` and `principal` for ReviewerClient.submit/request_approval
        (`build_request`'s fields): what a reviewer reads about this call."""
        arguments = dict(arguments)
        sent_name = self.name or tool_name
        currency = str(arguments.get("currency") or self.currency or "")
        what = _first_line(tool_text) or tool_name
        values = {name: _shown(value) for name, value in arguments.items()}
        values.setdefault("currency", currency)
        values["tool"] = sent_name
        if self.summary is not None:
            summary = _fill(self.summary, values)
        else:
            summary = f"{what}: {_listed(arguments, argument_order, currency)}" if arguments else what
        action: dict[str, Any] = {"tool": sent_name, "arguments": arguments}
        target = self.target or next((name for name in TARGET_ARGUMENTS if _plain(arguments.get(name))), None)
        if target and _plain(arguments.get(target)):
            action["target"] = f"{target}:{arguments[target]}"
        consequences: dict[str, Any] = {
            "effect": _fill(self.consequences, values) if self.consequences else (effect or what),
            "tool": tool_name,
        }
        if tool_text:
            consequences["tool_description"] = tool_text[:TEXT_MAX]
        if _plain(arguments.get("amount")):
            consequences["amount"] = str(arguments["amount"])
            if currency:
                consequences["currency"] = currency
        if self.reversible is not None:
            consequences["reversible"] = self.reversible
        principal = self.principal(context) if self.principal is not None else default_principal
        fields = {"action": action, "summary": summary[:SUMMARY_MAX], "consequences": consequences}
        if principal is not None:
            fields["principal"] = _principal(principal)
        return fields


def _principal(value: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(value, Mapping) or not str(value.get("id") or "").strip():
        raise ToolDescriptionError("principal", "returns {'id': ..., 'display': ...} with a non-empty id")
    return {"id": str(value["id"])[:200], "display": str(value.get("display") or value["id"])[:200]}


def _first_line(text: str) -> str:
    return (text or "").strip().split("\n", 1)[0].strip().rstrip(".")[:SUMMARY_MAX]


def _plain(value: Any) -> bool:
    return value not in (None, "") and not isinstance(value, dict | list)


def _shown(value: Any) -> str:
    return str(value) if _plain(value) else json.dumps(value, ensure_ascii=False, sort_keys=True)[:200]


def _fill(template: str, values: dict[str, Any]) -> str:
    """The template with the call's values; a name the call did not send shows as "?" (never raises)."""
    return string.Formatter().vformat(template, (), _Missing(values))


class _Missing(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "?"


def _listed(arguments: Mapping[str, Any], order: tuple[str, ...], currency: str) -> str:
    """ "order_id 7002, amount EUR 22.00": the schema's order first, then the rest as sent."""
    names = [name for name in order if name in arguments] + [name for name in arguments if name not in order]
    parts = []
    for name in names:
        if name == "currency" and _plain(arguments.get("amount")):
            continue  # shown with the amount
        shown = _shown(arguments[name])
        if name == "amount" and currency:
            shown = f"{currency} {shown}"
        parts.append(f"{name} {shown}")
    return ", ".join(parts)[:SUMMARY_MAX]
