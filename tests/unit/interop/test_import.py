"""speedbench import on real files of `vllm bench serve` and AIPerf 0.13 (tests/data/interop/README.md says
which commands produced them): the cells carry what each tool printed, the speedup interval comes from the
paired bootstrap on the per-request data, summaries alone give no interval, and a bad file or a
mismatched pair is one line naming the file and the field, exit 2, nothing written."""
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from speedbench import metrics
from speedbench.interop import importer
from speedbench.interop.model import InputFileError
from speedbench.results import ResultsStore

DATA = Path(__file__).resolve().parents[2] / "data" / "interop"
VB = {c: (DATA / f"vllm-bench-baseline-c{c}.json", DATA / f"vllm-bench-spec-c{c}.json") for c in (2, 4)}
AP = (DATA / "aiperf-baseline-c4", DATA / "aiperf-spec-c4")
LABELS = importer.Labels(drafter="tiny_draft_small", run_id="t")


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "speedbench.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


def _cell(pair, tmp_path):
    (cell,) = importer.import_pairs([pair], tmp_path / "out", LABELS)
    return cell


def test_vllm_bench_pair_carries_what_it_printed(tmp_path):
    cell = _cell(VB[4], tmp_path)
    # printed by vllm bench serve (README): median/P99 TTFT 42.13/72.79, median/P99 TPOT 6.89/9.28, AL 2.11
    assert (round(cell.ttft_ms_p50_spec, 2), round(cell.ttft_ms_p99_spec, 2)) == (42.13, 72.79)
    assert (round(cell.tpot_ms_p50_spec, 2), round(cell.tpot_ms_p99_spec, 2)) == (6.89, 9.28)
    assert round(cell.al, 2) == 2.11 and len(cell.accepted_per_pos) == 4 and cell.num_speculative_tokens == 4
    assert cell.source == "vllm bench serve 0.32.0+cpu" and cell.concurrency == 4 and cell.n_requests == 16
    # one benchmark run a side is one window of a load point: no interval (issue 48 item 3), never [s, s]
    store = ResultsStore(tmp_path / "out")
    req = store.requests()
    assert len(req) == 32 and set(req["role"]) == {"baseline", "spec"}
    assert np.isfinite(cell.speedup) and cell.speedup_windows == 1
    assert np.isnan(cell.speedup_ci_low) and np.isnan(cell.speedup_ci_high)
    assert not cell.stable and "one repeat" in cell.unstable_reason
    # the records give back the printed percentiles (np.percentile, as vllm bench): the reader kept every request
    spec = req[req["role"] == "spec"]
    assert np.percentile(spec["tpot"] * 1e3, 50) == pytest.approx(cell.tpot_ms_p50_spec, rel=1e-9)
    assert np.percentile(spec["ttft"] * 1e3, 99) == pytest.approx(cell.ttft_ms_p99_spec, rel=1e-9)


def test_aiperf_pair_carries_what_it_printed(tmp_path):
    cell = _cell(AP, tmp_path)
    # printed by AIPerf (README): TTFT p50/p99 369.20/439.19, ITL (TPOT) p50/p99 0.00/9.49, AL 2.22 (2.36 per request)
    assert (round(cell.ttft_ms_p50_spec, 2), round(cell.ttft_ms_p99_spec, 2)) == (369.20, 439.19)
    assert (round(cell.tpot_ms_p50_spec, 2), round(cell.tpot_ms_p99_spec, 2)) == (0.00, 9.49)
    assert round(cell.al, 2) == 2.22 and round(cell.al_request_mean, 2) == 2.36
    assert cell.source == "aiperf 0.13.0" and cell.n_requests == 16 and cell.num_speculative_tokens == 4
    # per-request counters: speedbench's pooled AL over the records is AIPerf's token-weighted AL
    spec = ResultsStore(tmp_path / "out").requests().query("role == 'spec'")
    assert 1 + spec["accepted"].sum() / spec["n_drafts"].sum() == pytest.approx(cell.al, rel=1e-12)
    assert sum(cell.accepted_hist) == spec["n_drafts"].sum()


