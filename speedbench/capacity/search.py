"""SLA capacity read from paired load points (``speedbench capacity``; docs/load.md).

A sweep over load (``load.request_rate``, or ``load.concurrency`` where every point is closed loop)
gives, at every level, a baseline and a speculative pass of the same requests under the same
arrivals. For each configuration (drafter, D, the other load setting, context bucket) and role:

* attainment at a level = the share of its requests (every repeat) that finished within every
  objective of the SLO set (``metrics.latency.meets_slo``: the same rule as goodput);
  its interval is Wilson's at the requests of *one* window (a repeat's requests share that
  window's state, so the repeats are not counted as independent draws);
* capacity = the load at which attainment, falling with load, crosses the target (``--attainment``,
  default 0.9): linear between the last level that meets it and the first that does not; every
  level below must meet it. ``censored`` when the highest level measured still meets it (the
  capacity is at least that level: "above X (censored)"); ``below`` when the lowest level already
  misses it (the capacity is under the lowest level measured: "measure below X"), never a bare 0;
* the interval: the same crossing read off the attainment intervals' high and low ends.

Every capacity says what it rests on: the attainment per level with its Wilson interval
(``ATTAINMENT_INTERVAL``), printed by the command, in the report and in ``capacity.json``.

The search is over the measured grid (as ``vllm bench sweep serve_sla`` searches its own, which
it does not pair): a finer grid around the crossing narrows the interval.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import NormalDist

import pandas as pd

from ..drafters.registry import is_baseline
from ..metrics.latency import meets_slo, slo_set
from ..records import RequestRecord, from_row
from ..results.layout import RunFolder

DEFAULT_ATTAINMENT = 0.9
ATTAINMENT_INTERVAL = "Wilson score interval, 95%, n = the requests of one window"


class CapacityError(ValueError):
    """The results cannot give a capacity (one line saying why)."""


@dataclass(frozen=True)
class Level:
    load: float
    cell_id: str
    attainment: float
    low: float
    high: float
    n_requests: int  # every repeat
    n_window: int  # the requests of one window (the interval's n)
    stable: bool


@dataclass(frozen=True)
class Capacity:
    point: float
    low: float
    high: float
    censored: bool  # the highest level measured still met the target: capacity >= point
    below: bool = False  # the lowest level measured already missed the target: capacity < edge
    edge: float = math.nan  # the lowest level (below) or the highest (censored) measured
    edge_attainment: tuple = ()  # (attainment, low, high) at that level: what the reason rests on

    def text(self, unit: str) -> str:
        if not math.isfinite(self.point):
            return "n/a (no level measured)"
        if self.below:
            return f"below {self.edge:.3g} {unit}"
        if self.censored:
            return f"above {self.point:.3g} {unit} (censored)"
        return f"{self.point:.3g} {unit} [{self.low:.3g}, {self.high:.3g}]"

    @property
    def why(self) -> str:
        """``below`` / ``censored`` / "" (a crossing was measured)."""
        return "below" if self.below else "censored" if self.censored else ""

    def reason(self, unit: str) -> str:
        """Why the capacity has no crossing ("" when it has one): the edge level's attainment and what to measure."""
        return _why(self.why, self.edge, unit, _pct(*self.edge_attainment) if self.edge_attainment else "n/a")


def _why(kind: str, edge: float, unit: str, attainment: str) -> str:
    if kind == "below":
        return (f"the lowest level already misses the SLO (attainment {attainment} at {edge:.3g} {unit}): "
                f"measure below {edge:.3g} {unit}")
    if kind == "censored":
        return (f"the top level still meets the SLO (attainment {attainment} at {edge:.3g} {unit}): "
                f"capacity above {edge:.3g} {unit} (censored); measure above {edge:.3g} {unit}")
    return ""


def _pct(point: float, low: float, high: float) -> str:
    if not math.isfinite(point):
        return "n/a"
    return f"{point:.0%} [{low:.0%}, {high:.0%}]" if math.isfinite(low) and math.isfinite(high) else f"{point:.0%}"


