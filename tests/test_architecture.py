"""The import layering of minibroker/ (docs/architecture.md, "Layers"): no cycles, no import upwards.

The layer table is read from docs/architecture.md, between ``<!-- layers: begin -->`` and
``<!-- layers: end -->`` (the one source: this test has no table of its own): one row per layer, top
first, each naming its units, packages or modules. A module belongs to the longest unit that is it or
contains it (``minibroker``, the package's own ``__init__``, only when nothing longer does). An import
is allowed within a unit and from a unit to any unit of a lower layer; units side by side in one layer
do not import each other.

What counts as an import: every ``import`` and ``from ... import`` of a module, wherever it stands (at
the top, inside a function, under ``if TYPE_CHECKING``), and ``importlib.import_module`` of a constant
``minibroker.*`` name. A lazy import (inside a function) is a dependency like any other: minibroker
imports some subsystems on first use, and issue 28 will load more of them lazily, which is fine
downwards and never a way to hide an upward import or a cycle. ``from a.b import c`` is an edge to the
module ``a.b.c`` when ``c`` is one, else to ``a.b``; ``import a.b.c`` an edge to ``a.b.c``. The packages
``a`` and ``a.b`` that Python initialises on the way are not counted as dependencies of the importer.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import re
from collections.abc import Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = "minibroker"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# Parsing the package's 1.6 MB of Python takes 1-2.5 s: the checks of minibroker run on one worker and
# share one parse (``_minibroker_graph``).
pytestmark = pytest.mark.xdist_group("architecture")


# -- the checks (also run on a made-up package below) ---------------------------------------------------


def read_layers(text: str) -> list[list[str]]:
    """The layer table of an architecture page: layers top first, each a list of units."""
    match = re.search(r"<!-- layers: begin -->\n(.*?)<!-- layers: end -->", text, re.S)
    assert match, "no <!-- layers: begin --> ... <!-- layers: end --> table in docs/architecture.md"
    layers: list[list[str]] = []
    for row in match.group(1).splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].isdigit():
            continue  # the header and its rule
        assert int(cells[0]) == len(layers) + 1, f"layers are numbered 1, 2, ... top first: {row!r}"
        units = re.findall(r"`([\w.]+)`", cells[1])
        assert units, f"a layer naming no package: {row!r}"
        layers.append(units)
    assert layers, "the layer table has no rows"
    return layers


def package_modules(root: pathlib.Path, package: str) -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every .py file of ``package`` (a directory under ``root``), and
    every .c file (the source of an extension module: the record layer's accelerator)."""
    modules = {}
    for path in sorted([*(root / package).rglob("*.py"), *(root / package).rglob("*.c")]):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imports(tree: ast.AST, here: str) -> Iterator[tuple[str, tuple[str, ...], int]]:
    """(origin, names, line) of each import in ``tree``: ``import a.b`` is ("a.b", (), line); ``from a
    import b, c`` is ("a", ("b", "c"), line). ``here``: the package relative imports start from."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, (), node.lineno
        elif isinstance(node, ast.ImportFrom):
            origin = node.module or ""
            if node.level:
                base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            yield origin, tuple(alias.name for alias in node.names), node.lineno
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield node.args[0].value, (), node.lineno


def import_graph(root: pathlib.Path, package: str) -> dict[str, dict[str, int]]:
    """Module -> {module of the package it imports: the first line that does}."""
    modules = package_modules(root, package)

    def module_of(name: str) -> str:
        while name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        here = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges: dict[str, int] = {}
        text = "" if path.suffix == ".c" else path.read_text()  # an extension module imports nothing
        if "import" not in text:  # (the generated message tables: 0.8 MB not to parse)
            graph[module] = edges
            continue
        for origin, names, line in _imports(ast.parse(text, str(path)), here):
            if origin != package and not origin.startswith(package + "."):
                continue
            targets = {f"{origin}.{n}" if f"{origin}.{n}" in modules else module_of(origin)
                       for n in names} if names else {module_of(origin)}
            for target in targets - {module}:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def unit_of(module: str, units: dict[str, int]) -> str | None:
    """The longest unit of the table that is ``module`` or contains it."""
    name = module
    while name:
        if name in units:
            return name
        name = name.rpartition(".")[0]
    return None


def layering_violations(graph: dict[str, dict[str, int]], layers: list[list[str]],
                        paths: dict[str, pathlib.Path]) -> list[str]:
    """Every import that goes up the table or sideways within a layer, and every module in no layer:
    ``path:line: what``."""
    units = {unit: depth for depth, row in enumerate(layers) for unit in row}

    def where(module: str) -> str:
        path = paths[module]
        return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name)

    problems = [f"{where(module)}: {module} is in no layer of the table"
                for module in sorted(graph) if unit_of(module, units) is None]
    for module, edges in sorted(graph.items()):
        unit = unit_of(module, units)
        for target, line in sorted(edges.items()):
            to = unit_of(target, units)
            if unit is None or to is None or to == unit or units[to] > units[unit]:
                continue
            side = "above" if units[to] < units[unit] else "beside"
            problems.append(f"{where(module)}:{line}: {module} imports {target}, layer {units[to] + 1} "
                            f"({to}), {side} its own layer {units[unit] + 1} ({unit})")
    return problems


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (a list of modules, the first repeated at the end) through each strongly connected
    component of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
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
                if len(component) > 1:
                    components.append(sorted(component))
    return [_cycle_in(graph, set(component)) for component in components]


def _cycle_in(graph: dict[str, dict[str, int]], component: set[str]) -> list[str]:
    """A cycle through the first module of a strongly connected component (breadth-first, shortest)."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph[node]):
            if child == start:
                return paths[node] + [start]
            if child in component and child not in paths:
                paths[child] = paths[node] + [child]
                queue.append(child)
    raise AssertionError("not a strongly connected component")


