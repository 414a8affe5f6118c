"""The package's shape: orchestration above components (no import cycle between modules), no normgrow import
hidden inside a function, and no function longer than about 80 lines."""

import ast
from pathlib import Path

import normgrow

PACKAGE = Path(normgrow.__file__).parent
MAX_LINES = 80


def modules() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text()) for p in sorted(PACKAGE.glob("*.py"))}


def normgrow_imports(node: ast.AST) -> set[str]:
    """normgrow modules an import statement names (`from normgrow import x` names module x if it is one)."""
    names = set(modules_cache)
    if isinstance(node, ast.ImportFrom) and node.module:
        if node.module == "normgrow":
            return {a.name for a in node.names if a.name in names}
        if node.module.startswith("normgrow."):
            return {node.module.split(".")[1]}
    if isinstance(node, ast.Import):
        return {a.name.split(".")[1] for a in node.names if a.name.startswith("normgrow.")}
    return set()


modules_cache = modules()


def test_no_import_cycle_between_modules():
    graph = {name: set() for name in modules_cache}
    for name, tree in modules_cache.items():
        if name == "__init__":
            continue
        for node in tree.body:  # module-level imports
            graph[name] |= normgrow_imports(node) - {"__init__"}
    state: dict[str, int] = {}

    def visit(n: str, path: list[str]) -> None:
        state[n] = 1
        for m in sorted(graph[n]):
            assert state.get(m) != 1, f"import cycle: {' → '.join(path + [n, m])}"
            if m not in state:
                visit(m, path + [n])
        state[n] = 2

    for n in graph:
        if n not in state:
            visit(n, [])


def functions(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_no_normgrow_import_inside_a_function():
    hidden = [f"{name}.{fn.name}" for name, tree in modules_cache.items() for fn in functions(tree)
              for node in ast.walk(fn) if normgrow_imports(node)]
    assert not hidden, hidden


def test_functions_stay_short():
    long = [f"{name}.{fn.name}: {fn.end_lineno - fn.lineno + 1} lines" for name, tree in modules_cache.items()
            for fn in functions(tree) if fn.end_lineno - fn.lineno + 1 > MAX_LINES]
    assert not long, long
