"""G5, after a fine-tune: each drafter's AL against the original target and against a fine-tuned copy of it.

The write-up warns that target-attached drafters (heads that read the target's hidden states: EAGLE-3,
MTP, Medusa, DFlash) lose acceptance when the target is fine-tuned, more than an external draft model
does, so AL must be re-measured then. This section measures it: for every drafter run against both a
``finetuned:NAME`` target and the model it was fine-tuned from (``models.finetuned_source``), on the same
prompts, the AL of each and their ratio (fine-tuned / original) with a paired bootstrap interval over the
prompts (``gate.stats.compare``: both runs evaluated on the same resampled prompts), and one sentence
saying whether the numbers confirm the claim: every attached drafter's ratio interval below every
external draft's (confirmed), above (refuted), or neither (undecided).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..drafters.registry import METHODS
from ..gate.stats import RequestArrays, compare
from ..models import finetuned_source
from ..results.store import ResultsStore
from .common import D, MEASURED, MECH, Section, fmt, spec_cells

ATTACHED = frozenset({"head", "target_head"})  # drafting models that read the target's hidden states
EXTERNAL = frozenset({"own_model"})
CONFIDENCE, RESAMPLES, SEED = 0.95, 2000, 0


def _target_path(cells: pd.DataFrame) -> str:
    for extra in cells["extra"]:
        if isinstance(extra, dict):
            path = ((extra.get("config") or {}).get("target") or {}).get("path")
            if path:
                return str(path)
    return ""


def _requests(roots: list[Path], cell_ids: set[str]) -> pd.DataFrame:
    frames = []
    for root in roots:
        req = ResultsStore(root).requests()
        if not req.empty and "cell_id" in req:
            frames.append(req[req["cell_id"].isin(cell_ids)])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _arrays(req: pd.DataFrame) -> RequestArrays | None:
    if req.empty:
        return None
    # one AL per prompt: each prompt's first repeat (greedy repeats are the same tokens), categories apart
    req = req.assign(request_id=req["category"].astype(str) + "/" + req["request_id"].astype(str))
    return RequestArrays.from_frame(req[req["repeat"] == req["repeat"].min()])


def _family(method: str) -> str:
    entry = METHODS.get(method)
    cost = entry.cost if entry else None
    return "attached" if cost in ATTACHED else "external" if cost in EXTERNAL else "model-free or other"


def comparisons(data) -> pd.DataFrame:
    """One row per (drafter, D) run against a fine-tuned target and its source target."""
    spec = spec_cells(data.ok)
    cols = ["drafter", "method", "family", "D", "original", "fine-tuned", "AL original", "AL fine-tuned", "ratio",
            "interval", "prompts", "ratio_low", "ratio_high"]
    if spec.empty or "extra" not in spec:
        return pd.DataFrame(columns=cols)
    paths = {t: _target_path(g) for t, g in spec.groupby("target")}
    rows, rng = [], np.random.default_rng(SEED)
    for ft, ft_path in sorted(paths.items()):
        source = finetuned_source(ft_path)
        if source is None:
            continue
        originals = [t for t, p in paths.items() if p == source]
        if not originals:
            continue
        orig = originals[0]
        for (mech, d), grp in spec[spec["target"].isin([ft, orig])].groupby([MECH, D]):
            by_target = {t: g for t, g in grp.groupby("target")}
            if set(by_target) != {ft, orig}:
                continue
            arrays = {t: _arrays(_requests(data.roots, set(g["cell_id"]))) for t, g in by_target.items()}
            if arrays[ft] is None or arrays[orig] is None:
                continue
            est = compare("al", arrays[orig], arrays[ft], CONFIDENCE, RESAMPLES, rng)
            method = str(grp["method"].iloc[0])
            rows.append({"drafter": mech, "method": method, "family": _family(method), "D": int(d), "original": orig,
                         "fine-tuned": ft, "AL original": est.baseline, "AL fine-tuned": est.current,
                         "ratio": est.ratio, "interval": f"[{fmt(est.low)}, {fmt(est.high)}]",
                         "prompts": est.n_requests, "ratio_low": est.low, "ratio_high": est.high})
    return pd.DataFrame(rows, columns=cols)


def verdict(frame: pd.DataFrame) -> str:
    """Whether the write-up's claim holds here: attached drafters lose more acceptance than external drafts."""
    att, ext = frame[frame["family"] == "attached"], frame[frame["family"] == "external"]
    if att.empty or ext.empty:
        return ("The claim (target-attached drafters lose more acceptance after a fine-tune than external drafts) "
                "cannot be tested here: it needs at least one drafter of each kind run against both targets.")
    worst_att, best_att = float(att["ratio_high"].max()), float(att["ratio_low"].min())
    worst_ext, best_ext = float(ext["ratio_high"].max()), float(ext["ratio_low"].min())
    kept = (f"attached drafters keep {fmt(float(att['ratio'].min()))}-{fmt(float(att['ratio'].max()))} of their AL, "
            f"external drafts {fmt(float(ext['ratio'].min()))}-{fmt(float(ext['ratio'].max()))}")
    if all(math.isfinite(x) for x in (worst_att, best_ext)) and worst_att < best_ext:
        return f"Confirmed on these runs: {kept}; every attached drafter's interval lies below every external draft's."
    if all(math.isfinite(x) for x in (best_att, worst_ext)) and best_att > worst_ext:
        return (f"Refuted on these runs: {kept}; every attached drafter's interval lies above every external draft's "
                "(the external drafts lost more).")
    return f"Undecided on these runs: {kept}; the intervals overlap."


def build(data, out: Path | None = None) -> Section:
    sec = Section("g5_finetune", "G5 - AL after a fine-tune of the target")
    frame = comparisons(data)
    if frame.empty:
        sec.text("No drafter was run against a fine-tuned target and its original (`speedbench fixtures finetune`, "
                 "then `target=tiny,tiny_ft`): nothing to compare.")
        return sec
    shown = frame.drop(columns=["ratio_low", "ratio_high"])
    sec.values["finetune"] = frame.to_dict("records")
    sec.values["verdict"] = verdict(frame)
    sec.table(shown, "Each drafter's AL (bonus token included) against the original target and the fine-tuned one, "
              "on the same prompts; ratio = fine-tuned / original with a 95% paired percentile bootstrap interval "
              "over the prompts (each prompt's first repeat).",
              {"AL original": MEASURED, "AL fine-tuned": MEASURED, "ratio": MEASURED, "interval": MEASURED})
    sec.text(sec.values["verdict"])
    return sec
