"""SLA capacity from paired load points (``speedbench.capacity``): attainment per level, the
crossing of the target, its interval from the attainment intervals, and the command's refusals.
The results folder is written by hand (cells table + requests files), as a sweep leaves it."""
import json
import math
import subprocess
import sys
from dataclasses import asdict
from types import SimpleNamespace

import pandas as pd
import pytest

from speedbench.capacity.search import CapacityError, Level, capacity_of, crossing, search, wilson
from speedbench.records import RequestRecord
from speedbench.results.layout import RunFolder


def test_crossing_interpolates_between_the_last_level_that_meets_and_the_first_that_misses():
    assert crossing([1, 2, 4, 8], [1.0, 0.95, 0.85, 0.2], 0.9) == (pytest.approx(2 + 0.5 * 2), False)
    assert crossing([1, 2], [0.99, 0.95], 0.9) == (2, True)  # still met at the top: censored
    assert crossing([1, 2], [0.5, 0.1], 0.9) == (0.0, False)  # missed at the lowest load
    lo, hi = wilson(20, 20)
    assert hi == 1.0 and 0.8 < lo < 0.9  # 20 of 20 cannot prove 90% at 95% confidence


def test_capacity_interval_comes_from_the_attainment_intervals():
    levels = [Level(r, f"c{r}", a, lo, hi, 40, 40, True) for r, a, lo, hi in
              ((1, 1.0, 0.95, 1.0), (2, 0.95, 0.88, 0.99), (4, 0.5, 0.35, 0.65))]
    cap = capacity_of(levels, 0.9)
    assert cap.low < cap.point < cap.high and not cap.censored
    assert cap.point == pytest.approx(2 + (0.95 - 0.9) / 0.45 * 2)


def _rec(rid, role, rate, ttft, repeat):
    return RequestRecord(request_id=rid, category="all", context_bucket="", entropy_tier="", role=role, prompt_tokens=8,
                         n_tokens=16, output_ids=tuple(range(16)), ttft=ttft, tpot=0.004, e2e=ttft + 0.06, n_steps=0,
                         n_drafts=0, drafted=0, accepted=0, repeat=repeat)


@pytest.fixture
def sweep(tmp_path):
    """Four open-loop points; TTFT grows with the rate, faster for the baseline than for speculation."""
    root = tmp_path / "run"
    (root / "requests").mkdir(parents=True)
    cells = []
    for rate in (2.0, 4.0, 8.0, 16.0):
        cid = f"cell-{int(rate)}"
        rows = []
        for role, slope in (("baseline", 0.012), ("spec", 0.006)):
            for rep in range(2):
                for i in range(30):
                    ttft = slope * rate * (0.5 + i / 30)  # a spread of TTFTs within the level
                    rows.append(asdict(_rec(f"q{i}", role, rate, ttft, rep)) | {"role": role})
        pd.DataFrame(rows).to_parquet(RunFolder(root).requests_path(cid))
        cells.append({"cell_id": cid, "drafter": "ngram", "method": "ngram", "num_speculative_tokens": 4, "context_bucket": "",
                      "concurrency": -1, "request_rate": rate, "stable": rate != 16.0, "results_dir": str(root),
                      "extra": {"config": {"slo": {"ttft_ms": 100.0}}}})
    baseline = dict(cells[0], cell_id="base-only", drafter="none", method="none")
    return root, SimpleNamespace(ok=pd.DataFrame(cells + [baseline]))


def test_search_reads_the_slo_the_runs_recorded_and_moves_capacity_with_speculation(sweep):
    _, data = sweep
    objectives, rows = search(data)
    assert objectives == {"ttft_ms": 100.0}
    (row,) = rows  # the drafter "none" cell is nobody's configuration
    assert row.axis == "request_rate" and row.unit == "requests/s"
    assert row.baseline.point < row.spec.point  # TTFT grows half as fast with speculation
    assert 4 <= row.baseline.point <= 8 and 8 <= row.spec.point <= 16
    assert [lv.attainment for lv in row.levels["baseline"]][0] == 1.0
    assert "moves SLA capacity from" in row.line() and "1 of the points behind it are unstable" in row.line()
    _, tight = search(data, {"ttft_ms": 30.0})  # a tighter objective, given on the command line
    assert tight[0].baseline.point < row.baseline.point


def test_capacity_refusals_are_one_line(sweep):
    _, data = sweep
    with pytest.raises(CapacityError, match="attainment"):
        search(data, target=1.5)
    with pytest.raises(CapacityError, match="no load points of drafter eagle3"):
        search(data, drafter="eagle3")
    no_slo = SimpleNamespace(ok=data.ok.assign(extra=[{}] * len(data.ok)))
    with pytest.raises(CapacityError, match="no SLO set"):
        search(no_slo)


def test_capacity_json_is_strict_and_the_command_refuses_a_folder_without_results(tmp_path):
    from speedbench.results.store import strict_json
    from speedbench.capacity.search import Capacity, CapacityRow

    row = CapacityRow("ngram", 4, "", "request_rate", "", Capacity(math.nan, math.nan, math.nan, False),
                      Capacity(2.0, 1.0, 3.0, True))
    body = json.loads(strict_json(row.as_dict()))  # NaN -> null, not a bare NaN
    assert body["baseline"]["point"] is None and body["spec"]["censored"] is True
    assert "from n/a (no level measured) to above 2 requests/s (censored)" in body["line"]
    proc = subprocess.run([sys.executable, "-m", "speedbench.cli", "capacity", str(tmp_path / "nothing")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "speedbench capacity:" in proc.stderr


def test_a_capacity_without_a_crossing_says_why_and_what_to_measure(sweep):
    """Never a bare "0 -> 0 [0, 0]": the lowest level missing the SLO says "measure below X" with its
    attainment and Wilson interval; the top level still meeting it says "above X (censored)"."""
    _, data = sweep
    _, (low,) = search(data, {"ttft_ms": 10.0})  # every baseline and speculative TTFT at 2 requests/s is over 10 ms
    assert low.baseline.below and low.spec.below and low.baseline.edge == 2.0
    line = low.line()
    assert "0 [0, 0]" not in line and "from below 2 requests/s to below 2 requests/s" in line
    assert "for both, the lowest level already misses the SLO (attainment 0% [0%, " in line
    assert "measure below 2 requests/s" in line and line.count("measure below") == 1
    _, (high,) = search(data, {"ttft_ms": 1000.0})  # everything meets it: censored at the top level measured
    assert high.spec.censored and not high.spec.below and high.spec.edge == 16.0
    assert "to above 16 requests/s (censored)" in high.line() and "attainment 100% [" in high.line()
    assert "capacity above 16 requests/s (censored); measure above 16" in high.line()
    body = json.loads(__import__("speedbench.results.store", fromlist=["x"]).strict_json(low.as_dict()))
    assert body["baseline"]["below"] is True and "measure below 2" in body["baseline"]["reason"]
    assert body["attainment_interval"].startswith("Wilson")
    per_level = low.attainment_rows()
    assert [r["load"] for r in per_level] == [2.0, 4.0, 8.0, 16.0]
    assert per_level[0]["baseline"].startswith("0% [0%, ") and per_level[0]["n_baseline"] == 30
