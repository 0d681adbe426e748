"""Metric math on hand-made counters."""
import math

import pytest

from speedbench import metrics
from speedbench.records import RequestRecord, StepRecord


def rec(rid, drafts, drafted, accepted, hist, out=(1, 2, 3), status="ok", tpot=0.01):
    return RequestRecord(rid, "c", "", "", "spec", 5, len(out), tuple(out), 0.1, tpot, 0.5, drafts, drafts,
                         drafted, accepted, tuple(hist), status=status)


def test_al_includes_the_bonus_token():
    # 4 drafts of D=3: accepted 3, 0, 2, 1 -> AL = 1 + 6/4
    acc = metrics.acceptance([rec("a", 4, 12, 6, (1, 1, 1, 1))], depth=3)
    assert acc.al == pytest.approx(2.5)
    assert acc.rate == pytest.approx(0.5)
    assert acc.per_position() == pytest.approx((0.75, 0.5, 0.25))
    assert acc.per_position_conditional() == pytest.approx((0.75, 2 / 3, 0.5))


def test_pooling_skips_failed_requests_and_pads_histogram():
    good = rec("a", 2, 4, 4, (0, 0, 2))
    bad = rec("b", 9, 9, 9, (9,), status="failed")
    acc = metrics.acceptance([good, bad], depth=4)
    assert (acc.drafts, acc.accepted, acc.hist) == (2, 4, (0, 0, 2, 0, 0))
    assert acc.al == 3.0


def test_no_drafts_is_not_a_number_not_one():
    acc = metrics.acceptance([rec("a", 0, 0, 0, ())], depth=4)
    assert math.isnan(acc.al) and acc.per_position() == ()


def test_vllm_counter_example_from_the_notes():
    # vLLM on CPU, ngram D=4: drafts 112, draft tokens 392 (lookup may propose < D), accepted 384,
    # per-position counts [112, 96, 92, 84] (vllm-notes.md)
    hist = (0, 112 - 96, 96 - 92, 92 - 84, 84)
    acc = metrics.Acceptance(112, 392, 384, hist)
    assert acc.al == pytest.approx(1 + 384 / 112)
    assert acc.per_position() == pytest.approx((1.0, 96 / 112, 92 / 112, 84 / 112))


def test_agreement_reports_first_divergence():
    base = [rec("a", 0, 0, 0, (), out=(1, 2, 3, 4)), rec("b", 0, 0, 0, (), out=(5, 6))]
    spec = [rec("a", 0, 0, 0, (), out=(1, 2, 9, 4)), rec("b", 0, 0, 0, (), out=(5, 6))]
    a = metrics.agreement(base, spec)
    assert a.match_rate == 0.5
    assert a.first_divergence == 2
    assert a.token_match_rate == pytest.approx(4 / 6)
    assert metrics.first_mismatch((1, 2), (1, 2, 3)) == 2


def test_predicted_speedup_formula():
    # T_verif(B)=10, T_verif(B(1+D))=12, T_draft=4, AL=3.2 -> 10*3.2/16 = 2.0
    assert metrics.predicted_speedup(10, 12, 4, 3.2) == pytest.approx(2.0)
    assert math.isnan(metrics.predicted_speedup(math.nan, 12, 4, 3.2))
    # the per-step work outside the forwards: in the baseline's time per token, shared over AL tokens with speculation
    assert metrics.predicted_speedup(10, 12, 4, 3.2, t_other_base=4, t_other_spec=4) == pytest.approx(14 * 3.2 / 20)
    assert metrics.predicted_speedup(10, 12, 4, 3.2, t_other_base=4, t_other_spec=4) > metrics.predicted_speedup(10, 12, 4, 3.2)
    assert metrics.low_latency_speedup(3.0, 0.25, 4) == pytest.approx(1.5)


