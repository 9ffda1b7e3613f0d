"""No module of the project imports itself back, through any chain, even under TYPE_CHECKING.

import-linter's ``acyclic_siblings`` contract (pyproject.toml) checks the packages folder by
folder; this test checks module by module, the imports it ignores included, and names each
cycle it finds (style.md §25: a type two modules share lives in a third).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
#: The packages import-linter reads, so a package added there is checked here too.
PACKAGES = tuple(
    tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
)


def strongly_connected(graph: grimp.ImportGraph) -> list[list[str]]:
    """The groups of two or more modules that reach each other (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            following = next(imported, None)
            if following is not None:
                if following not in index:
                    index[following] = low[following] = len(index)
                    stack.append(following)
                    on_stack.add(following)
                    work.append(
                        (
                            following,
                            iter(sorted(graph.find_modules_directly_imported_by(following))),
                        )
                    )
                elif following in on_stack:
                    low[module] = min(low[module], index[following])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == module:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def test_no_module_imports_itself_back() -> None:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert strongly_connected(graph) == []


def test_the_check_finds_a_cycle_made_only_for_type_checking() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "a.app", "a.routes", "a.services"):
        graph.add_module(module)
    graph.add_import(importer="a.app", imported="a.routes")
    graph.add_import(importer="a.routes", imported="a.app")  # under TYPE_CHECKING
    graph.add_import(importer="a.app", imported="a.services")
    assert strongly_connected(graph) == [["a.app", "a.routes"]]
