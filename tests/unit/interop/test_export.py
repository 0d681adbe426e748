"""speedbench export on cells imported from the real `vllm bench serve` and AIPerf files (tests/data/interop):
SPEED-Bench run folders that the tool's folder rule takes, under the field names its source writes
(NVIDIA Model-Optimizer examples/specdec_bench: metrics/timing.py, metrics/acceptance_rate.py, utils.dump_env,
upload_to_s3._is_run_dir/_discover_runs/_check_provenance, run_utils.resolve_run_save_dir), InferenceX YAML
that a YAML parser reads back to the measured AL with its notes, CSV that pandas reads back one row per cell,
and one-line errors (exit 2, nothing written) for what cannot be exported."""
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from speedbench.interop import export, importer
from speedbench.results import ResultsStore

DATA = Path(__file__).resolve().parents[2] / "data" / "interop"
VB = [(DATA / f"vllm-bench-baseline-c{c}.json", DATA / f"vllm-bench-spec-c{c}.json") for c in (2, 4)]
AP = (DATA / "aiperf-baseline-c4", DATA / "aiperf-spec-c4")
LABELS = importer.Labels(drafter="tiny_draft_small", run_id="t")
SENTINELS = ("configuration.json", "timing.json", "acceptance_rate.json")  # upload_to_s3._RUN_SENTINELS
# the tool's names: Timing.process_final, AcceptanceRate.process_final/_process_lengths, dump_env + run.py's arguments
TIMING_KEYS = {"Output TPS", "Output TPS/gpu", "E2E Request Time", "TTFT Time", "Request Generation Step Time",
               "Request Generation Tokens Per Second", "Number of Output Tokens"}
STATS_KEYS = {"min", "max", "mean", "std", "quantiles"}
ACCEPT_KEYS = {"Request_AL", "Average_AL", "Acceptance_Length_Histogram", "Conditional_Acceptance_Rate",
               "Joint_Acceptance_Rate"}
CONFIG_KEYS = {"engine", "engine_version", "speculative_algorithm", "model_dir", "draft_model_dir", "draft_length",
               "concurrency", "dataset", "num_requests", "output_length", "temperature", "tp_size", "gpu",
               "python_version", "argv", "container_image", "checkpoint", "timestamp"}


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "speedbench.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=600, env=env)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("imported") / "vb"
    importer.import_pairs(VB, out, LABELS)
    return out


def _runs(root: Path) -> list[Path]:
    """The run folders the SPEED-Bench upload script finds (its _is_run_dir and _discover_runs, flat or sweep)."""
    is_run = lambda d: any((d / f).exists() for f in SENTINELS)  # noqa: E731
    if is_run(root):
        return [root]
    found = []
    for child in sorted(p for p in root.iterdir() if p.is_dir()):
        found += [child] if is_run(child) else [g for g in sorted(child.iterdir()) if g.is_dir() and is_run(g)]
    return found


def test_specdec_bench_folders_follow_the_tools_rule_and_names(imported, tmp_path, monkeypatch):
    monkeypatch.setenv("CONTAINER_IMAGE", "example/image:1")
    written = export.export([str(imported)], "specdec_bench", tmp_path / "sb")
    cells = ResultsStore(imported).cells()
    assert sorted(written) == _runs(tmp_path / "sb") and len(written) == len(cells) == 2  # one run folder per cell
    assert [p.name for p in written] == ["000_speed_c2", "001_speed_c4"] or all(
        p.name.startswith(f"{i:03d}_") and p.name.endswith(f"_c{c}") for i, (p, c) in enumerate(zip(written, (2, 4))))
    for run, (_, cell) in zip(written, cells.sort_values("concurrency").iterrows()):
        assert {p.name for p in run.iterdir()} == {*SENTINELS, "responses.jsonl"}
        config = json.loads((run / "configuration.json").read_text())
        assert CONFIG_KEYS <= set(config), CONFIG_KEYS - set(config)
        assert config["container_image"]  # upload_to_s3._check_provenance refuses a run without it
        assert config["draft_length"] == cell["num_speculative_tokens"] and config["concurrency"] == cell["concurrency"]
        (timing,) = json.loads((run / "timing.json").read_text())  # a list of one dict per run (Metric.write)
        assert {"Output TPS", "Output TPS/gpu", "TTFT Time", "E2E Request Time"} <= set(timing) <= TIMING_KEYS
        for name in set(timing) - {"Output TPS", "Output TPS/gpu"}:
            assert set(timing[name]) == STATS_KEYS and set(timing[name]["quantiles"]) == {"0.25", "0.5", "0.75"}
            float(timing[name]["mean"])  # %.4f strings
        (accept,) = json.loads((run / "acceptance_rate.json").read_text())
        assert set(accept) == ACCEPT_KEYS
        joint = list(accept["Joint_Acceptance_Rate"].values())
        assert joint[0] == pytest.approx(1.0) and all(a >= b for a, b in zip(joint, joint[1:]))
        lines = (run / "responses.jsonl").read_text().splitlines()
        assert len(lines) == cell["n_requests"] and {"question_id", "turns", "choices"} <= set(json.loads(lines[0]))
    monkeypatch.delenv("CONTAINER_IMAGE")
    again = export.export([str(imported)], "specdec_bench", tmp_path / "no-image")
    assert json.loads((again[0] / "configuration.json").read_text())["container_image"] is None  # never made up


