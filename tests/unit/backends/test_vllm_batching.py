"""Offline vLLM ``backend.options.batching``: what continuous batching changes, without starting an engine
(the engine runs it in the commands of docs/load.md)."""
import dataclasses

import pytest

from speedbench.backends.vllm.backend import VllmBackend
from speedbench.backends.vllm_serve import VllmServeBackend
from speedbench.config import BackendConfig, ModelConfig
from speedbench.config.engine_options import VllmOptions
from speedbench.pipeline import protocol
from speedbench.records import Request


def backend(batching):
    return VllmBackend(ModelConfig(name="tiny", path="random:tiny-target"),
                       BackendConfig(name="vllm", options={"batching": batching, "max_num_seqs": 8}))


def test_continuous_batching_caps_the_engine_at_c_and_submits_the_whole_cell():
    static, cont = backend("static"), backend("continuous")
    assert (static.engine_seqs(2), static.engine_seqs(16)) == (8, 16)  # at least B slots
    assert (cont.engine_seqs(2), cont.engine_seqs(16)) == (2, 16)  # exactly C: the engine batches up to C
    reqs = [Request(f"r{i}", "c", ("hi",), 8) for i in range(5)]
    assert [len(b) for b in protocol.blocks(reqs, 2, static.asynchronous or static.submits_all)] == [2, 2, 1]
    assert [len(b) for b in protocol.blocks(reqs, 2, cont.asynchronous or cont.submits_all)] == [5]


def test_an_unknown_batching_mode_is_refused_naming_the_option():
    problems = VllmBackend.preflight(BackendConfig(name="vllm", options=VllmOptions(batching="dynamic")), 1)
    assert problems == ["backend.options.batching must be static or continuous, got 'dynamic'"]


def test_settings_are_resolved_once_and_never_change():
    """The backend's settings are one frozen value computed in the constructor (CPU: timers in the
    measured passes, so the profiler stays off); a bad option value fails there with the preflight's line."""
    b = backend("static")
    assert (b.settings.timers, b.settings.profile, b.settings.on_cpu) == ("measured", False, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.settings.timers = "false"
    with pytest.raises(ValueError, match=r"^backend.options.timers must be auto, measured, separate or false, got 'never'$"):
        VllmBackend(ModelConfig(name="tiny", path="random:tiny-target"), BackendConfig(name="vllm", options={"timers": "never"}))
    assert VllmOptions(timers="FALSE", profile_split=False).problems() == []  # YAML's false, any case
    serve = VllmServeBackend.preflight(BackendConfig(name="vllm_serve", options={"spec_metrics": "steps"}), 1)
    assert "backend.options.spec_metrics must be auto, per_request or counters, got 'steps'" in serve
