"""What the report models: the target's shape (from its config, never its weights) and the hardware.

The report stays a pure function of the results: hardware comes from ``--hardware`` or from the
device named in provenance (matched against the table); a device not in the table gets the
``cpu-nominal`` entry, and the text says so.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..modelling import hardware
from ..modelling.hardware import Hardware
from ..modelling.shapes import ModelShape, load_shape
from ..results.load import ReportData


@dataclass
class TargetShape:
    name: str
    path: str | None
    shape: ModelShape | None
    error: str = ""


@dataclass
class ModelContext:
    targets: list[TargetShape]
    hw: Hardware
    hw_note: str


def resolve(data: ReportData, hardware_name: str | None = None) -> ModelContext:
    targets = []
    names = sorted(set(data.cells["target"])) if not data.cells.empty else []
    for name in names or list(data.targets):
        info = data.targets.get(name)
        path = info.path if info else None
        if not path:
            targets.append(TargetShape(name, None, None, "no target path in provenance.json"))
            continue
        try:
            # a hub id is read from the local cache only: the report never reaches the network
            targets.append(TargetShape(name, path, load_shape(path, info.dtype if info else None, name, allow_hub=False)))
        except (OSError, KeyError, ValueError) as exc:
            targets.append(TargetShape(name, path, None, f"{type(exc).__name__}: {exc}"))
    if hardware_name:
        hw = hardware.get(hardware_name)
        note = f"{hw.name} ({hw.source}), chosen with --hardware"
    else:
        matched = [h for h in (hardware.match_device_name(d) for d in data.device_names) if h]
        if matched:
            hw = matched[0]
            note = f"{hw.name} ({hw.source}), matched to the device in provenance"
        else:
            hw = hardware.HARDWARE["cpu-nominal"]
            seen = ", ".join(data.device_names) or "unknown"
            note = (f"cpu-nominal ({hw.peak_flops / 1e12:g} TFLOP/s, {hw.mem_bw / 1e9:g} GB/s; nominal): device "
                    f"'{seen}' is not in the hardware table; pass --hardware to choose")
    return ModelContext(targets, hw, note)
