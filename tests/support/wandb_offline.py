"""Read W&B offline run files back (test helper).

wandb 0.31 writes offline runs as ``offline-run-*/run-<id>.wandb``: a LevelDB-style log
(7-byte header ``:W&B`` + magic 0xBEE1 + version; 32 KiB blocks of records, each with a
7-byte header crc32/length/type, long records split FIRST/MIDDLE/LAST) of
``wandb_internal_pb2.Record`` protobufs. The SDK's own reader is gone from 0.31's Python
package, hence this one.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

from wandb.proto import wandb_internal_pb2 as pb

BLOCK = 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path):
    data = Path(path).read_bytes()
    ident, magic, _version = struct.unpack("<4sHB", data[:7])
    assert ident == b":W&B" and magic == 0xBEE1, f"{path}: not a W&B run file"
    pos, buf = 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        buf = chunk if kind in (FULL, FIRST) else buf + chunk
        if kind in (FULL, LAST):
            rec = pb.Record()
            rec.ParseFromString(buf)
            yield rec
            buf = b""


@dataclass
class OfflineRun:
    folder: Path
    run_id: str = ""
    name: str = ""
    group: str = ""
    job_type: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    history_keys: set[str] = field(default_factory=set)

    def tables(self) -> dict[str, dict]:
        """Logged tables by key: {"columns": [...], "data": [[...], ...]}."""
        files = (self.folder / "files" / "media" / "table").glob("*.table.json")
        return {p.name.rsplit("_", 2)[0]: json.loads(p.read_text()) for p in files}  # <key>_<step>_<hash>.table.json

    def images(self) -> list[Path]:
        return sorted((self.folder / "files" / "media" / "images").rglob("*.png"))


def read_run(folder: Path) -> OfflineRun:
    run = OfflineRun(Path(folder))
    (path,) = Path(folder).glob("run-*.wandb")
    for rec in records(path):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            r = rec.run
            run.run_id, run.name, run.group, run.job_type, run.tags = r.run_id, r.display_name, r.run_group, r.job_type, list(r.tags)
            run.config.update({item.key: json.loads(item.value_json) for item in r.config.update})
        elif kind == "config":
            run.config.update({item.key: json.loads(item.value_json) for item in rec.config.update if item.key})
        elif kind == "summary":
            for item in rec.summary.update:
                if item.key:
                    run.summary[item.key] = json.loads(item.value_json)
        elif kind == "history":
            run.history_keys.update(item.key or "/".join(item.nested_key) for item in rec.history.item)
    return run


def offline_runs(root: Path) -> list[OfflineRun]:
    return [read_run(p) for p in sorted(Path(root).glob("wandb/offline-run-*")) if p.is_dir()]
