"""The report on a single configuration: tables instead of one-point plots, no verdict without data."""
from __future__ import annotations

import re

import pytest

from speedbench.report import build_report

from tests.support.synthetic_results import make_results


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    root = tmp_path_factory.mktemp("single")
    run = make_results(root, mechanisms=(("ngram", "ngram", None),), depths=(4,), batches=(1,))
    out = root / "report"
    build_report([run], out)
    return out


def test_no_one_point_plots(single):
    pngs = {p.name for p in single.glob("*.png")}
    for name in ("g1_verify_ratio.png", "g4_low_latency.png", "g5_pareto.png"):
        assert name not in pngs, name
    md = (single / "report.md").read_text()
    assert "a table instead of a plot" in md
    assert "g5_per_position.png" in pngs  # D = 4 positions: a real curve


def test_no_verdict_from_one_draft_length(single):
    md = (single / "report.md").read_text()
    assert "they agree" not in md and "they differ" not in md
    assert "only D = 4 measured" in md


def test_captions_say_what_is_drawn(single):
    md = (single / "report.md").read_text()
    assert "modelled and measured" not in md  # no attention microbenchmark here
    assert "modelled only" in md


def test_text_columns_are_left_aligned(single):
    md = (single / "report.md").read_text()
    header = next(ln for ln in md.splitlines() if ln.startswith("| mechanism"))
    align = md.splitlines()[md.splitlines().index(header) + 1]
    assert align.split("|")[1] == ":---" and "---:" in align
    html = (single / "report.html").read_text()
    assert "td.text,th.text{text-align:left}" in html
    assert re.search(r'<td class="text">ngram</td>', html)
