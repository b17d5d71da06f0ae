"""No import cycle among the project's modules, across apps too, counting imports inside functions.

lint-imports' acyclic_siblings contract checks the siblings inside each package; this checks the whole
module graph at once (grimp, the graph import-linter itself builds), so a cycle that runs through two
apps (approvals.x -> accounts.y -> approvals.x) fails here. A cycle hidden in a function-level import
is still a cycle: grimp reads those imports too.
"""

import grimp
import pytest

pytestmark = pytest.mark.database_independent  # never reaches the suite's database

PACKAGES = ("approvals", "audit", "tenants", "accounts", "signing_keys", "lib", "sso", "reviewer")


def import_cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, iter(sorted(graph.find_modules_directly_imported_by(other)))))
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def test_the_project_has_no_import_cycle():
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    assert import_cycles(graph) == []


def test_the_check_finds_a_cycle():
    graph = grimp.ImportGraph()
    for module in ("shop", "shop.orders", "shop.invoices", "shop.mail"):
        graph.add_module(module)
    graph.add_import(importer="shop.orders", imported="shop.invoices")
    graph.add_import(importer="shop.invoices", imported="shop.mail")
    graph.add_import(importer="shop.mail", imported="shop.orders")
    assert import_cycles(graph) == [["shop.invoices", "shop.mail", "shop.orders"]]


def test_the_graph_holds_function_level_imports():
    """ApprovalsConfig.ready() imports the direct send inside the method: the graph still has that edge."""
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    assert graph.direct_import_exists(importer="approvals.apps", imported="approvals.worker.delivery")
