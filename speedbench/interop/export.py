"""A results folder written for other tools (``speedbench export``, docs/interop.md).

* ``specdec_bench``: the SPEED-Bench tool's (NVIDIA Model-Optimizer ``examples/specdec_bench``)
  sweep layout ``OUT/<target>__<drafter>/<NNN>_<dataset>_c<C>/`` (its ``resolve_run_save_dir``:
  ``{index:03d}_{dataset}_c{concurrency}``), one run folder per speculative cell holding
  ``configuration.json``, ``timing.json`` and ``acceptance_rate.json`` (each a JSON list of one
  dict per run, as its ``Metric.write`` appends) and ``responses.jsonl``. Its upload script counts
  a folder holding any of the three JSON files as a run, at ``root/run/`` or ``root/sweep/run/``.
  Timing stats blocks are its ``compute_statistics``: ``{min, max, mean, std, quantiles: {"0.25",
  "0.5", "0.75"}}`` as ``%.4f`` strings (numpy's population std and linear percentiles), times in
  seconds; acceptance keys ``Request_AL`` ({request: {turn: AL}}), ``Average_AL``,
  ``Acceptance_Length_Histogram``, ``Conditional_Acceptance_Rate``, ``Joint_Acceptance_Rate``
  (product of the conditional rates, its main branch) over the streamed chunk lengths, as it counts.
* ``inferencex``: InferenceX's golden-AL YAML ``{model: {thinking_off: {K: AL}}}`` (AL to 2
  decimals) per (target, drafter), one file each; comments give each K's cells, requests and
  speedup interval, and a note where AL is not monotone in K or comes from an unstable cell.
* ``csv``: the cell table, one tidy row per cell (lists as JSON text).
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..console import UsageError

QUANTILES = (0.25, 0.5, 0.75)
SPECDEC_FILES = ("configuration.json", "timing.json", "acceptance_rate.json")


def _safe(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(value)).strip("_") or "run"


def stats_block(values) -> dict | None:
    """The SPEED-Bench tool's ``compute_statistics`` block (None when there is no value)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return None
    q = np.percentile(v, [x * 100 for x in QUANTILES])
    return {"min": f"{v.min():.4f}", "max": f"{v.max():.4f}", "mean": f"{v.mean():.4f}", "std": f"{v.std():.4f}",
            "quantiles": {f"{x}": f"{y:.4f}" for x, y in zip(QUANTILES, q)}}


def _list(v) -> list:
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except json.JSONDecodeError:
            return []
    return list(v) if isinstance(v, (list, tuple, np.ndarray)) else []


def _chunk_lengths(req: pd.Series) -> list[list[int]]:
    """Per turn, the streamed chunk lengths of a request (what the SPEED-Bench tool's AL counts); [] if not kept."""
    chunks, turns = _list(req.get("chunks")), _list(req.get("turn_chunks"))
    out, start = [], 0
    for n in turns:
        out.append([int(c) for c in chunks[start:start + int(n)]])
        start += int(n)
    return [t for t in out if t]


