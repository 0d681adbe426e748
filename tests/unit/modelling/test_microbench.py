"""Microbenchmarks at tiny sizes on the CPU: they run, write parquet + provenance, and feed the report."""
import json

import numpy as np
import pandas as pd
import pytest

from speedbench.cli import main
from speedbench.report import build_report

FAST = ["--device", "cpu", "--warmup", "1", "--repeats", "3", "--threads", "1"]


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    root = tmp_path_factory.mktemp("mb")
    assert main(["microbench", "gemm", "--results-dir", str(root), "--n", "64", "--k", "64", "--batch", "1,4",
                 "--depth", "0-3", *FAST]) == 0
    assert main(["microbench", "attention", "--results-dir", str(root), "--context", "64", "--kv-heads", "1",
                 "--head-dim", "16", "--group", "64", "--depth", "0-3", *FAST]) == 0
    assert main(["microbench", "verify", "--results-dir", str(root), "--context", "16", "--batch", "1,2",
                 "--depth", "0,1,3", *FAST]) == 0
    return root


def test_gemm(bench):
    g = pd.read_parquet(bench / "microbench" / "gemm.parquet")
    assert sorted(zip(g.batch, g.depth)) == [(b, d) for b in (1, 4) for d in range(4)]
    assert (g.m == g.batch * (1 + g.depth)).all()
    assert g.normalised.max() == pytest.approx(1.0) and (g.normalised > 0).all()
    assert np.allclose(g.tflops, 2 * g.m * 64 * 64 / g.time_s / 1e12)
    prov = json.loads((bench / "microbench" / "gemm.provenance.json").read_text())
    assert prov["engine"]["microbench"] == "gemm" and prov["config"]["n"] == 64


def test_attention(bench):
    a = pd.read_parquet(bench / "microbench" / "attention.parquet")
    assert list(a.queries_per_kv_head) == [64, 128, 192, 256]
    assert list(a.tiles) == [1, 1, 2, 2]
    assert a.relative_time.iloc[0] == 1.0 and (a.time_s > 0).all()


def test_verify(bench):
    v = pd.read_parquet(bench / "microbench" / "verify.parquet")
    assert sorted(zip(v.batch, v.depth)) == [(b, d) for b in (1, 2) for d in (0, 1, 3)]
    assert (v.tokens == v.batch * (1 + v.depth)).all()
    assert (v[v.depth == 0].ratio == 1.0).all() and (v.time_s > 0).all()
    assert set(v.impl) == {"LeanLlama"}


def test_the_report_reads_microbench_results(bench, tmp_path):
    files = build_report([bench], tmp_path / "out")
    md = files.markdown.read_text()
    assert "GEMM M-sweep" in md and "Measured staircase" in md and "Engine verification sweep" in md
    values = json.loads(files.json.read_text())
    assert values["g1"]["gemm_knee_m"] >= 1
    assert [r["tiles"] for r in values["g3"]["staircase"]] == [1, 2]
    assert any(p.name == "g1_gemm.png" for p in files.plots)
