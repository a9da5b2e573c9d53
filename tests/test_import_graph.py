"""No import circles in rs_lightning, and no import that runs upward from the core.

Every ``import`` and ``from ... import`` in the package counts, also those inside functions (a deferred import
that closes a circle is still a circle: the two modules can only be read together); imports under
``if TYPE_CHECKING:`` do not run and do not count. A package's ``__init__`` counts as a module of its own. The
data package imports its modules by listing its folder at import time (``rs_lightning/data/__init__.py``),
which is discovery, not an edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

from rs_testing import REPO

PACKAGE = REPO / "rs_lightning"


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str], root: Path = REPO) -> set[str]:
    """The modules of ``modules`` that ``path`` imports (a ``from X import y`` counts as X.y when that is a
    module, else as X)."""
    tree = ast.parse(path.read_text())
    name, package = module_name(path, root), path.name == "__init__.py"
    hidden = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module
            for alias in node.names:
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target)
    return (found & modules) - {name}


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imports(path, set(paths)) for name, path in paths.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
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
                    found.append(sorted(component))
    return found


def test_no_import_circles():
    found = circles(import_graph())
    assert not found, "modules that import each other (move the shared part below both):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_the_check_sees_a_circle_through_a_deferred_import(tmp_path):
    """Catches a checker that reads module-level imports only, or that drops relative imports."""
    package = tmp_path / "rs_lightning" / "sub"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import f\n")
    (package / "b.py").write_text("def f():\n    from rs_lightning.sub import a\n")
    hidden = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n"
    (package / "c.py").write_text(hidden)
    paths = {module_name(p, tmp_path): p for p in package.glob("*.py")}
    graph = {name: imports(path, set(paths), tmp_path) for name, path in paths.items()}
    assert circles(graph) == [["rs_lightning.sub.a", "rs_lightning.sub.b"]]
    assert graph["rs_lightning.sub.c"] == set()


def test_the_core_imports_nothing_above_it():
    """rs_lightning/smoothing is the core: no Lightning, and none of the layers built on it."""
    layers = ("cli", "methods", "callbacks", "certification", "analysis", "data", "models")
    above = tuple(f"rs_lightning.{layer}" for layer in layers)
    graph = import_graph()
    upward = {
        f"{name} -> {target}"
        for name, targets in graph.items()
        if name.startswith("rs_lightning.smoothing")
        for target in targets
        if target.startswith(above)
    }
    assert not upward
    for path in (PACKAGE / "smoothing").rglob("*.py"):
        assert "import lightning" not in path.read_text() and "from lightning" not in path.read_text(), path
