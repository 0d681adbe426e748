#!/usr/bin/env python3
"""What counting only the steady window changes, on one recorded load sweep.

For every load-point cell of a results folder it recomputes, from the same stored per-request
records (``requests/<cell>.parquet``), the TPOT speedup and the throughput speedup twice, with the
cell's own estimator and interval (``metrics.speedup_columns``, ``metrics.latency``, windows as
the independent units): once over each pass's whole window (first send -> last token) and once
over its steady window (``metrics.steady``, what ``load.steady_state=true`` counts). Both come
from the same requests, so the difference is the window's alone, not run-to-run noise. Prints
one row per cell: the point, both speedups with their 95% intervals, the steady window's share of
the whole window and the share of requests it kept.

    python scripts/steady_effect.py results/runs/<run_id>
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import fields

from speedbench.backends.base import GenerateOutput
from speedbench.columns.load import load_label
from speedbench.metrics import latency, speedup_columns, steady
from speedbench.records import RequestRecord
from speedbench.results.store import ResultsStore


def records(frame) -> list[RequestRecord]:
    """The stored rows as ``RequestRecord``s (lists back to tuples; fields the folder lacks keep their defaults)."""
    names = [f.name for f in fields(RequestRecord)]
    out = []
    for row in frame.to_dict("records"):
        kw = {k: (tuple(v) if hasattr(v, "__len__") and not isinstance(v, str) else v)
              for k, v in row.items() if k in names}
        out.append(RequestRecord(**kw))
    return out


def effect(cell: dict, reqs: list[RequestRecord], confidence: float, n_resamples: int) -> dict:
    conc = int(cell["concurrency"]) if cell.get("concurrency", -1) > 0 else None
    rate = float(cell.get("request_rate", math.inf))
    base = GenerateOutput([r for r in reqs if r.role == "baseline"])
    spec = GenerateOutput([r for r in reqs if r.role == "spec"])
    out = {}
    cut_b, spans_b = steady.steady_pass(base, conc, rate)
    cut_s, spans_s = steady.steady_pass(spec, conc, rate)
    for label, b, s, wins in (("whole", base, spec, None),
                              ("steady", cut_b, cut_s, (steady.window_counts(base, spans_b), steady.window_counts(spec, spans_s)))):
        sp = speedup_columns(b.requests, s.requests, confidence, n_resamples, True)
        lp = latency.load_point_columns(b, s, None, confidence, n_resamples, True, wins)
        out[label] = (sp.speedup, sp.speedup_ci_low, sp.speedup_ci_high,
                      lp.speedup_throughput, lp.speedup_throughput_ci_low, lp.speedup_throughput_ci_high)
    spans = [*spans_b.values(), *spans_s.values()]
    found = [s for s in spans if s.found]
    out["window_share"] = (sum(s.length_s for s in found) / sum(s.whole_s for s in found)) if found else math.nan
    out["kept_share"] = sum(s.kept for s in spans) / max(1, sum(s.finished for s in spans))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="a results folder (results/runs/<run_id>) of load-point cells")
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--n-resamples", type=int, default=1000)
    args = ap.parse_args(argv)
    store = ResultsStore(args.results)
    frame = store.requests()
    rows = [c for c in store.cell_rows() if not c.get("derived") and (c.get("concurrency", -1) > 0
                                                                      or math.isfinite(c.get("request_rate", math.inf)))]
    if not rows:
        print(f"steady_effect: no load-point cells in {args.results}", file=sys.stderr)
        return 2
    f = lambda v: f"{v:.3f}" if math.isfinite(v) else "nan"  # noqa: E731
    print("| cell | drafter | point | TPOT speedup whole | TPOT speedup steady | throughput speedup whole "
          "| throughput speedup steady | steady / whole window | requests kept |")
    print("|---|---|---|---|---|---|---|---|---|")
    for cell in sorted(rows, key=lambda c: (c["drafter"], c.get("concurrency", -1), c.get("request_rate", 0))):
        e = effect(cell, records(frame[frame["cell_id"] == cell["cell_id"]]), args.confidence, args.n_resamples)
        w, s = e["whole"], e["steady"]
        point = load_label(cell).strip()
        print(f"| {cell['cell_id'][:8]} | {cell['drafter']} D={cell['num_speculative_tokens']} | {point} "
              f"| {f(w[0])} [{f(w[1])}, {f(w[2])}] | {f(s[0])} [{f(s[1])}, {f(s[2])}] "
              f"| {f(w[3])} [{f(w[4])}, {f(w[5])}] | {f(s[3])} [{f(s[4])}, {f(s[5])}] "
              f"| {e['window_share']:.0%} | {e['kept_share']:.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
