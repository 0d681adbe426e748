"""An unknown backend name is refused by one rule (config.schemas.unknown_backend), wherever it is met."""
import pytest

from speedbench.backends import registry
from speedbench.config import BackendConfig
from speedbench.config.engine_options import retired_options
from speedbench.config.hydra import to_run_config
from speedbench.config.schemas import unknown_backend
from speedbench.pipeline.validation import check_models
from omegaconf import OmegaConf
from tests.support.sweep_helpers import make_run

LINE = unknown_backend("nosuch", registry.ENTRIES)


def test_one_line_from_the_registry_the_validation_pass_and_the_config_edge(tmp_path):
    assert LINE.startswith("backend.name='nosuch' is not a known backend; known: ['hf', 'openai'")
    with pytest.raises(ValueError) as exc:
        registry.entry("nosuch")
    assert str(exc.value) == LINE
    run = make_run(tmp_path, "unknown")
    run.backend = BackendConfig(name="nosuch")
    assert check_models(run) == ([LINE], None)
    with pytest.raises(ValueError) as exc:
        to_run_config(OmegaConf.structured(run), registry.schemas())
    assert str(exc.value) == LINE


def test_the_retired_request_rate_names_load_request_rate():
    assert retired_options({"request_rate": 4.0}) == [
        "backend.options.request_rate=4.0: retired; set load.request_rate=4.0 instead"]
    assert retired_options({"request_rate": None, "timeout_s": 5}) == []


def test_serving_is_the_entrys_fact_not_a_class_flag():
    from speedbench.backends.base import Backend

    for name in ("openai", "torch", "synthetic"):
        assert registry.backend_class(name).asynchronous is Backend.asynchronous  # no class repeats it
        assert registry.backend_class(name).name is Backend.name  # its name is its entry's key
    assert registry.server_backends() == ["openai", "vllm_serve"]


def test_simulated_times_are_the_entrys_fact():
    from speedbench.backends.base import Backend

    assert registry.simulated_backends() == ["synthetic"]
    assert registry.backend_class("synthetic").wall_clock is Backend.wall_clock  # no class flag repeats it
