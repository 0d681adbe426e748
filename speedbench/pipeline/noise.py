"""Noise accounting: was the machine quiet while a cell was measured?

Read around each measured pass: the process's CPU time against wall time (an in-process
engine whose threads had to wait for a CPU shows CPU time well below wall time x threads),
the 1-minute load average, and CPU steal time from ``/proc/stat`` (a hypervisor taking the
CPU). Where a source does not exist (no ``/proc``), the figure is NaN, never a guess.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

from ..backends.base import cpu_count


def _proc_stat() -> tuple[float, float] | None:
    """(steal jiffies, total jiffies) over all CPUs, or None."""
    try:
        with open("/proc/stat") as f:
            parts = f.readline().split()
    except OSError:
        return None
    if not parts or parts[0] != "cpu":
        return None
    vals = [float(x) for x in parts[1:]]
    steal = vals[7] if len(vals) > 7 else 0.0
    return steal, sum(vals[:8])


@dataclass
class NoiseMeter:
    """Accumulates the machine's state over the measured passes of one cell."""

    threads: int = 0  # compute threads of an in-process engine; 0: CPU time says nothing (other processes)
    wall_s: float = 0.0
    cpu_s: float = 0.0
    load_max: float = math.nan
    _stat0: tuple[float, float] | None = field(default=None, repr=False)
    _stat1: tuple[float, float] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._stat0 = _proc_stat()

    def measure(self, fn):
        """Run ``fn()`` and account for its wall and CPU time; returns its result."""
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            return fn()
        finally:
            self.wall_s += time.perf_counter() - w0
            self.cpu_s += time.process_time() - c0
            try:
                load = os.getloadavg()[0]
                self.load_max = load if math.isnan(self.load_max) else max(self.load_max, load)
            except OSError:  # pragma: no cover
                pass

    @property
    def cpu_util(self) -> float:
        if self.threads <= 0 or self.wall_s <= 0:
            return math.nan
        return self.cpu_s / (self.wall_s * self.threads)

    @property
    def steal_frac(self) -> float:
        now = _proc_stat()
        if self._stat0 is None or now is None or now[1] <= self._stat0[1]:
            return math.nan
        return (now[0] - self._stat0[0]) / (now[1] - self._stat0[1])

    def verdict(self, min_cpu_util: float, max_load_per_cpu: float) -> str:
        """Why this cell was measured under contention ('' when nothing was seen)."""
        reasons = []
        util = self.cpu_util
        if not math.isnan(util) and util < min_cpu_util:
            reasons.append(f"CPU time {util:.0%} of wall x {self.threads} thread(s): the engine waited for a CPU")
        ncpu = cpu_count()
        if not math.isnan(self.load_max) and self.load_max > max_load_per_cpu * ncpu:
            reasons.append(f"load average {self.load_max:.1f} on {ncpu} CPU(s)")
        steal = self.steal_frac
        if not math.isnan(steal) and steal > 0.02:
            reasons.append(f"CPU steal {steal:.1%}")
        return "; ".join(reasons)
