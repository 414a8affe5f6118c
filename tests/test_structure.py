"""The package's shape, written down as tests: no import cycle between modules (the packages' `__init__`
modules included), no normgrow import hidden inside a function, no module over 600 lines and no function over 60,
the folders in layers — each imports only the utilities and the folders below it, so nothing outside normgrow/study/
imports the study wing but the command line and the package's own `__init__` (which re-exports the registration
calls) — and the verdict engine apart from the paper's claims: nothing it imports, directly or through other modules,
is a module of claims."""

import ast
from pathlib import Path

import normgrow

PACKAGE = Path(normgrow.__file__).parent
MAX_LINES = 60  # a function
MAX_MODULE_LINES = 600
ENGINE = "normgrow.study.engine.verdicts"
PAPER = {
    "normgrow.study.paper.claims",
    "normgrow.study.paper.mechanism",
}  # the paper's claims, registered on the engine
STUDY_USERS = {"normgrow", "normgrow.cli"}  # the only modules outside normgrow.study that may import it
# The floor plan, bottom up: a module imports only modules of its own floor and of the floors below. The package
# root holds the shared utilities (the ground floor) and the face: the command line and `__init__`, on top.
FLOORS: list[set[str]] = [
    {"errors", "atomic", "locks", "registry", "progress", "version", "flags", "hfsource"},
    {"config"},
    {"nn", "data"},  # side by side: neither imports the other
    {"parallel"},
    {"teacher"},
    {"train"},
    {"machine"},
    {"run"},
    {"study"},
    {"cli", ""},  # "": the package's __init__
]