def _acceptance(cell: pd.Series, spec: pd.DataFrame) -> tuple[dict, str]:
    request_al: dict[str, dict[str, float]] = {}
    lengths: dict[int, int] = {}
    for i, (_, r) in enumerate(spec.iterrows()):
        for t, turn in enumerate(_chunk_lengths(r)):
            request_al.setdefault(str(i), {})[str(t)] = sum(turn) / len(turn)
            for n in turn:
                lengths[n] = lengths.get(n, 0) + 1
    how = "streamed chunk lengths"
    if not lengths:  # no chunks kept (an imported or offline cell): from the steps' accepted counts
        hist = [int(x) for x in _list(cell.get("accepted_hist"))]
        lengths = {k + 1: n for k, n in enumerate(hist) if n}
        how = "accepted-draft histogram (no streamed chunks kept)"
        if not lengths:  # an imported cell: vLLM and AIPerf print per-position acceptance, not a histogram
            lengths, how = _lengths_from_positions(cell), "per-position acceptance (no streamed chunks or histogram kept)"
        for i, (_, r) in enumerate(spec.iterrows()):
            if int(r.get("n_drafts") or 0) > 0:
                request_al[str(i)] = {"0": 1 + float(r["accepted"]) / float(r["n_drafts"])}
    out: dict[str, Any] = {"Request_AL": request_al}
    all_al = [a for turns in request_al.values() for a in turns.values()]
    out["Average_AL"] = sum(all_al) / len(all_al) if all_al else float(cell.get("al", math.nan))
    lengths = dict(sorted(lengths.items()))
    out["Acceptance_Length_Histogram"] = {str(k): v for k, v in lengths.items()}
    total = sum(lengths.values())
    cond, joint, running, prev, j = {}, {}, total, 1.0, 1.0
    for k, v in lengths.items():
        c = running / total / prev if total and prev else math.nan
        cond[str(k)] = c
        prev = running / total if total else math.nan
        running -= v
        j *= c
        joint[str(k)] = j
    out["Conditional_Acceptance_Rate"], out["Joint_Acceptance_Rate"] = cond, joint
    return out, how


def _lengths_from_positions(cell: pd.Series) -> dict[int, int]:
    """Drafts by acceptance length (1 + accepted) from per-position acceptance p_k (the share of drafts
    whose position k was accepted, so P(length = 1 + j) = p_j - p_(j+1), p_0 = 1), times the drafts
    (``n_drafts``, else the accepted tokens over the sum of p_k)."""
    p = [float(x) for x in _list(cell.get("accepted_per_pos")) if _finite(x)]
    if not p or sum(p) <= 0:
        return {}
    n = float(cell.get("n_drafts") or 0) if _finite(cell.get("n_drafts")) else 0.0
    if n <= 0 and _finite(cell.get("n_accepted")):
        n = float(cell["n_accepted"]) / sum(p)
    shares = [1.0, *p, 0.0]
    counts = {j + 1: int(round(n * (shares[j] - shares[j + 1]))) for j in range(len(p) + 1)}
    return {k: v for k, v in counts.items() if v > 0}


def _timing(cell: pd.Series, spec: pd.DataFrame) -> dict:
    ok = spec[spec["status"] == "ok"] if "status" in spec else spec
    out: dict[str, Any] = {"Output TPS": float(cell.get("output_tok_s_spec", math.nan))}
    n_gpus = int(cell.get("n_gpus") or 0)
    out["Output TPS/gpu"] = out["Output TPS"] / n_gpus if n_gpus > 0 else out["Output TPS"]
    blocks = {
        "E2E Request Time": list(ok["e2e"]) if "e2e" in ok else [],
        "TTFT Time": list(ok["ttft"]) if "ttft" in ok else [],
        "Request Generation Step Time": [g for gaps in ok.get("chunk_gaps", []) for g in _list(gaps)],
        "Request Generation Tokens Per Second": [1.0 / t for t in ok.get("tpot", []) if t and math.isfinite(t) and t > 0],
        "Number of Output Tokens": list(ok["n_tokens"]) if "n_tokens" in ok else [],
    }
    for name, values in blocks.items():
        block = stats_block(values)
        if block is not None:
            out[name] = block
    return out


