"""Reversibility is the strictest of the agent's statement and the admins' classification, and an
unclassified tool counts as R2: the agent's word can only make it stricter. Every pair is tested."""

import pytest

from approvals.policy import classification

# What the agent may say, and the class it states ("" for nothing).
AGENT_STATEMENTS: dict[str, tuple[dict, str]] = {
    "nothing": ({}, ""),
    "reversibility R0": ({"reversibility": "R0"}, "R0"),
    "reversible: true": ({"reversible": True}, "R1"),
    "reversibility R2": ({"reversibility": "r2"}, "R2"),
    "reversible: false": ({"reversible": False}, "R3"),
    "reversibility R3": ({"reversibility": "R3"}, "R3"),
    "nonsense": ({"reversibility": "R9", "reversible": "maybe"}, ""),
}
# The admins' classification of the tool ([] for unclassified).
CLASSIFICATIONS = {
    "unclassified": [],
    "R0": ["R0"],
    "R1": ["R1"],
    "R2": ["R2"],
    "R3": ["R3"],
    "R1 and R3": ["R1", "R3"],
}


@pytest.mark.parametrize("agent_name", AGENT_STATEMENTS)
@pytest.mark.parametrize("classified_name", CLASSIFICATIONS)
def test_the_agents_statement_only_ever_makes_reversibility_stricter(agent_name, classified_name):
    consequences, stated = AGENT_STATEMENTS[agent_name]
    admin_classes = CLASSIFICATIONS[classified_name]
    floor = max(admin_classes) if admin_classes else classification.UNCLASSIFIED
    result = classification.reversibility(consequences, admin_classes)
    assert result == max(floor, stated or floor)
    assert result >= floor  # never below what the admins (or the unclassified default) say


def test_an_agents_reversible_true_on_an_unclassified_tool_counts_as_r2():
    assert classification.reversibility({"reversible": True}, []) == "R2"
    assert classification.reversibility({"reversibility": "R0"}, []) == "R2"
