"""Batches: the rule a policy version may carry, as pure functions (validation, the rule in force for a
batch, and the checks of a manifest against it). Taking a batch in and deciding it is
approvals/services/batches.py.

A policy version's `batch` is {} (its tools are never batched) or

    {"max_members": 25, "max_total": {"EUR": "1000.00"}, "partial": true,
     "irreversible": false, "break_glass": false}

- max_members: how many members a batch may have (2 to MAX_MEMBERS);
- max_total: the most the members may move together, per currency ({}: no total); a member in a
  currency not named is refused when any total is named (fail closed);
- partial: whether reviewers may approve a chosen subset (default false: all or nothing);
- irreversible: whether R3 (irreversible) actions may be batched (default false);
- break_glass: whether a member may be released alone by break-glass (default false).

A batch is accepted only when every policy version that shaped any member carries a rule, and the tenant
default shaped none (it has no rule). The strictest applies: the fewest members, the smallest total per
currency, the currencies every total names, a subset or R3 or break-glass only where every rule allows it.
"""

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

MAX_MEMBERS = 500
BATCH_RULE_KEYS = {"max_members", "max_total", "partial", "irreversible", "break_glass"}
_CURRENCY = re.compile(r"[A-Z]{3}")
_AMOUNT = re.compile(r"[0-9]{1,12}(\.[0-9]{1,4})?")
EXAMPLE = '{"max_members": 25, "max_total": {"EUR": "1000.00"}, "partial": true}'


def rule_error(value: object) -> str | None:
    """What is wrong with a batch rule (None when it may be stored)."""
    if value in (None, {}):
        return None
    if not isinstance(value, dict):
        return f"batch is {{}} (never batched) or an object like {EXAMPLE}"
    unknown = set(value) - BATCH_RULE_KEYS
    if unknown:
        return "unknown batch keys: " + ", ".join(sorted(unknown))
    if "max_members" not in value:
        return "batch needs max_members"
    size = value["max_members"]
    if isinstance(size, bool) or not isinstance(size, int) or not 2 <= size <= MAX_MEMBERS:
        return f"batch max_members is a whole number from 2 to {MAX_MEMBERS}"
    totals = value.get("max_total", {})
    if not isinstance(totals, dict):
        return 'batch max_total is an object of currency to amount, e.g. {"EUR": "1000.00"}'
    for currency, cap in totals.items():
        if not _CURRENCY.fullmatch(currency):
            return f"batch max_total: {currency!r} is not a three-letter currency code such as EUR"
        if not isinstance(cap, str) or not _AMOUNT.fullmatch(cap) or Decimal(cap) <= 0:
            return f'batch max_total for {currency} is a positive amount written as text, e.g. "1000.00"'
    for name in ("partial", "irreversible", "break_glass"):
        if not isinstance(value.get(name, False), bool):
            return f"batch {name} is true or false"
    return None


def normalized(value: Any) -> dict[str, Any]:
    """A valid rule as stored: {} or every key present (the booleans defaulted to false)."""
    if not value:
        return {}
    return {
        "max_members": value["max_members"],
        "max_total": dict(sorted(value.get("max_total", {}).items())),
        "partial": value.get("partial", False),
        "irreversible": value.get("irreversible", False),
        "break_glass": value.get("break_glass", False),
    }


@dataclass(frozen=True)
class Rule:
    """The batch rule in force for one batch: the strictest of its members' versions' rules."""

    max_members: int
    # currency -> the most the members may move together; None: no total is named by any rule.
    max_total: dict[str, Decimal] | None
    partial: bool
    irreversible: bool
    break_glass: bool
    versions: tuple[str, ...] = field(default=())  # "policy@version" of the rules it was built from

    def as_json(self) -> dict[str, Any]:
        return {
            "max_members": self.max_members,
            "max_total": None
            if self.max_total is None
            else {currency: format(cap, "f") for currency, cap in sorted(self.max_total.items())},
            "partial": self.partial,
            "irreversible": self.irreversible,
            "break_glass": self.break_glass,
            "versions": list(self.versions),
        }


def merged_rule(rules: list[tuple[str, dict[str, Any]]]) -> Rule | None:
    """The strictest of (version name, rule) pairs; None when there are none or one is {} (not batched)."""
    if not rules or not all(rule for _, rule in rules):
        return None
    named_totals = [rule["max_total"] for _, rule in rules if rule.get("max_total")]
    totals: dict[str, Decimal] | None = None
    if named_totals:
        currencies = set.intersection(*(set(each) for each in named_totals))
        totals = {c: min(Decimal(each[c]) for each in named_totals) for c in currencies}
    return Rule(
        max_members=min(int(rule["max_members"]) for _, rule in rules),
        max_total=totals,
        partial=all(rule.get("partial", False) for _, rule in rules),
        irreversible=all(rule.get("irreversible", False) for _, rule in rules),
        break_glass=all(rule.get("break_glass", False) for _, rule in rules),
        versions=tuple(sorted({name for name, _ in rules})),
    )


def amount_of(arguments: dict[str, Any]) -> tuple[Decimal, str] | None:
    """(amount, currency) an action states, or None when it states no readable amount."""
    amount = arguments.get("amount")
    if not isinstance(amount, str):
        return None
    try:
        figure = Decimal(amount.strip())
    except InvalidOperation:
        return None
    if not figure.is_finite():
        return None
    return figure, str(arguments.get("currency") or "")


def totals_of(actions: list[dict[str, Any]]) -> dict[str, Decimal]:
    """What the actions move together, per currency ("" for an amount without one)."""
    totals: dict[str, Decimal] = {}
    for action in actions:
        stated = amount_of(action.get("arguments") or {})
        if stated is not None:
            figure, currency = stated
            totals[currency] = totals.get(currency, Decimal(0)) + figure
    return totals


def total_refusal(rule: Rule, actions: list[dict[str, Any]]) -> str | None:
    """Why the members together move more than the rule allows (None when they do not)."""
    if rule.max_total is None:
        return None
    for currency, total in sorted(totals_of(actions).items()):
        cap = rule.max_total.get(currency)
        if cap is None:
            allowed = ", ".join(sorted(rule.max_total)) or "none"
            return (
                f"the members move {currency or 'an amount without a currency'}, which no batch total "
                f"names (batched currencies: {allowed})"
            )
        if total > cap:
            return f"the members move {currency} {format(total, 'f')} together; the most is {currency} {cap}"
    return None
