"""What kind of action a proposal is, independent of any one policy: its reversibility class and, for a
tool no policy names, a risk hint from the tool's name. Both are inputs that can only make review
stricter: neither ever allows anything.

Reversibility: R0 read-only, R1 reversible, R2 reversible with cost, R3 irreversible.
It comes from the agent's consequences (`reversibility: "R0".."R3"`, or `reversible: true/false`) and
from the admins' classification of the tool (`PolicyVersion.reversibility` on every active version whose
agent and tool patterns match); the strictest wins, and a tool nobody classifies counts as R2 (fail
closed), so the agent's statement can only make it stricter. CEL conditions see it as `reversibility`.

Risk hint: the keyword groups of the HITL plugin's classifier (shared/seeds/
hitl-plugin-risk-classifier.txt): a lowercased tool name containing a shell/exec, file-write or
external-API-write keyword is high risk; anything else gets no hint.
"""

REVERSIBILITY_CLASSES = {
    "R0": "read-only",
    "R1": "reversible",
    "R2": "reversible with cost",
    "R3": "irreversible",
}
UNCLASSIFIED = "R2"

# Checked in this order; the first group with a keyword in the tool name names the hint.
RISK_KEYWORDS = (
    ("shell or command execution", ("shell", "exec", "bash", "run_command", "terminal")),
    ("file write", ("write", "edit", "delete", "remove", "rm_", "mv_", "move", "create_file")),
    ("external API write", ("http_post", "http_put", "http_delete", "api_write", "post_", "put_", "delete_")),
)


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
    name = (tool or "").lower()
    for group, keywords in RISK_KEYWORDS:
        if any(keyword in name for keyword in keywords):
            return group
    return ""
