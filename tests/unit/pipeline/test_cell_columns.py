"""Output-length settings are cell columns and keep the report's groups apart; older folders still load (issue #15)."""
import json
from pathlib import Path

from speedbench.pipeline.cells import CellKey
from speedbench.report.common import setup_cols
from speedbench.results import ResultsStore
from tests.support.sweep_helpers import make_run
from tests.support.synthetic_results import make_results

REPO = Path(__file__).resolve().parents[3]


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


def test_prediction_from_a_separately_timed_split_is_filled(tmp_path):
    """An engine that times its split in a separate pass (vLLM on CUDA) still gets ``speedup_predicted``.

    The cell's steps carry acceptance but no per-step times (NaN), and the split arrives in
    ``extra.timed_split``: the prediction then uses the measured tokens per step, which the
    row builder used to drop before the split columns were filled (NaN prediction).
    """
    import math

    from speedbench.backends.base import GenerateOutput
    from speedbench.pipeline.cells import assemble_cell
    from speedbench.records import RequestRecord, StepRecord

    nan = float("nan")

    def request(role, n_steps, drafted, accepted):
        return RequestRecord(request_id="r0", category="coding", context_bucket="", entropy_tier="", role=role,
                             prompt_tokens=8, n_tokens=12, output_ids=tuple(range(12)), ttft=0.01,
                             tpot=0.004 if role == "spec" else 0.006, e2e=0.06, n_steps=n_steps,
                             n_drafts=n_steps if drafted else 0, drafted=drafted, accepted=accepted)

    def steps(n, d, acc):
        return [StepRecord(request_id="r0", step=i, batch_index=0, drafted=d, accepted=acc, emitted=acc + 1,
                           t_draft=nan, t_verify=nan, t_accept=nan, t_step=nan, verify_tokens=1 + d, iteration=i)
                for i in range(n)]

    split = {"span_error": 0.01}
    base = GenerateOutput([request("baseline", 12, 0, 0)], steps(12, 0, 0), wall_s=0.1,
                          extra={"timed_split": {**split, "split_ms": {"draft": 0.0, "verify": 5.0, "accept": 0.5,
                                                                       "other": 1.0}}})
    spec = GenerateOutput([request("spec", 4, 8, 8)], steps(4, 2, 2), wall_s=0.1,
                          extra={"timed_split": {**split, "split_ms": {"draft": 1.0, "verify": 6.0, "accept": 0.5,
                                                                       "other": 1.0}}})
    key = CellKey.for_run(make_run(tmp_path, "x"), "coding", "")
    cell = assemble_cell(key, base, spec, warmup_s=0.0, device="cpu", n_gpus=1)
    assert cell.t_verify_ms == 6.0 and cell.t_verify_ms_baseline == 5.0
    assert math.isfinite(cell.speedup_predicted)
    # (T_verif(B) + T_other) * AL / (T_verif(B(1+D)) + T_draft + T_other'): verify with its accept, 1 ms other each
    assert abs(cell.speedup_predicted - (5.5 + 1.0) * 3 / (7.5 + 1.0)) < 1e-9


def test_every_cell_column_is_declared_once_and_a_failed_cell_holds_the_declared_defaults(tmp_path):
    """CellResult composes the column groups (speedbench.columns): no field of a group is declared again
    in CellResult or in another group, and a cell that measured nothing is exactly the groups' defaults."""
    import math
    from dataclasses import MISSING, fields

    from speedbench import columns
    from speedbench.pipeline.cells import failed_cell
    from speedbench.records import CellIdentity, CellResult

    owners: dict[str, str] = {}
    for group in (CellIdentity, *columns.GROUPS):
        for f in fields(group):
            assert f.name not in owners, f"{f.name} declared in {owners.get(f.name)} and {group.__name__}"
            owners[f.name] = group.__name__
    own = set(CellResult.__annotations__)  # what CellResult itself declares
    assert not own & set(owners), sorted(own & set(owners))
    assert {f.name for f in fields(CellResult)} == own | set(owners)
    for group in columns.GROUPS:
        assert all(f.default is not MISSING or f.default_factory is not MISSING for f in fields(group)), group
    cell = failed_cell(CellKey.for_run(make_run(tmp_path, "x"), "coding", ""), "boom", "cpu", 0)
    assert cell.status == "failed" and cell.error == "boom" and cell.n_requests == 0
    for group in columns.GROUPS:
        for f in fields(group):
            got, want = getattr(cell, f.name), f.default
            assert (math.isnan(got) and math.isnan(want)) if isinstance(want, float) and math.isnan(want) else got == want, f.name
