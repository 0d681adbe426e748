"""Load points without an engine: percentiles, ITL per chunk and per token, goodput, windows,
throughput speedups, arrivals, load options and cell ids (pure and fast)."""
import math
import random

import numpy as np
import pytest

from speedbench import arrivals
from speedbench.metrics import latency as ml
from speedbench.backends.base import GenerateOutput
from speedbench.config import LoadConfig, SloConfig
from speedbench.pipeline import load
from speedbench.pipeline.cells import CellKey
from speedbench.records import Request, RequestRecord
from tests.support.sweep_helpers import make_run


def rec(rid="r0", role="spec", *, ttft=0.1, tpot=0.01, n=5, t_start=0.0, repeat=0, chunks=(1, 2, 2), turn_chunks=(3,),
        gaps=(0.02, 0.04), status="ok"):
    e2e = ttft + tpot * (n - 1)
    return RequestRecord(request_id=rid, category="c", context_bucket="", entropy_tier="", role=role, prompt_tokens=4,
                         n_tokens=n, output_ids=tuple(range(n)), ttft=ttft, tpot=tpot, e2e=e2e, n_steps=0, n_drafts=0,
                         drafted=0, accepted=0, status=status, repeat=repeat, chunks=tuple(chunks),
                         turn_chunks=tuple(turn_chunks), t_start=t_start, chunk_gaps=tuple(gaps))


def test_summary_matches_numpy_percentiles_and_ignores_nan():
    values = [1.0, 2.0, 3.0, 4.0, 100.0, math.nan]
    s = ml.summary(values)
    assert s["mean"] == pytest.approx(22.0)
    assert s["p50"] == 3.0 and s["p99"] == pytest.approx(np.percentile([1, 2, 3, 4, 100], 99))
    assert all(math.isnan(v) for v in ml.summary([]).values())


def test_itl_per_token_spreads_each_gap_over_the_tokens_of_its_chunk():
    # two turns: chunks (1, 3) and (1, 1, 2): gaps end with a chunk of 3, then 1, then 2 tokens
    r = rec(chunks=(1, 3, 1, 1, 2), turn_chunks=(2, 3), gaps=(0.03, 0.01, 0.04))
    assert ml.gap_tokens(r) == [3, 1, 2]
    assert ml.itl_per_chunk([r]) == [0.03, 0.01, 0.04]
    assert ml.itl_per_token([r]) == pytest.approx([0.01, 0.01, 0.01, 0.01, 0.02, 0.02])
    # counts that do not line up with the gaps: no per-token ITL rather than a wrong one
    assert ml.itl_per_token([rec(chunks=(1, 2), turn_chunks=(2,), gaps=(0.1, 0.2))]) == []


def test_goodput_counts_requests_meeting_every_slo_per_second_of_window():
    recs = [rec("a", ttft=0.05, tpot=0.01, t_start=0.0), rec("b", ttft=0.3, tpot=0.01, t_start=0.5),
            rec("c", ttft=0.05, tpot=0.05, t_start=1.0), rec("d", status="failed", t_start=1.0)]
    window = max(r.t_start + r.e2e for r in recs[:3]) - 0.0
    cols = ml.role_columns(recs, "spec", ml.slo_set(SloConfig(ttft_ms=100, tpot_ms=20)))
    assert cols["goodput_spec"] == pytest.approx(1 / window)  # only "a" meets both
    assert cols["requests_s_spec"] == pytest.approx(3 / window)
    assert cols["output_tok_s_spec"] == pytest.approx(15 / window)
    assert cols["failed_requests_spec"] == 1
    assert math.isnan(ml.role_columns(recs, "spec", {})["goodput_spec"])  # no SLO set: no goodput
    assert cols["ttft_ms_p50_spec"] == pytest.approx(50.0)


def test_throughput_speedup_pairs_repeats_and_has_an_interval():
    def passes(role, tpot):
        return GenerateOutput([rec(f"r{i}", role, tpot=tpot * (1 + 0.05 * rep), t_start=0.0, repeat=rep)
                               for rep in range(3) for i in range(2)], wall_s=1.0)

    cols = ml.load_point_columns(passes("baseline", 0.02), passes("spec", 0.01), SloConfig(e2e_ms=1000))
    # same tokens, spec windows (ttft + 4 tpot) shorter: ratio = base window / spec window per repeat
    expect = [(0.1 + 4 * 0.02 * (1 + 0.05 * k)) / (0.1 + 4 * 0.01 * (1 + 0.05 * k)) for k in range(3)]
    assert cols.speedup_throughput == pytest.approx(float(np.median(expect)))
    assert cols.speedup_throughput_ci_low <= cols.speedup_throughput <= cols.speedup_throughput_ci_high
    assert cols.speedup_goodput == pytest.approx(cols.speedup_throughput)  # every request meets the SLO


