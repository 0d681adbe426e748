"""Faults of the results folder, through the real CLI on synthetic-backend runs (nothing loads):
a write that fails keeps every cell already written; a corrupt or non-numeric cell file, a symlink
loop and a read-only report folder are one line naming the file or folder, exit 2, for every command."""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from speedbench.cli import main

SMALL = ["backend=synthetic", "dataset=smoke", "dataset.categories=[coding,math]", "max_new_tokens=8", "warmup_batches=0"]


def run(results: Path, run_id: str, *extra: str) -> int:
    return main(["run", *SMALL, f"results_dir={results}", f"run_id={run_id}", "hydra/job_logging=disabled", *extra])


def one_line(capsys, code: int, *names: str) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err[-2000:]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    """One finished synthetic run (two category cells and their overall row); copy before changing it."""
    results = tmp_path_factory.mktemp("faults")
    assert run(results, "ok") == 0
    return results / "ok"


def copy(done: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "results" / done.name
    shutil.copytree(done, dst)
    return dst


def test_a_table_that_cannot_be_written_leaves_the_measured_cell_ok(tmp_path, capsys):
    results = tmp_path / "results"
    (results / "full" / "cells.parquet").mkdir(parents=True)  # a real OSError (EISDIR) at each table rebuild
    code = run(results, "full", "dataset.categories=[coding]")
    line = one_line(capsys, code, str(results / "full"), "cell table")
    assert "Is a directory" in line
    (cell,) = [json.loads(p.read_text()) for p in (results / "full" / "cells").glob("*.json")]
    assert cell["status"] == "ok" and cell["error"] == ""  # never overwritten as failed
    assert (results / "full" / "requests" / f"{cell['cell_id']}.parquet").is_file()
    assert (results / "full" / "steps" / f"{cell['cell_id']}.parquet").is_file()


def test_run_id_latest_is_refused_and_latest_never_points_to_itself(tmp_path, capsys):
    results = tmp_path / "results"
    assert run(results, "first", "dataset.categories=[coding]") == 0
    assert os.readlink(results / "latest") == "first"
    before = (results / "first" / "provenance.json").read_text()
    capsys.readouterr()
    one_line(capsys, run(results, "latest"), "run_id='latest'", "reserved")
    assert os.readlink(results / "latest") == "first"  # the previous run's pointer and provenance untouched
    assert (results / "first" / "provenance.json").read_text() == before
    from speedbench.run.output import point_latest

    (results / "latest").unlink()
    (results / "latest").mkdir()  # a folder named latest (written before the refusal): never linked to itself
    assert point_latest(results / "latest") is None and not (results / "latest").is_symlink()


@pytest.mark.parametrize("command", ["report", "gate", "merge", "wandb-log"])
def test_a_latest_symlink_loop_is_one_line(tmp_path, capsys, command):
    loop = tmp_path / "latest"
    os.symlink("latest", loop)
    argv = {"report": ["report", str(loop)], "gate": ["gate", "--baseline", str(loop), "--current", str(loop)],
            "merge": ["merge", str(tmp_path / "out"), str(loop)], "wandb-log": ["wandb-log", str(loop), "--mode", "disabled"]}
    one_line(capsys, main(argv[command]), str(loop), "symlink loop")


def _corrupt(folder: Path) -> Path:
    path = sorted((folder / "cells").glob("*.json"))[0]
    path.write_text(path.read_text()[:40])  # a truncated cell file
    return path


@pytest.mark.parametrize("command", ["resume", "report", "merge", "plan", "wandb-log"])
def test_a_truncated_cell_file_is_one_line_naming_it_for_every_command(done, tmp_path, capsys, command):
    folder = copy(done, tmp_path)
    bad = _corrupt(folder)
    if command == "resume":
        code = run(folder.parent, folder.name)
    else:
        argv = {"report": ["report", str(folder), "--no-plots"], "merge": ["merge", str(tmp_path / "merged"), str(folder)],
                "plan": ["plan", "--results", str(folder), "--model-shape", "llama-3.1-8b"],
                "wandb-log": ["wandb-log", str(folder), "--mode", "disabled"]}[command]
        code = main(argv)
    one_line(capsys, code, str(bad), "unreadable cell file")


def test_report_names_a_non_numeric_metric(done, tmp_path, capsys):
    folder = copy(done, tmp_path)
    for field in ("al", "speedup"):
        path = sorted((folder / "cells").glob("*.json"))[0]
        row = json.loads(path.read_text())
        row[field] = "fast"
        path.write_text(json.dumps(row))
        one_line(capsys, main(["report", str(folder), "--no-plots"]), str(path), f"{field} must be a number")
        row[field] = 1.5
        path.write_text(json.dumps(row))


def test_report_into_a_folder_that_takes_no_files_says_so_and_names_out(done, tmp_path, capsys):
    folder = copy(done, tmp_path)
    (folder / "report").write_text("in the way")  # running as root ignores permission bits; a file in the way does not
    line = one_line(capsys, main(["report", str(folder), "--no-plots"]), str(folder / "report"), "not writable", "--out DIR")
    assert "File exists" in line or "Not a directory" in line
    if os.geteuid() != 0:  # a read-only results folder, as a user sees it
        (folder / "report").unlink()
        folder.chmod(0o555)
        try:
            one_line(capsys, main(["report", str(folder), "--no-plots"]), "not writable", "--out DIR")
        finally:
            folder.chmod(0o755)
    assert main(["report", str(folder), "--no-plots", "--out", str(tmp_path / "elsewhere")]) == 0
    assert (tmp_path / "elsewhere" / "report.md").is_file()


def _prompt_run(results: Path, prompts: Path, run_id: str):
    from speedbench.config import BackendConfig, DatasetConfig, ModelConfig, RunConfig, SamplingConfig
    from speedbench.drafters.registry import make_drafter

    return RunConfig(target=ModelConfig(name="tiny", path="random:tiny-target"), drafter=make_drafter("ngram", 2),
                     dataset=DatasetConfig(name="prompts", path=str(prompts)), backend=BackendConfig(name="synthetic"),
                     sampling=SamplingConfig(), batch_size=1, max_new_tokens=8, results_dir=str(results), run_id=run_id,
                     warmup_batches=0)


def _write_prompts(path: Path, text: str) -> Path:
    path.write_text("".join(json.dumps({"question_id": f"{cat}-{i}", "category": cat, "turns": [f"{text} {cat} {i}"]}) + "\n"
                            for cat in ("coding", "math") for i in range(2)))
    return path


def test_a_prompt_file_edited_in_place_gives_new_cells_and_the_gate_says_prompts_differ(tmp_path, capsys, caplog):
    from speedbench.pipeline import runner

    results, prompts = tmp_path / "results", _write_prompts(tmp_path / "p.jsonl", "Write a function")
    first = runner.run_cells(_prompt_run(results, prompts, "r"), progress=False)
    assert len(first) == 2 and all(c.prompts_digest and c.setting_id for c in first)
    shutil.copytree(results / "r", tmp_path / "baseline")
    _write_prompts(prompts, "Prove a theorem")  # same path, same ids, new text
    import logging

    logging.getLogger(runner.__name__).disabled = False  # a Hydra run in this process may have disabled it
    with caplog.at_level(logging.WARNING, logger=runner.__name__):
        second = runner.run_cells(_prompt_run(results, prompts, "r"), progress=False)  # resume=True by default
    assert {c.cell_id for c in second}.isdisjoint({c.cell_id for c in first})  # not reused
    assert [c.setting_id for c in second] == [c.setting_id for c in first]
    assert all(a.prompts_digest != b.prompts_digest for a, b in zip(first, second))
    assert "measured these settings on other prompts" in caplog.text
    capsys.readouterr()
    code = main(["gate", "--baseline", str(tmp_path / "baseline"), "--current", str(results / "r"), "--config", "ci"])
    out = capsys.readouterr().out
    assert code == 3, out
    assert "prompts differ in 2 cell(s)" in out and "REGRESSED" not in out and "FAIL" not in out
    for a, b in zip(first, second):
        assert f"{a.cell_id} -> {b.cell_id}" in out  # the cells, named


def test_a_folder_written_before_the_digest_still_loads_and_gates(tmp_path, capsys):
    """Older folders: cell_id is the settings' hash, no setting_id or prompts_digest: matched, compared."""
    from speedbench.pipeline import runner

    results, prompts = tmp_path / "results", _write_prompts(tmp_path / "p.jsonl", "Write a function")
    runner.run_cells(_prompt_run(results, prompts, "new"), progress=False)
    old = tmp_path / "old"
    shutil.copytree(results / "new", old)
    for path in sorted((old / "cells").glob("*.json")):
        row = json.loads(path.read_text())
        if row.get("derived"):
            path.unlink()
            continue
        setting = row.pop("setting_id")
        row.pop("prompts_digest")
        for part in ("requests", "steps"):
            (old / part / f"{row['cell_id']}.parquet").rename(old / part / f"{setting}.parquet")
        path.unlink()
        (old / "cells" / f"{setting}.json").write_text(json.dumps({**row, "cell_id": setting}))
    assert main(["report", str(old), "--no-plots"]) == 0
    capsys.readouterr()
    code = main(["gate", "--baseline", str(old), "--current", str(results / "new"), "--config", "ci"])
    out = capsys.readouterr().out
    assert code == 0 and "PASS" in out and "prompts differ" not in out.lower(), out


# issue 54, finding 1: G1 over cells whose setup columns differ, some of them unstable

def _run_on(results: Path, run_id: str, dataset: str, *extra: str) -> Path:
    argv = [a for a in SMALL if not a.startswith("dataset=")] + [f"dataset={dataset}"]
    assert main(["run", *argv, f"results_dir={results}", f"run_id={run_id}", "hydra/job_logging=disabled", *extra]) == 0
    return results / run_id


def _g1(out: Path) -> tuple[dict, str]:
    md = (out / "report.md").read_text()
    return json.loads((out / "report.json").read_text())["g1"], md[md.index("## G1"):md.index("## G2")]


def test_report_over_two_runs_differing_in_dataset_one_all_unstable_marks_its_rows(tmp_path, capsys):
    one = _run_on(tmp_path / "results", "one", "smoke", "protocol.min_repeats=1", "protocol.max_repeats=1")
    two = _run_on(tmp_path / "results", "two", "mini")
    assert not any(json.loads(p.read_text())["stable"] for p in (one / "cells").glob("*.json"))  # one repeat: unstable
    capsys.readouterr()
    code = main(["report", str(one), str(two), "--no-plots", "--out", str(tmp_path / "report")])
    assert code == 0, capsys.readouterr().err[-3000:]
    g1, md = _g1(tmp_path / "report")
    assert {r["dataset"] for r in g1["ratios"]} == {"mini"}  # the verdict reads the stable run only
    assert {r["dataset"] for r in g1["unstable_ratios"]} == {"smoke"}  # the unstable run's ratios, kept apart
    assert all(math.isfinite(r["ratio"]) for r in g1["ratios"] + g1["unstable_ratios"])
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and "smoke" in ln]
    assert rows and all("unstable" in ln for ln in rows), md  # shown, and marked
    assert not any("unstable" in ln for ln in md.splitlines() if ln.startswith("| ") and "mini" in ln), md


