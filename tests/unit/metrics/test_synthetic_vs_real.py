"""Synthetic against real acceptance (issue 51 item 4): the independent synthetic draw, the twin pairing,
the speedup ratio and the per-step variance, on real reference-engine runs with the tiny models."""
from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest
import torch

from speedbench.backends.vllm.spec import speculative_config, synthetic_problems
from speedbench.config import LoadConfig, ProtocolConfig
from speedbench.drafters.registry import make_drafter
from speedbench.engine.synthetic_acceptance import SyntheticAcceptance
from speedbench.metrics.speedup import tpot_ratio_table
from speedbench.metrics.synthetic_vs_real import rates_of, speedup_ratio, step_stats, twins, verdict
from speedbench.pipeline import runner
from speedbench.report.synthetic_vs_real import comparison
from speedbench.results.layout import RunFolder
from speedbench.results.store import ResultsStore
from tests.support.sweep_helpers import make_run

RATES = [0.8, 0.6, 0.7, 0.5]


def wilson(x: int, n: int, confidence: float = 0.999) -> tuple[float, float]:
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = x / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def conditional_counts(accepted: np.ndarray, depth: int) -> list[tuple[int, int]]:
    """(reached position k+1 and accepted it, reached position k+1) per position."""
    return [(int((accepted >= k + 1).sum()), int((accepted >= k).sum())) for k in range(depth)]


def draws(mode: str, steps: int = 1500, rows: int = 4, seed: int = 3) -> np.ndarray:
    acc = SyntheticAcceptance(len(RATES), rates=RATES, seed=seed, draw=mode)
    full = torch.full((rows,), len(RATES))
    return np.array([acc.draw(full).tolist() for _ in range(steps)])  # [step, row]


def test_independent_draw_reproduces_the_rates_within_a_binomial_interval():
    got = draws("independent")
    for k, ((x, n), rate) in enumerate(zip(conditional_counts(got.ravel(), len(RATES)), RATES)):
        lo, hi = wilson(x, n)
        assert lo <= rate <= hi, f"position {k + 1}: {x}/{n} accepted, rate {rate} outside [{lo:.3f}, {hi:.3f}]"


def test_independent_draws_vary_as_independent_draws_and_quota_draws_do_not():
    """The mean of 20 consecutive independent draws varies as var / 20 (75 blocks: the ratio within the
    chi-square(74) 99.9% band, about [0.55, 1.6]); quota draws keep each block close to the profile."""
    def block_ratio(x: np.ndarray, size: int = 20) -> float:
        x = x.astype(float)
        return float(np.var(x.reshape(-1, size).mean(1), ddof=1) / (np.var(x, ddof=1) / size))

    assert 0.5 < block_ratio(draws("independent", rows=1)[:, 0]) < 1.7
    assert block_ratio(draws("quota", rows=1)[:, 0]) < 0.25  # systematic: not what a synthetic benchmark assumes


def test_a_finished_row_uses_no_draw_and_the_cap_holds():
    acc = SyntheticAcceptance(4, rates=[1.0, 1.0, 1.0, 1.0], seed=0, draw="independent")
    out = acc.draw(torch.tensor([4, 2, 4]), torch.tensor([True, True, False])).tolist()
    assert out == [4, 2, 0]


def test_an_unknown_draw_is_refused_naming_the_option():
    with pytest.raises(ValueError, match="drafter.synthetic_draw='sometimes'"):
        SyntheticAcceptance(4, rates=RATES, draw="sometimes")


def test_vllm_path_passes_the_rates_and_refuses_a_draw_it_does_not_make():
    d = make_drafter("draft_model", 4, model="/m", synthetic_rates=RATES, synthetic_draw="independent")
    cfg = speculative_config(d)
    assert cfg["rejection_sample_method"] == "synthetic"
    assert cfg["synthetic_acceptance_rates"] == pytest.approx(list(np.cumprod(RATES)))
    assert "synthetic_draw" not in cfg
    assert synthetic_problems(d, on_cpu=False) == []
    assert "not supported by vLLM on CPU" in synthetic_problems(d, on_cpu=True)[0]
    quota = make_drafter("draft_model", 4, model="/m", synthetic_rates=RATES, synthetic_draw="quota")
    assert "synthetic_draw=quota" in synthetic_problems(quota, on_cpu=False)[0]


def _run(root, run_id, concurrency, **drafter):
    run = make_run(root, run_id, categories=("coding", "math"), max_new_tokens=16,
                   drafter=make_drafter("draft_model", 4, model="random:tiny-draft", **drafter),
                   load=LoadConfig(concurrency=concurrency, num_requests=4), per_category=False, ignore_eos=True,
                   protocol=ProtocolConfig(min_repeats=2, max_repeats=2, budget_s=5.0))
    runner.run_cells(run, progress=False)
    return ResultsStore(RunFolder.of(root, run_id).root)


