"""The report from a synthetic results folder: every guideline section's numbers, checked against
values computed here independently (from the raw cell JSON files and the synthetic model)."""
import json
import math
import statistics
from collections import defaultdict

import pytest

from speedbench.report import build_report

from tests.support.synthetic_results import BATCHES, DEPTHS, OPTIONS, PER_CATEGORY, raw_cells, shared_results

A, BB = OPTIONS["verify_a_ms"], OPTIONS["verify_b_ms"]
DRAFT_MS = {"tiny_draft": 0.4, "ngram": 0.01}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    run = shared_results(tmp_path_factory)
    out = tmp_path_factory.mktemp("report")
    files = build_report([run], out)
    values = json.loads(files.json.read_text())
    return run, files, values, raw_cells(run)


def by_config(cells, key):
    """AL: the arithmetic mean over a configuration's cells; speedup: the geometric mean (ratios)."""
    groups = defaultdict(list)
    for c in cells:
        groups[(c["drafter"], c["num_speculative_tokens"], c["batch_size"])].append(c[key])
    if key == "speedup":
        return {k: math.exp(sum(math.log(x) for x in v) / len(v)) for k, v in groups.items()}
    return {k: sum(v) / len(v) for k, v in groups.items()}


def test_files_are_written_and_html_is_self_contained(report):
    _, files, _, _ = report
    md, page = files.markdown.read_text(), files.html.read_text()
    for title in ("Summary", "G1", "G2", "G3", "G4", "G5"):
        assert f"## {title}" in md
    assert len(files.plots) >= 6 and all(p.exists() and p.stat().st_size > 1000 for p in files.plots)
    assert page.count("data:image/png;base64,") == len(files.plots)
    assert 'src="g' not in page  # no reference to a file beside the page
    assert "Synthetic backend" in md  # simulated numbers are never passed off as an engine's


def test_every_number_is_labelled(report):
    md = report[1].markdown.read_text()
    for line in md.splitlines():
        if line.startswith("| ") and "---" not in line and any(k in line for k in ("AL", "speedup", "ratio", "share")):
            if line.split("|")[1].strip() in ("mechanism", "B", "D", "context bucket", "category"):
                assert "(measured)" in line or "(modelled" in line, line


def test_summary_reads_each_configuration_from_its_all_row_and_picks_the_best(report):
    """One number for one thing: a configuration's AL, speedup and interval are its derived all row's
    (what the console prints on the all row), not a mean over its category cells."""
    run, _, values, cells = report
    derived = {(c["drafter"], c["num_speculative_tokens"], c["batch_size"]): c for c in raw_cells(run, derived=True)}
    al, sp = by_config(cells, "al"), by_config(cells, "speedup")
    rows = {(r["drafter"], r["num_speculative_tokens"], r["batch_size"]): r for r in values["summary"]["configs"]}
    assert set(rows) == set(al) == set(derived)
    for k, r in rows.items():
        d = derived[k]
        assert r["al"] == pytest.approx(d["al"]) and r["speedup"] == pytest.approx(d["speedup"])
        assert (r["speedup_low"], r["speedup_high"]) == pytest.approx((d["speedup_ci_low"], d["speedup_ci_high"]))
        assert r["source"] == "all row" and r["cells"] == len(set(c["category"] for c in cells))
    sp = {k: d["speedup"] for k, d in derived.items()}
    for rec in values["summary"]["recommendation"]:
        best = max((k for k in sp if k[2] == rec["B"]), key=lambda k: sp[k])
        assert rec["pick"] == f"{best[0]} D={best[1]}"
        assert rec["speedup"] == pytest.approx(sp[best])


