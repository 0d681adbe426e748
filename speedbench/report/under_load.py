"""Speculation under load: speedup vs concurrency per drafter, where it stops paying, the
per-user vs per-GPU throughput Pareto, goodput vs request rate, and random vs real prompts.

Reads load-point cells (``concurrency`` >= 1 or a finite ``request_rate``; docs/load.md). A
point is *net-negative* when its speedup interval lies below 1, *pays* when it lies above 1,
and is a *tie* otherwise; a drafter *stops paying* at the smallest load (concurrency in closed
loop, request rate in open loop) from which no point pays. Unstable points are shown and
marked, and never decide a verdict. Each point says where it was measured (``path``: in
process, stepped with its partner, or a server through the client) and whether the client set
the pace (``client_bound``); with an SLO set, the SLA capacity of each configuration comes from
``capacity.search`` (the command ``speedbench capacity`` prints the same rows).
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from . import plots
from .common import D, MEASURED, MECH, Section, baseline_spread, device_unit, finite, spec_cells, with_intervals
from ..results.load import ReportData

RANDOM = "random"


def load_points(ok: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(closed-loop, open-loop) speculative load-point cells."""
    if ok.empty or "concurrency" not in ok:
        return ok.iloc[0:0], ok.iloc[0:0]
    spec = spec_cells(ok)
    conc = pd.to_numeric(spec["concurrency"], errors="coerce").fillna(-1)
    rate = pd.to_numeric(spec["request_rate"], errors="coerce").fillna(math.inf)
    return spec[(conc >= 1) & ~rate.map(math.isfinite)], spec[rate.map(math.isfinite)]


def verdict(low: float, high: float) -> str:
    if finite(high) and high < 1:
        return "net-negative"
    if finite(low) and low > 1:
        return "pays"
    return "tie" if finite(low) and finite(high) else "n/a"


def _stable(row) -> bool:
    return bool(row.get("stable", True)) if "stable" in row else True


AXES = {"concurrency": ("C", "concurrency", "{:g}"), "request_rate": ("rate", "request rate", "{:g}/s")}


def stops_paying(points: pd.DataFrame, axis: str = "concurrency") -> str:
    """The smallest load from which no stable point of one drafter pays, in words, with the points behind it."""
    short, word, fmt = AXES[axis]
    rows = points.sort_values(axis)
    stable = rows[rows.apply(_stable, axis=1)]
    unstable = len(rows) - len(stable)
    note = f" ({unstable} unstable point(s) left out)" if unstable else ""
    if stable.empty:
        return f"no stable point: no verdict{note}"
    loads = [float(c) for c in stable[axis]]
    verdicts = list(stable["verdict"])
    behind = ", ".join(f"{short} {fmt.format(c)}: {v}" for c, v in zip(loads, verdicts))
    pays = [c for c, v in zip(loads, verdicts) if v == "pays"]
    later = [c for c in loads if not pays or c > max(pays)]
    if not later:
        return f"pays at every measured {word} (up to {fmt.format(max(loads))}){note} [{behind}]"
    first = min(later)
    neg = [fmt.format(c) for c, v in zip(loads, verdicts) if v == "net-negative"]
    tail = f"; net-negative at {short} = {', '.join(neg)}" if neg else ""
    return (f"stops paying at {short} = {fmt.format(first)}" + (" (never pays)" if not pays else "") + tail + note
            + f" [{behind}]")


def path(row) -> str:
    """Where a point was measured: in process (stepped with its partner) or through a server's client."""
    extra = row.get("extra") if isinstance(row.get("extra"), dict) else {}
    protocol = extra.get("protocol") or {}
    if "client" in extra or protocol.get("why_pass", "").startswith("a server"):
        return "server"
    return "in-process" if protocol.get("interleave") == "step" else "in-process (pass)"


