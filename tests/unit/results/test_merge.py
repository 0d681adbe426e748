"""`speedbench merge`: results of many jobs into one folder; conflicting duplicates refused."""
import json
import os
import shutil

import pandas as pd

from speedbench import cli
from speedbench.results import ResultsStore
from tests.support.sweep_helpers import copy_results


def split(src, dst_a, dst_b):
    """Two job-like folders from one: the first cell in ``dst_a``, the others in ``dst_b``."""
    for dst in (dst_a, dst_b):
        shutil.copytree(src, dst)
    ids = sorted(p.stem for p in (src / "cells").glob("*.json"))
    for cid in ids[1:]:  # a derived overall row (category=all) has a cell file only
        for part, ext in (("cells", "json"), ("requests", "parquet"), ("steps", "parquet")):
            (dst_a / part / f"{cid}.{ext}").unlink(missing_ok=part != "cells")
    for part, ext in (("cells", "json"), ("requests", "parquet"), ("steps", "parquet")):
        (dst_b / part / f"{ids[0]}.{ext}").unlink(missing_ok=part != "cells")
    for dst in (dst_a, dst_b):
        (dst / "cells.parquet").unlink()
    return ids


def edit_cell(folder, cell_id, **changes):
    path = folder / "cells" / f"{cell_id}.json"
    row = json.loads(path.read_text())
    row.update(changes)
    path.write_text(json.dumps(row))
    return path


def test_merge_joins_job_folders_and_rebuilds_the_table(tmp_path):
    src = copy_results(tmp_path / "src")
    ids = split(src, tmp_path / "a", tmp_path / "b")
    out = tmp_path / "out"
    assert cli.main(["merge", str(out), str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    merged, original = ResultsStore(out), ResultsStore(src)
    assert sorted(merged.cells().cell_id) == ids
    assert len(pd.read_parquet(out / "cells.parquet")) == len(ids)
    measured = [i for i in ids if (src / "requests" / f"{i}.parquet").exists()]
    assert len(measured) == len(ids) - 1  # 3 category cells and their derived overall row
    for part in ("requests", "steps"):
        assert sorted(p.stem for p in (out / part).glob("*.parquet")) == measured
    pd.testing.assert_frame_equal(merged.requests(), original.requests())
    prov = merged.provenance()
    assert prov["config"]["run_id"] == "shared" and len(prov["merged_from"]) == 2
    # merging the same folders again is a no-op: identical duplicates are not conflicts
    assert cli.main(["merge", str(out), str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert sorted(merged.cells().cell_id) == ids


def test_conflicting_duplicates_are_refused_unless_prefer_newest(tmp_path, capsys):
    a = copy_results(tmp_path / "a")
    b = copy_results(tmp_path / "b")
    cid = sorted(p.stem for p in (a / "cells").glob("*.json"))[0]
    newer = edit_cell(b, cid, al=1.5)
    os.utime(newer, (newer.stat().st_atime + 60, newer.stat().st_mtime + 60))
    out = tmp_path / "out"
    assert cli.main(["merge", str(out), str(a), str(b)]) == 3
    err = capsys.readouterr().err
    assert cid in err and "--prefer newest" in err
    assert not (out / "cells").exists()  # a refused merge writes nothing
    assert cli.main(["merge", str(out), str(a), str(b), "--prefer", "newest"]) == 0
    table = ResultsStore(out).cells().set_index("cell_id")
    assert table.loc[cid, "al"] == 1.5 and len(table) == 4  # 3 category cells + the derived overall row


def test_an_ok_cell_wins_over_a_failed_attempt_of_it(tmp_path):
    a = copy_results(tmp_path / "a")
    b = copy_results(tmp_path / "b")
    cid = sorted(p.stem for p in (a / "cells").glob("*.json"))[0]
    ok_al = json.loads((a / "cells" / f"{cid}.json").read_text())["al"]
    edit_cell(a, cid, status="failed", error="OOM", al=float("nan"))
    out = tmp_path / "out"
    assert cli.main(["merge", str(out), str(a), str(b)]) == 0
    row = ResultsStore(out).cells().set_index("cell_id").loc[cid]
    assert row.status == "ok" and row.al == ok_al


def test_merge_refuses_a_folder_that_is_not_a_results_folder(tmp_path, capsys):
    assert cli.main(["merge", str(tmp_path / "out"), str(tmp_path)]) == 2
    assert "not a results folder" in capsys.readouterr().err


def fail_again(folder, cell_id, error):
    """A failed re-measurement of a measured cell, through the store (resume=false): the cell stays,
    the attempt is a line in failures.jsonl."""
    from dataclasses import replace

    from speedbench.records import STATUS_FAILED, CellResult, from_row

    store = ResultsStore(folder)
    measured = from_row(CellResult, store.cell(cell_id))
    assert not store.write_cell(replace(measured, status=STATUS_FAILED, error=error))
    return [json.loads(line) for line in store.failures_path.read_text().splitlines()]


def failures(folder):
    path = ResultsStore(folder).failures_path
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_merge_keeps_the_failed_attempts_of_every_folder(tmp_path, capsys):
    """Issue 54 finding 2: merge copied cells, requests and steps but not failures.jsonl."""
    src = copy_results(tmp_path / "src")
    ids = split(src, tmp_path / "a", tmp_path / "b")
    a_lines = fail_again(tmp_path / "a", ids[0], "server down")
    b_lines = fail_again(tmp_path / "b", ids[1], "OOM")
    out = tmp_path / "out"
    assert cli.main(["merge", str(out), str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    merged = failures(out)
    assert sorted(merged, key=json.dumps) == sorted(a_lines + b_lines, key=json.dumps)
    for line in merged:  # each names the measured cell it kept, in the merged folder
        assert (out / line["kept"]).is_file() and line["cell_id"] in ResultsStore(out).cells().cell_id.tolist()
    # merging again, or a folder holding the same lines (a copy of a job's folder), adds nothing twice
    shutil.copytree(tmp_path / "a", tmp_path / "a_copy")
    assert cli.main(["merge", str(out), str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "a_copy")]) == 0
    assert sorted(failures(out), key=json.dumps) == sorted(merged, key=json.dumps)


def test_two_records_of_one_attempt_that_differ_are_refused_like_cells(tmp_path, capsys):
    a = copy_results(tmp_path / "a")
    cid = sorted(p.stem for p in (a / "cells").glob("*.json"))[0]
    (line,) = fail_again(a, cid, "server down")
    b = tmp_path / "b"
    shutil.copytree(a, b)
    ResultsStore(b).failures_path.write_text(json.dumps({**line, "error": "edited"}) + "\n")
    os.utime(ResultsStore(b).failures_path, ns=(ResultsStore(a).failures_path.stat().st_mtime_ns + 10**9,) * 2)
    out = tmp_path / "out"
    assert cli.main(["merge", str(out), str(a), str(b)]) == 3
    err = capsys.readouterr().err
    assert cid in err and "failures.jsonl" in err and "--prefer newest" in err
    assert not out.exists() or not (out / "failures.jsonl").exists()  # a refused merge writes nothing
    assert cli.main(["merge", str(out), str(a), str(b), "--prefer", "newest"]) == 0
    assert [f["error"] for f in failures(out)] == ["edited"]
