import pytest
import torch

from speedbench import models
from speedbench.drafters.base import DraftContext
from speedbench.engine.cached_lm import HFCachedLM
from speedbench.engine.clock import Clock
from speedbench.engine.lean_llama import LeanLlama, LeanWeights


@pytest.fixture(scope="session")
def tiny_target():
    return models.load_model("random:tiny-target")


@pytest.fixture(scope="session")
def tiny_draft():
    return models.load_model("random:tiny-draft")


def make_context(target, draft, impl: str) -> DraftContext:
    weights: dict[int, LeanWeights] = {}

    def make_lm(hf, num_layers=None):
        if impl == "hf":
            from speedbench.backends.torch_backend import _first_layers

            return HFCachedLM(hf if num_layers is None else _first_layers(hf, num_layers))
        if id(hf) not in weights:
            weights[id(hf)] = LeanWeights(hf)
        return LeanLlama(weights[id(hf)], num_layers)

    loaded = {"draft": draft, "target": target}
    return DraftContext(target, make_lm, torch.device("cpu"), lambda path: loaded[path])


@pytest.fixture
def clock():
    return Clock("cpu")


@pytest.fixture(scope="session")
def engine_models(tmp_path_factory):
    """The tiny target and draft as folders every engine loads (vLLM cannot load ``random:`` presets)."""
    from speedbench.models import export, local_dir

    from .engine_support import TINY_DRAFT, TINY_TARGET

    root = tmp_path_factory.mktemp("engine-models")
    return {
        name: str(export(path, root / name)) if path.startswith("random:") else local_dir(path)
        for name, path in (("target", TINY_TARGET), ("draft", TINY_DRAFT))
    }
