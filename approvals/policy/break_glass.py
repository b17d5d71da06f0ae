"""Budgeted break-glass: the rule a policy version may carry, as pure functions (validation, the rule that
applies to a proposal, the amount check). The release itself is approvals/services/break_glass.py.

A policy version's `break_glass` is {} (none) or

    {"people": ["riley", "sam"], "per_week": 3, "amount_cap": "500.00", "currency": "EUR",
     "review_hours": 24}

- people: usernames of the tenant's reviewers or admins who may release alone in an emergency;
- per_week: how many releases each of them may make in any rolling 7 days (in the tenant);
- amount_cap, currency: the most one release may move, in the action's currency; an action without an
  amount, or in another currency, cannot be released this way (fail closed);
- review_hours: the deadline of the two post-hoc reviews (default 24).

A proposal may be released by break-glass only when every policy version pinned on it carries a rule
that names the person, and the tenant default did not shape it (the default has no break-glass). The
strictest applies: the smallest weekly budget, every cap, the shortest review deadline.
"""

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

WEEK_DAYS = 7
DEFAULT_REVIEW_HOURS = 24
REVIEWS_PER_RELEASE = 2
RULE_KEYS = {"people", "per_week", "amount_cap", "currency", "review_hours"}
_CURRENCY = re.compile(r"[A-Z]{3}")
_AMOUNT = re.compile(r"[0-9]{1,12}(\.[0-9]{1,4})?")
EXAMPLE = (
    '{"people": ["riley"], "per_week": 3, "amount_cap": "500.00", "currency": "EUR", "review_hours": 24}'
)


def rule_error(value, people: set[str] | None = None) -> str | None:
    """What is wrong with a break-glass rule (None when it may be stored). `people`: the usernames of the
    tenant's reviewers and admins, when known."""
    if value in (None, {}):
        return None
    if not isinstance(value, dict):
        return f"break-glass is {{}} (none) or an object like {EXAMPLE}"
    unknown = set(value) - RULE_KEYS
    if unknown:
        return "unknown break-glass keys: " + ", ".join(sorted(unknown))
    missing = {"people", "per_week", "amount_cap", "currency"} - set(value)
    if missing:
        return "break-glass needs " + ", ".join(sorted(missing))
    named = value["people"]
    if not isinstance(named, list) or not named or not all(isinstance(p, str) and p for p in named):
        return "break-glass people is a non-empty list of usernames"
    if len(set(named)) != len(named):
        return "break-glass names a person twice"
    if people is not None:
        strangers = sorted(set(named) - people)
        if strangers:
            return "break-glass people must be reviewers or admins of this tenant: " + ", ".join(strangers)
    for name, low, high in (("per_week", 1, 100), ("review_hours", 1, 168)):
        number = value.get(name, DEFAULT_REVIEW_HOURS)
        if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
            return f"break-glass {name} is a whole number from {low} to {high}"
    cap = value["amount_cap"]
    if not isinstance(cap, str) or not _AMOUNT.fullmatch(cap) or Decimal(cap) <= 0:
        return 'break-glass amount_cap is a positive amount written as text, e.g. "500.00"'
    if not isinstance(value["currency"], str) or not _CURRENCY.fullmatch(value["currency"]):
        return "break-glass currency is a three-letter code such as EUR"
    return None


def normalized(value) -> dict:
    """A valid rule as stored: {} or every key present (review_hours defaulted)."""
    if not value:
        return {}
    return {
        "people": list(value["people"]),
        "per_week": value["per_week"],
        "amount_cap": value["amount_cap"],
        "currency": value["currency"],
        "review_hours": value.get("review_hours", DEFAULT_REVIEW_HOURS),
    }


@dataclass(frozen=True)
class Rule:
    """The break-glass rule in force for one proposal: the strictest of its pinned versions' rules."""

    people: frozenset[str]
    per_week: int
    caps: tuple[tuple[Decimal, str], ...]  # (amount, currency): each must hold
    review_hours: int
    versions: tuple[str, ...]  # "policy@version" of the rules it was built from

    def names(self, user) -> bool:
        return user.get_username() in self.people

    def cap_text(self) -> str:
        return " and ".join(f"{currency} {format(cap, ',f')}" for cap, currency in self.caps)


def rule_for(requirements: dict, versions) -> Rule | None:
    """The rule for a proposal with these requirements and pinned versions; None when break-glass is not
    allowed (no version pinned, the tenant default shaped it, or a pinned version has no rule)."""
    versions = list(versions)
    if not versions or requirements.get("tenant_default"):
        return None
    rules = [version.break_glass for version in versions]
    if not all(rules):
        return None
    people = frozenset.intersection(*(frozenset(rule["people"]) for rule in rules))
    return Rule(
        people=people,
        per_week=min(int(rule["per_week"]) for rule in rules),
        caps=tuple(sorted({(Decimal(rule["amount_cap"]), rule["currency"]) for rule in rules})),
        review_hours=min(int(rule.get("review_hours", DEFAULT_REVIEW_HOURS)) for rule in rules),
        versions=tuple(sorted(f"{version.policy.slug}@{version.version}" for version in versions)),
    )


def amount_refusal(rule: Rule, arguments: dict) -> tuple[str, str] | None:
    """Why the action's amount cannot be released by break-glass, as (code, message); None if it can."""
    amount, currency = arguments.get("amount"), arguments.get("currency")
    try:
        figure = Decimal(str(amount).strip()) if isinstance(amount, str | int) else None
    except InvalidOperation:
        figure = None
    if figure is None or not figure.is_finite() or figure < 0:
        return "amount_unknown", "break-glass needs an action with a stated amount; this one has none"
    for cap, cap_currency in rule.caps:
        if currency != cap_currency:
            return (
                "currency_mismatch",
                f"break-glass is capped in {cap_currency}; this action is in {currency or 'no currency'}",
            )
        if figure > cap:
            return "over_cap", f"break-glass releases at most {rule.cap_text()} at a time"
    return None


def amount_of(arguments: dict) -> tuple[str, str]:
    return str(arguments.get("amount") or ""), str(arguments.get("currency") or "")
