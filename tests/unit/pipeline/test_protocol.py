"""The measurement protocol: ABBA order, repeats and the stopping rule, the speedup estimator
and its interval, noise accounting. Timing-free: the synthetic backend's simulated times and
constructed ratio tables stand in for measured ones (the real engine's protocol runs are in
test_gate_regressions.py and in the benchmarks)."""
import math

import numpy as np
import pytest

from speedbench import metrics
from speedbench.backends.base import GenerateSpec
from speedbench.backends.registry import BACKENDS
from speedbench.config import BackendConfig, ModelConfig, ProtocolConfig, SamplingConfig
from speedbench.drafters.registry import make_drafter
from speedbench.pipeline import protocol
from speedbench.pipeline.noise import NoiseMeter
from speedbench.records import Request


def test_abba_order_alternates_by_block_and_flips_by_repeat():
    assert [protocol.order(b, 0) for b in range(4)] == [("baseline", "spec"), ("spec", "baseline")] * 2
    assert [protocol.order(b, 1) for b in range(2)] == [("spec", "baseline"), ("baseline", "spec")]
    # over two repeats every block runs each role first once: drift cancels within a block
    for b in range(3):
        assert {protocol.order(b, 0)[0], protocol.order(b, 1)[0]} == {"baseline", "spec"}


def test_blocks_are_batches_or_the_whole_cell_for_servers():
    reqs = [Request(f"r{i}", "c", ("x",), 8) for i in range(5)]
    assert [len(b) for b in protocol.blocks(reqs, 2, asynchronous=False)] == [2, 2, 1]
    assert [len(b) for b in protocol.blocks(reqs, 2, asynchronous=True)] == [5]


def test_speedup_estimator_is_the_geometric_mean_of_per_request_medians():
    ratios = np.array([[1.0, 1.2, 1.1], [2.0, 2.0, 8.0], [1.5, np.nan, 1.5]])
    est = metrics.paired_speedup(ratios, n_resamples=500)
    expected = math.exp(np.mean(np.log([1.1, 2.0, 1.5])))  # a burst (8.0) in one repeat is outvoted
    assert est.point == pytest.approx(expected)
    assert est.low <= est.point <= est.high and est.n_requests == 3 and est.n_repeats == 3
    flat = metrics.paired_speedup(np.full((4, 3), 1.25), n_resamples=200)
    assert flat.point == flat.low == flat.high == pytest.approx(1.25) and flat.cv == pytest.approx(0.0)


def test_the_interval_carries_repeat_to_repeat_variation():
    rng = np.random.default_rng(0)
    same = np.repeat(rng.lognormal(0.3, 0.05, size=(6, 1)), 5, axis=1)  # requests differ, repeats agree
    noisy = same * rng.lognormal(0.0, 0.15, size=(6, 5))  # the same requests, noisy repeats
    quiet, loud = metrics.paired_speedup(same), metrics.paired_speedup(noisy)
    assert loud.rel_half_width > quiet.rel_half_width
    assert loud.cv > 0.03 > quiet.cv
    # with the prompts held fixed, repeats that agree leave no noise at all; noisy repeats do
    assert metrics.paired_speedup(same, requests=False).rel_half_width == pytest.approx(0.0)
    assert metrics.paired_speedup(noisy, requests=False).rel_half_width > 0.02


def test_requests_without_a_finite_ratio_are_dropped_and_empty_is_nan():
    est = metrics.paired_speedup(np.array([[np.nan, np.nan], [1.5, 1.5]]))
    assert est.n_requests == 1 and est.point == pytest.approx(1.5)
    assert math.isnan(metrics.paired_speedup(np.empty((0, 0))).point)


def test_geomean_interval_over_cells_and_ties():
    point, low, high = metrics.geomean_interval([1.2, 1.2], [1.1, 1.1], [1.3, 1.3])
    assert point == pytest.approx(1.2) and low > 1.1 and high < 1.3  # two independent cells narrow it
    assert math.isnan(metrics.geomean_interval([1.2], [math.nan], [1.3])[0])
    assert metrics.intervals_overlap((1.0, 1.2), (1.15, 1.4)) and not metrics.intervals_overlap((1.0, 1.1), (1.2, 1.3))


