"""``logger=wandb``: one W&B run per cell, grouped by sweep (group = run_id).

Offline by default: runs are written under ``<results>/<run_id>/wandb/`` and uploaded
later with ``wandb sync <results>/<run_id>/wandb/offline-run-*``; ``logger.mode=online``
logs live (credentials come from the usual ``wandb login`` / ``WANDB_API_KEY``, never from
speedbench's config, and the logged config is redacted). ``logger.options`` may set
``entity``, ``dir`` and extra ``tags``.

Each run's id is derived from (run_id, cell_id), so logging a cell again (for instance with
``speedbench wandb-log`` after the fact) updates the same W&B run when synced.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import wandb

from ..hashing import stable_hash
from ..config import LoggerConfig
from ..results.provenance import redact
from ..results.store import ResultsStore
from . import payload
from .base import CellLogger

MODES = ("offline", "online", "disabled")
OPTIONS = ("entity", "dir", "tags")


class WandbLogger(CellLogger):
    def __init__(self, cfg: LoggerConfig, root: Path) -> None:
        super().__init__(cfg, root)
        if cfg.mode not in MODES:
            raise ValueError(f"logger.mode must be one of {', '.join(MODES)}, got {cfg.mode!r}")
        unknown = sorted(set(cfg.options) - set(OPTIONS))
        if unknown:
            raise ValueError(f"logger.options: unknown key(s) {unknown}; known: {list(OPTIONS)}")
        self.dir = Path(cfg.options.get("dir") or root)
        self.extra_tags = [str(t) for t in cfg.options.get("tags") or ()]

    def _init(self, run_id: str, run_uid: str, name: str, job_type: str, tags: list[str], config: dict[str, Any]):
        self.dir.mkdir(parents=True, exist_ok=True)
        # everything W&B is handed is redacted (the one secret rule): a setting interpolated from a secret
        # (+logger.options.entity=${oc.env:DB_PWD}) would land in W&B's debug log and run file as it is
        given = redact({"project": self.cfg.project, "entity": self.cfg.options.get("entity"), "group": run_id,
                        "job_type": job_type, "name": name, "tags": tags + self.extra_tags, "config": config})
        return wandb.init(
            **given,
            id=run_uid,
            dir=redact(str(self.dir)),
            mode=self.cfg.mode,
            reinit="create_new",
            settings=wandb.Settings(console="off", silent=True, save_code=False, x_disable_stats=True),
        )

    def log_cell_id(self, cell_id: str, store: ResultsStore) -> None:
        row = store.cell(cell_id)
        # a derived overall row (category=all) has no records of its own: its category cells' are its
        parts = (row.get("extra") or {}).get("derived_from") or [cell_id] if row.get("derived") else [cell_id]
        paths = [store.requests_path(cid) for cid in parts]
        frames = [pd.read_parquet(p) for p in paths if p.exists()]
        requests = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        run = self._init(
            row["run_id"], stable_hash({"run_id": row["run_id"], "cell_id": cell_id}), payload.run_name(row),
            "cell", payload.tags(row), payload.config(row, store.provenance()),
        )
        try:
            run.summary.update(payload.summary(row))
            run.summary.update(redact({"status": row.get("status", ""), "error": row.get("error", "")}))
            tables = {"per_category": payload.per_category(requests), "per_position": payload.per_position(row)}
            run.log({name: wandb.Table(columns=t.columns, data=t.rows) for name, t in tables.items() if t.rows})
        finally:
            run.finish()

    def log_sweep(self, store: ResultsStore) -> None:
        """One run for the whole folder: the cell table and the report's plots (``report/*.png``)."""
        table = store.cells()
        if table.empty:
            return
        run_id = str(table["run_id"].iloc[0])
        prov = store.provenance()
        run = self._init(
            run_id, stable_hash({"run_id": run_id, "sweep": str(store.root.name)}), f"{run_id} (sweep)",
            "sweep", sorted({t for row in table.to_dict("records") for t in payload.tags(row)}),
            payload.config({}, prov),
        )
        try:
            flat = table.map(lambda v: json.dumps(v) if isinstance(v, (list, dict)) else v)
            run.log({"cells": wandb.Table(dataframe=flat)})
            plots = sorted((store.root / "report").glob("*.png"))
            if plots:
                run.log({f"report/{p.stem}": wandb.Image(str(p)) for p in plots})
            run.summary.update({"n_cells": len(table), "n_failed": int((table["status"] != "ok").sum())})
        finally:
            run.finish()
