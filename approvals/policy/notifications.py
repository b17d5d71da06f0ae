"""A policy version's `notifications` field: what it may say, and what a proposal pins from it.

    {"reminders": [50, 80],                      # percent of the TTL at which waiting reviewers are reminded
     "escalation": {"before_expiry_seconds": 900, "group": "finance-leads"},   # or "people": ["ana"]
     "at_expiry": "expire_closed",               # or "expire_closed_tell_admins"
     "chat_decisions": true}                     # Approve / Reject from Slack, with a fresh code

Every key is optional; {} asks for nothing. At expiry a proposal always closes (silence never approves):
"expire_closed_tell_admins" also tells the tenant admins that it expired unseen. Chat decisions are never
allowed for an irreversible (R3) action nor where the policy asks for a passkey (a chat modal cannot
carry a WebAuthn answer); `chat_decisions_allowed()` holds that rule. Pure: no database.
"""

from approvals.policy.step_up import needs_passkey

EXPIRE_CLOSED = "expire_closed"
EXPIRE_CLOSED_TELL_ADMINS = "expire_closed_tell_admins"
AT_EXPIRY = (EXPIRE_CLOSED, EXPIRE_CLOSED_TELL_ADMINS)
KEYS = {"reminders", "escalation", "at_expiry", "chat_decisions"}
MAX_REMINDERS = 5


def notifications_error(
    value, people: set[str] | None = None, group_slugs: set[str] | None = None
) -> str | None:
    """What is wrong with a `notifications` value (None when it may be stored). `people` and
    `group_slugs` are the tenant's usernames and group slugs an escalation may name (None: unchecked)."""
    if not isinstance(value, dict):
        return 'notifications is a JSON object like {"reminders": [50, 80]}'
    unknown = set(value) - KEYS
    if unknown:
        return "unknown keys: " + ", ".join(sorted(unknown)) + " (known: " + ", ".join(sorted(KEYS)) + ")"
    reminders = value.get("reminders", [])
    if not isinstance(reminders, list) or len(reminders) > MAX_REMINDERS:
        return f"reminders is a list of at most {MAX_REMINDERS} percents of the TTL, like [50, 80]"
    for percent in reminders:
        if isinstance(percent, bool) or not isinstance(percent, int) or not 1 <= percent <= 99:
            return f"reminder {percent!r}: a whole percent of the TTL from 1 to 99"
    if len(set(reminders)) != len(reminders):
        return "a reminder percent is named twice"
    if "escalation" in value:
        problem = _escalation_error(value["escalation"], people, group_slugs)
        if problem:
            return problem
    if value.get("at_expiry", EXPIRE_CLOSED) not in AT_EXPIRY:
        return "at_expiry is " + " or ".join(AT_EXPIRY) + ": a proposal nobody decided always closes"
    if not isinstance(value.get("chat_decisions", False), bool):
        return "chat_decisions is true or false"
    return None


def _escalation_error(step, people, group_slugs) -> str | None:
    if not isinstance(step, dict) or "before_expiry_seconds" not in step:
        return 'escalation is an object like {"before_expiry_seconds": 900, "group": "leads"}'
    if set(step) - {"before_expiry_seconds", "group", "people"}:
        return "escalation has before_expiry_seconds and one of group or people"
    seconds = step["before_expiry_seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 1:
        return "escalation before_expiry_seconds is a whole number of seconds, at least 1"
    if ("group" in step) == ("people" in step):
        return "escalation names either a group or people (on-call usernames), not both"
    if "group" in step:
        if not isinstance(step["group"], str) or (
            group_slugs is not None and step["group"] not in group_slugs
        ):
            known = ", ".join(sorted(group_slugs or ())) or "none yet"
            return f"escalation group {step['group']!r} is not a group of this tenant ({known})"
        return None
    named = step["people"]
    if not isinstance(named, list) or not named or not all(isinstance(n, str) for n in named):
        return "escalation people is a non-empty list of usernames"
    if people is not None and (strangers := sorted(set(named) - people)):
        return "escalation names people who are not reviewers or admins here: " + ", ".join(strangers)
    return None


def pinned(notifications: dict) -> dict:
    """What one version's `notifications` adds to its requirements (approvals/policy/evaluation.py
    version_requirements). Empty keys are left out, so requirements pinned before this read the same."""
    step = notifications.get("escalation")
    return {
        **({"reminders": sorted(notifications["reminders"])} if notifications.get("reminders") else {}),
        **({"escalations": [step]} if step else {}),
        **(
            {"at_expiry": EXPIRE_CLOSED_TELL_ADMINS}
            if notifications.get("at_expiry") == EXPIRE_CLOSED_TELL_ADMINS
            else {}
        ),
        **({"chat_decisions": True} if notifications.get("chat_decisions") else {}),
    }


def merged(requirements: list[dict]) -> dict:
    """What several versions' requirements ask together (policy/evaluation.py stricter_requirements):
    every reminder any asks for, every escalation step, the admins told at expiry if any asks, and chat
    decisions only if all allow them."""
    result: dict = {}
    reminders = sorted({p for each in requirements for p in each.get("reminders", [])})
    if reminders:
        result["reminders"] = reminders
    steps: list[dict] = []
    for each in requirements:
        steps += [step for step in each.get("escalations", []) if step not in steps]
    if steps:
        result["escalations"] = steps
    if any(each.get("at_expiry") == EXPIRE_CLOSED_TELL_ADMINS for each in requirements):
        result["at_expiry"] = EXPIRE_CLOSED_TELL_ADMINS
    if requirements and all(each.get("chat_decisions") for each in requirements):
        result["chat_decisions"] = True
    return result


def chat_decisions_allowed(requirements: dict, reversibility: str) -> bool:
    """Whether Approve and Reject may be given from chat: the policy says so, the action is not
    irreversible, and the step-up is a one-time code (a passkey cannot be answered in a chat modal)."""
    return (
        bool(requirements.get("chat_decisions")) and reversibility != "R3" and not needs_passkey(requirements)
    )