def test_inferencex_yaml_round_trips_to_the_measured_al(imported, tmp_path):
    (path,) = export.export([str(imported)], "inferencex", tmp_path / "ix")
    cells = ResultsStore(imported).cells()
    data = yaml.safe_load(path.read_text())
    (target,) = data
    (k,) = data[target]["thinking_off"]
    weights = cells["n_requests"].astype(float)
    assert k == 4 and data[target]["thinking_off"][4] == round(float((cells.al * weights).sum() / weights.sum()), 2)
    assert "requests" in path.read_text() and "speedup interval" in path.read_text()


def test_inferencex_notes_al_not_monotone_in_k_and_unstable_cells(imported, tmp_path):
    cells = ResultsStore(imported).cells()
    two = cells.copy()  # corner case: the same cells at K=2 and K=4, K=4's AL lower, one of them unstable
    two.loc[two.index[0], ["num_speculative_tokens", "al", "stable"]] = [2, 2.5, True]
    two.loc[two.index[1], ["num_speculative_tokens", "al", "stable", "unstable_reason"]] = [4, 2.1, False, "noisy"]
    (path,) = export.write_inferencex(two, pd.DataFrame(), {}, tmp_path / "ix")
    text = path.read_text()
    assert yaml.safe_load(text)[next(iter(yaml.safe_load(text)))]["thinking_off"] == {2: 2.5, 4: 2.1}
    assert "not monotone" in text and "unstable" in text and text.startswith("#")
    assert "# NOTE: K=4 from unstable cells; K=4 below K=2" in text


def test_csv_reads_back_one_row_per_cell(imported, tmp_path):
    (path,) = export.export([str(imported)], "csv", tmp_path / "out.csv")
    back, cells = pd.read_csv(path), ResultsStore(imported).cells()
    assert len(back) == len(cells) and sorted(back.cell_id) == sorted(cells.cell_id) and back.cell_id.is_unique
    for col in ("al", "ttft_ms_p50_spec", "tpot_ms_p99_spec", "concurrency", "source"):
        assert list(back.sort_values("cell_id")[col]) == pytest.approx(list(cells.sort_values("cell_id")[col])) \
            if col != "source" else list(back.sort_values("cell_id")[col]) == list(cells.sort_values("cell_id")[col])
    assert json.loads(back.accepted_per_pos.iloc[0])  # lists as JSON text


def test_aiperf_cells_export_too(tmp_path):
    importer.import_pairs([AP], tmp_path / "ap", LABELS)
    for fmt in export.WRITERS:
        assert export.export([str(tmp_path / "ap")], fmt, tmp_path / fmt), fmt


def test_what_cannot_be_exported_is_one_line_exit_2_nothing_written(imported, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    corrupt = tmp_path / "corrupt"
    importer.import_pairs(VB[:1], corrupt, LABELS)
    (cell_file,) = (corrupt / "cells").iterdir()
    cell_file.write_bytes(cell_file.read_bytes()[:200])  # a truncated cell file
    for bad, names in ((tmp_path / "missing", "missing"), (empty, "empty"), (corrupt, str(cell_file))):
        out = tmp_path / f"out-{bad.name}"
        r = cli("export", bad, "--format", "csv", "--out", out)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
        assert names in lines[0] and not out.exists()
    r = cli("export", imported, "--format", "nope", "--out", tmp_path / "x")
    assert r.returncode == 2 and "--format" in r.stderr and not (tmp_path / "x").exists()