def _synthetic(noise: float):
    engine = BackendConfig(name="synthetic", options={"noise": noise, "alpha": 0.7})
    return BACKENDS.get("synthetic")(ModelConfig(name="t", path="random:unused"), engine)


def _specs(batch: int = 2):
    base = GenerateSpec(make_drafter("none"), batch, SamplingConfig(), 24, False, "baseline")
    spec = GenerateSpec(make_drafter("draft_model", 4, model="x"), batch, SamplingConfig(), 24, False, "spec")
    return {"baseline": base, "spec": spec}


REQS = [Request(f"r{i}", "coding", ("hello world " * (i + 1),), 24) for i in range(4)]
QUIET = dict(max_load_per_cpu=1e9)  # this test is about the stopping rule, not the machine's load


def test_a_precise_cell_stops_after_min_repeats():
    cfg = ProtocolConfig(min_repeats=3, max_repeats=8, target_rel_half_width=0.02, **QUIET)
    m = protocol.measure(_synthetic(noise=0.0), REQS, _specs(), cfg)
    assert m.n_repeats == 3 and m.stopped_by == "target"
    # every request measured in both roles in every repeat, and the records say which repeat
    for role_out in (m.base, m.spec):
        assert sorted({(r.request_id, r.repeat) for r in role_out.requests}) == [
            (f"r{i}", k) for i in range(4) for k in range(3)]
    assert m.instability(0.0, cfg) == ""


def test_a_noisy_cell_repeats_until_max_and_says_why():
    cfg = ProtocolConfig(min_repeats=2, max_repeats=4, target_rel_half_width=0.001, budget_s=60, **QUIET)
    m = protocol.measure(_synthetic(noise=0.3), REQS, _specs(), cfg)
    assert m.n_repeats == 4 and m.stopped_by == "max_repeats"
    est = metrics.paired_speedup(metrics.tpot_ratios(m.base.requests, m.spec.requests), requests=False)
    reason = m.instability(est.rel_half_width, cfg)
    assert "above the target" in reason and "max_repeats" in reason


def test_contention_is_seen_in_cpu_time_against_wall_time():
    import time

    busy = NoiseMeter(threads=1)
    busy.measure(lambda: sum(i * i for i in range(400_000)))
    idle = NoiseMeter(threads=1)
    idle.measure(lambda: time.sleep(0.2))  # a thread that waits (as for a CPU) burns no CPU time
    assert idle.cpu_util < 0.1 and busy.cpu_util > 3 * max(idle.cpu_util, 0.01)  # a compute loop burns it
    assert "waited for a CPU" in idle.verdict(min_cpu_util=0.85, max_load_per_cpu=1e9)
    assert NoiseMeter(threads=0).verdict(0.85, 1e9) == ""  # an out-of-process engine: CPU time says nothing


def test_the_runner_writes_protocol_columns(tmp_path):
    from speedbench.config import DatasetConfig, RunConfig
    from speedbench.pipeline import runner

    run = RunConfig(target=ModelConfig(name="t", path="random:unused"), drafter=make_drafter("draft_model", 4, model="x"),
                    dataset=DatasetConfig(name="mini", path="qualitative.jsonl", categories=["coding"], n_requests=4),
                    backend=BackendConfig(name="synthetic", options={"noise": 0.0}), sampling=SamplingConfig(),
                    results_dir=str(tmp_path), run_id="p", max_new_tokens=16, warmup_batches=0,
                    protocol=ProtocolConfig(min_repeats=2, **QUIET))
    (cell,) = runner.run_cells(run, progress=False)
    assert cell.n_repeats == 2 and cell.stable and cell.unstable_reason == ""
    assert cell.speedup_noise == pytest.approx(0.0)  # simulated times repeat exactly
    assert cell.speedup_ci_low <= cell.speedup <= cell.speedup_ci_high  # the prompts still differ
    assert cell.threads == 0 and math.isnan(cell.cpu_util)  # synthetic: no engine threads in this process
    assert cell.extra["protocol"]["stopped_by"] == "target"
    # paired pass against pass, and the cell says why (the synthetic engine's times are simulated)
    assert cell.extra["protocol"]["interleave"] == "pass"
    assert cell.extra["protocol"]["why_pass"] == "simulated times: no machine drift to pair against"


