"""What kind of action a proposal is, independent of any one policy: its reversibility class and, for a
tool no policy names, a risk hint from the tool's name. Both are inputs that can only make review
stricter: neither ever allows anything.

Reversibility: R0 read-only, R1 reversible, R2 reversible with cost, R3 irreversible.
It comes from the agent's consequences (`reversibility: "R0".."R3"`, or `reversible: true/false`) and
from the admins' classification of the tool (`PolicyVersion.reversibility` on every active version whose
agent and tool patterns match); the strictest wins, and a tool nobody classifies counts as R2 (fail
closed), so the agent's statement can only make it stricter. CEL conditions see it as `reversibility`.

Risk hint: the keyword groups of `reviewer_gate.risk` (the agent-side gating uses the same ones, so an
agent and Reviewer agree on which tool names are risky): a lowercased tool name containing a shell/exec,
file-write or external-API-write keyword is high risk; anything else gets no hint. Reviewer names the
groups in words for the reviewer's page.
"""

from reviewer_gate.risk import risk_hint as keyword_group

REVERSIBILITY_CLASSES = {
    "R0": "read-only",
    "R1": "reversible",
    "R2": "reversible with cost",
    "R3": "irreversible",
}
UNCLASSIFIED = "R2"

RISK_HINT_WORDS = {
    "shell_exec": "shell or command execution",
    "file_write": "file write",
    "external_api_write": "external API write",
}


def agent_reversibility(consequences: dict) -> str:
    """The class the agent's consequences state, or "" when they state none."""
    stated = str((consequences or {}).get("reversibility") or "").strip().upper()
    if stated in REVERSIBILITY_CLASSES:
        return stated
    reversible = (consequences or {}).get("reversible")
    if reversible is True:
        return "R1"
    if reversible is False:
        return "R3"
    return ""


def reversibility(consequences: dict, admin_classes: list[str]) -> str:
    """The strictest of what the agent states and what the admins classified, where a tool nobody
    classified counts as R2: the agent's word can only make it stricter, never lift it (an agent's
    `reversible: true` on an unclassified delete stays R2)."""
    classified = [c for c in admin_classes if c in REVERSIBILITY_CLASSES] or [UNCLASSIFIED]
    stated = agent_reversibility(consequences)
    return max([*classified, stated] if stated else classified)


def risk_hint(tool: str) -> str:
    """The keyword group the tool's name falls in ("file write"), or "" for no hint."""
    kind = keyword_group(tool or "")
    return RISK_HINT_WORDS[kind] if kind else ""