def test_without_send_times_the_pass_wall_time_is_the_window():
    r = [rec(t_start=math.nan), rec("r1", t_start=math.nan)]
    assert ml.role_columns(r, "spec", {}, wall_s=2.0)["requests_s_spec"] == pytest.approx(1.0)


def test_arrivals_are_seeded_with_the_mean_rate_and_burstiness_sets_their_spread():
    a = arrivals.arrival_times(4000, rate=10.0, burstiness=1.0, seed=3)
    assert a == arrivals.arrival_times(4000, rate=10.0, burstiness=1.0, seed=3) and a[0] == 0.0
    gaps = np.diff(a)
    assert gaps.mean() == pytest.approx(0.1, rel=0.05) and gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.08)
    bursty = np.diff(arrivals.arrival_times(4000, rate=10.0, burstiness=0.25, seed=3))
    assert bursty.mean() == pytest.approx(0.1, rel=0.1) and bursty.std() / bursty.mean() == pytest.approx(2.0, rel=0.1)
    assert arrivals.arrival_times(3, rate=math.inf) == [0.0, 0.0, 0.0]
    # Poisson keeps the exact sequence of the earlier expovariate arrivals
    rng = random.Random(5)
    assert arrivals.interarrival(random.Random(5), 2.0) == rng.expovariate(2.0)


def test_point_requests_cycle_with_their_own_ids():
    reqs = [Request(f"q{i}", "c", ("hi",), 8) for i in range(3)]
    got = load.point_requests(reqs, 7)
    assert [r.request_id for r in got] == ["q0", "q1", "q2", "q0#1", "q1#1", "q2#1", "q0#2"]
    assert load.point_requests(reqs, 2) == reqs[:2] and load.point_requests(reqs, None) == reqs


def test_load_options_are_part_of_the_cell_id_only_when_set(tmp_path):
    run = make_run(tmp_path, "x")
    before = CellKey.for_run(run, "coding", "").cell_id
    run.load = LoadConfig(warmup_requests=3)  # warm-up only: the same measurement
    assert CellKey.for_run(run, "coding", "").cell_id == before
    ids = set()
    for lc in (LoadConfig(concurrency=2), LoadConfig(concurrency=4), LoadConfig(concurrency=2, request_rate=5.0),
               LoadConfig(concurrency=2, request_rate=5.0, burstiness=0.5)):
        run.load = lc
        ids.add(CellKey.for_run(run, "coding", "").cell_id)
    assert len(ids) == 4 and before not in ids


def test_bad_load_options_are_refused_naming_them(tmp_path):
    run = make_run(tmp_path, "x")
    run.load = LoadConfig(concurrency=0, burstiness=-1.0)
    run.slo = SloConfig(tpot_ms=0)
    problems = load.load_problems(run)
    assert any("load.concurrency" in p for p in problems) and any("load.burstiness" in p for p in problems)
    assert any("slo.tpot_ms" in p for p in problems)
    run.load = LoadConfig(request_rate=4.0)
    assert any("needs a server backend" in p for p in load.load_problems(run))


def test_duration_sizes_a_point_once_so_both_windows_run_the_same_requests(tmp_path):
    run = make_run(tmp_path, "x")
    run.load = LoadConfig(concurrency=2, duration_s=3.0)
    assert load.sized_requests(run, warm_requests_s=4.0) == (12, {"duration_s": 3.0, "from": "warmup", "requests_s": 4.0,
                                                                 "num_requests": 12})
    assert load.sized_requests(run, warm_requests_s=0.1)[0] == 2  # never fewer than C in flight
    with pytest.raises(ValueError, match="load.duration_s"):
        load.sized_requests(run, warm_requests_s=None)
    run.load = LoadConfig(concurrency=2, request_rate=2.5, duration_s=3.0)  # open loop: rate x duration
    assert load.sized_requests(run, warm_requests_s=None)[0] == 8
    run.load = LoadConfig(concurrency=2)
    assert load.sized_requests(run, warm_requests_s=4.0) == (None, None)
    before = CellKey.for_run(run, "coding", "").cell_id
    run.load = LoadConfig(concurrency=2, duration_s=3.0)
    assert CellKey.for_run(run, "coding", "").cell_id != before  # a duration is part of the point's identity