def test_iteration_times_dedupe_rows_of_one_forward_and_overhead():
    s = [StepRecord("a", 0, 0, 2, 1, 2, 0.001, 0.010, 0.001, 0.013, 6, iteration=0),
         StepRecord("b", 0, 1, 2, 2, 3, 0.001, 0.010, 0.001, 0.013, 6, iteration=0),
         # a later forward whose times happen to equal the first one's is still its own iteration
         StepRecord("a", 1, 0, 2, 0, 1, 0.001, 0.010, 0.001, 0.013, 6, iteration=1)]
    it = metrics.iteration_times(s)
    assert len(it) == 2
    assert metrics.overhead_fraction(it) == pytest.approx((0.026 - 0.024) / 0.026)
    assert metrics.tokens_per_step(s) == pytest.approx(2.0)
    assert metrics.stats_ms([0.001, 0.003])[:2] == pytest.approx((2.0, 2.0))


def test_the_prediction_rebuilds_the_tpot_ratio_from_fully_timed_steps():
    """With every part of every step timed, the formula is the pair's TPOT ratio rebuilt from its
    parts: the speculative side counts the tokens its last step *kept* (2 of the 4 it emitted were
    cut at max_new_tokens), and the baseline's own draft-phase time (a plain-decoding pass run
    through the drafting loop with no drafter) is part of its per-step other time."""
    ms = 1e-3

    def step(rid, i, _, d, acc, kept, draft, verify, accept, other):
        return StepRecord(rid, i, 0, d, acc, acc + 1, draft, verify, accept, draft + verify + accept + other,
                          1 + d, iteration=i, kept=kept)

    n_out = 11  # the prefill's token, then 10 decode tokens
    base = [step("r", i, 0, 0, 0, 1, 0.06 * ms, 2.5 * ms, 0.2 * ms, 0.03 * ms) for i in range(n_out - 1)]
    spec = [step("r", i, 1, 4, 3, kept, 2.4 * ms, 4.0 * ms, 0.3 * ms, 0.04 * ms) for i, kept in enumerate((4, 4, 2))]
    assert sum(s.kept for s in spec) == n_out - 1 and sum(s.emitted for s in spec) == 12
    tpot = {role: sum(s.t_step for s in steps) / (n_out - 1) for role, steps in (("b", base), ("s", spec))}
    predicted = metrics.predicted_ratios(base, spec)
    assert predicted.shape == (1, 1)
    assert predicted[0, 0] == pytest.approx(tpot["b"] / tpot["s"], rel=1e-9)
    assert metrics.tokens_per_step(spec) == pytest.approx(10 / 3)  # kept, not the 4 emitted per step
    unknown = [StepRecord("r", 0, 0, 4, 3, 4, 0, 0, 0, 0, 5)]  # kept not known (-1): what it emitted
    assert metrics.tokens_per_step(unknown) == 4.0


def test_redaction_keeps_token_counts_and_hides_credentials():
    from speedbench.results.provenance import redact

    out = redact({"num_speculative_tokens": 4, "max_new_tokens": 64, "api_key": "abc", "hf_token": "x",
                  "options": {"token": "t", "base_url": "http://127.0.0.1:8000"}, "argv": ["api_key=sk-123"],
                  "note": "sk-abcdefghijklmnopq"})
    assert out["num_speculative_tokens"] == 4 and out["max_new_tokens"] == 64
    assert out["api_key"] == out["hf_token"] == out["options"]["token"] == "<redacted>"
    assert out["options"]["base_url"] == "http://127.0.0.1:8000"
    assert out["argv"] == ["api_key=<redacted>"] and out["note"] == "<redacted>"


def test_geomean_and_the_speedup_estimator_are_the_one_definition():
    import numpy as np

    assert metrics.geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert metrics.geomean([2.0, float("nan"), 0.0, -1.0, 8.0]) == pytest.approx(4.0)  # unusable values left out
    assert math.isnan(metrics.geomean([])) and math.isnan(metrics.geomean([float("nan")]))
    ratios = np.array([[1.0, 1.2, 1.1], [2.0, 2.0, 8.0]])  # [request, repeat]
    assert metrics.speedup_of(ratios) == pytest.approx(math.sqrt(1.1 * 2.0))
    stacked = np.stack([ratios, ratios * 2])  # leading axes are kept: one estimate per resample
    assert np.allclose(metrics.speedup_of(stacked), [math.sqrt(2.2), 2 * math.sqrt(2.2)])
    assert metrics.paired_speedup(ratios).point == pytest.approx(metrics.speedup_of(ratios))
