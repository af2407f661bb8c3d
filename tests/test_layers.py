"""The layers, read from the imports: runtime → events → sinks → schema → report and TUI (docs/architecture.md).

Every `import` statement counts, at module level or inside a function (a function-level import is
still a dependency, and the usual way a cycle hides), except those under `if TYPE_CHECKING:`.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
HEAVY = ("torch", "jax", "jaxlib")

# Each layer: the xladev modules it may import (besides its own), and whether torch/jax may be imported.
# Shared leaves hold tables and pure functions every layer may use.
LEAVES = ("xladev.schema", "xladev._flags", "xladev.errors", "xladev.analysis", "xladev.graphdiff")
LAYERS = {
    "leaf": (LEAVES, False),
    "events": (LEAVES, False),
    "runtime": (("xladev.events",) + LEAVES, True),
    "sinks": (("xladev.events",) + LEAVES, False),
    "report": (LEAVES + ("xladev.dumps",), False),
    "tui": (LEAVES + ("xladev.report",), False),  # the report's reading and diagnosis: the same findings
    "dumps": (LEAVES, False),
    # The adapter for a real torch_xla: a source of events like the runtime, writing through the event-log sink.
    "attach": (("xladev.events", "xladev.sinks", "xladev.dumps") + LEAVES, True),
}


def layer_of(module: str) -> str | None:
    """The layer a module belongs to; None for the top (the package, CLI, public debug API)."""
    if module.startswith(LEAVES):
        return "leaf"
    for prefix, layer in (("xladev.runtime", "runtime"), ("xladev.events", "events"), ("xladev.sinks", "sinks"),
                          ("xladev.report", "report"), ("xladev_tui", "tui"), ("xladev.dumps", "dumps"),
                          ("xladev.attach", "attach")):
        if module == prefix or module.startswith(prefix + "."):
            return layer
    return None


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "tui":
        parts[0] = "xladev_tui"  # installed under its own name (pyproject's package-dir)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(source: str, module: str, is_package: bool) -> set[str]:
    """Every module a source imports (absolute names; `from a import b` also yields `a.b`)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking_only(child):
                for orelse in child.orelse:
                    visit(orelse)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = module.split(".")
                    if not is_package:
                        base = base[:-1]
                    base = base[:len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                found.add(target)
                found.update(f"{target}.{alias.name}" for alias in child.names)
            visit(child)

    visit(ast.parse(source))
    return found


def violations(module: str, imported: set[str]) -> list[str]:
    """The imports of `module` that go against the layer order."""
    layer = layer_of(module)
    if layer is None:
        return []
    allowed, heavy_ok = LAYERS[layer]
    bad = []
    for target in sorted(imported):
        root = target.split(".")[0]
        if root in HEAVY:
            if not heavy_ok:
                bad.append(f"{module} imports {target} ({layer} may not import torch or jax)")
            continue
        if root not in ("xladev", "xladev_tui", "tui"):
            continue
        if root == "tui":
            bad.append(f"{module} imports {target}: the TUI is installed as xladev_tui")
            continue
        target_layer = layer_of(target)
        if target in ("xladev",) or target_layer == layer:
            continue
        if target_layer is None:
            # `from xladev import graphdiff` names the leaf as `xladev.graphdiff` too.
            if target.startswith(LEAVES) or any(target.startswith(a) for a in allowed):
                continue
            bad.append(f"{module} ({layer}) imports {target} (the package top: CLI, debug API)")
        elif not target.startswith(allowed):
            bad.append(f"{module} ({layer}) imports {target} ({target_layer})")
    return bad


def _sources():
    for path in sorted(list((ROOT / "xladev").rglob("*.py")) + list((ROOT / "tui").rglob("*.py"))):
        yield module_name(path), path.name == "__init__.py", path.read_text()


def _graph() -> dict[str, set[str]]:
    return {module: imports_of(text, module, is_package) for module, is_package, text in _sources()}


def test_no_import_goes_against_the_layers():
    graph = _graph()
    bad = [line for module, imported in graph.items() for line in violations(module, imported)]
    assert not bad, "imports against runtime → events → sinks → schema → report/TUI:\n" + "\n".join(bad)


def test_the_check_fails_on_each_kind_of_wrong_edge():
    # The checker itself, on sources that break each rule: it must name every one.
    cases = {
        "xladev.sinks.fake": "from xladev.runtime.graph.ir import Graph",
        "xladev.report.fake": "def f():\n    import torch",
        "xladev.events.fake": "from xladev.sinks import metrics",
        "xladev.schema.fake": "import xladev.events",
        "xladev_tui.fake": "from xladev.sinks import metrics",
    }
    for module, source in cases.items():
        assert violations(module, imports_of(source, module, False)), module
    allowed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from xladev.runtime.graph.ir import Graph\n"
    assert not violations("xladev.sinks.fake", imports_of(allowed, "xladev.sinks.fake", False))


# Inside the runtime, its folders, bottom up (docs/architecture.md): a module may import its own folder and those
# before it. `device.py` and the package `__init__` sit above them all: registration wires the layers together.
RUNTIME_ORDER = ("graph", "lowering", "compile", "execute", "record", "distributed", "api", "parallel", "dynamo")


def runtime_folder(module: str) -> str | None:
    """The runtime folder of `module` (`xladev.runtime.execute.barrier` -> "execute"); None outside them."""
    parts = module.split(".")
    if parts[:2] != ["xladev", "runtime"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in RUNTIME_ORDER else None


def runtime_violations(module: str, imported: set[str]) -> list[str]:
    """The imports of a runtime module that reach a higher folder of the runtime (or its top)."""
    folder = runtime_folder(module)
    if folder is None:
        return []
    rank = RUNTIME_ORDER.index(folder)
    bad = []
    for target in sorted(imported):
        if not target.startswith("xladev.runtime.") and target != "xladev.runtime":
            continue
        target_folder = runtime_folder(target)
        if target_folder is None:
            if target == "xladev.runtime":
                continue  # the package itself (`from xladev.runtime import graph`): only a docstring
            bad.append(f"{module} ({folder}) imports {target} (the runtime's top: registration)")
        elif RUNTIME_ORDER.index(target_folder) > rank:
            bad.append(f"{module} ({folder}) imports {target} ({target_folder}, a higher layer)")
    return bad


def test_every_runtime_module_is_in_a_layer_folder():
    top = {m for m in _graph() if m.startswith("xladev.runtime.") and runtime_folder(m) is None}
    assert top == {"xladev.runtime.device"}, f"runtime modules outside the layer folders: {sorted(top)}"


def test_no_runtime_import_goes_up_the_layers():
    graph = _graph()
    bad = [line for module, imported in graph.items() for line in runtime_violations(module, imported)]
    assert not bad, "imports against " + " < ".join(RUNTIME_ORDER) + ":\n" + "\n".join(bad)


def test_the_runtime_check_fails_on_a_planted_wrong_edge():
    # A lowering that reaches the dispatcher (record/), an execution that reads the tensor subclass, a graph module
    # that imports registration: each is named; an import down the layers is not.
    planted = {
        "xladev.runtime.lowering.fake": "from xladev.runtime.record.dispatch import handle",
        "xladev.runtime.execute.fake": "def f():\n    from xladev.runtime.record import tensor",
        "xladev.runtime.graph.fake": "import xladev.runtime.device",
    }
    for module, source in planted.items():
        assert runtime_violations(module, imports_of(source, module, False)), module
    fine = "from xladev.runtime.graph.ir import Graph\nfrom xladev.runtime.compile import compilation"
    assert not runtime_violations("xladev.runtime.execute.fake", imports_of(fine, "xladev.runtime.execute.fake", False))


def _cycles(graph: dict[str, set[str]], prefix: str) -> list[list[str]]:
    """Strongly connected components of more than one module among modules starting with `prefix`."""
    nodes = {m for m in graph if m.startswith(prefix)}
    # A module importing its own package (`from xladev.schema import units`) runs that package's
    # `__init__`, which re-exports its modules: the usual package pattern, not a cycle of dependencies.
    edges = {m: {t for t in graph[m] if t in nodes and t != m and not m.startswith(t + ".")} for m in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def connect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(nodes):
        if node not in index:
            connect(node)
    return found


def test_cycle_finder_finds_a_cycle():
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}
    assert _cycles(graph, "p.") == [["p.a", "p.b", "p.c"]]


@pytest.mark.parametrize("package", ["xladev.runtime", "xladev.sinks", "xladev.report", "xladev.schema",
                                     "xladev.events", "xladev_tui"])
def test_no_import_cycles(package):
    cycles = _cycles(_graph(), package)
    assert not cycles, f"import cycles in {package}: " + "; ".join(" ↔ ".join(c) for c in cycles)


def test_no_two_modules_share_a_name():
    # A name says what a module does; two modules with one name would be two jobs under one name.
    # Exempt: files Python names (`__init__.py`, a package's `__main__.py`), and the torch_xla alias, whose
    # module names (metrics.py, profiler.py...) are dictated by torch_xla's layout, not by their job here.
    alias = ROOT / "xladev" / "torch_xla_alias"
    seen: dict[str, list[str]] = {}
    for path in list((ROOT / "xladev").rglob("*.py")) + list((ROOT / "tui").rglob("*.py")):
        if path.name not in ("__init__.py", "__main__.py") and not path.is_relative_to(alias):
            seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert not {name: paths for name, paths in seen.items() if len(paths) > 1}
