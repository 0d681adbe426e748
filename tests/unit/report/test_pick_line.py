"""The run's last line restates the report's *What to pick*: the same pick, speedup and interval."""
from __future__ import annotations

from pathlib import Path

from speedbench.report.common import spec_cells
from speedbench.report.pick import pick_lines
from speedbench.report.summary import config_table, recommend
from speedbench.results.load import load

BASELINE = Path(__file__).resolve().parents[3] / "results" / "baselines" / "ci-default"


def test_the_pick_line_is_the_reports_pick():
    data = load([BASELINE])
    spec = spec_cells(data.ok)
    picks = recommend(spec, config_table(spec, data.overall), False)
    lines = pick_lines(BASELINE)
    assert len(lines) == len(picks) >= 1
    for line, (_, row) in zip(lines, picks.iterrows()):
        assert f"speedup {row['speedup']:.2f} {row['interval']}" in line, (line, row.to_dict())
        assert line.endswith("on mini") or " on mini " in line, line
        if row["pick"].startswith("none (plain"):
            assert line.startswith("nothing beats plain decoding (best: ngram D=4 "), line
        elif row["pick"].startswith(("tie", "none with confidence", "no verdict")):
            assert line.startswith("undecided: best ") and row["pick"] in line, line
        else:
            assert line.startswith(f"pick: {row['pick']} "), line


def test_a_folder_the_report_cannot_read_gets_one_line_not_a_crash(tmp_path):
    from speedbench.run.output import picks

    (line,) = picks(tmp_path / "nothing-here")
    assert line.startswith("pick: n/a (the report could not read ") and "nothing-here" in line, line