@dataclass(frozen=True)
class CapacityRow:
    drafter: str
    D: int
    context_bucket: str
    axis: str  # request_rate | concurrency
    fixed: str  # the other load setting, e.g. "concurrency=8" ("" when unset)
    baseline: Capacity
    spec: Capacity
    levels: dict = field(default_factory=dict)  # role -> tuple of Level
    unstable_cells: tuple = ()  # cells behind it that are not stable

    @property
    def unit(self) -> str:
        return "requests/s" if self.axis == "request_rate" else "in flight"

    def line(self) -> str:
        """The report's and the console's sentence."""
        word = "requests/s" if self.axis == "request_rate" else "concurrent requests"
        moved = (f"speculation ({self.drafter} D={self.D}) moves SLA capacity from {self.baseline.text(word)} "
                 f"to {self.spec.text(word)}")
        if self.fixed:
            moved += f" at {self.fixed}"
        base, spec = self.baseline, self.spec
        if base.why and (base.why, base.edge) == (spec.why, spec.edge):  # one sentence for both roles
            both = " and ".join(f"{_pct(*c.edge_attainment)} {r}" for r, c in (("baseline", base), ("speculation", spec)))
            moved += f"; for both, {_why(base.why, base.edge, word, both)}"
        else:
            for role, cap in (("baseline", base), ("speculation", spec)):
                if cap.reason(word):
                    moved += f"; {role}: {cap.reason(word)}"
        if self.unstable_cells:
            moved += f"; {len(self.unstable_cells)} of the points behind it are unstable"
        return moved

    def attainment_rows(self) -> list[dict]:
        """Per level: the load and each role's attainment with its interval (``ATTAINMENT_INTERVAL``) and n."""
        by_load: dict[float, dict] = {}
        for role, levels in self.levels.items():
            for lv in levels:
                row = by_load.setdefault(lv.load, {"load": lv.load})
                row[role] = _pct(lv.attainment, lv.low, lv.high)
                row[f"n_{role}"] = lv.n_window
        return [by_load[k] for k in sorted(by_load)]

    def as_dict(self) -> dict:
        out = asdict(self)
        word = "requests/s" if self.axis == "request_rate" else "concurrent requests"
        out["line"] = self.line()
        out["attainment_interval"] = ATTAINMENT_INTERVAL
        for role, cap in (("baseline", self.baseline), ("spec", self.spec)):
            out[role]["text"] = cap.text(word)
            out[role]["reason"] = cap.reason(word)
        return out