def test_merged_passes_count_every_iteration_once():
    """Each pass numbers its forwards from 0; the cell's merge must keep them apart, so the
    per-iteration times (t_draft_ms, t_verify_ms, ...) come from every block and repeat, and the
    rows of one batch forward still count once."""
    cfg = ProtocolConfig(min_repeats=3, max_repeats=3, **QUIET)
    m = protocol.measure(_synthetic(noise=0.0), REQS, _specs(batch=2), cfg)  # 2 blocks x 3 repeats
    assert m.n_repeats == 3
    for out in (m.base, m.spec):
        # a pass's rows: per (repeat, block) the forwards that rows share; rebuilt from the rows
        per_forward = {}
        for s in out.steps:
            per_forward.setdefault(s.iteration, set()).add((s.repeat, s.turn))
        assert all(len(v) == 1 for v in per_forward.values())  # no id shared across passes
        forwards = len(metrics.iteration_times(out.steps))
        assert forwards == len(per_forward)
        n_rows = len(out.steps)
        assert n_rows / 2 <= forwards < n_rows  # B=2: two rows share a forward while both are running
    one = protocol.merge_passes([m.base])
    assert [s.iteration for s in one.steps] == [s.iteration for s in m.base.steps]  # merging again changes nothing


def test_one_repeat_is_never_stable_and_has_no_zero_width_noise(tmp_path):
    """min_repeats=1: one repeat says nothing of the noise (it read 0, so stable=yes stopped by target)."""
    from speedbench.config import DatasetConfig, RunConfig
    from speedbench.pipeline import runner

    only_one = ProtocolConfig(min_repeats=1, max_repeats=1, **QUIET)
    m = protocol.measure(_synthetic(noise=0.0), REQS, _specs(), only_one)
    assert m.n_repeats == 1 and m.stopped_by == "max_repeats"
    assert "one repeat" in m.instability(math.nan, only_one)
    more = protocol.measure(_synthetic(noise=0.0), REQS, _specs(), ProtocolConfig(min_repeats=1, max_repeats=4, **QUIET))
    assert more.n_repeats == 2 and more.stopped_by == "target"  # "min" 1: a second repeat gives the noise
    ratios = metrics.tpot_ratios(m.base.requests, m.spec.requests)
    assert math.isnan(metrics.paired_speedup(ratios, requests=False).rel_half_width)
    one = metrics.paired_speedup(np.array([[1.37]]))
    assert one.point == pytest.approx(1.37) and math.isnan(one.low) and math.isnan(one.high)  # not [1.37, 1.37]
    run = RunConfig(target=ModelConfig(name="t", path="random:unused"), drafter=make_drafter("draft_model", 4, model="x"),
                    dataset=DatasetConfig(name="mini", path="qualitative.jsonl", categories=["coding"], n_requests=2),
                    backend=BackendConfig(name="synthetic", options={"noise": 0.0}), sampling=SamplingConfig(),
                    results_dir=str(tmp_path), run_id="p", max_new_tokens=8, warmup_batches=0, protocol=only_one)
    (cell,) = runner.run_cells(run, progress=False)
    assert cell.n_repeats == 1 and not cell.stable and "one repeat" in cell.unstable_reason
    assert math.isnan(cell.speedup_noise)


