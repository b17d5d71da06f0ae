"""Types as a ratchet: the strict list in pyproject.toml only grows, and every new module joins it.

Every product module is on exactly one of two lists: the strict list (checked by every mypy run with the
strict block's flags) or the committed baseline of modules not yet strict. A new module on neither list
fails here, and it belongs on the strict list; a module that moved is renamed on its list; a baseline
module that now passes the strict flags leaves the baseline. tests/layout/typing_lists.py regenerates
both lists (docs/testing.md).
"""

import pytest

from tests.layout import typing_lists

pytestmark = pytest.mark.database_independent  # never reaches the suite's database

REGENERATE = "regenerate both lists with .venv/bin/python tests/layout/typing_lists.py"


def test_every_product_module_is_on_the_strict_list_or_the_baseline():
    listed = set(typing_lists.strict_list()) | set(typing_lists.baseline_list())
    unlisted = sorted(typing_lists.product_modules() - listed)
    assert not unlisted, f"new modules join the strict list in pyproject.toml: {unlisted}"


def test_every_listed_module_exists():
    """mypy says nothing of an override naming no module, so a moved module would leave the list unseen."""
    modules = typing_lists.product_modules()
    assert not sorted(set(typing_lists.strict_list()) - modules), f"moved or deleted; {REGENERATE}"
    assert not sorted(set(typing_lists.baseline_list()) - modules), f"moved or deleted; {REGENERATE}"


def test_every_module_a_mypy_override_names_exists():
    """The same for every override naming a module of ours (the tests' ignore_errors list among them)."""
    ours = (*typing_lists.PRODUCT_PACKAGES, "tests")
    modules = typing_lists.product_modules() | typing_lists.test_modules()
    named = {
        module
        for block in typing_lists.mypy_overrides()
        for module in ([block["module"]] if isinstance(block["module"], str) else block["module"])
        if module.split(".")[0] in ours and not module.endswith(".*")
    }
    assert not sorted(named - modules), "moved or deleted: rename them in pyproject.toml [tool.mypy]"


def test_no_module_is_on_both_lists():
    both = sorted(set(typing_lists.strict_list()) & set(typing_lists.baseline_list()))
    assert not both


def test_both_lists_are_sorted_without_repeats():
    for listed in (typing_lists.strict_list(), typing_lists.baseline_list()):
        assert listed == sorted(set(listed))


def test_no_baseline_module_already_passes_the_strict_flags():
    """The ratchet's click: a fixed module leaves the baseline, so it cannot slip back (one mypy run)."""
    passing = sorted(set(typing_lists.baseline_list()) - typing_lists.modules_failing_strict())
    assert not passing, f"these pass strict now and join the strict list: {passing}; {REGENERATE}"
