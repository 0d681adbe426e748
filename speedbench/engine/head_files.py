"""The folder a drafting head is shipped in (``config.json`` + ``model.safetensors``), written and read
the one way every head family here uses: tensors stored at a dtype, computed in float32."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, TypeVar

import torch
from torch import nn

Spec = TypeVar("Spec")


def save_folder(module: nn.Module, cfg: dict[str, Any], out: Path, dtype: torch.dtype) -> None:
    """``module``'s state at ``dtype`` and ``cfg`` (with that dtype, the stored precision) into ``out``."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to(dtype).contiguous() for k, v in module.state_dict().items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = {**cfg, "dtype": str(dtype).removeprefix("torch.")}
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def read_folder(path: Path, what: str, from_config: Callable[[dict[str, Any]], Spec]) -> tuple[Spec, dict[str, torch.Tensor]]:
    """(the spec ``from_config`` reads from config.json, the stored tensors); ``what`` names the head in errors."""
    from safetensors.torch import load_file

    path = Path(path)
    cfg_file, weights = path / "config.json", path / "model.safetensors"
    if not cfg_file.is_file() or not weights.is_file():
        raise FileNotFoundError(f"{what} {path}: needs config.json and model.safetensors")
    try:
        spec = from_config(json.loads(cfg_file.read_text()))
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{what} {cfg_file}: {exc}") from exc
    return spec, load_file(str(weights))