def test_g1_ratios_match_the_synthetic_cost_model(report):
    _, _, values, cells = report
    ratios = {(r["batch_size"], r["num_speculative_tokens"]): r["ratio"] for r in values["g1"]["ratios"]}
    assert set(ratios) == {(b, d) for b in BATCHES for d in DEPTHS}
    for (b, d), ratio in ratios.items():
        rows = min(b, PER_CATEGORY)  # a static batch holds at most one category's requests
        assert ratio == pytest.approx((A + BB * rows * (1 + d)) / (A + BB * rows), rel=1e-9)
        ver = statistics.median(c["t_verify_ms"] for c in cells if (c["batch_size"], c["num_speculative_tokens"]) == (b, d))
        base = statistics.median(c["t_verify_ms_baseline"] for c in cells if (c["batch_size"], c["num_speculative_tokens"]) == (b, d))
        assert ratio == pytest.approx(ver / base)
    free = {r["batch_size"]: r for r in values["g1"]["nearly_free"]}
    for b in BATCHES:
        ok = [d for d in DEPTHS if ratios[(b, d)] <= 1.10]
        first_bad = next((d for d in DEPTHS if ratios[(b, d)] > 1.10), None)
        expect_free = max((d for d in DEPTHS if d < (first_bad or 99) and d in ok), default=None)
        got = free[b]["nearly free up to D"]
        assert (got is None or math.isnan(got)) if expect_free is None else got == expect_free
    assert free[1]["nearly free up to D"] == 2 and free[1]["stops being nearly free at D"] == 4


def test_g2_reads_g_from_the_target_config(report):
    _, _, values, _ = report
    tiny = values["g2"]["targets"]["tiny"]
    assert (tiny["n_heads"], tiny["n_kv_heads"], tiny["G"], tiny["D0"]) == (4, 2, 2, 63)
    for v in values["g2"]["verdicts"]["tiny"]:
        assert v["verdict"].startswith("untestable")  # D0 = 63 is far beyond the measured D <= 4
        assert 0 < v["attention share, D=0"] < 1


def test_g3_lists_tile_aligned_depths(report):
    assert report[2]["g3"]["targets"]["tiny"]["aligned"] == [127, 191, 255, 319]


def test_g4_rho_and_the_d_where_al_stops_paying(report):
    _, _, values, cells = report
    at1 = [c for c in cells if c["batch_size"] == 1]
    for row in values["g4"]["summary"]:
        mech = row["mechanism"]
        # synthetic model: draft c*D, verify a + b*1: rho = c / (a + b), exactly
        assert row["rho"] == pytest.approx(DRAFT_MS[mech] / (A + BB))
        al = by_config([c for c in at1 if c["drafter"] == mech], "al")
        score = {k[1]: v / (1 + row["rho"] * k[1]) for k, v in al.items()}
        assert row["D where AL stops paying (max AL/(1+rho D))"] == max(score, key=score.get)
        sp = by_config([c for c in at1 if c["drafter"] == mech], "speedup")
        assert row["measured best D"] == max(sp, key=sp.get)[1]


def test_g5_rankings(report):
    _, _, values, cells = report
    sp = by_config(cells, "speedup")
    for b in BATCHES:
        got = [r for r in values["g5"]["ranking"] if r["B"] == b]
        best = {m: max((v, k[1]) for k, v in sp.items() if k[0] == m and k[2] == b) for m in DRAFT_MS}
        order = sorted(best, key=lambda m: -best[m][0])
        assert [r["mechanism"] for r in got] == order
        assert [r["best D"] for r in got] == [best[m][1] for m in order]
        for row in values["g5"]["by_category"][str(b)]:
            for m in DRAFT_MS:
                expect = max(c["speedup"] for c in cells if c["drafter"] == m and c["batch_size"] == b
                             and c["category"] == row["category"])
                assert row[m] == pytest.approx(expect)
            top, second = sorted(DRAFT_MS, key=lambda m: -row[m])[:2]
            cell = max((c for c in cells if c["drafter"] == top and c["batch_size"] == b
                        and c["category"] == row["category"]), key=lambda c: c["speedup"])
            assert row["best's interval"] == f"[{cell['speedup_ci_low']:.3g}, {cell['speedup_ci_high']:.3g}]"
            if cell["speedup_ci_low"] > 1 and cell["speedup_ci_low"] > row[second]:  # excludes 1 and the runner-up
                assert row["winner"] == top
            elif cell["speedup_ci_high"] < 1:  # slower than plain decoding: no winner
                assert row["winner"].startswith("none pays")
            else:  # its interval holds 1 or the runner-up: a tie, never a winner
                assert row["winner"].startswith(f"tie: {top} ")


