"""The steady window of a load point (``load.steady_state``, ``metrics.steady``): where it starts and
ends in closed and open loop, what a cell then counts, and the option's checks (pure and fast)."""
import math
import random

import pytest

from speedbench.backends.base import GenerateOutput
from speedbench.config import LoadConfig
from speedbench.metrics import latency as ml
from speedbench.metrics import steady
from speedbench.pipeline import load
from speedbench.pipeline.cells import CellKey
from tests.support.sweep_helpers import make_run
from tests.unit.metrics.test_load_metrics import rec


def closed_loop(n, c, seed=0, role="spec", repeat=0, slow_after=None):
    """Records of a closed loop of ``c`` slots over ``n`` requests (each slot sends its next request as the
    last one ends), with random request lengths; ``slow_after``: requests from this index on run 3x slower."""
    rng = random.Random(seed)
    free, out = [0.0] * c, []
    for i in range(n):
        k = min(range(c), key=lambda j: free[j])
        tpot = 0.01 * (3 if slow_after is not None and i >= slow_after else 1)
        r = rec(f"r{i}", role, ttft=0.05, tpot=tpot, n=rng.randint(20, 60), t_start=free[k], repeat=repeat)
        free[k] = r.t_start + r.e2e
        out.append(r)
    return out


def test_closed_loop_window_runs_from_full_in_flight_to_the_start_of_the_drain():
    records = closed_loop(30, 4)
    span = steady.steady_span(records, 4, math.inf)
    ends = sorted(r.t_start + r.e2e for r in records)
    assert span.found and span.rule == "closed: in flight >= 4"
    assert span.t0 == 0.0  # all four slots send at once
    assert span.t1 == pytest.approx(ends[30 - 4])  # the first slot left without work: the drain starts
    assert span.kept == 30 - 3  # the three that finish in the drain are not counted
    assert span.whole_s == pytest.approx(ends[-1])


def test_open_loop_window_runs_from_the_first_end_to_the_last_send():
    records = [rec(f"r{i}", t_start=0.5 * i, tpot=0.02, n=40) for i in range(20)]
    span = steady.steady_span(records, None, 2.0)
    assert span.found and span.t0 == pytest.approx(records[0].e2e) and span.t1 == pytest.approx(9.5)
    assert span.kept == sum(span.t0 <= r.t_start + r.e2e <= span.t1 for r in records) < 20


def test_a_cell_counts_only_steady_requests_and_the_steady_window_as_its_throughput_window():
    base = GenerateOutput(closed_loop(24, 4, seed=1, role="baseline"))
    spec = GenerateOutput(closed_loop(24, 4, seed=1, slow_after=20) + [rec("bad", status="error")])
    cut, spans = steady.steady_pass(spec, 4, math.inf)
    kept = [r for r in cut.requests if r.status == "ok"]
    assert len(kept) == spans[0].kept == 21 and any(r.status == "error" for r in cut.requests)  # failures stay
    whole = ml.load_point_columns(base, spec)
    cut_base, base_spans = steady.steady_pass(base, 4, math.inf)
    part = ml.load_point_columns(cut_base, cut, steady=(steady.window_counts(base, base_spans),
                                                        steady.window_counts(spec, spans)))
    inside = sum(steady.tokens_in(r, spans[0].t0, spans[0].t1) for r in spec.requests)
    assert part.output_tok_s_spec == pytest.approx(inside / spans[0].length_s)
    assert part.requests_s_spec == pytest.approx(len(kept) / spans[0].length_s)
    # the slowed tail ran mostly in the drain: counting it whole lowers the speculative throughput more
    assert part.output_tok_s_spec > whole.output_tok_s_spec
    assert part.tpot_ms_p99_spec <= whole.tpot_ms_p99_spec


def test_a_pass_that_never_reaches_the_level_keeps_every_request_and_says_so():
    records = closed_loop(2, 2)[:1]  # one request: never two in flight
    out, spans = steady.steady_pass(GenerateOutput(records), 2, math.inf)
    assert not spans[0].found and out.requests == records
    note = steady.steady_note(spans, spans)
    assert "no steady window, every request counted" in note["steady_window"]["warning"]


def test_a_short_steady_window_is_flagged_and_a_long_one_is_not():
    short = steady.steady_span(closed_loop(30, 4), 4, math.inf)  # about 3 s: shorter than 10 s
    assert short.short and "shorter than max(10 s, 10% of the pass)" in steady.steady_note({0: short}, {})[
        "steady_window"]["warning"]
    long = steady.steady_span(closed_loop(400, 4), 4, math.inf)
    assert long.length_s > 10 and not long.short and steady.steady_note({0: long}, {0: long})["steady_window"][
        "warning"] == ""


def test_steady_state_is_part_of_the_cell_id_only_when_on_and_needs_a_load_point(tmp_path):
    run = make_run(tmp_path, "x")
    run.load = LoadConfig(concurrency=2)
    whole = CellKey.for_run(run, "coding", "").cell_id
    run.load = LoadConfig(concurrency=2, steady_state=True)
    assert CellKey.for_run(run, "coding", "").cell_id != whole and not load.load_problems(run)
    run.load = LoadConfig(steady_state=True)
    assert any("load.steady_state needs a load point" in p for p in load.load_problems(run))
    run.load = LoadConfig(concurrency=2, steady_state="yes")
    assert any("load.steady_state must be true or false" in p for p in load.load_problems(run))


def test_tokens_in_counts_the_part_of_a_decode_inside_the_window():
    r = rec(ttft=1.0, tpot=0.1, n=11, t_start=0.0)  # first token at 1 s, the other 10 evenly to 2 s
    assert steady.tokens_in(r, 0.0, 3.0) == pytest.approx(11)
    assert steady.tokens_in(r, 1.5, 3.0) == pytest.approx(5)  # half the decode, not the first token
    assert steady.tokens_in(r, 0.0, 1.5) == pytest.approx(6)
    assert steady.tokens_in(rec(status="error"), 0.0, 9.0) == 0
    # a closed loop: the tokens inside the window, over it, match the whole window's rate (no edge bias)
    records = closed_loop(400, 4)
    span = steady.steady_span(records, 4, math.inf)
    whole = sum(r.n_tokens for r in records) / span.whole_s
    assert sum(steady.tokens_in(r, span.t0, span.t1) for r in records) / span.length_s == pytest.approx(whole, rel=0.02)