def test_a_drafter_that_never_proposes_makes_no_stable_speedup_claim():
    engine = BackendConfig(name="synthetic", options={"alpha": 0.7, "propose_prob_by_method": {"draft_model": 0.0}})
    backend = BACKENDS.get("synthetic")(ModelConfig(name="t", path="random:unused"), engine)
    cfg = ProtocolConfig(min_repeats=2, max_repeats=2, **QUIET)
    m = protocol.measure(backend, REQS, _specs(), cfg)
    assert not any(r.drafted for r in m.spec.requests)
    assert m.instability(0.0, cfg).startswith("no_drafts")
    plain = protocol.measure(backend, REQS, {**_specs(), "spec": _specs()["baseline"]}, cfg)
    assert plain.instability(0.0, cfg) == ""  # a drafter-less pass is not "no drafts": nothing was meant to draft


def test_the_per_process_component_widens_the_interval_in_quadrature_not_the_noise():
    """protocol.process_noise: a normal component of that relative SD added on the log scale to
    each side of the interval; zero leaves it as measured; the noise (stability) is untouched."""
    from statistics import NormalDist

    from speedbench.metrics.speedup import widen

    assert widen(1.2, 1.1, 1.3, 0.0) == (1.1, 1.3)
    low, high = widen(1.2, 1.1, 1.3, 0.02)
    z = NormalDist().inv_cdf(0.975)
    assert math.log(1.2 / low) == pytest.approx(math.hypot(math.log(1.2 / 1.1), z * math.log1p(0.02)))
    assert math.log(high / 1.2) == pytest.approx(math.hypot(math.log(1.3 / 1.2), z * math.log1p(0.02)))
    point = widen(1.0, 1.0, 1.0, 0.01)  # a zero-width interval becomes +-z * SD
    assert point[0] == pytest.approx(math.exp(-z * math.log1p(0.01))) and point[1] > 1.0
    rng = np.random.default_rng(3)
    from speedbench.records import RequestRecord

    def rec(i, rep, role, tpot):
        return RequestRecord(f"r{i}", "c", "", "", role, 8, 10, (), 0.01, tpot, 0.1, 10, 5, 20, 5, repeat=rep)
    base = [rec(i, r, "baseline", 0.010 * (1 + 0.01 * rng.standard_normal())) for i in range(4) for r in range(3)]
    spec = [rec(i, r, "spec", 0.008 * (1 + 0.01 * rng.standard_normal())) for i in range(4) for r in range(3)]
    plain = metrics.speedup_columns(base, spec)
    wide = metrics.speedup_columns(base, spec, process_noise=0.03)
    assert wide.speedup == plain.speedup and wide.speedup_noise == plain.speedup_noise
    assert wide.speedup_ci_low < plain.speedup_ci_low and wide.speedup_ci_high > plain.speedup_ci_high


def _cells(n: int, noise: float = 0.0):
    backend = _synthetic(noise=noise)
    return backend, [(f"c{k}", [Request(f"c{k}-r{i}", "coding", ("hello world " * (i + 1),), 24) for i in range(2)])
                     for k in range(n)]


def _recording(monkeypatch, label=lambda block: block[0].request_id.split("-")[0]):
    """The (label, repeat) of every block that ran, in the order it ran (wraps the real run_block);
    the label is the cell's name by default."""
    ran, real = [], protocol.run_block

    def run_block(backend, block, specs, first_second, mode, noise):
        ran.append((label(block), specs["spec"].repeat))
        return real(backend, block, specs, first_second, mode, noise)

    monkeypatch.setattr(protocol, "run_block", run_block)
    return ran


