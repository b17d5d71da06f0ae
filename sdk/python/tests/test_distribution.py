"""What the wheel must contain: every module imports (with the extras installed), and it is typed."""

import importlib
from importlib import resources

import pytest

import reviewer_gate

MODULES = [
    "gate",
    "decision",
    "keys",
    "used_stores",
    "client",
    "approval",
    "risk",
    "testing",
    "a2a",
    "mcp_gateway",
    "langgraph",
    "openai_agents",
    "agent_framework",
    "adk",
    "crewai",
]


@pytest.mark.parametrize("name", MODULES)
def test_each_module_imports(name):
    importlib.import_module(f"reviewer_gate.{name}")


def test_the_package_is_typed_and_versioned():
    assert resources.files(reviewer_gate).joinpath("py.typed").is_file()
    assert reviewer_gate.__version__.count(".") == 2