def _configuration(cell: pd.Series, prov: dict) -> dict:
    """``configuration.json`` under the tool's names (its ``dump_env``: run.py's arguments, then the
    provenance fields); ``container_image`` from ``CONTAINER_IMAGE`` as the tool takes it (its upload
    script refuses a run without it), the rest speedbench's own provenance."""
    import os

    cfg = (cell.get("extra") or {}).get("config") if isinstance(cell.get("extra"), dict) else None
    versions = dict(prov.get("versions") or prov.get("packages") or {})
    config = prov.get("config") if isinstance(prov.get("config"), dict) else {}
    cfg = cfg or config
    target = (cfg or {}).get("target", {}).get("path") if cfg else cell.get("target")
    draft = ((cfg or {}).get("drafter") or {}).get("model") if cfg else None
    conc = int(cell.get("concurrency")) if _finite(cell.get("concurrency")) and cell.get("concurrency") > 0 else 1
    return {
        "dataset": cell.get("dataset"),
        "num_requests": int(cell.get("n_requests") or 0),
        "engine": cell.get("backend"),
        "speculative_algorithm": cell.get("method"),
        "model_dir": target,
        "draft_model_dir": draft,
        "temperature": float(cell["temperature"]) if _finite(cell.get("temperature")) else None,
        "output_length": int(cell["max_new_tokens"]) if _finite(cell.get("max_new_tokens")) else None,
        "draft_length": int(cell.get("num_speculative_tokens") or 0),
        "tp_size": max(1, int(cell.get("n_gpus") or 1)),
        "concurrency": conc,
        "engine_version": versions.get("vllm") or cell.get("source") or None,
        "gpu": (prov.get("hardware") or {}).get("gpu") or cell.get("device"),
        "python_version": prov.get("python") if isinstance(prov.get("python"), str) else None,
        "argv": prov.get("argv") or [],
        "container_image": os.environ.get("CONTAINER_IMAGE") or None,
        "checkpoint": {"path": target},
        "timestamp": prov.get("created_utc") or prov.get("created") or prov.get("timestamp"),
        "versions": versions,
        "source": cell.get("source") or "speedbench",
        "speedbench_cell_id": cell.get("cell_id"),
    }


