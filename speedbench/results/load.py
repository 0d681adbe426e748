"""Reading one or several results folders into one frame for the report and the planner.

A folder given may be a run (it has ``cells/``) or a parent of runs (each sub-folder with
``cells/`` is read). The same cell measured in several folders keeps its last copy, in the
order the folders were given. Nothing here runs an engine.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from .layout import RunFolder
from .store import ResultsStore, check_folder

MICROBENCH_KINDS = ("gemm", "attention", "verify")


@dataclass
class TargetInfo:
    name: str
    path: str | None
    dtype: str | None


@dataclass
class ReportData:
    roots: list[Path]
    cells: pd.DataFrame  # every cell (failed ones too) + measured ``context_tokens``
    provenance: list[dict[str, Any]]
    microbench: dict[str, pd.DataFrame] = field(default_factory=dict)
    targets: dict[str, TargetInfo] = field(default_factory=dict)
    device_names: list[str] = field(default_factory=list)

    @property
    def ok(self) -> pd.DataFrame:
        """Measured cells that finished; derived rows (category=all) are left out so no mean counts a
        prompt twice (see ``overall``)."""
        if self.cells.empty:
            return self.cells
        return self.cells[(self.cells["status"] == "ok") & ~_derived(self.cells)].reset_index(drop=True)

    @property
    def overall(self) -> pd.DataFrame:
        """Derived rows (category=all): each configuration pooled over its category cells' records."""
        if self.cells.empty:
            return self.cells
        return self.cells[(self.cells["status"] == "ok") & _derived(self.cells)].reset_index(drop=True)

    @property
    def failed(self) -> pd.DataFrame:
        if self.cells.empty:
            return self.cells
        return self.cells[self.cells["status"] != "ok"].reset_index(drop=True)

    @property
    def backends(self) -> list[str]:
        return sorted(set(self.cells["backend"])) if not self.cells.empty else []


def run_folders(paths: list[str | Path]) -> list[Path]:
    out: list[Path] = []
    for p in map(check_folder, paths):
        if RunFolder(p).has_results:
            out.append(p)
        elif p.is_dir():
            out += sorted(q for q in p.iterdir() if not q.is_symlink() and RunFolder(q).has_results)  # not `latest`
        else:
            raise FileNotFoundError(f"results folder {p} does not exist")
    if not out:
        raise FileNotFoundError(f"no results (cells/ or microbench/) under {[str(p) for p in paths]}")
    return out


def measured_context(store: ResultsStore) -> dict[str, float]:
    """Mean context per cell while decoding: prompt tokens + half the generated tokens (spec runs)."""
    req = store.requests()
    if req.empty or "prompt_tokens" not in req:
        return {}
    req = req[(req["role"] == "spec") & (req["status"] == "ok")]
    ctx = req["prompt_tokens"] + req["n_tokens"] / 2
    return ctx.groupby(req["cell_id"]).mean().to_dict()


def load(paths: list[str | Path]) -> ReportData:
    roots = run_folders(paths)
    frames, provs, micro = [], [], {k: [] for k in MICROBENCH_KINDS}
    targets: dict[str, TargetInfo] = {}
    devices: list[str] = []
    for root in roots:
        store = ResultsStore(root)
        cells = store.cells()
        prov = store.provenance()
        if prov:
            provs.append(prov)
            tcfg = (prov.get("config") or {}).get("target") or {}
            if tcfg.get("name"):
                targets[tcfg["name"]] = TargetInfo(tcfg["name"], tcfg.get("path"), tcfg.get("dtype"))
            hw = prov.get("hardware") or {}
            devices.append(str(hw.get("gpu") or hw.get("device") or ""))
        if not cells.empty:
            ctx = measured_context(store)
            cells = cells.assign(context_tokens=cells["cell_id"].map(ctx).astype(float), results_dir=str(root))
            frames.append(cells)
        for kind in MICROBENCH_KINDS:
            path = RunFolder(root).microbench_path(kind)
            if path.exists():
                micro[kind].append(pd.read_parquet(path).assign(results_dir=str(root)))
    cells = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if not cells.empty:
        cells = cells.drop_duplicates("cell_id", keep="last").reset_index(drop=True)
        if "schedule" in cells:  # folders written before the column: static D, as ""
            cells["schedule"] = cells["schedule"].fillna("").astype(str)
        if "synthetic_al" in cells:  # forced acceptance is another configuration than the drafter's own
            forced = pd.to_numeric(cells["synthetic_al"], errors="coerce").notna()
            cells["acceptance_kind"] = forced.map({True: "synthetic", False: "real"})
    return ReportData(
        roots=roots, cells=cells, provenance=provs,
        microbench={k: pd.concat(v, ignore_index=True) for k, v in micro.items() if v},
        targets=targets, device_names=[d for d in dict.fromkeys(devices) if d],
    )


def _derived(cells: pd.DataFrame) -> pd.Series:
    if "derived" not in cells:
        return pd.Series(False, index=cells.index)
    return cells["derived"].map(lambda v: bool(v) and v == v)


def finite(x: Any) -> bool:
    try:
        return x is not None and not math.isnan(float(x))
    except (TypeError, ValueError):
        return False
