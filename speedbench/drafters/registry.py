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


def build_drafter(method: str, ctx: DraftContext, options: dict[str, Any]) -> Drafter:
    return DRAFTERS.get(method)(ctx, **options)