def test_summary_only_has_no_interval_and_is_never_stable(tmp_path):
    paths = []
    for p in VB[4]:
        data = json.loads(p.read_text())
        for k in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times",
                  "generated_texts", "errors"):
            data.pop(k)
        paths.append(tmp_path / p.name)
        paths[-1].write_text(json.dumps(data))
    cell = _cell(tuple(paths), tmp_path)
    assert cell.unstable_reason == importer.SUMMARY_ONLY and not cell.stable
    assert math.isnan(cell.speedup_ci_low) and math.isnan(cell.speedup_ci_high)
    assert round(cell.tpot_ms_p50_spec, 2) == 6.89 and round(cell.al, 2) == 2.11


def _refused(tmp_path, base, spec, *needles):
    out = tmp_path / "never"
    r = cli("import", "--pair", base, spec, "--out", out)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and all(n in lines[0] for n in needles), r.stderr
    assert not out.exists()
    return lines[0]


def test_mismatched_pair_is_refused_naming_the_field(tmp_path):
    _refused(tmp_path, VB[2][0], VB[4][1], "vllm-bench-spec-c4.json", "'max_concurrency'")
    _refused(tmp_path, VB[4][0], AP[1], "field 'tool'")
    other = json.loads(VB[4][1].read_text())
    other["temperature"] = "1.0"
    (tmp_path / "t1.json").write_text(json.dumps(other))
    _refused(tmp_path, VB[4][0], tmp_path / "t1.json", "t1.json", "'temperature'")
    _refused(tmp_path, VB[4][0], VB[4][0], "no speculative-decoding section")  # baseline twice


def test_malformed_and_truncated_files_are_one_line_errors(tmp_path):
    text = VB[4][1].read_text()
    (tmp_path / "cut.json").write_text(text[: len(text) // 2])
    _refused(tmp_path, VB[4][0], tmp_path / "cut.json", "cut.json", "truncated or malformed")
    bad = json.loads(text)
    bad["median_tpot_ms"] = "fast"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    _refused(tmp_path, VB[4][0], tmp_path / "bad.json", "bad.json", "'median_tpot_ms'", "must be a number")
    bad = json.loads(text)
    bad["itls"] = bad["itls"][:3]
    (tmp_path / "short.json").write_text(json.dumps(bad))
    _refused(tmp_path, VB[4][0], tmp_path / "short.json", "short.json", "'itls'")
    folder = tmp_path / "aiperf-cut"
    folder.mkdir()
    (folder / "profile_export_aiperf.json").write_text((AP[1] / "profile_export_aiperf.json").read_text())
    lines = (AP[1] / "profile_export.jsonl").read_text().splitlines()
    (folder / "profile_export.jsonl").write_text("\n".join(lines[:-1] + [lines[-1][:40]]))
    _refused(tmp_path, AP[0], folder, "profile_export.jsonl", f"line {len(lines)}")


def test_a_bad_second_pair_writes_nothing(tmp_path):
    with pytest.raises(InputFileError):
        importer.import_pairs([VB[4], (VB[2][0], VB[4][1])], tmp_path / "out", LABELS)
    assert not (tmp_path / "out").exists()


def test_report_gate_schedule_capacity_run_on_an_imported_folder(tmp_path):
    vb, ap = tmp_path / "vllm-bench", tmp_path / "aiperf"
    for out, pairs in ((vb, [VB[2], VB[4]]), (ap, [AP])):
        r = cli("import", *[a for pair in pairs for a in ("--pair", *pair)], "--drafter", "tiny_draft_small", "--out", out)
        assert r.returncode == 0, r.stderr
        assert len(ResultsStore(out).cells()) == len(pairs)
        gate = cli("gate", "--current", out, "--baseline", out)  # an imported run against itself
        assert gate.returncode == 0 and "PASS" in gate.stdout, gate.stdout + gate.stderr
    # one folder per sweep (schedule refuses two tools' cells at one load, as it refuses two backends)
    for args in (("report", vb, ap, "--out", tmp_path / "report"), ("capacity", vb, "--tpot-ms", "20")):
        done = cli(*args)
        assert done.returncode == 0, (args, done.stderr[-2000:])
    # one benchmark run a side is one window per load point: no interval, so no K (issue 48 items 2-3), said in one line
    done = cli("schedule", vb)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "a load point needs two windows" in done.stderr.strip().splitlines()[-1]
    assert (tmp_path / "report" / "report.md").stat().st_size > 0
