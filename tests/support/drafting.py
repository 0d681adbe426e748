"""Reference-engine drafter contexts on in-memory models (tiny target and draft, a PARD copy)."""
import torch

from speedbench.engine.build import LMBuilder
from speedbench.engine.drafting import DraftContext


def with_pard_token(model, token: int = 0):
    """A shallow copy of ``model`` whose config names a mask token (``pard_token``): a PARD draft."""
    import copy

    out = copy.copy(model)
    out.config = copy.copy(model.config)
    out.config.pard_token = token
    return out


def make_context(target, draft, impl: str) -> DraftContext:
    loaded = {"draft": draft, "target": target, "pard": with_pard_token(draft)}
    return DraftContext(target, LMBuilder(impl), torch.device("cpu"), lambda path: loaded[path])
