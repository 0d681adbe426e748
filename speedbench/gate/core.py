"""``speedbench gate``: did AL or speedup regress between a baseline and a current results folder?

Cells are matched by ``setting_id`` (a hash of the cell's settings; ``cell_id`` in folders
written before it existed, where the two are the same hash). A matched pair whose prompt digests
differ (the prompt text changed) is not compared: it is listed as "prompts differ" (exit 3), never
called a regression; a side without a digest (an older folder) is unknown, not different.
A ratio that is not a finite number (a baseline speedup of 0 or below, a NaN) fails its check,
naming the cell: it is never a pass. For every matched cell
and every gated metric (AL, speedup) the gate estimates current / baseline with a paired
bootstrap over requests (``gate_stats``) and fails when the metric is worse beyond its
tolerance *with confidence*: the upper end of the interval is below ``1 - tolerance``.
A geometric mean over all cells is gated the same way (``per_cell: false`` on a metric gates
only that pooled row, for cells too small or too noisy alone). Tolerances live in ``conf/gate/``.

Exit codes: 0 pass; 1 a regression (or a cell that failed in the current run, or a ratio
that is not a finite number); 2 a usage or config error, or an input folder that cannot be read
(a corrupted cell file or request table, named); 3 cells that do not match (baseline cells
missing from the current run, matched cells whose prompts differ, or no common cells at all); 4 nothing was gated: every matched cell had fewer
requests than ``min_requests`` (or no usable measurement), so no check could fail; opt in to
accepting that with ``allow_nothing_gated: true`` in the gate config or ``--allow-nothing-gated``;
5 inconclusive: a speedup verdict the runs could not measure (``measurable``), and nothing regressed.

A speedup is a fact of the machine as well as of the code, so a speedup verdict is INCONCLUSIVE (never a
regression, never a pass) when
  * the machine ran the same no-speculation steps at another speed in the two runs: the step ratio
    (``step_ratio``, current / baseline) is beyond ``max_step_ratio`` either way, past the range over which
    the speed's effect on a speedup was measured (docs/ci-gate.md says how both numbers were chosen); or
  * within it, the verdict does not survive the machine's largest measured effect: the ratio's interval
    widened by ``max(r, 1/r) ** max_speed_elasticity`` (r the step ratio) both ways; or
  * a cell behind it is unstable (``evidence.is_stable``) and its regression (or improvement) does not
    survive that cell's own measurement noise (``speedup_noise``) added to the ratio's interval
    (``metrics.widen``, in quadrature; on the pooled row each cell's share of the geometric mean); an
    unstable cell with no noise estimate (one repeat) makes a regression inconclusive outright. A pass
    stays a pass: a wider interval only widens around it.
AL verdicts stay hard: greedy AL is a fact of the models and the code, not of the machine.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from . import stats as gate_stats
from .. import evidence
from ..columns import load_label
from ..paths import gate_conf_dir
from ..records import STATUS_OK
from ..results.layout import RunFolder
from ..results.store import ResultsReadError, read_cell_file

EXIT_PASS, EXIT_REGRESSION, EXIT_CONFIG, EXIT_MISMATCH, EXIT_NOTHING_GATED, EXIT_INCONCLUSIVE = 0, 1, 2, 3, 4, 5
GATE_CONF_DIR = gate_conf_dir()  # conf/gate/ of a checkout, speedbench/conf/gate of a wheel
PASS, IMPROVED, REGRESSED, FAILED, INSUFFICIENT, NA = "pass", "improved", "regressed", "failed", "insufficient", "n/a"
INFO = "info"  # estimated and shown, not gated (the metric is gated on the pooled row only)
PROMPTS_DIFFER = "prompts-differ"  # the two cells measured other prompt text: not compared (a mismatch)
INCONCLUSIVE = "inconclusive"  # a speedup verdict the runs could not measure (``measurable``): exit 5
MACHINE_BOUND_METRICS = ("speedup",)  # verdicts that move with the machine's speed (AL does not)
BAD = (REGRESSED, FAILED)
JUDGED = (PASS, IMPROVED, REGRESSED, FAILED)  # verdicts that could have failed the gate


class GateInputError(ValueError):
    """A results folder the gate cannot read (names the file)."""


class GateConfigError(ValueError):
    pass


@dataclass(frozen=True)
class MetricRule:
    tolerance: float  # allowed relative loss: fail when the ratio's upper bound < 1 - tolerance
    per_cell: bool = True  # false: gate only the geometric mean over cells (noisy small cells)


@dataclass(frozen=True)
class GateConfig:
    rules: dict[str, MetricRule]
    confidence: float = 0.95  # two-sided bootstrap percentile interval
    n_resamples: int = 2000
    seed: int = 0
    min_requests: int = 2  # fewer matched requests in a cell: reported, not gated
    pooled: bool = True  # also gate the geometric mean over all cells
    allow_nothing_gated: bool = False  # true: a run where no check was judged passes (exit 0)
    # How many percent a speedup moves per percent of machine speed (the share of a speculative step that
    # does not get faster with the machine, measured by scripts/speed_vs_speedup.py on repeated runs of
    # the benchmark). > 0: each speedup ratio is divided by (current / baseline no-speculation step
    # time) ** speed_elasticity, so a run on a slower or faster moment of the machine is compared as if
    # at the baseline run's speed. 0: ratios as measured.
    speed_elasticity: float = 0.0
    # A speedup verdict is INCONCLUSIVE when current / baseline no-speculation step time is beyond this factor
    # either way (above it, or below its inverse): past 1.6 no measurement says what the machine does to a
    # speedup (the elasticity below was measured over step times 1.49-2.42 ms, a range of 1.62x).
    max_step_ratio: float = 1.6
    # Within it, a speedup verdict must survive the machine's largest measured effect: its interval widened by
    # max(r, 1/r) ** max_speed_elasticity both ways (r the step ratio; 0.12: the steepest elasticity measured on
    # the CI benchmark, docs/ci-gate.md "Machine speed"; 0 turns the allowance off).
    max_speed_elasticity: float = 0.12


SCALARS = {"confidence": float, "n_resamples": int, "seed": int, "min_requests": int, "pooled": bool,
           "allow_nothing_gated": bool, "speed_elasticity": float, "max_step_ratio": float, "max_speed_elasticity": float}


def load_config(path_or_name: str | Path) -> GateConfig:
    """A gate config from a YAML path, or a name in ``conf/gate/`` (``default``, ``ci``)."""
    path = Path(path_or_name)
    if not path.exists() and (GATE_CONF_DIR / f"{path_or_name}.yaml").exists():
        path = GATE_CONF_DIR / f"{path_or_name}.yaml"
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise GateConfigError(f"gate config {path_or_name}: {exc}") from exc
    if not isinstance(data, dict):
        raise GateConfigError(f"gate config {path}: expected a mapping")
    rules, kwargs = {}, {}
    for key, value in data.items():
        if key in gate_stats.METRICS:
            if not isinstance(value, dict) or "tolerance" not in value or set(value) - {"tolerance", "per_cell"}:
                raise GateConfigError(f"gate config {path}: {key} must be {{tolerance: <fraction>, per_cell: <bool>}}, got {value!r}")
            tol, per_cell = value["tolerance"], value.get("per_cell", True)
            if not isinstance(tol, (int, float)) or not 0 <= tol < 1:
                raise GateConfigError(f"gate config {path}: {key}.tolerance must be in [0, 1), got {tol!r}")
            if not isinstance(per_cell, bool):
                raise GateConfigError(f"gate config {path}: {key}.per_cell must be true or false, got {per_cell!r}")
            rules[key] = MetricRule(float(tol), per_cell)
        elif key in SCALARS:
            if SCALARS[key] is bool and not isinstance(value, bool):
                raise GateConfigError(f"gate config {path}: {key} must be true or false, got {value!r}")
            try:
                kwargs[key] = SCALARS[key](value)
            except (TypeError, ValueError):
                raise GateConfigError(f"gate config {path}: {key} must be a {SCALARS[key].__name__}, got {value!r}") from None
        else:
            known = sorted([*gate_stats.METRICS, *SCALARS])
            raise GateConfigError(f"gate config {path}: unknown key {key!r}; known: {known}")
    if not rules:
        raise GateConfigError(f"gate config {path}: no metric to gate (add al: {{tolerance: ...}} or speedup: ...)")
    cfg = GateConfig(rules=rules, **kwargs)
    if not cfg.pooled and not all(r.per_cell for r in rules.values()):
        raise GateConfigError(f"gate config {path}: per_cell: false needs pooled: true (else the metric is never gated)")
    if not 0 <= cfg.speed_elasticity < 1:
        raise GateConfigError(f"gate config {path}: speed_elasticity must be in [0, 1), got {cfg.speed_elasticity!r}")
    if not cfg.max_step_ratio > 1:
        raise GateConfigError(f"gate config {path}: max_step_ratio must be above 1, got {cfg.max_step_ratio!r}")
    if not 0 <= cfg.max_speed_elasticity < 1:
        raise GateConfigError(f"gate config {path}: max_speed_elasticity must be in [0, 1), got {cfg.max_speed_elasticity!r}")
    if not 0.5 <= cfg.confidence < 1 or cfg.n_resamples < 100 or cfg.min_requests < 1:
        raise GateConfigError(f"gate config {path}: need 0.5 <= confidence < 1, n_resamples >= 100, min_requests >= 1")
    return cfg


@dataclass(frozen=True)
class Check:
    """One metric of one cell (or of all cells: ``cell_id == "ALL"``)."""

    cell_id: str
    label: str
    metric: str
    baseline: float
    current: float
    ratio: float
    low: float
    high: float
    tolerance: float
    n_requests: int
    verdict: str
    note: str = ""
    detectable_loss: float = math.nan  # the loss this check would catch 90% of the times (``detectable_loss``)


DETECT_POWER = 0.9  # the share of runs in which a loss of ``detectable_loss`` would be called a regression


def detectable_loss(low: float, high: float, tol: float, confidence: float, power: float = DETECT_POWER) -> float:
    """The smallest relative loss this check would call a regression in ``power`` of runs with its own noise.

    The interval is read as a normal interval of the log ratio (se = log(high / low) / (2 z)); a check
    regresses when its upper bound is below 1 - tol, so a true ratio r is caught with probability
    ``power`` when log r + (z + z_power) se < log(1 - tol): loss = 1 - (1 - tol) exp(-(z + z_power) se).
    NaN without a finite interval. A PASS says nothing of losses below this: the run was too noisy to see them."""
    from statistics import NormalDist

    if not (math.isfinite(low) and math.isfinite(high) and low > 0 and high >= low):
        return math.nan
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    se = math.log(high / low) / (2 * z)
    return 1.0 - (1.0 - tol) * math.exp(-(z + NormalDist().inv_cdf(power)) * se)


@dataclass
class GateReport:
    baseline: str
    current: str
    config: GateConfig
    checks: list[Check] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # "cell_id (label)" in baseline, absent from current
    new: list[str] = field(default_factory=list)  # in current only: not gated
    prompts_differ: list[str] = field(default_factory=list)  # "cell_id (label)": matched settings, other prompts
    # current / baseline no-speculation step time (geometric mean over matched ok cells): how much faster or
    # slower the machine ran the same forward passes. A speedup moves with it (the drafter's and the loop's
    # fixed cost weighs more on a faster machine), so a speedup ratio far from 1 beside a step ratio far
    # from 1 may be the machine's, not the code's. NaN where a side lacks the column.
    step_ratio: float = math.nan

    @property
    def nothing_gated(self) -> bool:
        """No check was judged: every cell was insufficient / n/a / info and no pooled row was judged."""
        return not any(c.verdict in JUDGED for c in self.checks)

    @property
    def inconclusive(self) -> list[Check]:
        """The checks whose verdict the runs could not measure (``measurable``)."""
        return [c for c in self.checks if c.verdict == INCONCLUSIVE]

    @property
    def exit_code(self) -> int:
        if self.missing or self.prompts_differ or not any(c.cell_id != "ALL" for c in self.checks):
            return EXIT_MISMATCH
        if any(c.verdict in BAD for c in self.checks):
            return EXIT_REGRESSION
        if self.inconclusive:
            return EXIT_INCONCLUSIVE
        if self.nothing_gated and not self.config.allow_nothing_gated:
            return EXIT_NOTHING_GATED
        return EXIT_PASS

    @property
    def verdict(self) -> str:
        if self.exit_code == EXIT_PASS and self.nothing_gated:
            return "pass-nothing-gated"
        return {EXIT_PASS: "pass", EXIT_REGRESSION: "regression", EXIT_MISMATCH: "mismatch",
                EXIT_NOTHING_GATED: "nothing-gated", EXIT_INCONCLUSIVE: "inconclusive"}[self.exit_code]


def label(row: dict) -> str:
    bucket = f"/{row['context_bucket']}" if row.get("context_bucket") else ""
    return (f"{row['drafter']} D={row['num_speculative_tokens']} B={row['batch_size']}{load_label(row)} "
            f"T={row['temperature']:g} {row['category']}{bucket}")


def judge(ratio: float, low: float, high: float, tol: float) -> str:
    if not all(math.isfinite(v) for v in (ratio, low, high)):  # no number to judge: never a pass
        return FAILED
    if high < 1.0 - tol:
        return REGRESSED
    if low > 1.0 + tol:
        return IMPROVED
    return PASS


def _requests(root: Path, cell_id: str) -> gate_stats.RequestArrays | None:
    path = RunFolder(root).requests_path(cell_id)
    if not path.exists():
        return None
    try:
        return gate_stats.RequestArrays.from_frame(pd.read_parquet(path))
    except Exception as exc:  # noqa: BLE001 - any read or schema failure makes the input unusable
        raise GateInputError(f"{path}: unreadable request table ({type(exc).__name__}: {exc})") from exc


CELL_KEYS = ("cell_id", "status", "drafter", "num_speculative_tokens", "batch_size", "temperature", "category",
             "n_requests")


def read_cells(root: Path, metrics) -> dict[str, dict]:
    """The cell rows of ``root`` by id; a file that is not a whole, well-formed cell is a ``GateInputError``."""
    rows: dict[str, dict] = {}
    for path in RunFolder(root).cell_paths():
        try:
            row = read_cell_file(path)
        except ResultsReadError as exc:
            raise GateInputError(str(exc)) from exc
        missing = [k for k in (*CELL_KEYS, *metrics) if k not in row]
        if missing:
            raise GateInputError(f"{path}: not a cell row, missing {missing}")
        if row["cell_id"] != path.stem:
            raise GateInputError(f"{path}: cell_id {row['cell_id']!r} does not match the file name")
        for key in metrics:
            value = row[key]
            if value is None:
                row[key] = math.nan
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                raise GateInputError(f"{path}: {key} must be a number, got {value!r}")
        rows[row["cell_id"]] = row
    return rows


def match_key(row: dict) -> str:
    """What the gate matches cells by: the settings' hash (``cell_id`` of folders written before it)."""
    return str(row.get("setting_id") or row["cell_id"])


