"""The synthetic backend: torch-backend record shapes, no model, seeded, lossless, geometric acceptance."""
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import speedbench
from speedbench.backends.base import GenerateSpec
from speedbench.backends.registry import BACKENDS
from speedbench.pipeline.conversations import generate
from speedbench.config import BackendConfig, DatasetConfig, DrafterConfig, ModelConfig, RunConfig, SamplingConfig
from speedbench.records import Request, RequestRecord, StepRecord
from speedbench.results import ResultsStore


def backend(**options):
    run = RunConfig(target=ModelConfig(name="t", path="random:does-not-exist"), drafter=DrafterConfig(),
                    dataset=DatasetConfig(), backend=BackendConfig(name="synthetic", options=options),
                    sampling=SamplingConfig(), run_id="x")
    return BACKENDS.get("synthetic")(run.target, run.backend)  # no model, no tokenizer: the bogus path is never read


def reqs(n, cat="coding"):
    return [Request(f"r{i}", cat, ("hello world " * (i + 1),), 40) for i in range(n)]


def spec(method="draft_model", depth=4, batch=2, role="spec"):
    return GenerateSpec(DrafterConfig(name=method, method=method, num_speculative_tokens=depth), batch,
                        SamplingConfig(), 40, False, role)


def test_records_have_the_engine_shapes_and_invariants():
    out = generate(backend(alpha=0.7), reqs(4), spec())
    assert all(isinstance(r, RequestRecord) for r in out.requests) and all(isinstance(s, StepRecord) for s in out.steps)
    for r in out.requests:
        assert r.n_tokens == 40 == len(r.output_ids) and r.status == "ok"
        assert r.n_drafts == r.n_steps and r.drafted == 4 * r.n_drafts and 0 <= r.accepted <= r.drafted
        assert sum(r.accepted_hist) == r.n_drafts and len(r.accepted_hist) <= 5
        assert r.ttft > 0 and r.tpot > 0 and r.e2e > r.ttft
    for s in out.steps:
        assert s.emitted == s.accepted + 1 and s.accepted <= s.drafted and s.verify_tokens == 2 * 5
        assert s.t_step >= s.t_draft + s.t_verify + s.t_accept
    assert out.wall_s > 0


def test_seeded_and_lossless():
    a = generate(backend(), reqs(3), spec())
    b = generate(backend(), reqs(3), spec())
    base = generate(backend(), reqs(3), spec("none", 0, role="baseline"))
    assert [r.accepted for r in a.requests] == [r.accepted for r in b.requests]
    assert [r.output_ids for r in a.requests] == [r.output_ids for r in base.requests]
    assert all(r.n_drafts == 0 and r.accepted_hist == () for r in base.requests)


def test_acceptance_follows_the_geometric_model():
    alpha, depth = 0.6, 3
    out = generate(backend(alpha=alpha, seed=1), [Request(f"r{i}", "c", ("x",), 400) for i in range(20)],
                                                GenerateSpec(DrafterConfig(name="d", method="d", num_speculative_tokens=depth),
                                                             4, SamplingConfig(), 400, False, "spec"))
    drafts = sum(r.n_drafts for r in out.requests)
    al = 1 + sum(r.accepted for r in out.requests) / drafts
    assert al == pytest.approx((1 - alpha ** (depth + 1)) / (1 - alpha), rel=0.03)


def test_times_follow_the_options():
    out = generate(backend(verify_a_ms=3.0, verify_b_ms=0.5, draft_ms=0.25), reqs(2), spec(depth=3, batch=2))
    s = out.steps[0]
    assert s.t_verify == pytest.approx((3.0 + 0.5 * 2 * 4) / 1e3) and s.t_draft == pytest.approx(0.75 / 1e3)
    with pytest.raises(ValueError, match="backend.options.alhpa: unknown key .alhpa. in SyntheticOptions"):
        backend(alhpa=0.5)


def test_hydra_run_with_backend_synthetic(tmp_path):
    cmd = [sys.executable, "-m", "speedbench.cli", "run", "backend=synthetic", "drafter=tiny_draft",
           f"results_dir={tmp_path}", "run_id=syn", "max_new_tokens=16"]
    env = dict(os.environ, PYTHONPATH=str(Path(speedbench.__file__).resolve().parents[1]))  # this checkout's code
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = ResultsStore(tmp_path / "syn").cells()
    assert (cells.status == "ok").all() and (cells.backend == "synthetic").all()
    assert (cells.greedy_match_rate == 1.0).all() and cells.speedup.gt(0).all()
    assert not math.isnan(cells.al.iloc[0])
