"""G2: when attention dominates decode time, start at D0 = 128/G - 1.

G = num_attention_heads / num_key_value_heads, read from the target's config (never its
weights). The attention vs FFN share of decode time at the measured context lengths comes from
the cost model (modelled); the measured best D per batch size is compared with D0.
"""
from __future__ import annotations

import math

import pandas as pd

from ..modelling import costmodel as cm
from .common import B, D, MEASURED, MECH, MODELLED, Section, best_per_batch, contexts, finite, spec_cells
from ..results.load import ReportData
from .modelling import ModelContext

DOMINANT = 0.5  # attention share of decode time above which G2 applies


def verdict(best_d: float, d0: int | None, measured_ds: list[int], share: float, best_speedup: float = math.nan) -> str:
    """Whether the measured best D agrees with G2's starting point D0 (saying so when even the best D
    is slower than plain decoding: then no D pays at this B, whatever G2 says)."""
    if finite(best_speedup) and best_speedup < 1:
        return (f"no D pays: the best measured D ({int(best_d)}) is slower than plain decoding "
                f"({best_speedup:.2f}x), so G2's starting point is moot here")
    if d0 is None:
        return "no D0 (G >= 128): G2 gives no starting point"
    if not finite(best_d):
        return "n/a (no measured speedup)"
    applies = "" if not finite(share) or share >= DOMINANT else f"; attention is not dominant ({share:.0%} modelled), so G2 need not hold"
    if not measured_ds or d0 > max(measured_ds):
        return f"untestable: D0 = {d0} lies beyond the measured D range (max {max(measured_ds) if measured_ds else 'n/a'})" + applies
    if d0 not in measured_ds:
        return f"D0 = {d0} not measured; measured best D = {int(best_d)}" + applies
    return ("agrees" if int(best_d) == d0 else f"disagrees: measured best D = {int(best_d)}") + applies


def shares(ctx: ModelContext, shape, batches: list[int], ctx_table: pd.DataFrame, best: dict[int, float]) -> pd.DataFrame:
    rows = []
    for _, c in ctx_table.iterrows():
        context = c["context_tokens"]
        for b in batches:
            row = {"context bucket": c["context_bucket"] or "", "context tokens": context, "B": b}
            if finite(context):
                v0 = cm.verify_cost(shape, ctx.hw, b, 0, float(context))
                row["attention share, D=0"] = v0.attention_share
                row["FFN share, D=0"] = v0.ffn_share
                d = best.get(b, math.nan)
                row["attention share, best D"] = (cm.verify_cost(shape, ctx.hw, b, int(d), float(context)).attention_share
                                                  if finite(d) else math.nan)
            else:
                row.update({"attention share, D=0": math.nan, "FFN share, D=0": math.nan, "attention share, best D": math.nan})
            rows.append(row)
    return pd.DataFrame(rows)


def build(data: ReportData, ctx: ModelContext) -> Section:
    sec = Section("g2", "G2 - attention-bound decode: start at D = 128/G - 1")
    sec.text(
        "Decode attention reads the KV cache once for the G query heads that share a KV head; speculation "
        "raises its GEMM-M to G(1+D), and attention kernels reach good utilisation around GEMM-M = 128. G comes "
        "from the target's config; the shares of decode time are **modelled** by the cost model at the "
        f"**measured** context lengths, on {ctx.hw_note}."
    )
    ok = data.ok
    best = best_per_batch(ok, data.overall)
    spec = spec_cells(ok)
    for t in ctx.targets:
        if t.shape is None:
            sec.text(f"Target {t.name}: G not available (n/a): {t.error}.")
            continue
        s = t.shape
        d0 = cm.d0(s.group)
        sec.values.setdefault("targets", {})[t.name] = {"G": s.group, "D0": d0, "n_heads": s.n_heads, "n_kv_heads": s.n_kv_heads}
        sec.text(f"Target **{t.name}** (`{t.path}`): {s.n_heads} query heads / {s.n_kv_heads} KV heads -> **G = {s.group}**; "
                 f"D0 = 128/G - 1 = **{d0 if d0 is not None else 'n/a (< 1)'}**.")
        mine = best[best["target"] == t.name] if "target" in best and len(best) else best
        best_d = {int(r[B]): float(r[D]) for _, r in mine.iterrows()}
        batches = sorted(int(b) for b in spec[B].unique()) if not spec.empty else []
        table = shares(ctx, s, batches, contexts(ok[ok["target"] == t.name] if not ok.empty else ok), best_d)
        if not table.empty:
            sec.table(table, "Share of one verification forward's time (modelled) at the measured context.",
                      {"context tokens": MEASURED, "attention share, D=0": MODELLED, "FFN share, D=0": MODELLED,
                       "attention share, best D": MODELLED})
        rows = []
        for b in batches:
            ds = sorted(int(d) for d in spec[(spec[B] == b) & (spec["target"] == t.name)][D].unique())
            share = table[table["B"] == b]["attention share, D=0"].mean() if not table.empty else math.nan
            bd = best_d.get(b, math.nan)
            here = mine[mine[B] == b]
            mech = here[MECH].iloc[0] if len(here) else "n/a"
            speedup = float(here["speedup"].iloc[0]) if len(here) else math.nan
            rows.append({"B": b, "measured best D": bd, "mechanism": mech, "D0": d0 if d0 is not None else math.nan,
                         "attention share, D=0": share, "verdict": verdict(bd, d0, ds, share, speedup)})
        if rows:
            frame = pd.DataFrame(rows)
            sec.values.setdefault("verdicts", {})[t.name] = frame.to_dict("records")
            sec.table(frame, "Does the measured best D agree with D0?",
                      {"measured best D": MEASURED, "attention share, D=0": MODELLED})
    return sec