def test_bad_duration_options_are_refused_naming_them(tmp_path):
    run = make_run(tmp_path, "x")
    for lc, words in ((LoadConfig(duration_s=0.0), "load.duration_s must be a positive"),
                      (LoadConfig(duration_s=2.0, num_requests=4), "set one of them"),
                      (LoadConfig(duration_s=2.0, warmup_requests=0), "load.warmup_requests must be >= 1")):
        run.load = lc
        assert any(words in p for p in load.load_problems(run)), (lc, load.load_problems(run))


def test_request_rate_runs_on_servers_and_on_stepped_vllm_engines_only(tmp_path):
    run = make_run(tmp_path, "x")
    run.load = LoadConfig(request_rate=4.0)
    run.backend.name = "hf"
    assert any("neither serves nor steps" in p for p in load.load_problems(run))
    run.backend.name = "vllm_serve"
    assert not [p for p in load.load_problems(run) if "request_rate" in p]


def test_t_quantile_matches_the_student_t_table():
    from speedbench.metrics.speedup import t_quantile

    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 9: 2.262, 29: 2.045}  # 97.5% quantiles
    for df, t in table.items():
        assert t_quantile(0.975, df) == pytest.approx(t, rel=2e-3)


def test_a_load_points_interval_holds_the_spread_between_its_windows():
    from speedbench.metrics.speedup import paired_speedup

    # 8 requests, 4 windows; every request agrees within a window, the windows disagree (a server
    # or client state that lasts a window): resampling repeats per request averages that away
    rng = np.random.default_rng(1)
    window = np.array([1.30, 1.22, 1.36, 1.25])
    ratios = window[None, :] * (1 + 0.002 * rng.standard_normal((8, 4)))
    plain = paired_speedup(ratios, 0.95, 500)
    point = paired_speedup(ratios, 0.95, 500, windows=True)
    assert point.point == plain.point
    assert point.low < plain.low and point.high > plain.high
    assert point.low < window.min() * 1.02 and point.high > window.max() * 0.98  # the windows' own range
    noise = paired_speedup(ratios, 0.95, 500, requests=False, windows=True)
    assert noise.rel_half_width > 0.05  # such a point is not stable at a 2% target


def test_bursts_and_a_busy_client_flag_a_server_point_as_client_bound():
    steady = [rec(f"r{i}", gaps=(0.02, 0.02)) for i in range(10)]
    burst = [rec(f"b{i}", gaps=(0.0001, 0.0001)) for i in range(2)]  # read in one go by a lagging client
    assert ml.burst_frac(steady) == 0.0 and ml.burst_frac(steady + burst) == pytest.approx(2 / 12)
    quiet = GenerateOutput(steady, wall_s=1.0, extra={"client": ml.client_cost(0.1, 1.0, 30)})
    assert ml.client_columns(quiet, quiet) == {"burst_frac": 0.0, "client_cpu_share": pytest.approx(0.1),
                                               "client_bound": False}
    assert ml.client_columns(GenerateOutput(steady + burst, wall_s=1.0), quiet)["client_bound"]
    busy = GenerateOutput(steady, wall_s=1.0, extra={"client": ml.client_cost(0.95, 1.0, 30)})
    assert ml.client_columns(quiet, busy)["client_bound"]
    assert ml.client_cost(0.3, 1.0, 30)["cpu_ms_per_chunk"] == pytest.approx(10.0)