def prompts_differ(b: dict, c: dict) -> bool:
    """Both cells carry a prompt digest and they differ (a missing digest is unknown, not different)."""
    db, dc = b.get("prompts_digest") or "", c.get("prompts_digest") or ""
    return bool(db and dc and db != dc)


def _check_cell(cfg: GateConfig, base_root: Path, cur_root: Path, b: dict, c: dict) -> list[tuple[Check, gate_stats.RatioEstimate | None]]:
    cid, lab = c["cell_id"], label(b)  # the current run's cell (its files); matched to ``b`` by setting_id
    out = []
    if prompts_differ(b, c):
        note = f"prompts differ (digest {b['prompts_digest']} -> {c['prompts_digest']}): not compared"
        for metric, rule in cfg.rules.items():
            out.append((Check(cid, lab, metric, b[metric], c[metric], math.nan, math.nan, math.nan, rule.tolerance, 0,
                              PROMPTS_DIFFER, note), None))
        return out
    if b["status"] != STATUS_OK or c["status"] != STATUS_OK:
        failed_now = b["status"] == STATUS_OK
        verdict, note = (FAILED, f"current cell failed: {c.get('error', '')}") if failed_now else (NA, "baseline cell failed")
        for metric, rule in cfg.rules.items():
            out.append((Check(cid, lab, metric, b[metric], c[metric], math.nan, math.nan, math.nan, rule.tolerance, 0, verdict, note), None))
        return out
    reqs_b, reqs_c = _requests(base_root, b["cell_id"]), _requests(cur_root, c["cell_id"])
    shaky = unstable_sides(b, c)
    for metric, rule in cfg.rules.items():
        if reqs_b is None or reqs_c is None:  # only the cell rows: a point comparison
            point_b, point_c = float(b[metric]), float(c[metric])
            ratio = point_c / point_b if point_b > 0 else math.nan
            est = gate_stats.RatioEstimate(point_b, point_c, ratio, math.nan, math.nan,
                                           int(min(b["n_requests"], c["n_requests"])), np.empty(0))
            note = "no per-request records: point estimate, no interval"
        else:
            seed = match_key(b)[:12]  # the settings' hash: the same draws as before cells carried a digest
            rng = np.random.default_rng([cfg.seed, int(seed, 16) if _is_hex(seed) else 0])
            est = gate_stats.compare(metric, reqs_b, reqs_c, cfg.confidence, cfg.n_resamples, rng)
            note = ""
            if metric == "speedup" and cfg.speed_elasticity > 0:
                est, note = speed_adjusted(est, step_ratio([(b, c)]), cfg.speed_elasticity)
        if math.isnan(est.baseline):
            verdict, note = NA, "no baseline measurement"
        elif math.isnan(est.current):
            verdict, note = REGRESSED, "no measurement in the current run"
        elif not (math.isfinite(est.ratio) and est.baseline > 0):  # e.g. a baseline speedup of 0 or below
            verdict, note = FAILED, (f"ratio not a finite number (baseline {est.baseline:g}, current {est.current:g}): "
                                     "cannot be judged")
        elif est.n_requests < cfg.min_requests:
            verdict, note = INSUFFICIENT, f"{est.n_requests} matched request(s) < min_requests={cfg.min_requests}"
        elif not rule.per_cell:
            verdict, note = INFO, f"not gated per cell ({metric}.per_cell=false): see ALL"
        elif reqs_b is None or reqs_c is None:  # a point without an interval: as exact as it is
            verdict = judge(est.ratio, est.ratio, est.ratio, rule.tolerance)
            if metric in MACHINE_BOUND_METRICS and verdict in (REGRESSED, IMPROVED):  # a timing's point is not exact
                verdict, note = INCONCLUSIVE, f"{note}: a {verdict} point of a timing is not measured"
        else:
            verdict = judge(est.ratio, est.low, est.high, rule.tolerance)
        note = "; ".join(n for n in (note, shaky) if n)
        check = Check(cid, lab, metric, est.baseline, est.current, est.ratio, est.low, est.high, rule.tolerance, est.n_requests,
                      verdict, note, detectable_loss(est.low, est.high, rule.tolerance, cfg.confidence))
        out.append((check, est if verdict in (PASS, IMPROVED, REGRESSED, INFO) else None))
    return out


