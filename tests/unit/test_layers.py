"""Imports run one way, down the layers of docs/architecture.md's data flow, and never in a circle.

Layers, top first (a module may import its own layer and the ones listed after ``->``):

    edge       cli, run/, launchers/, hydra_plugins.speedbench_launchers  -> everything (the only Hydra code)
    tools      fixtures/, modelling.microbench             -> backends, drafters, engine, base (they run kernels, not cells)
    pipeline   pipeline/, interop/                         -> backends, drafters, engine, base
    readers    report/, gate/, loggers/, schedule/, modelling/  -> base (they read the results store only)
    backends   backends/                                   -> drafters, engine, base
    drafters   drafters/                                   -> engine, base
    engine     engine/                                     -> base
    base       records, metrics, results/, data/, config, registry, models, redact, console, paths, ...,
               and the two tables drafters.registry and backends.registry (data; their classes named by string)

The walk covers speedbench/ and the Hydra plugin module (hydra_plugins/speedbench_launchers), so a circle
through the plugin counts too.

Every import counts, also one inside a function. The walk reads the source (ast): nothing is imported.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "speedbench"
PLUGIN = ROOT / "hydra_plugins" / "speedbench_launchers"

EDGE, TOOLS, PIPELINE, READERS, BASE = "edge", "tools", "pipeline", "readers", "base"
BACKENDS, DRAFTERS, ENGINE = "backends", "drafters", "engine"  # execution, top first
EXECUTION = {BACKENDS, DRAFTERS, ENGINE}
MAY_IMPORT = {
    EDGE: {EDGE, TOOLS, PIPELINE, READERS, BASE} | EXECUTION,
    TOOLS: {TOOLS, BASE} | EXECUTION,
    PIPELINE: {PIPELINE, BASE} | EXECUTION,
    READERS: {READERS, BASE},
    BACKENDS: {BACKENDS, DRAFTERS, ENGINE, BASE},
    DRAFTERS: {DRAFTERS, ENGINE, BASE},
    ENGINE: {ENGINE, BASE},
    BASE: {BASE},
}
BY_PACKAGE = {
    "cli": EDGE, "run": EDGE, "launchers": EDGE,
    "fixtures": TOOLS,
    "pipeline": PIPELINE,
    "interop": PIPELINE,  # other tools' result files become cells through the pipeline's cell assembly
    "report": READERS, "gate": READERS, "loggers": READERS, "schedule": READERS, "modelling": READERS,
    "backends": BACKENDS, "drafters": DRAFTERS, "engine": ENGINE,
}
BY_MODULE = {
    "speedbench.modelling.microbench": TOOLS,  # times GEMMs with the engine's clock and builder
    "hydra_plugins.speedbench_launchers": EDGE,  # the launcher classes Hydra instantiates
    "speedbench.drafters.registry": BASE,  # the method table: data the cost model and the report read too
    "speedbench.backends.registry": BASE,  # the backend table: likewise (its classes are named by string)
}

# Upward imports still allowed, each with its reason (none today: add one only with a comment saying why).
ALLOWED_UPWARD: set[tuple[str, str]] = set()
ALLOWED_CYCLES: set[frozenset[str]] = set()


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for root in (PACKAGE, PLUGIN) for p in root.rglob("*.py")}


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The speedbench modules ``name`` imports, anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import speedbench.x.y` of a name inside a module
                target = target.rpartition(".")[0]
            if target in known and target != name:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imports(name, path, known) for name, path in known.items()}


def layer(module: str) -> str:
    if module in BY_MODULE:
        return BY_MODULE[module]
    top = module.split(".")[1] if "." in module else ""
    return BY_PACKAGE.get(top, BASE)


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(m, t) for m, targets in graph.items() for t in targets if layer(t) not in MAY_IMPORT[layer(m)]}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_runs_up_the_layers():
    found = upward_imports(_graph())
    assert sorted(found - ALLOWED_UPWARD) == []
    assert sorted(ALLOWED_UPWARD - found) == [], "an allowed upward import is gone: delete its line"


def test_no_import_cycles():
    found = [c for c in cycles(_graph()) if frozenset(c) not in ALLOWED_CYCLES]
    assert found == []


def test_the_walk_sees_function_level_imports_and_cycles():
    """The checks above could fail: a function-level import upward and a two-module circle are found."""
    graph = {"speedbench.records": {"speedbench.pipeline.runner"}, "speedbench.pipeline.runner": {"speedbench.records"}}
    assert upward_imports(graph) == {("speedbench.records", "speedbench.pipeline.runner")}
    assert cycles(graph) == [["speedbench.pipeline.runner", "speedbench.records"]]
    real = _graph()
    assert "speedbench.results.load" in real["speedbench.modelling.plan"]  # imported inside a function there
    assert "speedbench.run.app" in real["speedbench.cli"]  # likewise: cli imports the run edge on dispatch
    assert "speedbench.launchers.submitit" in real["hydra_plugins.speedbench_launchers"]  # the plugin is walked
    assert upward_imports({"speedbench.engine.decode": {"speedbench.drafters.ngram"}}) == {
        ("speedbench.engine.decode", "speedbench.drafters.ngram")}  # engine sits below drafters


# Outside the run edge, only config/'s Hydra module (the ConfigStore registration of the schemas and the
# composed config -> RunConfig step the edge calls) imports Hydra.
HYDRA_OUTSIDE_EDGE = {"speedbench.config.hydra"}


def _hydra_importers() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for target in names:
                if target == "hydra" or target.startswith("hydra."):
                    found.setdefault(name, set()).add(target)
    return found


def test_hydra_only_at_the_edge():
    users = _hydra_importers()
    assert sorted(m for m in users if layer(m) != EDGE and m not in HYDRA_OUTSIDE_EDGE) == []
    internals = sorted(m for m, targets in users.items() if any(t.startswith("hydra._internal") for t in targets))
    assert all(m.startswith("speedbench.run.") for m in internals), internals


# No function outside fixtures/ runs over this many lines (a reader keeps one on a screen).
LONGEST_FUNCTION = 80
ALLOWED_LONG: set[str] = set()  # each with why it is still long; add a line only with a comment saying why


def long_functions(limit: int = LONGEST_FUNCTION) -> dict[str, int]:
    found: dict[str, int] = {}
    for name, path in _modules().items():
        if name.startswith("speedbench.fixtures"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= limit:
                found[f"{name}.{node.name}"] = node.end_lineno - node.lineno + 1
    return found


def test_no_function_over_80_lines():
    found = long_functions()
    assert sorted(set(found) - ALLOWED_LONG) == []
    assert sorted(ALLOWED_LONG - set(found)) == [], "an allowed long function is short now: delete its line"
    assert "speedbench.engine.decode.generate" in long_functions(40)  # the walk measures (53 lines today)
