"""Verdicts read off intervals (issue 48 item 5): a G5 slice winner needs its interval above plain decoding
and clear of the runner-up, else "tie"; a configuration's unstable count counts its cells, not its derived
rows; a load point is named by its C or rate, never by B (report and console)."""
import math

import pandas as pd

from speedbench.pipeline.summary import format_table
from speedbench.report.common import config_speedups, point_text
from speedbench.report.mechanism import slice_pivot, winner


def test_a_slice_winner_needs_its_interval_above_one_and_clear_of_the_runner_up():
    s = pd.Series
    # the case: 1.06 [0.89, 1.19] is no winner
    assert winner(s({"ngram": 1.06, "eagle": 0.95}), s({"ngram": 0.89, "eagle": 0.9}), s({"ngram": 1.19, "eagle": 1.0})
                  ).startswith("tie: ngram 1.06x [0.89, 1.19] ~ plain decoding")
    lows, highs = s({"a": 1.2, "b": 1.1}), s({"a": 1.4, "b": 1.3})
    assert winner(s({"a": 1.3, "b": 1.25}), lows, highs) == "tie: a ~ b (a 1.30x [1.2, 1.4] includes b 1.25x)"
    assert winner(s({"a": 1.3, "b": 1.1}), lows, highs) == "a"  # above 1 and the runner-up's 1.1 is outside [1.2, 1.4]
    assert winner(s({"a": 0.8}), s({"a": 0.7}), s({"a": 0.9})).startswith("none pays (best: a 0.80x [0.7, 0.9]")
    assert winner(s({"a": 1.3}), s({"a": math.nan}), s({"a": math.nan})).startswith("no verdict")
    assert winner(s({"a": math.nan})) == "n/a"


def _cells(n=3, stable=(True, False, True)):
    return pd.DataFrame({"drafter": "ngram", "method": "ngram", "num_speculative_tokens": 4, "batch_size": 1,
                         "category": [f"c{i}" for i in range(n)], "context_bucket": "", "speedup": [1.3, 1.1, 1.2][:n],
                         "speedup_ci_low": [1.2, 0.9, 1.15][:n], "speedup_ci_high": [1.4, 1.3, 1.25][:n],
                         "speedup_noise": 0.01, "stable": list(stable)[:n], "al": 2.0, "al_speed_bench": 2.0,
                         "concurrency": -1, "request_rate": math.inf})


def test_slice_pivot_shows_the_best_interval_and_calls_the_overlap_a_tie():
    cells = pd.concat([_cells(), _cells().assign(drafter="eagle", method="eagle", speedup=[1.25, 1.5, 0.5],
                                                 speedup_ci_low=[1.2, 1.4, 0.4], speedup_ci_high=[1.3, 1.6, 0.6])])
    table = slice_pivot(cells, 1, "category", ["eagle", "ngram"]).set_index("category")
    assert table.loc["c0", "winner"].startswith("tie: ngram ~ eagle")  # 1.3 [1.2, 1.4] holds eagle's 1.25
    assert table.loc["c1", "winner"] == "eagle" and table.loc["c1", "best's interval"] == "[1.4, 1.6]"
    assert table.loc["c2", "winner"] == "ngram"


def test_unstable_counts_count_cells_not_the_derived_row():
    cells = _cells()
    overall = cells.iloc[[0]].assign(category="all", stable=False)  # one pooled row for the three cells
    conf = config_speedups(cells, overall)
    (row,) = conf.to_dict("records")
    assert row["source"] == "all row" and row["stable"] == "2/3" and row["unstable"] == "unstable: 1 of 3 cells"
    calm = config_speedups(cells.assign(stable=True), overall).iloc[0]
    assert calm["unstable"] == "unstable: the pooled all row (0 of 3 cells)"


def test_a_load_point_is_named_by_c_or_rate_never_by_b():
    assert point_text(["concurrency", "request_rate"], (4, math.inf, 1)) == "C=4"
    assert point_text(["concurrency", "request_rate"], (-1, 15.0, 1)) == "rate=15/s"
    assert point_text([], (8,)) == "B = 8"
    cells = _cells(2, (True, True)).assign(concurrency=[4, -1], request_rate=[math.inf, 2.0], n_requests=8,
                                           status="ok", category="all")
    cells = pd.concat([cells, _cells(1, (True,)).assign(n_requests=8, status="ok", batch_size=8)])
    lines = format_table(cells).splitlines()
    head = lines[0].split()
    b = head.index("B")
    rows = {(r.split()[head.index("C")], r.split()[head.index("rate")]): r.split()[b] for r in lines[1:4]}
    assert rows == {("4", "-"): "-", ("-", "2"): "-", ("-", "-"): "8"}  # B only where no load point is set