def test_acceptance_and_cost_by_live_batch_and_by_context_bucket():
    from speedbench.metrics.buckets import bucket_notes, context_bucket
    from speedbench.records import StepRecord

    def step(it, live, ctx, drafted, accepted, t):
        return StepRecord("r", it, 0, drafted, accepted, accepted + 1, 0.001, t, 0.0, t + 0.001, 5, iteration=it,
                          context_len=ctx, live_batch=live)

    steps = [step(0, 1, 100, 4, 3, 0.002), step(1, 1, 104, 4, 1, 0.002), step(2, 2, 600, 4, 0, 0.004),
             step(3, 2, 1500, 0, 0, 0.004), step(4, -1, -1, 4, 4, 0.009)]  # the last: engine said nothing
    assert (context_bucket(100), context_bucket(1024), context_bucket(1500), context_bucket(0)) == (64, 1024, 1024, -1)
    notes = bucket_notes(steps)
    one, two = notes["by_live_batch"]
    assert (one["bucket"], one["drafts"], one["al"]) == (1, 2, 3.0) and one["t_verify_ms"] == pytest.approx(2.0)
    assert (two["bucket"], two["steps"], two["drafts"], two["al"]) == (2, 2, 1, 1.0)
    assert two["t_step_ms"] == pytest.approx(5.0)
    assert [r["bucket"] for r in notes["by_context"]] == [64, 512, 1024]
    assert notes["by_context"][2]["al"] is None  # no draft in that bucket: no AL, written as null


def test_a_point_whose_every_request_came_in_a_burst_is_client_bound():
    # a starved client (or API process) read all 64 tokens of most requests from a buffer: the pass's own
    # median gap is itself a buffer read, so only the floor (no engine step is 0.1 ms) sees it
    burst = [rec(f"b{i}", gaps=(0.000015,) * 3) for i in range(9)] + [rec("s", gaps=(0.004,) * 3)]
    steady = [rec(f"r{i}", gaps=(0.004,) * 3) for i in range(10)]
    base, spec = GenerateOutput(burst, wall_s=1.0), GenerateOutput(steady, wall_s=1.0)
    assert ml.burst_frac(burst) == pytest.approx(0.9)
    cols = ml.client_columns(base, spec)
    assert cols["client_bound"] and cols["burst_frac"] == pytest.approx(0.9)


def test_by_context_pairs_the_baseline_per_bucket_with_an_interval_and_takes_configured_edges():
    from speedbench.metrics.buckets import bucket_notes, check_edges, context_bucket
    from speedbench.records import StepRecord

    def step(it, ctx, emitted, t):
        return StepRecord("r", it, 0, emitted - 1, emitted - 1, emitted, 0.0, t, 0.0, t, 3, iteration=it,
                          context_len=ctx, live_batch=1, kept=emitted)

    # small context (< 64): speculation emits 3 tokens per 2 ms step vs 1 per 1 ms; long (>= 64): 1.2 per 3 ms
    base = [step(i, 10 + i, 1, 0.001 + 1e-5 * (i % 3)) for i in range(20)] + \
           [step(20 + i, 70 + i, 1, 0.002 + 1e-5 * (i % 3)) for i in range(20)]
    spec = [step(i, 10 + 3 * i, 3, 0.002 + 1e-5 * (i % 2)) for i in range(10)] + \
           [step(10 + i, 70 + i, 1 + (i % 5 == 0), 0.003) for i in range(20)]
    assert context_bucket(70, (0, 64)) == 64 and context_bucket(10, (16, 64)) == -1
    rows = bucket_notes(spec, base, edges=(0, 64))["by_context"]
    short, long_ = rows
    assert (short["bucket"], long_["bucket"]) == (0, 64)
    assert short["speedup"] == pytest.approx(1.5, rel=0.02) and short["speedup_ci_low"] > 1.0
    assert long_["speedup"] == pytest.approx(0.8, rel=0.02) and long_["speedup_ci_high"] < 1.0
    assert short["speedup_ci_low"] <= short["speedup"] <= short["speedup_ci_high"]
    assert short["ms_per_token_baseline"] == pytest.approx(1.01, rel=0.01)
    assert [r["bucket"] for r in bucket_notes(spec, base)["by_context"]] == [8, 16, 32, 64]  # default: powers of two
    assert "speedup" not in bucket_notes(spec)["by_context"][0]  # no baseline: no speedup claimed
    with pytest.raises(ValueError, match="acceptance.context_edges"):
        check_edges([0, 64, 32])


def test_bad_context_edges_are_refused_by_the_protocol_checks(tmp_path):
    from speedbench.pipeline.validation import check_protocol
    from tests.support.sweep_helpers import make_run

    run = make_run(tmp_path, "edges")
    assert not [p for p in check_protocol(run) if "context_edges" in p]
    run.acceptance.context_edges = [0, 64, 64]
    (problem,) = [p for p in check_protocol(run) if "context_edges" in p]
    assert problem.startswith("acceptance.context_edges=[0, 64, 64]") and "strictly up" in problem
