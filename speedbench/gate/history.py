"""``speedbench history``: where a series of gated runs across commits changed, and by how much.

A gate compares two runs; a regression that creeps in over several commits, each step below what
one pair detects, passes every one of them. The history keeps the series (one results folder per
gated run, e.g. CI's ``run/ci-default`` of every commit) and looks for change points in it, per
cell and pooled (the geometric mean over cells, as the gate pools), for speedup and AL.

Reading: every folder under DIR that has ``cells/`` is a run; its ``provenance.json`` gives the
commit (``git.sha``) and the time (``created_utc``) that order the series. A run without them is
an error naming the file (exit 2): a series in the wrong order would put changes in the wrong place.
Derived cells (``category=all``, pooled from the category cells) are skipped, as the gate skips them.

Detection (the method of Apache Otava / Hunter, Fleming et al. 2023, "Hunter: Using Change Point
Detection to Hunt for Performance Regressions": split, then merge by a t-test): candidates come from
binary segmentation of the log values (``ruptures.Binseg``, least-squares cost: a shift of the mean)
with up to ``max_candidates`` change points and at least ``min_size`` runs per segment; then the
weakest candidate (largest p of Welch's t-test between the segments on its two sides,
``scipy.stats.ttest_ind``) is removed and its neighbours re-tested, until every one left has
p < ``max_pvalue``. Each change's size is the ratio of the geometric means after / before, with the
Welch interval of the difference of the log means (``confidence`` of the gate config). A segment
without spread on either side (greedy AL: the same every run) is exact: a change of any size there is
certain (p = 0, the interval is the point).

Verdict per change, as the gate's: ``regressed`` when the interval's upper end is below 1 - tolerance
(the metric's tolerance in the gate config, or ``--tolerance``), ``improved`` when its lower end is
above 1 + tolerance, else ``change`` (found, not beyond the tolerance with confidence); a change in a
series the config does not gate (per-cell speedup under ``per_cell: false``) is ``info``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .core import CELL_KEYS, GateConfig, _derived
from ..columns import load_label
from ..records import STATUS_OK
from ..results.layout import RunFolder
from ..results.store import ResultsReadError, read_cell_file

# What the history reads of a run: its provenance's commit and time, and per cell these fields (with the
# gate's own, so that a trimmed run can be gated too: scripts/gate_history_series.py keeps only these).
PROVENANCE_FIELDS = ("created_utc", "git", "run_id")
_HISTORY_KEYS = ("cell_id", "setting_id", "run_id", "status", "derived", "category", "target", "drafter", "method",
                 "num_speculative_tokens", "backend", "dataset", "concurrency", "request_rate", "n_requests",
                 "n_repeats", "speedup", "speedup_ci_low", "speedup_ci_high", "al", "t_step_ms_baseline",
                 "t_step_ms_spec", "prompts_digest")
CELL_FIELDS = (*_HISTORY_KEYS, *(k for k in CELL_KEYS if k not in _HISTORY_KEYS))
METRICS = ("speedup", "al")
POOLED = "ALL"
REGRESSED, IMPROVED, CHANGE, INFO = "regressed", "improved", "change", "info"


class HistoryInputError(ValueError):
    """A history folder or run the history cannot read (names the file)."""


@dataclass(frozen=True)
class HistoryRun:
    path: Path
    sha: str
    dirty: bool
    time: str  # created_utc, ISO 8601
    values: dict[tuple[str, str], float]  # (metric, cell key) -> value; cell key POOLED for the pooled row
    labels: dict[str, str]  # cell key -> label
    step_ms: float  # geometric mean no-speculation step time over cells (the machine's speed), NaN if unknown

    @property
    def name(self) -> str:
        return self.path.name if self.path.name != "ci-default" else f"{self.path.parent.name}/{self.path.name}"


@dataclass(frozen=True)
class Change:
    metric: str
    cell: str
    label: str
    index: int  # 0-based position in the series of the first run after the change
    before: tuple[int, int]  # [start, stop) positions of the runs on the left side
    after: tuple[int, int]
    ratio: float  # geometric mean after / before
    low: float
    high: float
    pvalue: float
    tolerance: float
    verdict: str


@dataclass
class HistoryReport:
    runs: list[HistoryRun]
    config: GateConfig
    changes: list[Change] = field(default_factory=list)
    series: list[tuple[str, str, str]] = field(default_factory=list)  # (metric, cell, label) looked at
    too_short: bool = False

    @property
    def exit_code(self) -> int:
        return 1 if any(c.verdict == REGRESSED for c in self.changes) else 0


def _label(row: dict) -> str:
    return f"{row.get('category') or row.get('cell_id')}{load_label(row)}"


def read_run(root: Path) -> HistoryRun:
    """One gated run: commit and time from its provenance, speedup and AL per cell and pooled."""
    prov_path = RunFolder(root).provenance_path
    if not prov_path.exists():
        raise HistoryInputError(f"{prov_path}: missing: the run's commit and time are unknown (a run of speedbench writes it)")
    try:
        prov = json.loads(prov_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise HistoryInputError(f"{prov_path}: unreadable provenance ({type(exc).__name__}: {exc})") from exc
    if not isinstance(prov, dict):
        raise HistoryInputError(f"{prov_path}: provenance must be a JSON object")
    sha = (prov.get("git") or {}).get("sha") if isinstance(prov.get("git"), dict) else None
    if not prov.get("created_utc"):
        raise HistoryInputError(f"{prov_path}: no created_utc: the run's time is unknown")
    if not sha:
        raise HistoryInputError(f"{prov_path}: no git.sha: the run's commit is unknown (measured outside a git checkout?)")
    values, labels, logs, steps = {}, {}, {m: [] for m in METRICS}, []
    for path in RunFolder(root).cell_paths():
        try:
            row = read_cell_file(path)
        except ResultsReadError as exc:
            raise HistoryInputError(str(exc)) from exc
        if _derived(row) or row.get("status") != STATUS_OK:
            continue
        key = str(row.get("setting_id") or row.get("cell_id") or path.stem)
        labels[key] = _label(row)
        for metric in METRICS:
            v = row.get(metric)
            if isinstance(v, (int, float)) and math.isfinite(v) and v > 0:
                values[(metric, key)] = float(v)
                logs[metric].append(math.log(v))
        step = row.get("t_step_ms_baseline")
        if isinstance(step, (int, float)) and math.isfinite(step) and step > 0:
            steps.append(math.log(step))
    for metric, vals in logs.items():
        if vals:
            values[(metric, POOLED)] = math.exp(sum(vals) / len(vals))
    return HistoryRun(Path(root), str(sha), bool(prov["git"].get("dirty")), str(prov["created_utc"]), values, labels,
                      math.exp(sum(steps) / len(steps)) if steps else math.nan)


def find_runs(directory: Path, depth: int = 3) -> list[Path]:
    """Every run folder (one with ``cells/``) at most ``depth`` levels under ``directory``."""
    directory = Path(directory)
    if not directory.is_dir():
        raise HistoryInputError(f"{directory}: not a folder")
    found, level = [], [directory]
    for _ in range(depth + 1):
        nxt = []
        for folder in level:
            if RunFolder(folder).has_cells:
                found.append(folder)
            else:
                nxt += sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
        level = nxt
    return found


def read_history(directory: Path) -> list[HistoryRun]:
    """The runs under ``directory`` in the order they were measured (provenance time, then commit)."""
    runs = [read_run(p) for p in find_runs(directory)]
    if not runs:
        raise HistoryInputError(f"{directory}: no results folder under it (a folder with cells/)")
    return sorted(runs, key=lambda r: (r.time, r.sha, str(r.path)))


def _compare(left: np.ndarray, right: np.ndarray, confidence: float) -> tuple[float, float, float, float]:
    """(ratio, low, high, p) of exp(mean(right) - mean(left)) by Welch's t-test on log values."""
    from scipy import stats

    diff = float(right.mean() - left.mean())
    if np.ptp(left) == 0 and np.ptp(right) == 0:  # exact on both sides (deterministic AL)
        return math.exp(diff), math.exp(diff), math.exp(diff), (1.0 if diff == 0 else 0.0)
    if len(left) < 2 or len(right) < 2:
        return math.exp(diff), math.nan, math.nan, 1.0
    res = stats.ttest_ind(right, left, equal_var=False)
    ci = res.confidence_interval(confidence)
    return math.exp(diff), math.exp(ci.low), math.exp(ci.high), float(res.pvalue)


