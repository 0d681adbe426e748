"""Slurm: the GPUs a sweep's jobs ask for, job states on clusters without accounting, where a cell ran.

* ``gpus_per_node`` in ``conf/hydra/launcher/slurm.yaml`` is ``${sb_slurm_gpus:...}``
  (:func:`gpus_per_node`): GPUs only when the engine runs on them (``backend.device=cuda...``,
  or ``auto`` on a partition whose nodes list GPUs), ``n_gpus`` of them; none for
  ``backend.device=cpu``, ``n_gpus=0`` or a partition without GPUs.
* job states on clusters without accounting: ``speedbench.launchers.slurm_states``.
* :func:`where` is the host and the Slurm job/array ids of this process: recorded with every
  cell (``extra.measured_on``) and in ``provenance.json``.
"""
from __future__ import annotations

import functools
import logging
import os
import socket
import subprocess
from typing import Any

log = logging.getLogger(__name__)

SLURM_ENV = {"job_id": "SLURM_JOB_ID", "array_job_id": "SLURM_ARRAY_JOB_ID", "array_task_id": "SLURM_ARRAY_TASK_ID"}


def where() -> dict[str, Any]:
    """``{"node": hostname, "slurm": {job_id, array_job_id, array_task_id}}``; ``slurm`` only inside a Slurm job."""
    out: dict[str, Any] = {"node": socket.gethostname()}
    ids = {key: os.environ[name] for key, name in SLURM_ENV.items() if os.environ.get(name)}
    if ids:
        out["slurm"] = ids
    return out


@functools.lru_cache(maxsize=16)
def partition_has_gpus(partition: str | None) -> bool | None:
    """Whether the nodes of ``partition`` (None: the default partition) list GPUs in their GRES;
    None when Slurm cannot say (no ``sinfo``, no such partition)."""
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%P|%G"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    found = None
    for line in out.stdout.splitlines():
        name, _, gres = line.strip().partition("|")
        default = name.endswith("*")
        if (partition is None and default) or (partition is not None and name.rstrip("*") == partition):
            found = bool(found) or "gpu" in gres.lower()
    return found


def gpus_per_node(device: Any, n_gpus: Any, partition: Any = None) -> int | None:
    """The ``--gpus-per-node`` of a sweep's jobs (None: ask for no GPU)."""
    device = str(device or "auto").strip().lower()
    try:
        count = int(n_gpus)
    except (TypeError, ValueError):
        return None  # validation names the bad n_gpus before anything is submitted
    if count <= 0 or not (device == "auto" or device.startswith("cuda")):
        return None
    if device == "auto" and partition_has_gpus(None if partition in (None, "") else str(partition)) is False:
        return None
    return count


def register_resolver() -> None:
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("sb_slurm_gpus", gpus_per_node, replace=True)


register_resolver()  # wherever the package composes a config (also in submitit's job processes)
