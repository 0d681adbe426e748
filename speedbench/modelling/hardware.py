"""Accelerators for the cost model: peak dense bf16 FLOP/s, memory bandwidth, memory size.

GPU figures are the vendors' public spec-sheet numbers for dense (no 2:4 sparsity) BF16
tensor-core throughput and HBM/GDDR bandwidth. Nobody reaches the peak; the cost model
applies its own achievable fractions (``CostParams``). ``cpu`` is calibrated on this machine
by a quick matmul and a large copy (< 2 s), never read from a table.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

from ..console import UsageError

TFLOP = 1e12
TB = 1e12
GB = 1e9


@dataclass(frozen=True)
class Hardware:
    name: str
    peak_flops: float  # dense bf16 FLOP/s (fp32 for a calibrated CPU)
    mem_bw: float  # bytes/s
    mem_bytes: float
    launch_s: float  # fixed cost of one kernel (launch + setup), seconds
    source: str  # "spec sheet", "calibrated", "nominal"

    @property
    def ridge(self) -> float:
        """FLOP per byte where a kernel turns from memory- to compute-bound."""
        return self.peak_flops / self.mem_bw


HARDWARE: dict[str, Hardware] = {
    h.name: h
    for h in (
        Hardware("a100-80gb", 312 * TFLOP, 2.039 * TB, 80 * GB, 4e-6, "spec sheet (A100 80GB SXM)"),
        Hardware("h100-sxm", 989 * TFLOP, 3.35 * TB, 80 * GB, 3e-6, "spec sheet (H100 SXM5)"),
        Hardware("h200", 989 * TFLOP, 4.8 * TB, 141 * GB, 3e-6, "spec sheet (H200 SXM)"),
        Hardware("b200", 2250 * TFLOP, 8.0 * TB, 180 * GB, 3e-6, "spec sheet (HGX B200)"),
        Hardware("l40s", 362 * TFLOP, 0.864 * TB, 48 * GB, 4e-6, "spec sheet (L40S)"),
        # used by the report when a run's device is not in the table (it never measures)
        Hardware("cpu-nominal", 0.2 * TFLOP, 20 * GB, 64 * GB, 5e-6, "nominal"),
    )
}
ALIASES = {"a100": "a100-80gb", "h100": "h100-sxm", "h100sxm": "h100-sxm", "h200-sxm": "h200", "l40": "l40s"}


class UnknownHardware(UsageError, KeyError):
    """A name not in the table: a usage error (one line, exit 2), and a ``KeyError`` for lookups."""

    __str__ = Exception.__str__  # the message as it is, not KeyError's quoted repr


def get(name: str) -> Hardware:
    """A table entry by name (case-insensitive, aliases allowed); ``cpu`` calibrates this machine."""
    key = name.strip().lower().replace(" ", "-")
    key = ALIASES.get(key, key)
    if key == "cpu":
        return calibrate_cpu()
    if key not in HARDWARE:
        raise UnknownHardware(f"--hardware {name!r}: unknown hardware; known: {', '.join(sorted(HARDWARE) + ['cpu'])}")
    return HARDWARE[key]


def match_device_name(device_name: str) -> Hardware | None:
    """The table entry for a device name as torch reports it (e.g. 'NVIDIA H200'), if any."""
    text = device_name.lower().replace(" ", "").replace("-", "")
    for probe, key in (("h200", "h200"), ("h100", "h100-sxm"), ("b200", "b200"), ("a100", "a100-80gb"), ("l40s", "l40s")):
        if probe in text:
            return HARDWARE[key]
    return None


def calibrate_cpu(seconds: float = 1.5, threads: int | None = None) -> Hardware:
    """Measure this CPU: fp32 matmul FLOP/s, copy bandwidth, and a tiny op's fixed cost."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    budget = seconds / 3

    def best_of(fn, min_reps: int = 2) -> float:
        fn()  # warm-up
        best, t_end, reps = float("inf"), time.perf_counter() + budget, 0
        while reps < min_reps or time.perf_counter() < t_end:
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
            reps += 1
            if reps > 200:
                break
        return best

    n = 512
    a, b = torch.randn(n, n), torch.randn(n, n)
    flops = 2 * n**3 / best_of(lambda: a @ b)
    src = torch.empty(8 * 1024 * 1024)  # 32 MiB: past the last-level cache of most parts
    dst = torch.empty_like(src)
    bw = 2 * src.numel() * src.element_size() / best_of(lambda: dst.copy_(src))
    x = torch.ones(8)
    launch = best_of(lambda: x.add(1.0), min_reps=20)
    try:
        import psutil  # optional

        mem = float(psutil.virtual_memory().total)
    except ImportError:
        mem = _meminfo_bytes()
    return Hardware("cpu", flops, bw, mem, launch, "calibrated")


def _meminfo_bytes() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float("nan")


def scaled(hw: Hardware, flops: float = 1.0, bw: float = 1.0) -> Hardware:
    return replace(hw, peak_flops=hw.peak_flops * flops, mem_bw=hw.mem_bw * bw)