def _candidates(x: np.ndarray, min_size: int, max_candidates: int) -> list[int]:
    """Binary segmentation's change points (positions of the first run after each)."""
    import ruptures

    n_bkps = min(max_candidates, len(x) // min_size - 1)
    if n_bkps < 1 or np.ptp(x) == 0:
        return []
    algo = ruptures.Binseg(model="l2", min_size=min_size, jump=1).fit(x.reshape(-1, 1))
    while n_bkps >= 1:
        try:
            return [b for b in algo.predict(n_bkps=n_bkps) if b < len(x)]
        except ruptures.exceptions.BadSegmentationParameters:  # that many segments of min_size do not fit
            n_bkps -= 1
    return []


def change_points(x: np.ndarray, min_size: int, max_candidates: int, max_pvalue: float,
                  confidence: float) -> list[tuple[int, tuple[int, int], tuple[int, int], float, float, float, float]]:
    """Hunter's merge over binary segmentation's candidates: (index, before, after, ratio, low, high, p) each."""
    cps = _candidates(x, min_size, max_candidates)

    def tested(points: list[int]):
        bounds = [0, *points, len(x)]
        return [(bounds[i], (bounds[i - 1], bounds[i]), (bounds[i], bounds[i + 1]),
                 *_compare(x[bounds[i - 1]:bounds[i]], x[bounds[i]:bounds[i + 1]], confidence))
                for i in range(1, len(bounds) - 1)]

    results = tested(cps)
    while results:
        weakest = max(range(len(results)), key=lambda i: results[i][6])
        if results[weakest][6] < max_pvalue:
            break
        cps.pop(weakest)
        results = tested(cps)
    return results


def analyse(runs: list[HistoryRun], cfg: GateConfig, min_size: int = 3, max_candidates: int = 4,
            max_pvalue: float = 0.01, tolerance: float | None = None) -> HistoryReport:
    """Change points of every metric the config gates, per cell and pooled."""
    report = HistoryReport(runs, cfg)
    if len(runs) < 2 * min_size:
        report.too_short = True
        return report
    labels = {k: v for r in runs for k, v in r.labels.items()}
    for metric in (m for m in METRICS if m in cfg.rules):
        rule = cfg.rules[metric]
        tol = rule.tolerance if tolerance is None else tolerance
        for cell in [POOLED, *sorted(labels, key=lambda k: labels[k])]:
            idx = [i for i, r in enumerate(runs) if (metric, cell) in r.values]
            if len(idx) < 2 * min_size:
                continue
            label = "all cells pooled" if cell == POOLED else labels[cell]
            report.series.append((metric, cell, label))
            x = np.log([runs[i].values[(metric, cell)] for i in idx])
            gated = cell == POOLED and cfg.pooled or cell != POOLED and rule.per_cell
            for at, before, after, ratio, low, high, p in change_points(x, min_size, max_candidates, max_pvalue,
                                                                       cfg.confidence):
                if not gated:
                    verdict = INFO
                elif high < 1 - tol:
                    verdict = REGRESSED
                elif low > 1 + tol:
                    verdict = IMPROVED
                else:
                    verdict = CHANGE
                report.changes.append(Change(metric, cell, label, idx[at], (idx[before[0]], idx[before[1] - 1] + 1),
                                             (idx[after[0]], idx[after[1] - 1] + 1), ratio, low, high, p, tol, verdict))
    return report
