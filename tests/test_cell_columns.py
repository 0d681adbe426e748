"""Output-length settings are cell columns and keep the report's groups apart; older folders still load (issue #15)."""
import json
from pathlib import Path

from speedbench.pipeline.cells import CellKey
from speedbench.report.common import setup_cols
from speedbench.results import ResultsStore
from tests.sweep_helpers import make_run
from tests.synthetic_results import make_results

REPO = Path(__file__).resolve().parents[1]


def test_runs_with_different_output_lengths_are_not_averaged_together(tmp_path):
    for n in (16, 32):
        make_results(tmp_path, run_id="mixed", max_new_tokens=n, mechanisms=(("ngram", "ngram", None),),
                     depths=(2,), batches=(1,))
    cells = ResultsStore(tmp_path / "mixed").cells()
    assert sorted(cells.max_new_tokens.unique()) == [16, 32]
    assert set(cells.ignore_eos) == {False} and (cells.batch_size_run == 1).all()
    assert "max_new_tokens" in setup_cols(cells)  # every report grouping keeps 16 and 32 apart


def test_cell_ids_are_unchanged_by_the_new_settings(tmp_path):
    run = make_run(tmp_path, "x")
    before = CellKey.for_run(run, "coding", "").cell_id
    run.dataset.on_too_long = "error"  # the default: same id as folders written before the key existed
    assert CellKey.for_run(run, "coding", "").cell_id == before
    run.dataset.on_too_long = "skip"  # changes which prompts run: a different cell
    assert CellKey.for_run(run, "coding", "").cell_id != before


OUTPUT_LENGTH_COLUMNS = ("max_new_tokens", "ignore_eos", "batch_size_run")


def test_a_folder_written_before_the_output_length_columns_still_loads(tmp_path):
    """A results folder from before these columns existed (built from the committed baseline by dropping them) loads."""
    source = REPO / "results" / "baselines" / "ci-default" / "cells"
    old = tmp_path / "old" / "cells"
    old.mkdir(parents=True)
    for path in sorted(source.glob("*.json")):
        row = json.loads(path.read_text())
        for column in OUTPUT_LENGTH_COLUMNS:
            row.pop(column, None)
        (old / path.name).write_text(json.dumps(row))
    assert "max_new_tokens" not in json.loads(next(old.glob("*.json")).read_text())
    cells = ResultsStore(old.parent).cells()
    assert len(cells) == len(list(source.glob("*.json")))
    assert "max_new_tokens" not in setup_cols(cells)
