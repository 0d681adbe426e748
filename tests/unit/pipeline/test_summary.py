"""The end-of-run table (pipeline.summary.format_table) on the committed CI baseline's real cell table:
it fits 120 columns, says why a cell is not stable, shows load points, and --wide shows every column."""
from pathlib import Path

import pandas as pd
import pytest

from speedbench.pipeline.summary import WIDTH, format_table, short_reason
from speedbench.results import ResultsStore
from speedbench.run.argv import split_run_argv

BASELINE = Path(__file__).resolve().parents[3] / "results" / "baselines" / "ci-default"


@pytest.fixture(scope="module")
def cells() -> pd.DataFrame:
    return ResultsStore(BASELINE).cells()


def widest(text: str) -> int:
    return max(map(len, text.splitlines()))


def header(text: str) -> list[str]:
    return text.splitlines()[0].split()


def test_the_default_table_fits_120_columns_and_wide_shows_every_column(cells):
    """Before: 187 characters on this folder (209 on a sweep), wrapped at 120."""
    table, wide = format_table(cells), format_table(cells, wide=True)
    assert widest(table) <= WIDTH
    assert widest(wide) > WIDTH and {"TPOT", "AL(SPEED-Bench)", "cv", "match", "loops"} <= set(header(wide))
    assert "--wide" in table.splitlines()[-1]


def test_a_long_reason_drops_named_columns_to_still_fit(cells):
    long = cells.assign(category=cells.category + "-with-a-long-category-name", stable=False,
                        unstable_reason="measurement noise +-12.5% above the target +-5% after 6 repeats "
                                        "(max_repeats reached); contention: load 3.1 per CPU")
    table = format_table(long)
    assert widest(table) <= WIDTH
    note = table.splitlines()[-1]
    assert note.startswith("left out to fit 120 columns: predicted")
    assert "NO (noise 12.5%, contention)" in table


@pytest.mark.parametrize("reason,short", [
    ("one repeat (max_repeats reached): no estimate of the measurement noise", "1 repeat"),
    ("2 request(s) failed; measurement noise +-9.0% above the target +-5% after 3 repeats (budget_s reached)",
     "failed, noise 9.0%"),
    ("coding: no_drafts: the drafter proposed no token, so ...", "no drafts"),
    ("client_bound: the client set the pace (40% of requests delivered in bursts, client CPU 90% of a core)",
     "client-bound"),
    ("no finite speedup interval (too few requests with two or more tokens)", "no CI"),
])
def test_stable_no_says_why_in_short(reason, short):
    assert short_reason(reason) == short


def test_unstable_rows_say_their_reason_and_stable_rows_say_yes(cells):
    one = cells.assign(stable=[True] + [False] * (len(cells) - 1),
                       unstable_reason=[""] + ["one repeat (max_repeats reached): no noise estimate"] * (len(cells) - 1))
    rows = format_table(one).splitlines()[1:len(cells) + 1]
    assert sum("NO (1 repeat)" in r for r in rows) == len(cells) - 1 and sum(" yes " in r for r in rows) == 1


def test_load_points_get_concurrency_and_rate_columns(cells):
    """Before: C=1 and C=4 rows looked identical (no concurrency or rate column)."""
    assert "C" not in header(format_table(cells))  # no load point: no empty columns
    loaded = pd.concat([cells.assign(concurrency=1, request_rate=float("inf")),
                        cells.assign(concurrency=4, request_rate=2.0)], ignore_index=True)
    table = format_table(loaded)
    cols = header(table)
    assert cols[cols.index("B") + 1:cols.index("B") + 3] == ["C", "rate"]
    rows = [r.split() for r in table.splitlines()[1:] if r.startswith("coding")]
    assert sorted((r[cols.index("C")], r[cols.index("rate")]) for r in rows) == [("1", "-"), ("4", "2")]
    assert widest(table) <= WIDTH


def test_problem_columns_appear_when_a_cell_shows_the_problem(cells):
    assert not {"loops", "match"} & set(header(format_table(cells)))
    bad = cells.assign(degenerate_frac=[0.5] + [0.0] * (len(cells) - 1), greedy_match_rate=0.9)
    assert {"loops", "match"} <= set(header(format_table(bad)))


def test_run_takes_wide_as_its_own_option():
    argv, own = split_run_argv(["--wide", "dataset=smoke"])
    assert own.wide and argv == ["dataset=smoke"]


def test_a_sweep_over_context_lengths_shows_the_bucket_in_size_order(cells):
    one = cells.iloc[:1]
    assert "context" not in header(format_table(cells.assign(context_bucket="1k")))  # one bucket: no column
    swept = pd.concat([one.assign(context_bucket=b) for b in ("32k", "1k", "16k", "8k")], ignore_index=True)
    table = format_table(swept)
    assert header(table)[1] == "context"
    assert [line.split()[1] for line in table.splitlines()[1:5]] == ["1k", "8k", "16k", "32k"]