@pytest.mark.parametrize("lacks", [("stable", "unstable_reason"), ("dataset", "stable", "unstable_reason")])
def test_report_over_a_folder_mixing_older_cells_and_new_ones(tmp_path, capsys, lacks):
    old = _run_on(tmp_path / "results", "old", "smoke")
    new = _run_on(tmp_path / "results", "new", "mini")
    for path in (old / "cells").glob("*.json"):  # cells written before these columns, into the new run's folder
        row = json.loads(path.read_text())
        for key in lacks:
            row.pop(key)
        (new / "cells" / path.name).write_text(json.dumps(row))
        for part in ("requests", "steps"):
            if (old / part / f"{path.stem}.parquet").is_file():
                shutil.copy(old / part / f"{path.stem}.parquet", new / part)
    capsys.readouterr()
    code = main(["report", str(new), "--no-plots", "--out", str(tmp_path / "report")])
    assert code == 0, capsys.readouterr().err[-3000:]
    g1, md = _g1(tmp_path / "report")
    # older cells count as stable (nothing says otherwise): every cell in the verdict, none marked
    assert g1["unstable_ratios"] == [] and "unstable" not in md
    if "dataset" not in lacks:
        assert {r["dataset"] for r in g1["ratios"]} == {"smoke", "mini"}