def unstable_sides(b: dict, c: dict) -> str:
    """A verdict built on unstable cells says so (``evidence.is_stable``): which side's cell was unstable."""
    sides = [name for name, row in (("baseline", b), ("current", c)) if not evidence.is_stable(row)]
    return f"unstable {' and '.join(sides)} cell" if sides else ""


def _derived(row: dict) -> bool:
    v = row.get("derived", False)
    return bool(v) and not (isinstance(v, float) and math.isnan(v))


def _is_hex(text: str) -> bool:
    return bool(text) and all(ch in "0123456789abcdef" for ch in text.lower())


def _by_setting(root: Path, cfg: GateConfig) -> dict[str, dict]:
    """The measured cell rows of ``root`` by ``match_key``; of two cells with one setting (a prompt file
    edited between a run and its resume), the one written last."""
    rows = sorted((r for r in read_cells(root, cfg.rules).values() if not _derived(r)),
                  key=lambda r: RunFolder(root).cell_path(r['cell_id']).stat().st_mtime_ns)
    return {match_key(r): r for r in rows}


def run_gate(baseline: Path, current: Path, cfg: GateConfig) -> GateReport:
    # derived rows (category=all, pooled from the category cells) are not gated: their cells are, and ALL pools them
    base_rows, cur_rows = _by_setting(baseline, cfg), _by_setting(current, cfg)
    report = GateReport(str(baseline), str(current), cfg)
    report.missing = [f"{r['cell_id']} ({label(r)})" for key, r in base_rows.items() if key not in cur_rows]
    report.new = [f"{r['cell_id']} ({label(r)})" for key, r in cur_rows.items() if key not in base_rows]
    estimates: dict[str, list[gate_stats.RatioEstimate]] = {m: [] for m in cfg.rules}
    shaky: dict[str, int] = {m: 0 for m in cfg.rules}  # pooled cells with an unstable side, per metric
    noise: dict[str, list[float]] = {m: [] for m in cfg.rules}  # the pooled cells' ``noise_sd``, per metric
    report.step_ratio = step_ratio([(base_rows[k], cur_rows[k]) for k in sorted(set(base_rows) & set(cur_rows))])
    for key in sorted(set(base_rows) & set(cur_rows)):
        sd = noise_sd(base_rows[key], cur_rows[key])
        for check, est in _check_cell(cfg, Path(baseline), Path(current), base_rows[key], cur_rows[key]):
            report.checks.append(measurable(check, report.step_ratio, sd, cfg))
            if check.verdict == PROMPTS_DIFFER and check.metric == next(iter(cfg.rules)):
                report.prompts_differ.append(f"{base_rows[key]['cell_id']} -> {check.cell_id} ({check.label})")
            if est is not None:
                estimates[check.metric].append(est)
                shaky[check.metric] += bool(unstable_sides(base_rows[key], cur_rows[key]))
                noise[check.metric].append(sd)
    if cfg.pooled:
        for metric, ests in estimates.items():
            if len(ests) < (2 if cfg.rules[metric].per_cell else 1):  # one gated cell: the pool adds nothing
                continue
            ratio, low, high = gate_stats.pooled(ests, cfg.confidence)
            tol = cfg.rules[metric].tolerance
            verdict = judge(ratio, low, high, tol) if math.isfinite(ratio) else NA
            note = f"{shaky[metric]} of {len(ests)} cells pooled have an unstable side" if shaky[metric] else ""
            pooled_sd = math.sqrt(sum(v * v for v in noise[metric])) / len(noise[metric])  # the log-mean's share
            report.checks.append(measurable(
                Check("ALL", f"geometric mean over {len(ests)} cells", metric, math.nan, math.nan, ratio, low, high, tol,
                      sum(e.n_requests for e in ests), verdict, note, detectable_loss(low, high, tol, cfg.confidence)),
                report.step_ratio, pooled_sd, cfg))
    return report


