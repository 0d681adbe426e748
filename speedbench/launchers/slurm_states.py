"""Job states on Slurm clusters without accounting, and jobs stuck pending (the launching process of a Slurm sweep).

submitit reads job states from ``sacct``. A cluster without accounting refuses it, and submitit
then warns on every poll ("Bypassing sacct error") and never learns that a job ended without a
result (a ``scancel``, a node failure), so the sweep would wait forever. :class:`StateWatcher`
asks ``squeue`` instead once ``sacct`` failed, and says so once. ``SweepGate`` installs it.

A job can also pend for a reason that waiting cannot resolve (``PartitionConfig``: it asks more CPUs
than any node of the partition has; ``BadConstraints``, a partition or QOS limit, an invalid account):
the sweep would wait silently until it is killed. The watcher reports such a job once (a warning naming
the job, the reason and the launcher keys to set); the sweep goes on waiting, since an administrator
may still change the cluster.
"""
from __future__ import annotations

import getpass
import logging
import re
import subprocess
import time

from submitit.slurm.slurm import SlurmInfoWatcher, SlurmJob

log = logging.getLogger(__name__)
GONE = "ENDED"  # a job squeue no longer lists: it ended (completed, cancelled, failed) and aged out
# pending reasons that do not go away by waiting (squeue %r)
STUCK = re.compile(r"^(PartitionConfig|BadConstraints|PartitionNodeLimit|PartitionTimeLimit|InvalidAccount|InvalidQOS"
                   r"|(QOS|Assoc)\w*PerJob\w*)\b")
KEYS = "hydra.launcher.cpus_per_task, mem_gb, gpus_per_node, partition or timeout_min"


def install_watcher() -> None:
    """Make submitit's Slurm jobs read their states through :class:`StateWatcher` (launching process)."""
    if not isinstance(SlurmJob.watcher, StateWatcher):
        SlurmJob.watcher = StateWatcher(delay_s=60)


class StateWatcher(SlurmInfoWatcher):
    """submitit's sacct watcher, with ``squeue`` once ``sacct`` failed (accounting off)."""

    accounting = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reported: set[tuple[str, str]] = set()  # (job, reason) said once

    def update(self) -> None:
        command = self._make_command()
        if command is None:
            return
        self._num_calls += 1
        if self.accounting:
            try:
                self._output = subprocess.check_output(command, stderr=subprocess.PIPE, timeout=60)
                self._info_dict.update(self.read_info(self._output))
            except (OSError, subprocess.SubprocessError) as exc:
                self.accounting = False
                detail = getattr(exc, "stderr", b"") or b""
                reason = detail.decode(errors="replace").strip().splitlines()[:1] or [type(exc).__name__]
                log.warning("sacct failed (%s): job states come from squeue", reason[0])
        if not self.accounting:
            self._info_dict.update(self._from_squeue())
        self._last_status_check = time.time()
        for job_id in self._registered - self._finished:
            if self.is_done(job_id, mode="cache"):
                self._finished.add(job_id)
        self.report_stuck()

    def report_stuck(self) -> list[tuple[str, str]]:
        """Warn once per job and reason about each of our jobs pending for a reason in :data:`STUCK`."""
        waiting = self._registered - self._finished
        if not waiting:
            return []
        try:
            out = subprocess.run(["squeue", "-h", "-r", "-t", "PD", "-u", getpass.getuser(), "-o", "%i|%r"],
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return []
        found = []
        for line in out.stdout.splitlines() if out.returncode == 0 else ():
            job, _, reason = line.strip().partition("|")
            if job in waiting and STUCK.match(reason) and (job, reason) not in self.reported:
                self.reported.add((job, reason))
                found.append((job, reason))
                log.warning("Slurm job %s is pending for a reason waiting cannot resolve: %s (it asks what no node of "
                            "its partition has, or a partition/QOS limit); cancel the sweep (Ctrl-C) and set %s",
                            job, reason, KEYS)
        return found

    def _from_squeue(self) -> dict[str, dict[str, str]]:
        """States of this user's jobs as squeue lists them (array tasks one by one); a registered
        job it no longer lists has ended. Nothing when squeue fails (the states stay as they were)."""
        try:
            out = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-u", getpass.getuser(), "-o", "%i|%T"],
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return {}
        if out.returncode != 0:
            return {}
        listed = {}
        for line in out.stdout.splitlines():
            job, _, state = line.strip().partition("|")
            if job:
                listed[job] = {"JobID": job, "State": state}
        return {job: listed.get(job, {"JobID": job, "State": GONE}) for job in self._registered - self._finished}
