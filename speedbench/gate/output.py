"""The gate's verdict for people (a table) and for CI systems (JSON, JUnit XML)."""
from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from dataclasses import asdict
from pathlib import Path

from .core import (BAD, DETECT_POWER, EXIT_INCONCLUSIVE, EXIT_NOTHING_GATED, EXIT_PASS, INCONCLUSIVE, INFO, INSUFFICIENT, NA,
                   PROMPTS_DIFFER, GateReport)
from ..results.store import atomic_write_text


def _num(v: float, fmt: str = ".3f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def _pct(v: float) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.1%}"


def detection_line(report: GateReport) -> str:
    """What this run could have caught: the detectable loss of each gated pooled (or per-cell) metric."""
    parts = []
    for metric in report.config.rules:
        rows = [c for c in report.checks if c.metric == metric and c.verdict not in (INFO, NA, INSUFFICIENT, PROMPTS_DIFFER)
                and math.isfinite(c.detectable_loss)]
        pooled = [c for c in rows if c.cell_id == "ALL"]
        if pooled:
            parts.append(f"{metric} {_pct(pooled[0].detectable_loss)} (all cells pooled)")
        elif rows:
            parts.append(f"{metric} {_pct(min(c.detectable_loss for c in rows))}-{_pct(max(c.detectable_loss for c in rows))}"
                         " (per cell)")
    if not parts:
        return ""
    return (f"could detect: a loss of {', '.join(parts)} in {DETECT_POWER:.0%} of runs at {report.config.confidence:.0%} "
            "confidence, from this run's own noise; smaller losses pass unseen")


def speed_line(report: GateReport) -> str:
    """How fast the machine ran the same no-speculation steps in the current run against the baseline run."""
    r = report.step_ratio
    if not math.isfinite(r):
        return ""
    how = "slower" if r > 1 else "faster"
    return (f"machine speed: the current run's no-speculation steps took {r:.2f}x the baseline run's ({abs(r - 1):.0%} "
            f"{how}); speedups shift with machine speed (drafting and bookkeeping cost the same on a faster machine, "
            "the forward pass less): compare runs measured on one machine, close in time")


RERUN = ("measure both on one machine, one run after the other: bash scripts/gate-ci.sh (it re-measures the "
         "baseline's commit here as the reference), or speedbench run the baseline's code and this one back to back "
         "and gate the two folders (docs/ci-gate.md, \"Same-machine gate\")")


def inconclusive_line(report: GateReport) -> str:
    """The last line of an inconclusive verdict: what could not be measured, and what to do."""
    checks = report.inconclusive
    machine = any("machine speed:" in c.note for c in checks)
    why = ("the machine ran the no-speculation steps at another speed in the two runs" if machine
           else "unstable cells: the loss is within their own noise")
    return (f"INCONCLUSIVE: {len(checks)} speedup check(s) not measured ({why}; no regression is claimed, "
            f"AL is judged as usual); {RERUN}")


def format_report(report: GateReport) -> str:
    conf = f"{report.config.confidence:.0%}"
    head = (f"{'cell':<16} {'case':<34} {'metric':<8} {'baseline':>9} {'current':>9} {'ratio':>7} {conf + ' CI':>17} "
            f"{'min ok':>7} {'detects':>7} {'n':>4}  verdict")
    lines = [f"speedbench gate: {report.current} vs baseline {report.baseline}", head, "-" * len(head)]
    for c in report.checks:
        ci = f"[{_num(c.low)}, {_num(c.high)}]"
        lines.append(
            f"{c.cell_id:<16} {c.label[:34]:<34} {c.metric:<8} {_num(c.baseline):>9} {_num(c.current):>9} "
            f"{_num(c.ratio):>7} {ci:>17} {_num(1 - c.tolerance, '.2f'):>7} {_pct(c.detectable_loss):>7} {c.n_requests:>4}  "
            f"{c.verdict.upper() if c.verdict in (*BAD, INCONCLUSIVE) else c.verdict}{'  (' + c.note + ')' if c.note else ''}"
        )
    for cell in report.missing:
        lines.append(f"MISSING in current: {cell}")
    for cell in report.new:
        lines.append(f"new in current (not gated): {cell}")
    for cell in report.prompts_differ:
        lines.append(f"PROMPTS DIFFER (not compared): {cell}")
    n_bad = sum(c.verdict in BAD for c in report.checks)
    if report.missing:
        tail = f"MISMATCH: {len(report.missing)} baseline cell(s) missing from the current run (same config? same run settings?)"
    elif report.prompts_differ:
        tail = (f"MISMATCH: prompts differ in {len(report.prompts_differ)} cell(s): same settings, other prompt text "
                "than the baseline's, so AL and speedup are not compared (no regression is claimed); "
                "measure the baseline on these prompts, or restore them")
    elif not any(c.cell_id != "ALL" for c in report.checks):
        tail = "MISMATCH: no cell in common between baseline and current (cell ids hash the settings; compare like with like)"
    elif n_bad:
        tail = f"FAIL: {n_bad} check(s) regressed beyond tolerance (ratio's upper bound < min ok)"
    elif report.exit_code == EXIT_INCONCLUSIVE:
        tail = inconclusive_line(report)
    elif report.exit_code == EXIT_NOTHING_GATED:
        tail = (f"NOTHING GATED: no check could be judged (every cell below min_requests={report.config.min_requests} "
                "or without a usable measurement); a regression would have passed unseen. Run more requests per cell, "
                "or accept this with --allow-nothing-gated / allow_nothing_gated: true")
    elif report.nothing_gated:
        tail = "PASS (nothing gated: allowed by allow_nothing_gated)"
    else:
        tail = "PASS"
    notes = [detection_line(report), speed_line(report) if "speedup" in report.config.rules else ""]
    return "\n".join(lines + [n for n in notes if n] + [tail])


def to_dict(report: GateReport) -> dict:
    return {
        "verdict": report.verdict,
        "exit_code": report.exit_code,
        "baseline": report.baseline,
        "current": report.current,
        "config": asdict(report.config),
        "checks": [asdict(c) for c in report.checks],
        "could_detect": detection_line(report),
        "step_ratio": report.step_ratio,
        "missing_in_current": report.missing,
        "new_in_current": report.new,
        "prompts_differ": report.prompts_differ,
    }


def write_json(report: GateReport, path: Path) -> None:
    def clean(v):
        return None if isinstance(v, float) and math.isnan(v) else v

    data = to_dict(report)
    data["checks"] = [{k: clean(v) for k, v in c.items()} for c in data["checks"]]
    atomic_write_text(Path(path), json.dumps(data, indent=2))


def write_junit(report: GateReport, path: Path) -> None:
    """One test case per (cell, metric); a missing cell is an error case."""
    suite = ET.Element("testsuite", name="speedbench-gate")
    failures = errors = skipped = 0
    for c in report.checks:
        case = ET.SubElement(suite, "testcase", classname=f"speedbench.gate.{c.cell_id}", name=f"{c.metric}: {c.label}", time="0")
        text = (
            f"{c.metric}: baseline {_num(c.baseline)} current {_num(c.current)} ratio {_num(c.ratio)} "
            f"CI [{_num(c.low)}, {_num(c.high)}] tolerance {c.tolerance:g} n={c.n_requests} {c.note}".strip()
        )
        if c.verdict in BAD:
            failures += 1
            ET.SubElement(case, "failure", message=f"{c.metric} {c.verdict}", type=c.verdict).text = text
        elif c.verdict == INCONCLUSIVE:
            errors += 1
            ET.SubElement(case, "error", message=f"{c.metric} inconclusive: {c.note}", type=INCONCLUSIVE).text = text
        elif c.verdict in (INSUFFICIENT, NA, INFO, PROMPTS_DIFFER):
            skipped += 1
            ET.SubElement(case, "skipped", message=c.note or c.verdict)
        else:
            ET.SubElement(case, "system-out").text = text
    for cell in report.missing:
        errors += 1
        case = ET.SubElement(suite, "testcase", classname="speedbench.gate.missing", name=cell, time="0")
        ET.SubElement(case, "error", message="cell missing from the current run", type="mismatch").text = cell
    for cell in report.prompts_differ:
        errors += 1
        case = ET.SubElement(suite, "testcase", classname="speedbench.gate.prompts", name=cell, time="0")
        ET.SubElement(case, "error", message="prompts differ: not compared", type="mismatch").text = cell
    if report.exit_code == EXIT_NOTHING_GATED:
        errors += 1
        case = ET.SubElement(suite, "testcase", classname="speedbench.gate", name="something gated", time="0")
        ET.SubElement(case, "error", message="nothing gated: every cell below min_requests", type="nothing-gated")
    elif report.exit_code != EXIT_PASS and not (failures or errors):  # e.g. no cell in common
        errors += 1
        case = ET.SubElement(suite, "testcase", classname="speedbench.gate", name="cells match", time="0")
        ET.SubElement(case, "error", message="no cell in common", type="mismatch")
    suite.set("tests", str(len(suite)))
    for key, val in (("failures", failures), ("errors", errors), ("skipped", skipped)):
        suite.set(key, str(val))
    root = ET.Element("testsuites", name="speedbench-gate")
    root.append(suite)
    ET.indent(root)
    atomic_write_text(Path(path), ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n")