def _finite(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(float(v))


def _spec_cells(cells: pd.DataFrame) -> pd.DataFrame:
    keep = cells["method"].astype(str) != "none" if "method" in cells else pd.Series(True, index=cells.index)
    if "derived" in cells:
        keep &= ~cells["derived"].fillna(False).astype(bool)
    return cells[keep]


def write_specdec_bench(cells: pd.DataFrame, requests: pd.DataFrame, prov: dict, out: Path) -> list[Path]:
    written = []
    for (target, drafter), group in _spec_cells(cells).groupby(["target", "drafter"], sort=True):
        sweep = out / f"{_safe(target)}__{_safe(drafter)}"
        group = group.sort_values(["num_speculative_tokens", "concurrency", "category", "cell_id"])
        for i, (_, cell) in enumerate(group.iterrows()):
            conc = int(cell["concurrency"]) if _finite(cell.get("concurrency")) and cell["concurrency"] > 0 else int(cell.get("batch_size") or 1)
            run = sweep / f"{i:03d}_{_safe(cell['dataset'])}_c{conc}"
            run.mkdir(parents=True, exist_ok=True)
            spec = requests[(requests["cell_id"] == cell["cell_id"]) & (requests["role"] == "spec")] if not requests.empty else requests
            accept, how = _acceptance(cell, spec)
            config = _configuration(cell, prov) | {"acceptance_from": how}
            (run / "configuration.json").write_text(json.dumps(config, indent=4, default=str))
            (run / "timing.json").write_text(json.dumps([_timing(cell, spec)], indent=4))
            (run / "acceptance_rate.json").write_text(json.dumps([accept], indent=4))
            with open(run / "responses.jsonl", "w", encoding="utf-8") as handle:
                for q, (_, r) in enumerate(spec.iterrows()):
                    # speedbench keeps token ids, not text: the turns stay empty strings (docs/interop.md)
                    handle.write(json.dumps({"question_id": q, "turns": [""], "choices": [{"index": 0, "turns": [""]}],
                                             "speedbench_request_id": r.get("request_id")}) + "\n")
            written.append(run)
    return written


def _slug(text: str) -> str:
    return _safe(text).lower()


def write_inferencex(cells: pd.DataFrame, requests: pd.DataFrame, prov: dict, out: Path) -> list[Path]:
    """One YAML per (target, drafter): ``{target: {thinking_off: {K: AL}}}``, notes as comments."""
    written = []
    out.mkdir(parents=True, exist_ok=True)
    for (target, drafter), group in _spec_cells(cells).groupby(["target", "drafter"], sort=True):
        lines = [f"# golden AL of drafter {drafter} on {target}, measured by speedbench "
                 f"(AL counts the bonus token; one value per K pools the K's cells' drafts)"]
        body, prev, notes = [], None, []
        for k, at_k in group.groupby("num_speculative_tokens", sort=True):
            ok = at_k[at_k["al"].map(_finite)]
            if ok.empty:
                continue
            weights = ok["n_requests"].clip(lower=1).astype(float)
            al = float((ok["al"] * weights).sum() / weights.sum())
            lo, hi = ok["speedup_ci_low"].min(), ok["speedup_ci_high"].max()
            comment = (f"{len(ok)} cell(s), {int(ok['n_requests'].sum())} requests; speedup interval "
                       f"[{lo:.3f}, {hi:.3f}]" if _finite(lo) and _finite(hi) else
                       f"{len(ok)} cell(s), {int(ok['n_requests'].sum())} requests; no speedup interval")
            unstable = ok[~ok["stable"].fillna(False).astype(bool)] if "stable" in ok else ok.iloc[0:0]
            if not unstable.empty:
                reasons = "; ".join(sorted({str(r) for r in unstable["unstable_reason"] if str(r)}))[:160]
                comment += f"; NOTE from {len(unstable)} unstable cell(s): {reasons}"
                notes.append(f"K={int(k)} from unstable cells")
            if prev is not None and al < prev[1]:
                comment += f"; NOTE not monotone: below K={prev[0]}'s {prev[1]:.2f}"
                notes.append(f"K={int(k)} below K={prev[0]}")
            body.append(f"    {int(k)}: {al:.2f}  # {comment}")
            prev = (int(k), al)
        if not body:
            continue
        if notes:
            lines.append("# NOTE: " + "; ".join(notes))
        lines += [f"{json.dumps(str(target))}:", "  thinking_off:", *body]
        path = out / f"{_slug(target)}__{_slug(drafter)}.yaml"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        written.append(path)
    return written


def write_csv(cells: pd.DataFrame, requests: pd.DataFrame, prov: dict, out: Path) -> list[Path]:
    flat = cells.drop(columns=[c for c in ("results_dir", "context_tokens") if c in cells]).copy()
    for col in flat.columns:
        if flat[col].map(lambda v: isinstance(v, (list, dict, tuple, np.ndarray))).any():
            flat[col] = flat[col].map(lambda v: json.dumps(v.tolist() if isinstance(v, np.ndarray) else v, default=str)
                                      if isinstance(v, (list, dict, tuple, np.ndarray)) else v)
    path = out if out.suffix == ".csv" else out / "cells.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    flat.to_csv(path, index=False)
    return [path]


# format -> writer(cells, requests, provenance, out) -> written paths
WRITERS: dict[str, Callable[[pd.DataFrame, pd.DataFrame, dict, Path], list[Path]]] = {
    "specdec_bench": write_specdec_bench, "inferencex": write_inferencex, "csv": write_csv,
}


def export(results: list[str], fmt: str, out: Path) -> list[Path]:
    from ..results import ResultsStore
    from ..results.load import load

    if fmt not in WRITERS:
        raise UsageError(f"--format {fmt!r}: known formats are {', '.join(WRITERS)}")
    data = load(results)
    if data.cells.empty:
        raise UsageError(f"{', '.join(map(str, results))}: no cells to export")
    requests = pd.concat([ResultsStore(r).requests() for r in data.roots], ignore_index=True)
    prov = data.provenance[0] if data.provenance else {}
    return WRITERS[fmt](data.cells, requests, prov, Path(out))
