"""The mechanism table (G5): the write-up's qualitative comparison of drafting mechanisms, filled with
this run's numbers. One row per mechanism measured (the ``drafter`` column), then one per method in the
method table that has no cell, saying why: the method table's ``unmeasured`` line where nothing here runs
it, else the engine's refusal, else that these results have no cell of it.

Columns: what the drafter reads (its inputs), how it drafts (serial, parallel, lookup: the method
table's ``kind``), its serve-time memory (parameters and extra KV bytes per token, from the drafter's
own ``config.json`` and weights at the dtype the run used), its draft time per step at each measured D
(the cells' ``t_draft_ms``: mean over cells, with their range), AL per category (at the mechanism's
largest measured D), its training cost (steps and wall time from the shipped models' manifest), and
its best speedup per batch size with the interval, read from G5's ranking (``mechanism.ranking``: the
one rule every section uses), never computed again here.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..drafters.registry import METHODS, MODEL_FREE, PARALLEL, SERIAL, engine_refusal, is_baseline
from .common import B, D, MEASURED, MECH, Section, fmt, spec_cells

# What a drafter reads, by what drafts (the method table's ``cost`` family: the cost model's drafting model),
# or by the method's own ``reads`` where its cost family reads more (Medusa: a head that takes no tokens)
INPUTS = {
    "free": "tokens (lookup over the prompt and output)",
    "own_model": "tokens (its own model)",
    "head": "target hidden states + tokens",
    "target_head": "target's last hidden state + last token",
    "target_layers": "tokens (the target's first layers)",
    "target_state": "target's last hidden state (no tokens)",
}
MODES = {SERIAL: "serial (one forward per drafted token)", PARALLEL: "parallel (one forward for all D)",
         MODEL_FREE: "lookup (no forward)"}
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "half": 2, "float": 4, "auto": 2}
COLUMNS = ["mechanism", "method", "inputs", "generation", "params", "param MiB", "KV KiB/token", "draft ms/step by D",
           "AL by category", "training", "best speedup by B"]


@dataclass(frozen=True)
class Footprint:
    """A drafter's serve-time memory: parameters (count and bytes at the run's dtype) and the KV bytes
    it adds per token (its attention layers x KV heads x head dim x 2, at that dtype)."""

    params: float
    param_bytes: float
    kv_bytes_per_token: float


def _config_of(cells: pd.DataFrame) -> dict[str, Any]:
    for extra in cells.get("extra", pd.Series(dtype=object)):
        if isinstance(extra, dict) and isinstance(extra.get("config"), dict):
            return extra["config"]
    return {}


def _weights_params(folder: Path, prefix: str = "") -> float:
    from safetensors import safe_open

    total = 0
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), "np") as f:
            for key in f.keys():
                if key.startswith(prefix):
                    total += math.prod(f.get_slice(key).get_shape())
    return float(total) if total else math.nan


def inputs(entry) -> str:
    """What a method's drafter reads: its own ``reads``, else by its drafting model, else (model-free) the lookup,
    else its own weights."""
    if entry is None:
        return "weights of its own (not in the method table)"
    if entry.reads in INPUTS:
        return INPUTS[entry.reads]
    if entry.cost in INPUTS:
        return INPUTS[entry.cost]
    return INPUTS["free"] if entry.kind == MODEL_FREE else "target hidden states + tokens (its own weights)"


def footprint(drafter: dict[str, Any], target: dict[str, Any], dtype: str) -> Footprint:
    """The footprint of a drafter config (``extra.config.drafter``) next to its target's config; NaN where
    the files are not here (a hub id)."""
    from ..models import model_config, resolve_path

    width = DTYPE_BYTES.get(str(dtype), 4)
    method = METHODS.get(str(drafter.get("method")))
    if method is not None and method.kind == MODEL_FREE:
        return Footprint(0.0, 0.0, 0.0)
    try:
        if drafter.get("model"):
            folder = Path(resolve_path(str(drafter["model"])))
            cfg = model_config(str(drafter["model"])) or {}
            params = _weights_params(folder) if folder.is_dir() else math.nan
            layers = cfg.get("num_hidden_layers", math.nan)
        elif method is not None and method.cost == "target_head" and target.get("path"):
            folder = Path(resolve_path(str(target["path"])))
            cfg = model_config(str(target["path"])) or {}
            params = _weights_params(folder, method.weights_prefix) if folder.is_dir() else math.nan  # the target's MTP layers
            layers = cfg.get("num_nextn_predict_layers", math.nan)
        elif drafter.get("num_layers") and target.get("path"):  # layer skip: the target's first layers
            cfg = model_config(str(target["path"])) or {}
            params, layers = 0.0, float(drafter["num_layers"])
        else:
            return Footprint(math.nan, math.nan, math.nan)
    except (OSError, ValueError):
        return Footprint(math.nan, math.nan, math.nan)
    if method is not None and not method.draft_kv:  # no attention of its own (Medusa's residual heads)
        return Footprint(params, params * width, 0.0)
    heads = cfg.get("num_key_value_heads") or cfg.get("num_attention_heads") or math.nan
    head_dim = cfg.get("head_dim") or (cfg.get("hidden_size", math.nan) / cfg.get("num_attention_heads", math.nan)
                                       if cfg.get("num_attention_heads") else math.nan)
    kv = 2.0 * float(layers) * float(heads) * float(head_dim) * width
    return Footprint(params, params * width, kv)


def _manifest() -> dict[str, Any]:
    path = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "MANIFEST.json"
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("provenance", {})
    except (OSError, json.JSONDecodeError):
        return {}


def training_cost(drafter: dict[str, Any], manifest: dict[str, Any], target: dict[str, Any] | None = None) -> str:
    """Steps and wall time of the shipped drafter's training (``MANIFEST.json``; a method drafting with the
    target's own layer: its target's entry), or why there is none."""
    method = METHODS.get(str(drafter.get("method")))
    if method is not None and method.kind == MODEL_FREE:
        return "none (model-free)"
    own_layer = method is not None and method.cost == "target_head" and not drafter.get("model")
    model = str((target or {}).get("path") if own_layer else drafter.get("model") or "")
    if not model.startswith("builtin:"):
        return "shares the target's weights" if drafter.get("num_layers") else "not recorded (not a shipped model)"
    name = model.split(":", 1)[1]
    own = (manifest.get("models") or {}).get(name) or {}
    distil = manifest.get("distillation") or {}
    steps = own.get("steps") or (distil.get("steps_per_drafter") or {}).get(name)
    wall = own.get("wall_s") if own.get("wall_s") is not None else (
        distil.get("wall_s") if name in (distil.get("steps_per_drafter") or {}) else None)
    if steps is None:
        return "not recorded in the manifest"
    shared = " (shared by the distilled drafters)" if own.get("wall_s") is None and wall is not None else ""
    return f"{int(steps)} steps, {fmt(float(wall))} s{shared}" if wall is not None else f"{int(steps)} steps"


def _draft_times(cells: pd.DataFrame) -> str:
    parts = []
    for d, grp in cells.groupby(D, sort=True):
        t = pd.to_numeric(grp["t_draft_ms"], errors="coerce").dropna()
        if t.empty:
            parts.append(f"D={int(d)}: n/a")
        elif len(t) == 1:
            parts.append(f"D={int(d)}: {fmt(float(t.iloc[0]))}")
        else:
            parts.append(f"D={int(d)}: {fmt(float(t.mean()))} [{fmt(float(t.min()))}-{fmt(float(t.max()))}]")
    return "; ".join(parts)


def _al_by_category(cells: pd.DataFrame) -> str:
    d_max = cells[D].max()
    top = cells[cells[D] == d_max]
    al = top.groupby("category")["al"].mean()
    return f"D={int(d_max)}: " + ", ".join(f"{c} {fmt(float(v))}" for c, v in al.items())


def _best_by_batch(rank: pd.DataFrame, mech: str) -> str:
    mine = rank[rank["mechanism"] == mech]
    if mine.empty:
        return "n/a"
    parts = []
    for b, grp in mine.groupby("B", sort=True):
        top = grp.sort_values("speedup", ascending=False).iloc[0]
        note = "" if top["evidence"] == "stable" else f", {top['evidence']}"
        parts.append(f"B={int(b)}: {fmt(float(top['speedup']))} {top['interval']} (D={top['best D']}{note})")
    return "; ".join(parts)


def table(ok: pd.DataFrame, rank: pd.DataFrame, backends: list[str] | None = None) -> pd.DataFrame:
    """The mechanism table of the ok cells (``rank``: ``mechanism.ranking`` of them)."""
    spec = spec_cells(ok)
    manifest = _manifest()
    rows = []
    measured_methods = set()
    for mech, cells in spec.groupby(MECH, sort=True):
        config = _config_of(cells)
        drafter, target = config.get("drafter", {}), config.get("target", {})
        name = str(cells["method"].iloc[0])
        measured_methods.add(name)
        entry = METHODS.get(name)
        fp = footprint(drafter, target, str(target.get("dtype", "float32")))
        rows.append({
            "mechanism": mech, "method": name,
            "inputs": inputs(entry),
            "generation": MODES.get(entry.kind if entry else "", "n/a"),
            "params": fp.params, "param MiB": fp.param_bytes / 2**20, "KV KiB/token": fp.kv_bytes_per_token / 1024,
            "draft ms/step by D": _draft_times(cells), "AL by category": _al_by_category(cells),
            "training": training_cost(drafter, manifest, target), "best speedup by B": _best_by_batch(rank, mech)})
    backends = backends or (sorted(ok["backend"].astype(str).unique()) if "backend" in ok else ["torch"])
    for name, entry in METHODS.items():
        if is_baseline(name) or name in measured_methods:
            continue
        why = entry.unmeasured or next((r for b in backends if (r := engine_refusal(b, name, on_cpu=True))), None)
        if why is None:
            runs = [b for b in backends if entry.runs_on(b)]
            why = "no cell in these results" + ("" if runs else f" (backend {', '.join(backends)} does not run it)")
        rows.append({"mechanism": f"({name})", "method": name, "inputs": inputs(entry),
                     "generation": MODES.get(entry.kind, "n/a"), "params": math.nan, "param MiB": math.nan,
                     "KV KiB/token": math.nan, "draft ms/step by D": "n/a", "AL by category": "n/a",
                     "training": "n/a", "best speedup by B": f"not measured: {why}"})
    return pd.DataFrame(rows, columns=COLUMNS)


def build(data, out: Path | None = None) -> Section:
    """The report's section: the table of ``data``'s ok cells, ranked by G5's one rule."""
    from .mechanism import ranking

    sec = Section("g5_mechanisms", "G5 - the mechanism table, measured")
    spec = spec_cells(data.ok)
    if spec.empty:
        sec.text("No speculative cell: no mechanism measured.")
        return sec
    add_to(sec, data.ok, ranking(spec, data.overall))
    return sec


def add_to(sec: Section, ok: pd.DataFrame, rank: pd.DataFrame) -> pd.DataFrame:
    frame = table(ok, rank)
    sec.values["mechanism_table"] = frame.to_dict("records")
    sec.table(frame, "The mechanism table: inputs, generation mode, serve-time memory (from the drafter's config and "
              "weights at the run's dtype), draft time per step (mean over cells [range]), AL per category, training "
              "cost (the shipped models' manifest) and the best speedup per batch size with its interval (G5's "
              "ranking); a method with no cell says why.",
              {"draft ms/step by D": MEASURED, "AL by category": MEASURED, "best speedup by B": MEASURED})
    return frame
