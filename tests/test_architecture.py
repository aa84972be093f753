"""The import rules of docs/architecture.md, checked on the source (no import is run).

Dependencies point one way: CLI and app → runtime → ZooKeeper layer → core. Inside the
runtime, its base (clock, logs, gc) → membership and run → fire and status → the daemon.
The installed package imports nothing from the lab (`tools/`, `sim/`), no module imports
itself through a circle (a function-level or type-only import counts too: a circle hidden
in a function is still a circle), and the integrations use the public API only.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "zksched"

# a module may import modules of its own rank or lower; the first matching prefix counts
RANKS: list[tuple[str, int]] = [
    ("zksched._version", 0),
    ("zksched.core", 0),
    ("zksched.zk", 1),
    ("zksched.runtime.clock", 2),
    ("zksched.runtime.logs", 2),
    ("zksched.runtime.gcsteward", 2),
    ("zksched.runtime.skips", 2),
    ("zksched.runtime.host", 2),
    ("zksched.runtime.membership", 3),
    ("zksched.runtime.run", 3),
    ("zksched.runtime.fire", 4),
    ("zksched.runtime.status", 4),
    ("zksched.runtime.daemon", 5),
    ("zksched.runtime", 2),  # the package's own __init__
    ("zksched.app", 6),
    ("zksched.integrations", 7),
    ("zksched.cli", 7),
    ("zksched.__main__", 8),
    ("zksched", 8),  # the public facade
]
# sub-packages of one rank that must still not import each other
APART = [
    ("zksched.runtime.membership", "zksched.runtime.run"),
    ("zksched.runtime.fire", "zksched.runtime.status"),
    ("zksched.cli", "zksched.integrations"),
    ("zksched.cli", "zksched.app"),
]
MAX_MODULE_LINES = 440  # "around 400": a module past this is asking to be split
MAX_RUNTIME_PACKAGE_LINES = 2_000


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def rank(module: str) -> int:
    for prefix, value in RANKS:
        if module == prefix or module.startswith(prefix + "."):
            return value
    raise AssertionError(f"{module} has no rank in tests/test_architecture.py")


def imports(module: str) -> Iterator[tuple[str, int]]:
    """Every module `module` imports, anywhere in it, with the line."""
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{module}:{node.lineno}: a relative import")
            assert node.module is not None
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                yield (name if name in MODULES else node.module), node.lineno


def zksched_imports(module: str) -> Iterator[tuple[str, int]]:
    for target, line in imports(module):
        if target.split(".")[0] != "zksched":
            continue
        while target not in MODULES and "." in target:
            target = target.rsplit(".", 1)[0]
        if target != module:
            yield target, line


def public(module: str, target: str) -> bool:
    """The integrations import the public facade (`zksched`), as an app would, and the
    rules `Cluster(...)` checks its arguments by (to name their own config keys)."""
    return module.startswith("zksched.integrations") and target in INTEGRATIONS_MAY_USE


INTEGRATIONS_MAY_USE = {"zksched", "zksched.app.arguments"}


def test_every_module_has_a_rank() -> None:
    for module in MODULES:
        rank(module)


def test_dependencies_point_down() -> None:
    upward = [
        f"{module}:{line} imports {target}"
        for module in MODULES
        for target, line in zksched_imports(module)
        if rank(target) > rank(module) and module != "zksched" and not public(module, target)
    ]
    assert upward == []


def test_sub_packages_of_one_rank_stay_apart() -> None:
    crossing = [
        f"{module}:{line} imports {target}"
        for module in MODULES
        for target, line in zksched_imports(module)
        for a, b in APART
        if (module.startswith(a) and target.startswith(b))
        or (module.startswith(b) and target.startswith(a))
    ]
    assert crossing == []


SUB_PACKAGES = [f"zksched.runtime.{name}" for name in ("membership", "fire", "run", "status")]


def public_names(package: str) -> set[str]:
    """The names a runtime sub-package's `__init__` gives the others (its `__all__`)."""
    tree = ast.parse(MODULES[package].read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return {ast.literal_eval(e) for e in node.value.elts}  # type: ignore[attr-defined]
    raise AssertionError(f"{package}/__init__.py has no __all__")


def test_runtime_sub_packages_are_used_through_their_init() -> None:
    """Outside a runtime sub-package, zksched imports only what its `__init__` names."""
    wrong = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.module is None:
                continue
            for package in SUB_PACKAGES:
                if module == package or module.startswith(package + "."):
                    continue
                if node.module.startswith(package + "."):
                    wrong.append(f"{module}:{node.lineno} reaches into {node.module}")
                elif node.module == package:
                    extra = {a.name for a in node.names} - public_names(package)
                    if extra:
                        wrong.append(f"{module}:{node.lineno} takes {sorted(extra)}")
    assert wrong == []


def test_the_package_never_imports_the_lab() -> None:
    lab = [
        f"{module}:{line} imports {target}"
        for module in MODULES
        for target, line in imports(module)
        if target.split(".")[0] in {"tools", "sim", "tests", "integration"}
    ]
    assert lab == []


def test_no_lab_folder_is_left_in_the_package() -> None:
    """The bench, chaos lab and simulator live in tools/ and sim/, never under zksched/
    (not even as a folder left behind by a move)."""
    left = [p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name in {"sim", "devtools"}]
    assert left == []


def test_no_import_circle() -> None:
    graph = {module: {t for t, _ in zksched_imports(module)} for module in MODULES}
    # the facade imports the app lazily by name; nothing imports the facade but __main__
    circles = [c for c in strongly_connected(graph) if len(c) > 1]
    assert circles == []


def test_integrations_use_the_public_api_only() -> None:
    private = [
        f"{module}:{line} imports {target}"
        for module in MODULES
        if module.startswith("zksched.integrations")
        for target, line in zksched_imports(module)
        if target not in INTEGRATIONS_MAY_USE and not target.startswith("zksched.integrations")
    ]
    assert private == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_stay_small(module: str) -> None:
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{module} has {lines} lines"


def test_runtime_sub_packages_stay_small() -> None:
    sizes = {
        package.name: sum(len(p.read_text().splitlines()) for p in package.rglob("*.py"))
        for package in (PACKAGE / "runtime").iterdir()
        if package.is_dir() and (package / "__init__.py").exists()
    }
    assert sizes and max(sizes.values()) <= MAX_RUNTIME_PACKAGE_LINES, sizes


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components, iteratively (no recursion limit to meet)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
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
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components
