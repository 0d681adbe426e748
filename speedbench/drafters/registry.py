"""The reference engine's drafters by method name (lazy imports)."""
from __future__ import annotations

from typing import Any

from ..engine.drafting import DraftContext, Drafter
from ..registry import Registry

DRAFTERS: Registry[type[Drafter]] = Registry("drafter")
DRAFTERS.register("none", "speedbench.drafters.none:NoDrafter")
DRAFTERS.register("ngram", "speedbench.drafters.ngram:NgramDrafter")
DRAFTERS.register("draft_model", "speedbench.drafters.draft_model:DraftModelDrafter")
DRAFTERS.register("layer_skip", "speedbench.drafters.draft_model:LayerSkipDrafter")
DRAFTERS.register("eagle3", "speedbench.drafters.eagle3:Eagle3Drafter")
DRAFTERS.register("pard", "speedbench.drafters.pard:PardDrafter")

# Which methods may run a draft-length schedule (``drafter.schedule``) on which engine; a method not
# listed for an engine is refused before anything loads. The reference engine drafts any width per
# step with every drafter. vLLM (0.32): ngram, draft_model, eagle and dflash vary K per step; suffix and
# medusa assert a fixed K; parallel drafting (``parallel``) sizes a buffer from the configured K.
_VLLM_SCHEDULE = frozenset({"ngram", "ngram_gpu", "draft_model", "eagle", "dflash"})
SCHEDULE_METHODS: dict[str, frozenset[str]] = {
    "torch": frozenset({"none", "ngram", "draft_model", "layer_skip", "eagle3", "pard"}),
    "vllm": _VLLM_SCHEDULE,
    "vllm_serve": _VLLM_SCHEDULE,  # the same vLLM build, started as servers (the schedule goes in --speculative-config)
}
# drafter settings that fix K on an engine even for a method listed above: engine -> (field, reason)
_PARALLEL_FIXED = (("parallel", "parallel drafting sizes its buffer from num_speculative_tokens"),
                   ("parallel_drafting", "parallel drafting sizes its buffer from num_speculative_tokens"))
SCHEDULE_FIXED_BY: dict[str, tuple[tuple[str, str], ...]] = {"vllm": _PARALLEL_FIXED, "vllm_serve": _PARALLEL_FIXED}
SCHEDULE_REFUSED_WHY = {"suffix": "suffix decoding asserts a fixed K", "medusa": "medusa asserts a fixed K",
                        "pard": "vLLM's parallel drafting sizes its buffer from num_speculative_tokens and is "
                                "wrong for any other K"}


def build_drafter(method: str, ctx: DraftContext, options: dict[str, Any]) -> Drafter:
    return DRAFTERS.get(method)(ctx, **options)
