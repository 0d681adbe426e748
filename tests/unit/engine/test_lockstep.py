"""Step-level interleaving (``engine.clock.Lockstep``, ``protocol.interleave=step``): two passes
take turns at iteration boundaries, one running at a time, each on its own clock; the
reference engine's outputs and counts are the same as when its passes run one after the other."""
import itertools
import time

import pytest
import torch

from speedbench.config import ProtocolConfig
from speedbench.engine.clock import Clock, Lockstep, own_time
from speedbench.pipeline import protocol

CLOCK = Clock("cpu")


def _job(name: str, steps: int, per_step: float, log: list, running: set, sleep: float = 0.0):
    def run():
        CLOCK.begin()
        start = own_time()
        for i in range(steps):
            running.add(name)
            assert running == {name}, f"{running} ran together"
            log.append(name)
            if sleep:
                time.sleep(sleep)
            running.discard(name)
            CLOCK.checkpoint((i + 1) * per_step)
        return own_time() - start
    return run


def test_the_one_behind_goes_next_and_never_two_at_once():
    log, running = [], set()
    # "spec" makes 3x the progress per step: about three baseline steps run for each of its steps
    out = Lockstep("baseline", "spec").run({"baseline": _job("baseline", 30, 1 / 30, log, running),
                                            "spec": _job("spec", 10, 1 / 10, log, running)})
    assert set(out) == {"baseline", "spec"}
    assert log.count("baseline") == 30 and log.count("spec") == 10
    # both end together: the last spec step comes among the last few baseline steps
    assert "spec" in log[-4:]
    runs = [len(list(g)) for _, g in itertools.groupby(log)]
    assert max(runs) <= 4  # never a long stretch of one pass alone


def test_each_pass_reads_its_own_clock():
    log, running = [], set()
    out = Lockstep("fast", "slow").run({"fast": _job("fast", 10, 0.1, log, running, sleep=0.002),
                                        "slow": _job("slow", 10, 0.1, log, running, sleep=0.03)})
    assert out["slow"] >= 10 * 0.03  # its own sleeps are its time
    assert out["fast"] < 0.15  # the slow partner's 0.3 s between its turns is not


def test_a_failing_pass_raises_and_frees_its_partner():
    def boom():
        CLOCK.begin()
        CLOCK.checkpoint(0.1)
        raise RuntimeError("engine died")

    log, running = [], set()
    with pytest.raises(RuntimeError, match="engine died"):
        Lockstep("baseline", "spec").run({"baseline": boom, "spec": _job("spec", 5, 0.2, log, running)})
    assert log.count("spec") == 5  # the partner ran to its end, alone


def test_outside_a_lockstep_the_clock_is_perf_counter_and_checkpoints_do_nothing():
    t0 = own_time()
    CLOCK.begin()
    CLOCK.checkpoint(0.5)
    assert abs(own_time() - time.perf_counter()) < 0.01 and own_time() >= t0


def test_step_mode_needs_an_engine_that_can_take_turns():
    from tests.unit.pipeline.test_protocol import _synthetic

    assert protocol.interleaving(_synthetic(0.0), ProtocolConfig()) == "pass"  # its loop has no checkpoints


@pytest.mark.parametrize("batch", [1, 2])
def test_the_reference_engine_in_lockstep_gives_the_same_tokens_and_counts(batch, tmp_path):
    from speedbench.backends.base import GenerateSpec
    from speedbench.backends.torch_backend import TorchBackend
    from speedbench.config import BackendConfig, ModelConfig, SamplingConfig
    from speedbench.drafters.registry import make_drafter
    from speedbench.records import Request

    backend = TorchBackend(ModelConfig(name="tiny", path="builtin:tiny-target"), BackendConfig())
    reqs = [Request(f"r{i}", "coding", (f"def add_{i}(a, b):\n    return",), 24) for i in range(4)]
    specs = {"baseline": GenerateSpec(make_drafter("none"), batch, SamplingConfig(), 24, False, "baseline"),
             "spec": GenerateSpec(make_drafter("ngram", 3), batch, SamplingConfig(), 24, False, "spec")}
    got = {}
    for mode in ("step", "pass"):
        cfg = ProtocolConfig(interleave=mode, min_repeats=1, max_repeats=1, max_load_per_cpu=1e9)
        m = protocol.measure(backend, reqs, specs, cfg)
        assert m.interleave == mode
        # both passes are greenlets on this thread: neither leaves torch's inference mode on (or off) for the other
        assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()
        got[mode] = m
        # each pass's own time: the two together fit in the cell's elapsed time
        assert 0 < m.base.wall_s and 0 < m.spec.wall_s and m.base.wall_s + m.spec.wall_s <= m.elapsed_s * 1.01
        for out in (m.base, m.spec):
            for r in out.requests:
                assert r.status == "ok" and r.ttft > 0 and r.tpot > 0
    for role in ("base", "spec"):
        step, back = getattr(got["step"], role), getattr(got["pass"], role)
        assert [r.output_ids for r in step.requests] == [r.output_ids for r in back.requests]
        assert [(s.drafted, s.accepted) for s in step.steps] == [(s.drafted, s.accepted) for s in back.steps]
    # greedy speculative decoding is lossless in lockstep too
    assert [r.output_ids for r in got["step"].spec.requests] == [r.output_ids for r in got["step"].base.requests]
