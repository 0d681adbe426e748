"""The walk of the run config: which speedbench modules a run's configuration passes through.

Runs ``speedbench run OVERRIDES`` in this process with a profile hook that records every call of a
speedbench function that receives the configuration (Hydra's composed ``DictConfig``, the typed
``RunConfig`` or one of its sub-configs: a dataclass of ``speedbench.config``) as an argument. The
walk is the set of (caller module, callee module) hand-overs of the configuration; a climb back up is
a hand-over from a module to one of a higher layer (the layers of tests/unit/test_layers.py, edge
first): a lower layer calling back into an upper one with the config (a return is not a climb). It
prints the modules entered, the hand-overs between modules and the climbs.

    python scripts/config_walk.py [OVERRIDES...]   # default: a 3-prompt, 8-token embedded run
"""
from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.unit.test_layers import layer  # noqa: E402 - the layer table the import test uses

ORDER = ("edge", "tools", "pipeline", "readers", "backends", "drafters", "engine", "base")


def _is_config(value, kinds: tuple[type, ...]) -> bool:
    return isinstance(value, kinds) or (dataclasses.is_dataclass(value) and not isinstance(value, type)
                                        and type(value).__module__.startswith("speedbench.config"))


def walk(argv: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    from omegaconf import DictConfig

    from speedbench.config import RunConfig
    from speedbench.run.app import run_app

    kinds = (DictConfig, RunConfig)
    seen: list[str] = []
    edges: list[tuple[str, str]] = []

    def hook(frame, event, arg):
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("speedbench"):
            return
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if any(_is_config(frame.f_locals.get(n), kinds) for n in names):
            if module not in seen:
                seen.append(module)
            caller = frame.f_back
            while caller is not None and not caller.f_globals.get("__name__", "").startswith("speedbench"):
                caller = caller.f_back  # through Hydra's and the standard library's frames
            source = caller.f_globals["__name__"] if caller is not None else ""
            if source and source != module and (source, module) not in edges:
                edges.append((source, module))

    sys.setprofile(hook)
    try:
        code = run_app(argv)
    finally:
        sys.setprofile(None)
    if code not in (0, 1):
        raise SystemExit(f"speedbench run {' '.join(argv)} exited {code}")
    return seen, edges


def main() -> None:
    results = tempfile.mkdtemp(prefix="config-walk-")
    argv = sys.argv[1:] or ["dataset.n_requests=3", "max_new_tokens=8", "protocol.min_repeats=1",
                            "protocol.max_repeats=1", "warmup_batches=0", "per_category=false"]
    seen, edges = walk([*argv, f"results_dir={results}", "run_id=walk"])
    climbs = [(a, b) for a, b in edges if ORDER.index(layer(b)) < ORDER.index(layer(a))]
    print(f"modules entered: {len(seen)}; hand-overs between modules: {len(edges)}; climbs back up: {len(climbs)}")
    for a, b in edges:
        mark = "  CLIMB" if (a, b) in climbs else ""
        print(f"  {a} ({layer(a)}) -> {b} ({layer(b)}){mark}")


if __name__ == "__main__":
    main()
