"""Device-synced clock reads: every timestamp is taken after the device has finished."""
from __future__ import annotations

import time

import torch


class Clock:
    """``now()`` syncs the device (CUDA) before reading ``perf_counter``; on CPU it is a plain read."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self._sync = torch.cuda.synchronize if self.device.type == "cuda" else None

    def now(self) -> float:
        if self._sync is not None:
            self._sync(self.device)
        return time.perf_counter()
