"""Offline vLLM ``backend.options.batching``: what continuous batching changes, without starting an engine
(the engine runs it in the commands of docs/load.md)."""
from speedbench.config.engine_options import VllmOptions
from speedbench.backends.vllm_backend import VllmBackend
from speedbench.config import BackendConfig, ModelConfig
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