def noise_sd(b: dict, c: dict) -> float:
    """The log-scale SD that the unstable sides' own measurement noise adds to a speedup ratio: each unstable
    side's ``speedup_noise`` (the relative half-width of its repeats-only 95% interval) as log1p(noise) / z,
    in quadrature. 0 when both sides are stable; NaN when an unstable side has no finite noise (one repeat)."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf(0.975)  # the run's interval (protocol confidence 0.95)
    total = 0.0
    for row in (b, c):
        if evidence.is_stable(row):
            continue
        v = row.get("speedup_noise")
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            return math.nan
        total += (math.log1p(v) / z) ** 2
    return math.sqrt(total)


def machine_allowance(steps: float, cfg: GateConfig) -> float:
    """The factor by which the machine's speed alone may have moved a speedup ratio: max(r, 1/r) ** E, r the step
    ratio, E the largest measured elasticity left after ``speed_elasticity``'s adjustment; 1 without a step ratio."""
    if not (math.isfinite(steps) and steps > 0):
        return 1.0
    residual = max(cfg.max_speed_elasticity - cfg.speed_elasticity, cfg.speed_elasticity)
    return max(steps, 1 / steps) ** residual


def measurable(check: Check, steps: float, sd: float, cfg: GateConfig) -> Check:
    """``check`` as the runs could measure it (the module docstring): a speedup verdict becomes INCONCLUSIVE when the
    machine's step ratio ``steps`` is beyond ``cfg.max_step_ratio`` either way, or when a regression (improvement)
    does not hold with the machine's allowance (``machine_allowance``) and the unstable cells' noise ``sd``
    (``noise_sd``; NaN: no estimate) added to its interval. A pass stays a pass within the limit; AL is left as is."""
    if check.metric not in MACHINE_BOUND_METRICS or check.verdict not in (PASS, IMPROVED, REGRESSED):
        return check

    def inconclusive(why: str) -> Check:
        return replace(check, verdict=INCONCLUSIVE, note="; ".join(n for n in (check.note, why) if n))

    limit = cfg.max_step_ratio
    if math.isfinite(steps) and steps > 0 and not 1 / limit <= steps <= limit:
        return inconclusive(f"machine speed: no-speculation steps took {steps:.2f}x the baseline run's, beyond "
                            f"max_step_ratio {limit:g} either way: the speedup ratio may be the machine's")
    allowance = machine_allowance(steps, cfg)
    if (sd == 0 and allowance == 1.0) or check.verdict == PASS:  # a wider interval only widens around a pass
        return check
    if not math.isfinite(sd):
        return inconclusive(f"{check.verdict} on an unstable cell without a noise estimate (one repeat): not measured")
    from ..metrics.speedup import widen

    low, high = widen(check.ratio, check.low, check.high, math.expm1(sd), cfg.confidence) if sd > 0 else (check.low, check.high)
    low, high = low / allowance, high * allowance
    what = " and ".join(x for x in (f"the machine's allowance x{allowance:.3f} (steps {steps:.2f}x)" if allowance > 1 else "",
                                    "the unstable cells' own noise" if sd > 0 else "") if x)
    if judge(check.ratio, low, high, check.tolerance) == check.verdict:
        held = f"holds with {what}: [{low:.3f}, {high:.3f}]"
        return replace(check, note="; ".join(n for n in (check.note, held) if n))
    return inconclusive(f"{check.verdict} only without {what}; with it [{low:.3f}, {high:.3f}]")