@pytest.mark.parametrize("interleave", [True, False])
def test_rounds_spread_each_cells_repeats_over_the_run(monkeypatch, interleave):
    ran = _recording(monkeypatch)
    backend, cells = _cells(3)
    cfg = ProtocolConfig(min_repeats=3, max_repeats=3, **QUIET)
    measuring = [(key, protocol.CellMeasurement(backend, reqs, _specs(batch=2), cfg)) for key, reqs in cells]
    finished = list(protocol.in_rounds(measuring, interleave=interleave))
    if interleave:  # round r: one repeat of every cell, forward on even rounds and backward on odd ones
        assert ran == [("c0", 0), ("c1", 0), ("c2", 0), ("c2", 1), ("c1", 1), ("c0", 1), ("c0", 2), ("c1", 2), ("c2", 2)]
    else:  # each cell's repeats back to back
        assert ran == [(f"c{k}", r) for k in range(3) for r in range(3)]
    assert [key for key, _ in finished] == ["c0", "c1", "c2"]  # each yielded as it stopped
    for _, cell in finished:
        m = cell.result()
        assert m.n_repeats == 3 and m.stopped_by == "target" and m.elapsed_s > 0  # noise-free: the target, at min_repeats
        assert sorted({r.repeat for r in m.spec.requests}) == [0, 1, 2]


def test_a_cell_stops_in_its_own_round_and_the_others_go_on(monkeypatch):
    ran = _recording(monkeypatch)
    backend, cells = _cells(2)
    quick = ProtocolConfig(min_repeats=1, max_repeats=1, **QUIET)
    slow = ProtocolConfig(min_repeats=3, max_repeats=3, **QUIET)
    measuring = [("c0", protocol.CellMeasurement(backend, cells[0][1], _specs(batch=2), quick)),
                 ("c1", protocol.CellMeasurement(backend, cells[1][1], _specs(batch=2), slow))]
    finished = protocol.in_rounds(measuring, interleave=True)
    key, first = next(finished)
    assert key == "c0" and first.repeats == 1 and ran == [("c0", 0)]  # written before c1 has run at all
    assert [k for k, _ in finished] == ["c1"] and ran[1:] == [("c1", 0), ("c1", 1), ("c1", 2)]


def test_a_cell_that_raises_leaves_the_rotation_and_the_rest_are_measured(monkeypatch):
    backend, cells = _cells(3)
    real = protocol.run_block

    def run_block(backend, block, specs, first_second, mode, noise):
        if block[0].request_id.startswith("c1") and specs["spec"].repeat == 1:
            raise RuntimeError("engine fell over")
        return real(backend, block, specs, first_second, mode, noise)

    monkeypatch.setattr(protocol, "run_block", run_block)
    cfg = ProtocolConfig(min_repeats=3, max_repeats=3, **QUIET)
    measuring = [(key, protocol.CellMeasurement(backend, reqs, _specs(batch=2), cfg)) for key, reqs in cells]
    finished = dict(protocol.in_rounds(measuring, interleave=True))
    assert isinstance(finished["c1"], RuntimeError) and "fell over" in str(finished["c1"])
    assert finished["c0"].result().n_repeats == 3 and finished["c2"].result().n_repeats == 3


def test_the_runner_measures_a_runs_cells_in_rounds_by_default(tmp_path, monkeypatch):
    from speedbench.config import DatasetConfig, RunConfig
    from speedbench.pipeline import runner

    ran = _recording(monkeypatch, label=lambda block: block[0].category)
    run = RunConfig(target=ModelConfig(name="t", path="random:unused"), drafter=make_drafter("draft_model", 4, model="x"),
                    dataset=DatasetConfig(name="mini", path="qualitative.jsonl", categories=["coding", "math"], n_requests=4),
                    backend=BackendConfig(name="synthetic", options={"noise": 0.0}), sampling=SamplingConfig(),
                    results_dir=str(tmp_path), run_id="p", max_new_tokens=16, warmup_batches=0,
                    protocol=ProtocolConfig(min_repeats=2, max_repeats=2, **QUIET))
    cells = runner.run_cells(run, progress=False)
    assert {c.category for c in cells if not c.derived} == {"coding", "math"}
    assert all(c.extra["protocol"]["cell_order"] == "rounds" for c in cells if not c.derived)
    firsts = [cat for cat, rep in ran if rep == 0]
    seconds = [cat for cat, rep in ran if rep == 1]
    assert ran.index((seconds[0], 1)) > max(ran.index((c, 0)) for c in set(firsts))  # every first repeat, then the seconds
