"""Every backend, one entry each: its class (imported on first use, so choosing ``backend=torch``
never imports vLLM), its options schema (``backend.options``) and its capabilities. Nothing else
lists backend names (the table is data the readers use too: it imports only the base layer); the validation pass asks these entries (and ``drafters.registry``) whether
an engine runs a method, with these options, before anything loads.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from ..config import engine_options as eo
from ..config.hydra import Schemas
from ..config.schemas import unknown_backend
from ..registry import Registry


@dataclass(frozen=True)
class BackendEntry:
    cls: str  # "module:Class"
    options: type  # the dataclass of backend.options
    build: str  # the engine build whose drafter refusals and schedule rules apply (drafters.registry)
    # drafter methods it runs: "drafters" (the drafter registry's entries for ``build``), "module:function"
    # (the installed build says; None when it is not installed), or None (the engine or its servers decide)
    methods: str | None = None
    devices: tuple[str, ...] = ("cpu", "cuda")  # where its engine runs (backend.device picks one, or auto)
    tokenizer: bool = True  # tokenizes with the target's tokenizer (the prompt length and control checks apply)
    local_models: bool = True  # reads the target's and the drafter's configs (model checks apply)
    servers: bool = False  # measures servers one request at a time (open-loop arrivals: load.request_rate)
    can_schedule: bool = False  # can run drafter.schedule (for the methods drafters.registry lists for ``build``)
    schedule_fixed_by: tuple[tuple[str, str], ...] = ()  # (drafter field, why) that fix K on this engine
    on_cpu: str | None = None  # "module:function": whether its engine runs on CPU (None: asked of nobody, True)
    # "module:function(backend config) -> why not": its passes are stepped in this process, so it runs
    # in-process load points (closed and open loop, ``pipeline.conversations``); '' when they are
    stepped: str | None = None
    # requests it really has in flight at once (None: any C, batched or as concurrent streams), and why
    max_in_flight: int | None = None
    in_flight_why: str = ""
    simulated: bool = False  # its times come from a model, not a clock (no contention check; the report warns)


_VLLM_METHODS = "speedbench.backends.vllm.spec:speedbench_methods_or_none"
_VLLM_CPU = "speedbench.backends.vllm.spec:on_cpu"
_PARALLEL_FIXED = (("parallel", "parallel drafting sizes its buffer from num_speculative_tokens"),
                   ("parallel_drafting", "parallel drafting sizes its buffer from num_speculative_tokens"))

ENTRIES: dict[str, BackendEntry] = {
    "torch": BackendEntry("speedbench.backends.torch_backend:TorchBackend", eo.TorchOptions, "torch", "drafters",
                          can_schedule=True),
    "synthetic": BackendEntry("speedbench.backends.synthetic:SyntheticBackend", eo.SyntheticOptions, "synthetic",
                              devices=("cpu",), tokenizer=False, local_models=False, simulated=True),
    "vllm": BackendEntry("speedbench.backends.vllm.backend:VllmBackend", eo.VllmOptions, "vllm", _VLLM_METHODS,
                         can_schedule=True, schedule_fixed_by=_PARALLEL_FIXED, on_cpu=_VLLM_CPU,
                         stepped="speedbench.backends.vllm.settings:why_not_stepped"),
    "openai": BackendEntry("speedbench.backends.openai_backend:OpenAIBackend", eo.OpenAIOptions, "openai",
                           devices=("remote",), local_models=False, servers=True),
    # the vllm build started as servers: vLLM's methods, refusals and schedule rules (the schedule goes in --speculative-config)
    "vllm_serve": BackendEntry("speedbench.backends.vllm_serve:VllmServeBackend", eo.VllmServeOptions, "vllm",
                               _VLLM_METHODS, servers=True, can_schedule=True, schedule_fixed_by=_PARALLEL_FIXED,
                               on_cpu=_VLLM_CPU),
    "hf": BackendEntry("speedbench.backends.hf_backend:HFBackend", eo.HFOptions, "hf", "drafters", max_in_flight=1,
                       in_flight_why="transformers' assisted generation is batch-1: its requests run one after another"),
}


BACKENDS: Registry = Registry("backend")  # the classes (lazy imports)
for _name, _entry in ENTRIES.items():
    BACKENDS.register(_name, _entry.cls)


def _load(path: str):
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def names() -> list[str]:
    return sorted(ENTRIES)


def entry(name: str) -> BackendEntry:
    if name not in ENTRIES:
        raise ValueError(unknown_backend(name, ENTRIES))
    return ENTRIES[name]


def backend_class(name: str):
    entry(name)  # an unknown name: one line naming the known ones
    return BACKENDS.get(name)


def option_schema(name: str) -> type:
    return entry(name).options


def methods(name: str) -> tuple[str, ...] | None:
    """Drafter methods ``name`` can run; None when the engine decides (servers, synthetic, no vLLM installed)."""
    source = entry(name).methods
    if source is None:
        return None
    if source == "drafters":
        from ..drafters.registry import methods_on

        return methods_on(entry(name).build)
    found = _load(source)()
    return None if found is None else ("none", *sorted(found))


def server_backends() -> list[str]:
    return sorted(n for n, e in ENTRIES.items() if e.servers)


def why_no_load_points(name: str, engine) -> str:
    """Why ``backend=name`` with these settings runs no open-loop load point ('' when it does: a server
    backend, or an engine whose passes step in this process)."""
    entry = ENTRIES.get(name)
    if entry is None or entry.servers:  # an unknown name is refused by the validation pass itself
        return ""
    if entry.stepped is None:
        return f"backend={name} neither serves nor steps its engine in this process"
    return _load(entry.stepped)(engine)


def on_cpu(name: str) -> bool:
    """Whether ``name``'s engine runs on CPU (asked only for a CPU-only refusal)."""
    source = entry(name).on_cpu
    return True if source is None else bool(_load(source)())


def simulated_backends() -> list[str]:
    """Backends whose cells hold modelled times (the report and the run's summary say so)."""
    return sorted(n for n, e in ENTRIES.items() if e.simulated)


def schedule_backends() -> list[str]:
    return sorted(n for n, e in ENTRIES.items() if e.can_schedule)


def schemas() -> Schemas:
    """What the Hydra edge (``config.hydra``) needs from the registries."""
    from ..drafters.registry import SCHEMA_NAMES, drafter_schema

    return Schemas(drafter=drafter_schema, drafter_kinds=SCHEMA_NAMES,
                   options={n: e.options for n, e in ENTRIES.items()})