def describe_cycle(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)) + \
        f" -> {cycle[-1]}"


# -- minibroker ----------------------------------------------------------------------------------------


@functools.cache
def _minibroker_graph() -> dict[str, dict[str, int]]:
    return import_graph(ROOT, PACKAGE)


def _minibroker():
    return _minibroker_graph(), read_layers(ARCHITECTURE.read_text()), package_modules(ROOT, PACKAGE)


def test_the_layer_table_names_every_module_and_only_real_ones():
    graph, layers, modules = _minibroker()
    units = {unit: depth for depth, row in enumerate(layers) for unit in row}
    assert not [m for m in graph if unit_of(m, units) is None], "modules in no layer of docs/architecture.md"
    assert [u for u in units if u not in modules] == [], "units of the table that are no module or package"
    assert len(units) == sum(len(row) for row in layers), "a unit named in two layers"


def test_no_import_cycles():
    graph = _minibroker_graph()
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(describe_cycle(c, graph) for c in found)


def test_no_import_breaks_the_layer_order():
    graph, layers, modules = _minibroker()
    problems = layering_violations(graph, layers, modules)
    assert not problems, "imports against the layer order of docs/architecture.md:\n" + "\n".join(problems)


def test_the_checks_catch_a_cycle_an_upward_import_and_a_sideways_one(tmp_path):
    """The checks themselves, on a made-up package: a lazy import upwards closes a cycle."""
    pkg = tmp_path / "house"
    for name, text in {
        "__init__.py": "",
        "top.py": "from house.low import base\n",
        "mid/__init__.py": "",
        "mid/a.py": "import house.mid.b\nfrom house import low\n",
        "mid/b.py": "def later():\n    from house.top import x  # lazy, upwards\n",
        "side.py": "from house.mid import a\n",
        "low.py": "import importlib\nimportlib.import_module('house.side')\n",
    }.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    layers = read_layers("<!-- layers: begin -->\n| layer | units |\n|---|---|\n| 1 | `house.top` |\n"
                         "| 2 | `house.mid`, `house.side` |\n| 3 | `house.low` |\n<!-- layers: end -->\n")
    graph = import_graph(tmp_path, "house")
    assert graph["house.top"] == {"house.low": 1}
    assert graph["house.mid.a"] == {"house.mid.b": 1, "house.low": 2}
    problems = layering_violations(graph, layers, package_modules(tmp_path, "house"))
    assert [p.split(": ", 1)[1] for p in problems] == [
        "house is in no layer of the table",
        "house.low imports house.side, layer 2 (house.side), above its own layer 3 (house.low)",
        "house.mid.b imports house.top, layer 1 (house.top), above its own layer 2 (house.mid)",
        "house.side imports house.mid.a, layer 2 (house.mid), beside its own layer 2 (house.side)",
    ]
    found = cycles(graph)
    assert found == [["house.low", "house.side", "house.mid.a", "house.low"]]
    assert describe_cycle(found[0], graph) == (
        "house.low (line 2) -> house.side (line 1) -> house.mid.a (line 2) -> house.low")
