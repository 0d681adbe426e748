"""``backend.options.lockstep`` (auto | true | false) resolved once, without starting an engine: on for
vLLM's CPU build with one worker, and where it is off, the reason every cell records in
``extra.protocol.why_pass``."""
import os

from speedbench.backends.vllm.backend import VllmBackend
from speedbench.backends.vllm.settings import _lockstep
from speedbench.config import BackendConfig, ModelConfig, ProtocolConfig
from speedbench.config.engine_options import VllmOptions
from speedbench.pipeline import protocol


def backend(**options):
    return VllmBackend(ModelConfig(name="tiny", path="random:tiny-target"), BackendConfig(name="vllm", options=options))


def test_auto_steps_on_the_cpu_build_and_building_the_backend_leaves_the_process_alone():
    keys = ("VLLM_ENABLE_V1_MULTIPROCESSING", "NUMBA_NUM_THREADS")
    before = {k: os.environ.get(k) for k in keys}
    b = backend()
    assert b.settings.lockstep and b.lockstep and protocol.interleaving(b, ProtocolConfig()) == "step"
    assert protocol.why_pass(b, ProtocolConfig()) == ""
    assert {k: os.environ.get(k) for k in keys} == before  # set when an engine starts, not here


def test_where_it_is_off_the_cell_says_why():
    off = backend(lockstep=False)  # YAML's false
    assert not off.lockstep and protocol.interleaving(off, ProtocolConfig()) == "pass"
    assert protocol.why_pass(off, ProtocolConfig()) == "backend.options.lockstep=false"
    assert protocol.why_pass(backend(), ProtocolConfig(interleave="pass")) == "protocol.interleave=pass"
    assert "tensor/pipeline parallel" in _lockstep("auto", True, 2)["no_lockstep"]
    cuda = _lockstep("auto", False, 1)
    assert not cuda["lockstep"] and "not yet measured on CUDA" in cuda["no_lockstep"]
    assert _lockstep("true", False, 1) == {"lockstep": True, "no_lockstep": ""}  # asked for: tried


def test_lockstep_values_and_workers_are_checked_before_anything_loads():
    assert VllmOptions(lockstep="sometimes").problems() == [
        "backend.options.lockstep must be auto, true or false, got 'sometimes'"]
    assert VllmOptions(lockstep=True).problems() == [] and VllmOptions(lockstep="AUTO").problems() == []
    tp = VllmOptions(lockstep="true", engine_args={"tensor_parallel_size": 2}).problems()
    assert len(tp) == 1 and tp[0].startswith("backend.options.lockstep=true needs one worker")
    assert VllmOptions(engine_args={"tensor_parallel_size": 2}).problems() == []  # auto: falls back, says why


def test_a_server_started_after_stepped_engines_does_not_inherit_their_variables(monkeypatch):
    from speedbench.backends import server_set
    from speedbench.backends.vllm import stepped

    monkeypatch.setattr(stepped, "_SET", {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "NUMBA_NUM_THREADS": "1"})
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    monkeypatch.setenv("NUMBA_NUM_THREADS", "3")  # the user's own value, not the harness's: kept
    env = server_set.child_env()
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in env and env["NUMBA_NUM_THREADS"] == "3" and env["PATH"] == os.environ["PATH"]