def test_g4_g5_name_no_winner_slower_than_plain_decoding(tmp_path):
    """Every mechanism 3-5x slower than plain decoding: G5 must not crown one per category ("What to pick": none),
    nor G4 read a best D without saying that none pays."""
    from tests.support.synthetic_results import make_results

    slow = {**OPTIONS, "draft_ms_by_method": {"ngram": 40.0, "draft_model": 60.0}}
    run = make_results(tmp_path, run_id="slow", depths=(2, 4), batches=(1,), options=slow)
    values = json.loads(build_report([run], tmp_path / "r", plots=False).json.read_text())
    assert all(c["speedup"] < 1 for c in raw_cells(run))
    rows = values["g5"]["by_category"]["1"]
    assert rows and all(r["winner"].startswith("none pays (best: ") for r in rows)
    assert all("slower than plain decoding" in r["winner"] for r in rows)
    assert all(p["pick"].startswith("none") for p in values["summary"]["recommendation"])  # the two agree
    md = (tmp_path / "r" / "report.md").read_text()
    assert "At B = 1 no mechanism beats plain decoding" in md
    assert md.count("No D pays: the best measured speedup is") == 2  # G4, each mechanism
    g2 = [r for rows in values["g2"]["verdicts"].values() for r in rows]
    assert g2 and all(r["verdict"].startswith("no D pays: the best measured D") for r in g2)  # G2 says so too
    g1 = values["g1"]["nearly_free"]
    assert g1 and all(math.isnan(r["recommended D (G1)"]) for r in g1)  # G1 recommends no D where none pays
    assert "At B = 1 no D pays" in md


def test_report_cli(report, tmp_path, capsys):
    from speedbench.cli import main

    run = report[0]
    assert main(["report", str(run), "--out", str(tmp_path / "r"), "--hardware", "h200"]) == 0
    out = capsys.readouterr().out
    assert "report.md" in out and "report.html" in out
    assert "h200 (spec sheet" in (tmp_path / "r" / "report.md").read_text()
    assert main(["report", str(tmp_path / "nothing-here")]) == 2


def test_overall_rows_are_shown_in_the_acceptance_section_and_left_out_of_the_means(report):
    run, files, values, cells = report
    overall = raw_cells(run, derived=True)
    assert overall and {c["category"] for c in overall} == {"all"}
    shown = {(r["drafter"], r["num_speculative_tokens"], r["batch_size"]): r for r in values["acceptance"]["overall"]}
    for c in overall:
        r = shown[(c["drafter"], c["num_speculative_tokens"], c["batch_size"])]
        assert r["al"] == pytest.approx(c["al"]) and r["al_request_mean"] == pytest.approx(c["al_request_mean"])
    assert all(c["category"] != "all" for c in cells)


def test_g5_draft_cost_vs_d_beside_the_serial_model(report):
    _, files, values, cells = report
    rows = values["g5"]["draft_cost"]
    draft, base, al = by_config(cells, "t_draft_ms"), by_config(cells, "t_verify_ms_baseline"), by_config(cells, "al")
    assert {(r["mechanism"], r["D"], r["B"]) for r in rows} == set(draft)
    for r in rows:
        key = (r["mechanism"], r["D"], r["B"])
        assert r["draft ms"] == pytest.approx(draft[key]) and r["AL"] == pytest.approx(al[key])
        assert r["O_d"] == pytest.approx(draft[key] / base[key])
        first = (r["mechanism"], min(DEPTHS), r["B"])
        assert r["rho*D"] == pytest.approx(draft[first] / base[first] / min(DEPTHS) * r["D"])
        # the synthetic drafters are serial (draft time c * D): measured O_d follows rho*D
        assert r["O_d"] == pytest.approx(r["rho*D"], rel=0.05)
        assert r["draft ms / draft ms at D_min"] == pytest.approx(r["D"] / min(DEPTHS), rel=0.05)
    assert "Draft cost vs D per mechanism" in files.markdown.read_text()