def module_name(path: Path) -> str:
    """normgrow/study/claims.py → normgrow.study.claims; normgrow/study/__init__.py → normgrow.study."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))}


modules_cache = modules()


def normgrow_imports(node: ast.AST, importer: str = "") -> set[str]:
    """The normgrow modules an import statement names, each resolved to a module of the package:
    `from normgrow.study import x` names normgrow.study.x if that is a module, else normgrow.study."""
    names = set(modules_cache)

    def resolve(dotted: str) -> str:
        while dotted not in names and "." in dotted:
            dotted = dotted.rsplit(".", 1)[0]
        return dotted

    out = set()
    if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "normgrow":
        for a in node.names:
            full = f"{node.module}.{a.name}"
            out.add(full if full in names else resolve(node.module))
    elif isinstance(node, ast.Import):
        out |= {resolve(a.name) for a in node.names if a.name.split(".")[0] == "normgrow"}
    return out - {importer}


def import_graph() -> dict[str, set[str]]:
    """Module → the normgrow modules its module-level imports name (a package's `__init__` runs before any of
    its submodules, so importing normgrow.study.x also runs normgrow.study)."""
    graph = {}
    for name, tree in modules_cache.items():
        deps = set()
        for node in tree.body:
            for dep in normgrow_imports(node, name):
                deps.add(dep)
                parent = dep.rsplit(".", 1)[0]
                if parent in modules_cache and parent != "normgrow" and not name.startswith(parent):
                    deps.add(parent)  # the subpackage's __init__, unless it is the importer's own package
        graph[name] = deps - {name}
    return graph


def test_the_graph_sees_subpackages_and_init():
    graph = import_graph()
    assert (
        "normgrow" in graph and "normgrow.study.engine.verdicts" in graph
    )  # __init__ and subpackage modules are walked
    assert "normgrow.version" in graph["normgrow"]
    assert "normgrow.study.engine.stats" in graph["normgrow.study.engine.verdicts"]


def test_no_import_cycle_between_modules():
    graph = import_graph()
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


def test_nothing_below_the_study_layer_imports_it():
    graph = import_graph()
    up = {
        name: sorted(d for d in deps if d == "normgrow.study" or d.startswith("normgrow.study."))
        for name, deps in graph.items()
        if not name.startswith("normgrow.study") and name not in STUDY_USERS
    }
    assert not {k: v for k, v in up.items() if v}, "core modules import the study layer"


def functions(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_no_normgrow_import_inside_a_function():
    hidden = [
        f"{name}.{fn.name}"
        for name, tree in modules_cache.items()
        for fn in functions(tree)
        for node in ast.walk(fn)
        if normgrow_imports(node)
    ]
    assert not hidden, hidden


def test_functions_stay_short():
    long = [
        f"{name}.{fn.name}: {fn.end_lineno - fn.lineno + 1} lines"
        for name, tree in modules_cache.items()
        for fn in functions(tree)
        if fn.end_lineno - fn.lineno + 1 > MAX_LINES
    ]
    assert not long, long


def test_modules_stay_under_600_lines():
    long = {
        p.name: n for p in sorted(PACKAGE.rglob("*.py")) if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, long


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for dep in graph[todo.pop()] - seen:
            seen.add(dep)
            todo.append(dep)
    return seen


def test_the_verdict_engine_does_not_import_the_papers_claims():
    """The engine (claims, roles and settings as registries, verdicts, Holm) reaches no module of claims through its
    imports (the study package's `__init__`, which registers the paper's claims, is not the engine's to import)."""
    graph = import_graph()
    below = reachable({k: v - {"normgrow.study"} for k, v in graph.items()}, ENGINE)
    assert not below & PAPER, below & PAPER
    assert ENGINE in reachable(
        graph, "normgrow.study.paper.claims"
    )  # the paper is registered on the engine, not beside it


ENGINE_ROOM = "normgrow.study.engine"


def outside_the_engine(graph: dict[str, set[str]]) -> list[str]:
    """Every import by an engine module of a study module outside the engine (the study package's `__init__`, which
    any submodule's import runs, aside)."""
    return sorted(
        f"{name} → {dep}"
        for name, deps in graph.items()
        if name.startswith(ENGINE_ROOM)
        for dep in deps
        if dep.startswith("normgrow.study") and not dep.startswith(ENGINE_ROOM) and dep != "normgrow.study"
    )


def test_the_engine_imports_nothing_of_the_study_wing_outside_it():
    graph = import_graph()
    assert outside_the_engine(graph) == []
    planted = {**graph, "normgrow.study.engine.fits": graph["normgrow.study.engine.fits"] | {"normgrow.study.record"}}
    assert outside_the_engine(planted) == ["normgrow.study.engine.fits → normgrow.study.record"]


PAPER_ROOM, REPORT_ROOM = "normgrow.study.paper", "normgrow.study.report"


def room_of(graph: dict[str, set[str]], prefix: str) -> set[str]:
    return {m for m in graph if m == prefix or m.startswith(prefix + ".")}


def papers_reached(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Each study module outside study/paper/ → the paper's modules it reaches through its imports (the study
    package's `__init__`, which imports the paper to register it, aside)."""
    paper = room_of(graph, PAPER_ROOM)
    without_init = {k: v - {"normgrow.study"} for k, v in graph.items()}
    outside = sorted(room_of(graph, "normgrow.study") - paper - {"normgrow.study"})
    return {m: found for m in outside if (found := reachable(without_init, m) & paper)}


def test_the_report_and_the_plumbing_import_no_module_of_the_paper():
    """The paper is a plug-in: its claims, sections and report parts register through registries, so no study
    module outside study/paper/ — the report's, the engine's, the runner's, the config's — reaches one of its modules.
    At 2935ab9 report.py imported regime and rivals directly, summary.py mechanism, regime and rivals; before the
    sections registry (09ab184) config.py, runner.py and pilot.py named the paper's regime: section."""
    graph = import_graph()
    report, paper = room_of(graph, REPORT_ROOM), room_of(graph, PAPER_ROOM)
    assert len(report) >= 14 and len(paper) >= 8 and PAPER <= paper  # the rooms are there, with their modules
    assert papers_reached(graph) == {}
    planted = {
        **graph,
        "normgrow.study.report.overview": graph["normgrow.study.report.overview"] | {"normgrow.study.paper.rivals"},
    }
    assert {"normgrow.study.report.overview", "normgrow.study.report.study"} <= set(papers_reached(planted))
    planted = {**graph, "normgrow.study.runner": graph["normgrow.study.runner"] | {"normgrow.study.paper.regime"}}
    assert "normgrow.study.runner" in papers_reached(planted)


def room(module: str) -> str:
    """normgrow.train.loop → train; normgrow.atomic → atomic; normgrow → "" (the package's __init__)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def floor(module: str) -> int:
    r = room(module)
    matches = [i for i, rooms in enumerate(FLOORS) if r in rooms]
    assert matches, f"{module}: in no floor of FLOORS (a new folder or root module: give it its floor)"
    return matches[0]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module on a higher floor, or of a side-by-side folder on the same floor."""
    return sorted(
        f"{name} → {dep}"
        for name, deps in graph.items()
        for dep in deps
        if floor(dep) > floor(name) or (floor(dep) == floor(name) and room(dep) != room(name) and floor(name) > 0)
    )


def test_each_folder_imports_only_the_floors_below_it():
    assert upward_imports(import_graph()) == []


def test_the_floor_check_catches_a_planted_upward_import():
    graph = import_graph()
    planted = {**graph, "normgrow.nn.model": graph["normgrow.nn.model"] | {"normgrow.run.pipeline"}}
    assert upward_imports(planted) == ["normgrow.nn.model → normgrow.run.pipeline"]
    sideways = {**graph, "normgrow.data.shards": graph["normgrow.data.shards"] | {"normgrow.nn.model"}}
    assert upward_imports(sideways) == ["normgrow.data.shards → normgrow.nn.model"]
    assert upward_imports({**graph, "normgrow.run.export": graph["normgrow.run.export"] | {"normgrow.nn.model"}}) == []


RUN_FILES = {"config.yaml", "summary.json", "metrics.jsonl", "diagnostics.jsonl", "checkpoints"}
RUN_DIR_MODULE = "normgrow.train.rundir"


def run_file_names(trees: dict[str, ast.Module]) -> list[str]:
    """`module: name` for every string literal that is exactly a run directory's file name, outside the run-directory
    module: a module that spells one opens the run's file by path instead of through RunDir."""
    return sorted(
        f"{name}: {node.value}"
        for name, tree in trees.items()
        if name != RUN_DIR_MODULE
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in RUN_FILES
    )


def test_only_the_run_directory_module_names_a_runs_files():
    assert run_file_names(modules_cache) == []


def test_the_run_file_check_catches_a_planted_path():
    planted = ast.parse('import json\n\ndef read(d):\n    return json.loads((d / "summary.json").read_text())\n')
    assert run_file_names({**modules_cache, "normgrow.run.plots": planted}) == ["normgrow.run.plots: summary.json"]
    assert run_file_names({RUN_DIR_MODULE: planted}) == []  # the module that owns the names may spell them


def test_every_package_folder_is_in_the_wheel():
    """pyproject.toml lists the packages a non-editable install ships: a folder missing there installs without its
    modules (study/paper and study/report were, until session 28)."""
    import tomllib

    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {module_name(p.parent / "__init__.py") for p in PACKAGE.rglob("__init__.py")}
    assert folders - listed == set()