def wilson(good: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    if n <= 0:
        return math.nan, math.nan
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = good / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def crossing(loads: list[float], values: list[float], target: float) -> tuple[float, bool]:
    """The load where ``values`` (attainment by increasing load) first falls below ``target``:
    linear between the two levels around it; (the last load, True) when none falls below."""
    for k, v in enumerate(values):
        if not (math.isfinite(v) and v >= target):
            if k == 0:
                return 0.0, False
            a, b = values[k - 1], v if math.isfinite(v) else 0.0
            frac = (a - target) / (a - b) if a > b else 0.0
            return loads[k - 1] + frac * (loads[k] - loads[k - 1]), False
    return loads[-1], True


def capacity_of(levels: list[Level], target: float) -> Capacity:
    if not levels:
        return Capacity(math.nan, math.nan, math.nan, False)
    loads = [lv.load for lv in levels]
    point, censored = crossing(loads, [lv.attainment for lv in levels], target)
    low, _ = crossing(loads, [lv.low for lv in levels], target)
    high, _ = crossing(loads, [lv.high for lv in levels], target)
    first = levels[0]
    below = not censored and not (math.isfinite(first.attainment) and first.attainment >= target)
    edge = levels[-1] if censored else first
    return Capacity(point, min(low, point), max(high, point), censored, below,
                    edge.load if (below or censored) else math.nan,
                    (edge.attainment, edge.low, edge.high) if (below or censored) else ())


def _records(root: str, cell_id: str) -> pd.DataFrame:
    path = RunFolder(root).requests_path(cell_id)
    return pd.read_parquet(path) if path.exists() else pd.DataFrame()


def _level(cell: pd.Series, frame: pd.DataFrame, role: str, axis: str, objectives: dict, confidence: float) -> Level | None:
    rows = frame[frame["role"] == role] if not frame.empty else frame
    if rows.empty:
        return None
    recs = [from_row(RequestRecord, r) for r in rows.to_dict("records")]
    good = sum(meets_slo(r, objectives) for r in recs)
    repeats = max(1, rows["repeat"].nunique() if "repeat" in rows else 1)
    n_window = len(recs) / repeats
    low, high = wilson(good / repeats, n_window, confidence)
    return Level(float(cell[axis]), str(cell["cell_id"]), good / len(recs), low, high, len(recs), int(round(n_window)),
                 bool(cell.get("stable", False)))


def objectives_of(cells: pd.DataFrame, given: dict) -> dict[str, float]:
    """The SLO set: the objectives given, else the one every cell's run recorded (``slo.*``)."""
    if given:
        return given
    found = set()
    for extra in cells.get("extra", pd.Series(dtype=object)):
        slo = ((extra or {}).get("config") or {}).get("slo") if isinstance(extra, dict) else None
        if slo:
            found.add(tuple(sorted(slo_set(slo).items())))
    if len(found) > 1:
        raise CapacityError(f"the cells ran under {len(found)} different SLO sets; name one with --ttft-ms/--tpot-ms/--e2e-ms")
    objectives = dict(next(iter(found))) if found else {}
    if not objectives:
        raise CapacityError("no SLO set: the runs set no slo.* and none was given (--ttft-ms, --tpot-ms, --e2e-ms)")
    return objectives


def search(data, given: dict | None = None, target: float = DEFAULT_ATTAINMENT, drafter: str | None = None,
           confidence: float = 0.95) -> tuple[dict[str, float], list[CapacityRow]]:
    """The SLO set used and the capacity of every configuration with load points in ``data`` (``results.load``)."""
    if not 0 < target <= 1:
        raise CapacityError(f"--attainment must be in (0, 1], got {target}")
    cells = data.ok
    if cells.empty or "concurrency" not in cells:
        raise CapacityError("no measured load points in these results (run with load.request_rate or load.concurrency)")
    cells = cells[~cells["method"].map(is_baseline)] if "method" in cells else cells[cells["drafter"] != "none"]
    if drafter is not None:
        cells = cells[cells["drafter"] == drafter]
    rated = cells[cells["request_rate"].map(lambda r: math.isfinite(float(r)))]
    axis, fixed_col = ("request_rate", "concurrency") if not rated.empty else ("concurrency", "request_rate")
    cells = rated if not rated.empty else cells[cells["concurrency"] > 0]
    if cells.empty:
        raise CapacityError("no load points" + (f" of drafter {drafter}" if drafter else "") +
                            ": capacity needs cells with load.request_rate or load.concurrency")
    objectives = objectives_of(cells, dict(given or {}))
    rows = []
    keys = ["drafter", "num_speculative_tokens", "context_bucket", fixed_col]
    for key, group in cells.groupby(keys, dropna=False, sort=True):
        group = group.sort_values(axis)
        levels: dict[str, list[Level]] = {"baseline": [], "spec": []}
        for _, cell in group.iterrows():
            frame = _records(cell["results_dir"], cell["cell_id"])
            for role in levels:
                lv = _level(cell, frame, role, axis, objectives, confidence)
                if lv is not None:
                    levels[role].append(lv)
        name, depth, bucket, other = key
        fixed = "" if (fixed_col == "concurrency" and int(other) < 0) or (fixed_col == "request_rate"
                                                                          and not math.isfinite(float(other))) \
            else f"{fixed_col}={other:g}" if isinstance(other, float) else f"{fixed_col}={other}"
        rows.append(CapacityRow(str(name), int(depth), str(bucket), axis, fixed, capacity_of(levels["baseline"], target),
                                capacity_of(levels["spec"], target), {r: tuple(v) for r, v in levels.items()},
                                tuple(str(c) for c, s in zip(group["cell_id"], group.get("stable", [True] * len(group)))
                                      if not bool(s))))
    return objectives, rows
