"""Where the cells ran: one row per node when a results folder's cells came from several nodes.

Every cell records ``extra.measured_on`` (the host, and inside a Slurm job its job, array job and
array task ids; ``speedbench.slurm.where``). A sweep spread over a cluster mixes nodes, and a
node's speed shifts its cells' timings: the table lets a reader check that no configuration
ran only on a different machine. One node (or folders written before the field existed): nothing.
"""
from __future__ import annotations

import pandas as pd

from .common import MECH, Section

UNKNOWN = "(not recorded)"


def _node(extra) -> str:
    where = extra.get("measured_on") if isinstance(extra, dict) else None
    return str(where.get("node") or UNKNOWN) if isinstance(where, dict) else UNKNOWN


def _job(extra) -> str:
    where = extra.get("measured_on") if isinstance(extra, dict) else None
    slurm = where.get("slurm") if isinstance(where, dict) else None
    if not isinstance(slurm, dict):
        return ""
    if slurm.get("array_job_id"):
        return f"{slurm['array_job_id']}_{slurm.get('array_task_id', '')}"
    return str(slurm.get("job_id", ""))


def per_node(cells: pd.DataFrame) -> pd.DataFrame:
    """node, cells, ok, failed, the Slurm jobs (array tasks) and the mechanisms that ran there."""
    if cells.empty or "extra" not in cells:
        return pd.DataFrame()
    frame = cells.assign(node=cells["extra"].map(_node), job=cells["extra"].map(_job))
    rows = []
    for node, part in frame.groupby("node", sort=True):
        jobs = sorted({j for j in part["job"] if j})
        mechs = sorted({f"{m} D={d}" for m, d in zip(part[MECH], part["num_speculative_tokens"])})
        rows.append({"node": node, "cells": len(part), "ok": int((part["status"] == "ok").sum()),
                     "failed": int((part["status"] != "ok").sum()), "Slurm jobs": ", ".join(jobs) or "-",
                     "configurations": ", ".join(mechs)})
    return pd.DataFrame(rows)


def add(sec: Section, cells: pd.DataFrame) -> None:
    """A "Where the cells ran" table in ``sec`` when the cells came from more than one node."""
    table = per_node(cells)
    if len(table) < 2:
        return
    sec.values["nodes"] = table.to_dict("records")
    sec.text(f"### Where the cells ran ({len(table)} nodes)\n\nTimings from different machines differ: compare "
             "configurations measured on the same node, or check that the nodes are alike.")
    sec.table(table)