def _paths(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    frame["path"] = [path(r) for _, r in frame.iterrows()]
    frame["verdict"] = [verdict(lo, hi) for lo, hi in zip(frame["speedup_ci_low"], frame["speedup_ci_high"])]
    return frame


def _verdict_lines(sec: Section, frame: pd.DataFrame, axis: str, key: str) -> None:
    lines, stop = [], {}
    for (ds, mech, d, where), grp in frame.groupby(["dataset", MECH, D, "path"]):
        name = f"{ds}/{mech}/D={d}/{where}"
        stop[name] = stops_paying(grp, axis)
        lines.append(f"- {mech} (D = {d}, {ds}, {where}): {stop[name]}.")
    sec.values[key] = stop
    sec.text("\n".join(lines))


def _client_note(sec: Section, frame: pd.DataFrame) -> None:
    servers = frame[frame["path"] == "server"]
    if servers.empty:
        return
    bound = servers[servers.get("client_bound", pd.Series(False, index=servers.index)).fillna(False).astype(bool)]
    sec.values["client_bound"] = list(bound["cell_id"])
    sec.text(f"Server points' absolute latencies (TTFT, TPOT, ITL) include the client, which runs on this machine: "
             f"{len(bound)} of {len(servers)} server point(s) are `client_bound` (the client set the pace: requests "
             "delivered in bursts, or a client busier than most of a core) and are unstable for it.")


def _closed(sec: Section, closed: pd.DataFrame, out: Path) -> None:
    frame = _paths(closed)
    cols = ["dataset", MECH, D, "concurrency", "path", "al", "speedup", "speedup_ci_low", "speedup_ci_high",
            "speedup_throughput", "speedup_throughput_ci_low", "speedup_throughput_ci_high", "tpot_ms_p99_spec",
            "itl_token_ms_p99_spec", "burst_frac", "client_bound", "verdict", "stable"]
    table = frame[[c for c in cols if c in frame]].sort_values(["dataset", MECH, D, "concurrency"])
    sec.values["points"] = table.to_dict("records")
    sec.table(with_intervals(table, ("speedup", "speedup_throughput")).rename(columns={"speedup": "TPOT speedup"}),
              "Closed-loop points: speedup of TPOT and of throughput against the matched baseline at the same "
              "concurrency, with their 95% intervals.",
              {"al": MEASURED, "TPOT speedup": MEASURED, "speedup_throughput": MEASURED})
    _verdict_lines(sec, frame, "concurrency", "stops_paying")
    _client_note(sec, frame)
    series = []
    for i, ((ds, mech, d), grp) in enumerate(frame.sort_values("concurrency").groupby(["dataset", MECH, D])):
        series.append(plots.Series(f"{mech} D={d} ({ds})", list(grp["concurrency"]), list(grp["speedup"]), "-o",
                                   color=f"C{i % 10}", low=list(grp["speedup_ci_low"]), high=list(grp["speedup_ci_high"])))
    sec.figure(plots.lines(out / "load_speedup_vs_concurrency.png", series, plots.Axes(
        "concurrency (requests in flight)", "speedup (TPOT)", "Speedup vs concurrency", logx=True,
        hlines=[(1.0, "")]), "Speedup of TPOT vs concurrency per drafter (1 = no gain; bars: each point's 95% interval)."))
    groups, rows = {}, []
    marks = "o^sDvP*X"
    per_gpu = frame.get("n_gpus", pd.Series(1, index=frame.index)).fillna(1).astype(float).clip(lower=1)  # a CPU: one device
    unit = device_unit(frame)
    # every cell's own baseline (the one its speedups are paired with), never one cell's standing in for all
    groups["baseline (each cell's own)"] = (list(frame["tokens_per_s_user_baseline"]),
                                            list(frame["output_tok_s_baseline"] / per_gpu), "x",
                                            [f"C{c}" for c in frame["concurrency"]])
    for i, (mech, grp) in enumerate(frame.groupby(MECH)):
        groups[mech] = (list(grp["tokens_per_s_user_spec"]), list(grp["output_tok_s_spec"] / per_gpu.loc[grp.index]),
                        marks[i % len(marks)], [f"D{d}/C{c}" for d, c in zip(grp[D], grp["concurrency"])])
    for label, (xs, ys, *_) in groups.items():
        rows += [{"series": label, "tok/s per user": x, "tok/s per GPU": y} for x, y in zip(xs, ys)]  # a stable key (per device on a CPU)
    sec.values["pareto"] = rows
    spread = baseline_spread(frame, ["concurrency"])  # at one concurrency the baselines should agree
    sec.values["pareto_baseline_spread"] = spread
    note = (spread[0].upper() + spread[1:] + ": compare each point with its own baseline (the paired speedups in the "
            "table), not with the other series." if spread else "")
    sec.figure(plots.pareto(out / "load_pareto.png", groups, plots.Axes(
        "output tokens/s per user", f"output tokens/s per {unit}", f"Per-user vs per-{unit} throughput", note=note),
        "Each point is one concurrency (labelled D/C), each baseline the one its cell was paired with; the line is "
        "each series' frontier (both higher is better)." + (f" {note}" if note else "")))


def _random_line(sec: Section, closed: pd.DataFrame) -> None:
    """How far random-token input moves AL and speedup from real prompts at each load point."""
    if closed.empty or RANDOM not in set(closed["dataset"]) or closed["dataset"].nunique() < 2:
        return
    lines = []
    key = [MECH, D, "concurrency"]
    rand = closed[closed["dataset"] == RANDOM].groupby(key)[["al", "speedup"]].mean()
    for ds, real in closed[closed["dataset"] != RANDOM].groupby("dataset"):
        both = real.groupby(key)[["al", "speedup"]].mean().join(rand.add_suffix("_random"), how="inner")
        for (mech, d, c), r in both.iterrows():
            lines.append(f"- {mech} D = {d}, C = {int(c)}: random input moves AL {r['al']:.2f} -> {r['al_random']:.2f} "
                         f"and speedup {r['speedup']:.2f} -> {r['speedup_random']:.2f} "
                         f"(x{r['speedup_random'] / r['speedup']:.2f}) against {ds}.")
    if lines:
        sec.values["random_vs_real"] = lines
        sec.text("**Random tokens vs real prompts**:\n" + "\n".join(lines))


def _open(sec: Section, opened: pd.DataFrame) -> None:
    frame = _paths(opened)
    cols = ["dataset", MECH, D, "request_rate", "concurrency", "path", "speedup", "speedup_ci_low", "speedup_ci_high",
            "requests_s_baseline", "requests_s_spec", "goodput_baseline", "goodput_spec", "speedup_goodput",
            "speedup_goodput_ci_low", "speedup_goodput_ci_high", "client_bound", "verdict", "stable"]
    table = frame[[c for c in cols if c in frame]].sort_values(["dataset", MECH, D, "request_rate"])
    sec.values["goodput"] = table.to_dict("records")
    sec.table(with_intervals(table, ("speedup", "speedup_goodput")).rename(columns={"speedup": "TPOT speedup"}),
              "Open-loop points: speedup of TPOT and goodput (requests/s meeting every SLO set) vs request rate, "
              "with their 95% intervals.",
              {"goodput_baseline": MEASURED, "goodput_spec": MEASURED, "speedup_goodput": MEASURED,
               "TPOT speedup": MEASURED})
    _verdict_lines(sec, frame, "request_rate", "stops_paying_open")
    _client_note(sec, frame)


def _by_live_batch(sec: Section, frame: pd.DataFrame) -> None:
    """AL and step time by the live batch of each engine step (``extra.by_live_batch``: stepped engines)."""
    rows = []
    for _, cell in frame.iterrows():
        extra = cell.get("extra") if isinstance(cell.get("extra"), dict) else {}
        for b in extra.get("by_live_batch") or ():
            rows.append({"drafter": cell[MECH], "D": cell[D], "concurrency": cell.get("concurrency"),
                         "request_rate": cell.get("request_rate"), "live batch": b["bucket"], "steps": b["steps"],
                         "AL": b["al"], "verify ms": b["t_verify_ms"], "step ms": b["t_step_ms"]})
    if not rows:
        return
    table = pd.DataFrame(rows).sort_values(["drafter", "D", "concurrency", "request_rate", "live batch"])
    sec.values["by_live_batch"] = table.to_dict("records")
    sec.table(table, "Acceptance and step time by the live batch of each speculative engine step (in-process points: "
                     "the engine's own batch at that step, which under load is rarely the nominal concurrency).",
              {"AL": MEASURED, "verify ms": MEASURED, "step ms": MEASURED})


def _capacity(sec: Section, data: ReportData) -> None:
    """The SLA capacity lines (``capacity.search``: the same rows as ``speedbench capacity``) and the
    attainment per level behind each, with its interval (``capacity.search.ATTAINMENT_INTERVAL``)."""
    from ..capacity.search import ATTAINMENT_INTERVAL, CapacityError, search

    try:
        objectives, rows = search(data)
    except CapacityError as exc:
        sec.values["capacity"] = str(exc)
        return
    slo = ", ".join(f"{k} <= {v:g}" for k, v in objectives.items())
    sec.values["capacity"] = [r.line() for r in rows]
    sec.text(f"**SLA capacity** ({slo}; 90% of requests within every objective; `speedbench capacity` for another "
             "target):\n\n" + "\n".join(f"- {r.line()}; from the points at {r.axis} = "
                                        f"{', '.join(f'{lv.load:g}' for lv in r.levels.get('spec', ()))}."
                                        for r in rows))
    table = []
    for r in rows:
        for lv in r.attainment_rows():
            table.append({"drafter": r.drafter, "D": r.D, "context bucket": r.context_bucket, "fixed": r.fixed,
                          r.axis: lv["load"], "attainment_baseline": lv.get("baseline", math.nan),
                          "n_baseline": lv.get("n_baseline", math.nan), "attainment_spec": lv.get("spec", math.nan),
                          "n_spec": lv.get("n_spec", math.nan)})
    if table:
        frame = pd.DataFrame(table)
        frame = frame.drop(columns=[c for c in ("context bucket", "fixed") if not frame[c].astype(bool).any()])
        sec.values["capacity_levels"] = frame.to_dict("records")
        sec.table(frame, f"Attainment per level (share of requests within every objective) behind each capacity, "
                         f"with its {ATTAINMENT_INTERVAL}.", {"attainment_baseline": MEASURED, "attainment_spec": MEASURED})


def build(data: ReportData, out: Path) -> Section:
    sec = Section("load", "Speculation under load")
    closed, opened = load_points(data.ok)
    if closed.empty and opened.empty:
        sec.text("No load points (`load.concurrency` / `load.request_rate`): n/a.")
        return sec
    sec.text("Each point is a cell: baseline and speculative windows at the same load, alternating and repeated until "
             "the interval is tight (docs/load.md). A point *pays* when its speedup interval is above 1, is "
             "*net-negative* when it is below 1, a *tie* otherwise; only stable points decide where a drafter stops "
             "paying.")
    if not closed.empty:
        _closed(sec, closed, out)
        _random_line(sec, closed)
    if not opened.empty:
        _open(sec, opened)
    _by_live_batch(sec, pd.concat([closed, opened]))
    _capacity(sec, data)
    return sec