def step_ratio(pairs: list[tuple[dict, dict]]) -> float:
    """Geometric mean over matched ok cells of current / baseline ``t_step_ms_baseline`` (NaN without any)."""
    logs = []
    for b, c in pairs:
        vb, vc = b.get("t_step_ms_baseline"), c.get("t_step_ms_baseline")
        usable = all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (vb, vc))
        if usable and b["status"] == STATUS_OK and c["status"] == STATUS_OK:
            logs.append(math.log(vc / vb))
    return math.exp(sum(logs) / len(logs)) if logs else math.nan


def speed_adjusted(est: gate_stats.RatioEstimate, steps: float, elasticity: float) -> tuple[gate_stats.RatioEstimate, str]:
    """``est`` as if the current run had run at the baseline run's machine speed: the ratio, its interval and
    its bootstrap samples divided by ``steps ** elasticity`` (``steps``: current / baseline no-speculation
    step time of the cell). Unchanged, with a note, when a side lacks the step time."""
    if not (math.isfinite(steps) and steps > 0):
        return est, "not speed-adjusted: no no-speculation step time on one side"
    f = steps ** -elasticity
    adjusted = gate_stats.RatioEstimate(est.baseline, est.current, est.ratio * f, est.low * f, est.high * f, est.n_requests,
                                        est.samples * f)
    return adjusted, f"speed-adjusted x{f:.3f} (steps {steps:.2f}x)"