@pytest.fixture(scope="module")
def twin_run(tmp_path_factory):
    """A real load point at C=2, one at C=1 without a twin, and the C=2 point's synthetic twin."""
    root = tmp_path_factory.mktemp("svr")
    store = _run(root, "svr", 2)
    _run(root, "svr", 1)
    real = store.cells()
    real2 = real[real["concurrency"] == 2].iloc[0]
    _run(root, "svr", 2, synthetic_rates=rates_of(real2), synthetic_draw="independent")
    return store


def test_twins_pair_a_real_cell_only_with_its_own_load_point(twin_run):
    cells = twin_run.cells()
    assert len(cells) == 3
    pairs = twins(cells)
    assert len(pairs) == 1
    real, syn = pairs[0]
    assert int(real["concurrency"]) == int(syn["concurrency"]) == 2
    assert math.isnan(real["synthetic_al"]) and math.isfinite(syn["synthetic_al"])
    extra = syn["extra"] if isinstance(syn["extra"], dict) else __import__("json").loads(syn["extra"])
    assert extra["synthetic_draw"] == "independent"


def test_the_ratio_is_the_two_cells_speedups_and_its_interval_holds_it(twin_run):
    rows = comparison(twin_run.cells(), [twin_run.root])
    assert len(rows) == 1
    r = rows[0]
    assert r["C"] == 2 and r["requests"] == 4
    # the ratio's arms are each cell's own speedup estimator on the same requests
    assert r["ratio"] == pytest.approx(r["speedup synthetic"] / r["speedup real"], rel=1e-9)
    lo, hi = r["ratio CI"]
    assert lo < r["ratio"] < hi
    assert r["verdict"] == verdict(lo, hi)


def test_the_ratio_of_a_cell_to_itself_scaled_is_the_scale(twin_run):
    cells = twin_run.cells()
    real = cells[cells["synthetic_al"].isna() & (cells["concurrency"] == 2)].iloc[0]
    ids, ratios = tpot_ratio_table(pd.read_parquet(RunFolder(twin_run.root).requests_path(real["cell_id"])))
    est = speedup_ratio((ids, ratios), (ids, ratios * 1.25))
    assert est.point == pytest.approx(1.25)
    assert est.low <= 1.25 <= est.high
    assert est.windows == (2, 2)
    # fewer than two windows per cell: no interval, never a zero-width one
    one = speedup_ratio((ids, ratios[:, :1]), (ids, ratios[:, :1] * 1.25))
    assert one.point == pytest.approx(1.25) and math.isnan(one.low) and math.isnan(one.high)


def test_step_variance_is_the_recorded_steps_accepted_length_variance(twin_run):
    for _, cell in twin_run.cells().iterrows():
        steps = pd.read_parquet(RunFolder(twin_run.root).steps_path(cell["cell_id"]))
        spec = steps[(steps["role"] == "spec") & (steps["drafted"] > 0)]
        got = step_stats(steps)
        assert got.steps == len(spec) > 0
        assert got.mean == pytest.approx(float(cell["al"]))  # AL pools the same drafting steps
        assert got.var == pytest.approx(float(np.var(spec["accepted"] + 1, ddof=1)))
        al_req = spec.groupby("request_id")["accepted"].mean() + 1
        assert got.var_request_al == pytest.approx(float(np.var(al_req, ddof=1)))


def test_the_synthetic_twin_draws_at_the_real_cells_rates(twin_run):
    """What the engine recorded in the twin's steps reproduces the asked per-position acceptance."""
    real, syn = twins(twin_run.cells())[0]
    steps = pd.read_parquet(RunFolder(twin_run.root).steps_path(syn["cell_id"]))
    acc = steps[(steps["role"] == "spec") & (steps["drafted"] > 0)]["accepted"].to_numpy()
    for k, ((x, n), rate) in enumerate(zip(conditional_counts(acc, 4), rates_of(real))):
        if n == 0:
            continue
        lo, hi = wilson(x, n)
        assert lo <= rate <= hi, f"position {k + 1}: {x}/{n}, asked {rate}"


def test_verdict_never_goes_beyond_the_interval():
    assert verdict(1.02, 1.3) == "synthetic overstates the real speedup"
    assert verdict(0.7, 0.98) == "synthetic understates the real speedup"
    assert verdict(0.9, 1.1).startswith("undecided")
    assert verdict(math.nan, math.nan).startswith("undecided")


@pytest.mark.parametrize("overrides,message", [
    (["drafter.synthetic_rates=[0.5,0.5,0.5,0.5]", "drafter.synthetic_draw=bogus"],
     "drafter.synthetic_draw='bogus' is not one of quota, independent"),
    (["drafter.synthetic_draw=independent"], "drafter.synthetic_draw needs drafter.synthetic_al or drafter.synthetic_rates"),
])
def test_a_bad_synthetic_draw_is_one_line_and_exit_2_before_any_model_loads(tmp_path, capsys, overrides, message):
    from speedbench.cli import main

    code = main(["run", "backend=torch", "drafter=tiny_draft_small", "drafter.num_speculative_tokens=4", *overrides,
                 f"results_dir={tmp_path}", "run_id=bad"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0]
    assert not (tmp_path / "bad" / "cells").exists()
