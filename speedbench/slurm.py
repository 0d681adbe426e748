"""Slurm: the GPUs a sweep's jobs ask for, job states on clusters without accounting, where a cell ran.

* ``gpus_per_node`` in ``conf/hydra/launcher/slurm.yaml`` is ``${sb_slurm_gpus:...}``
  (:func:`gpus_per_node`): GPUs only when the engine runs on them (``backend.device=cuda...``,
  or ``auto`` on a partition whose nodes list GPUs), ``n_gpus`` of them; none for
  ``backend.device=cpu``, ``n_gpus=0`` or a partition without GPUs.
* ``cpus_per_task`` and ``mem_gb`` are ``${sb_slurm_cpus:...}`` / ``${sb_slurm_mem_gb:...}``
  (:func:`cpus_per_task`, :func:`mem_gb`): 8 CPUs and 64 GB, or what the partition's largest node
  has (``sinfo``) when that is less, so a small cluster needs no override; values that no node of the
  partition has (set by hand) are refused before anything is submitted, naming the keys to set
  (:func:`fit_problems`).
* job states on clusters without accounting, and a job pending for a reason waiting cannot
  resolve: ``speedbench.launchers.slurm_states``.
* :func:`where` is the host and the Slurm job/array ids of this process: recorded with every
  cell (``extra.measured_on``) and in ``provenance.json``.
"""
from __future__ import annotations

import functools
import logging
import os
import socket
import subprocess
from dataclasses import dataclass
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


CPUS_PER_TASK = 8  # what a job asks when the partition's nodes have it
MEM_GB = 64


@dataclass(frozen=True)
class NodeSize:
    cpus: int
    mem_mb: int


def _partition(partition: Any) -> str | None:
    return None if partition in (None, "") else str(partition)


@functools.lru_cache(maxsize=16)
def largest_node(partition: str | None) -> NodeSize | None:
    """The most CPUs and the most memory a node of ``partition`` (None: the default one) has, from
    ``sinfo``; None when Slurm cannot say (no ``sinfo``, no such partition)."""
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%P|%c|%m"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    sizes = []
    for line in out.stdout.splitlines():
        name, cpus, mem = (line.strip().split("|") + ["", ""])[:3]
        if (partition is None and name.endswith("*")) or (partition is not None and name.rstrip("*") == partition):
            try:
                sizes.append(NodeSize(int(cpus.rstrip("+")), int(mem.rstrip("+"))))
            except ValueError:
                continue
    if not sizes:
        return None
    return NodeSize(max(n.cpus for n in sizes), max(n.mem_mb for n in sizes))


def cpus_per_task(partition: Any = None) -> int:
    """``CPUS_PER_TASK``, or the partition's largest node's CPUs when fewer."""
    node = largest_node(_partition(partition))
    return CPUS_PER_TASK if node is None else max(1, min(CPUS_PER_TASK, node.cpus))


def mem_gb(partition: Any = None) -> int | None:
    """``MEM_GB``, or the partition's largest node's memory (whole GB) when less; None (ask for no
    memory) on a node with under 1 GB configured."""
    node = largest_node(_partition(partition))
    if node is None:
        return MEM_GB
    return min(MEM_GB, node.mem_mb // 1024) or None


def fit_problems(launcher: Any) -> list[str]:
    """The keys of ``hydra.launcher`` (a Slurm launcher's config) that ask more than any node of its
    partition has: such a job would pend forever (reason PartitionConfig) or be refused by sbatch."""
    partition = _partition(launcher.get("partition"))
    node = largest_node(partition)
    if node is None:
        return []
    where = f"partition {partition}" if partition else "the default partition"
    p = []
    cpus = launcher.get("cpus_per_task")
    if isinstance(cpus, int) and cpus > node.cpus:
        p.append(f"hydra.launcher.cpus_per_task={cpus}: no node of {where} has more than {node.cpus} CPUs (sinfo); "
                 f"set hydra.launcher.cpus_per_task to at most {node.cpus}")
    mem = launcher.get("mem_gb")
    if isinstance(mem, int) and mem * 1024 > node.mem_mb:
        p.append(f"hydra.launcher.mem_gb={mem}: no node of {where} has more than {node.mem_mb} MB (sinfo); "
                 f"set hydra.launcher.mem_gb to at most {node.mem_mb // 1024}")
    return p


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


# The resolvers conf/hydra/launcher/slurm.yaml names (``${sb_slurm_gpus:...}``); registered by
# ``config.hydra.register_resolvers``, not on import.
RESOLVERS = {"sb_slurm_gpus": gpus_per_node, "sb_slurm_cpus": cpus_per_task, "sb_slurm_mem_gb": mem_gb}
