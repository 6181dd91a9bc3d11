"""The package's layers, proved from its imports (ARCHITECTURE.md draws them).

Built on grimp's graph of every import statement: those at the top of a module, those inside
functions and those under ``TYPE_CHECKING``. ``lint-imports`` checks the contracts in
``pyproject.toml`` (layers and forbidden imports); these tests add what a contract cannot say:
no cycle at all between modules, and a top level that holds only the face and the values.
"""

from __future__ import annotations

from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp", reason="grimp is in the test extra")

PACKAGE = "remotetensors"
SOURCE = Path(__file__).resolve().parents[2] / "src" / PACKAGE

# Faces besides the package's own: the drop-in for safetensors.torch, and the storage reader of
# torch.distributed.checkpoint.
FACES = {"dcp", "torch"}
# The values: they import only each other (see ARCHITECTURE.md).
VALUES = {"dtypes", "errors", "hooks", "index", "options", "ranges", "redact", "status", "version"}
PACKAGES = {
    "cli",
    "formats",
    "integrations",
    "models",
    "quantization",
    "reading",
    "sources",
    "views",
}
MAX_LINES = 900


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules it imports, leaving out an import of a package's own ``__init__``
    from inside that package (``from . import x`` asks the package for ``x``; no cycle)."""
    graph = grimp.build_graph(PACKAGE, include_external_packages=False)
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        edges[module] = {
            imported
            for imported in graph.find_modules_directly_imported_by(module)
            if not module.startswith(imported + ".")
        }
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative), each sorted; a module that imports itself counts as a cycle too."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges[node]:
                    found.append(sorted(component))
    return found


def shortest_cycle(edges: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest import path from the component's first module back to itself (breadth first,
    inside the component), to name in a failure: where to cut."""
    start = component[0]
    members = set(component)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [*reversed(path), start]
                if child not in parent:
                    parent[child] = node
                    following.append(child)
        frontier = following
    return [start]


def test_cycles_finds_a_cycle_and_names_its_modules() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert sorted(cycles(edges)) == [["a", "b", "c"], ["e"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert shortest_cycle(edges, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert shortest_cycle({"a": {"b", "c"}, "b": {"a"}, "c": {"b"}}, ["a", "b", "c"]) == [
        "a",
        "b",
        "a",
    ]
    assert shortest_cycle(edges, ["e"]) == ["e", "e"]


def test_no_module_is_in_an_import_cycle() -> None:
    edges = import_graph()
    found = cycles(edges)
    named = [
        f"{len(c)} modules in a cycle, e.g. " + " -> ".join(shortest_cycle(edges, c)) for c in found
    ]
    assert found == [], "import cycles: " + "; ".join(named)


def test_the_top_level_holds_the_face_and_the_values_only() -> None:
    modules = {p.stem for p in SOURCE.glob("*.py")} - {"__init__", "__main__"} - FACES
    folders = {p.name for p in SOURCE.iterdir() if (p / "__init__.py").exists()}
    assert modules == VALUES
    assert folders == PACKAGES


def test_values_import_only_values() -> None:
    edges = import_graph()
    crossing = {
        f"{module} -> {imported}"
        for module in (f"{PACKAGE}.{v}" for v in VALUES)
        for imported in edges[module]
        if imported.removeprefix(f"{PACKAGE}.") not in VALUES
    }
    assert crossing == set()


def test_no_module_is_over_the_line_limit() -> None:
    long = {
        str(path.relative_to(SOURCE)): n
        for path in SOURCE.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}
