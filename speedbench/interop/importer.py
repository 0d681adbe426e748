"""Pairs of another tool's result files -> ordinary cells (``speedbench import``, docs/interop.md).

Each pair (baseline file, speculative file) of one load point is read by its tool's reader, checked
to measure the same thing (every field of ``ToolRun.identity``: model, prompts, load point,
sampling; the first that differs refuses the pair in one line naming it), turned into per-request
records and assembled into a cell by the one cell-assembly path (``pipeline.cells.assemble_cell``):
with per-request data the speedup and its interval come from the same paired bootstrap as
speedbench's own server points. The columns each tool printed (latency percentiles, throughput,
AL, acceptance) are then set to the printed values, and ``source`` names the tool and version.
With summaries only there are no records: no interval, never stable ("no interval: summary only").
Every file is read and every pair checked before anything is written.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..backends.base import GenerateOutput
from ..config import BackendConfig, DatasetConfig, DrafterConfig, LoadConfig, ModelConfig, RunConfig, SamplingConfig
from ..pipeline.cells import CellKey, PassNotes, assemble_cell
from ..records import STATUS_FAILED, STATUS_OK, CellResult, Request, RequestRecord
from . import aiperf, vllm_bench
from .model import METRICS, STATS, InputFileError, ToolRun, read_json

SUMMARY_ONLY = "no interval: summary only"
# speedbench's rule for a cell measured once (pipeline.protocol): an interval, but no estimate of the noise
ONE_PAIR = "one repeat (an imported pair): no estimate of the measurement noise"
CATEGORY = "imported"
# format name -> (reader module): each has looks_like(data) and read(path)
READERS = {"vllm_bench": vllm_bench, "aiperf": aiperf}


@dataclass(frozen=True)
class Labels:
    """What the files do not say and the user does: the drafter's name and method, the run id."""

    drafter: str = "imported"
    method: str = "draft_model"
    num_speculative_tokens: int = 0  # 0: from the file (per-position entries / histogram)
    target: str = ""  # "": the model name in the files
    run_id: str = "imported"


def detect(path: Path, fmt: str = "auto") -> str:
    if fmt != "auto":
        if fmt not in READERS:
            raise InputFileError(f"--format {fmt!r}: known formats are {', '.join(['auto', *READERS])}")
        return fmt
    data = read_json(aiperf.resolve(path))
    for name, module in READERS.items():
        if module.looks_like(data):
            return name
    raise InputFileError(f"{path}: neither a `vllm bench serve --save-result` JSON (fields 'model_id', 'completed') "
                         f"nor an AIPerf {aiperf.SUMMARY_FILE} (field 'aiperf_version')")


def read(path: Path, fmt: str = "auto") -> ToolRun:
    return READERS[detect(Path(path), fmt)].read(Path(path))


def check_pair(base: ToolRun, spec: ToolRun) -> None:
    """The first field on which the two files of a pair differ, as a one-line refusal."""
    if base.tool != spec.tool:
        raise InputFileError(f"{spec.path}: field 'tool': {spec.tool!r} but the baseline {base.path} is {base.tool!r}")
    for key in sorted(set(base.identity) | set(spec.identity)):
        a, b = base.identity.get(key, "(absent)"), spec.identity.get(key, "(absent)")
        if a != b:
            show = lambda v: (repr(v)[:80] + "...") if len(repr(v)) > 80 else repr(v)  # noqa: E731
            raise InputFileError(f"{spec.path}: field {key!r} = {show(b)} but the baseline {base.path} has {show(a)}: "
                                 f"not the same measurement")
    if spec.spec is None:
        raise InputFileError(f"{spec.path}: no speculative-decoding section (field "
                             f"{'spec_decode_acceptance_length' if spec.tool == vllm_bench.TOOL else 'spec_decode_token_weighted_acceptance_length'}"
                             f"): not a speculative server's run")
    if base.spec is not None and base.spec.drafts > 0:
        raise InputFileError(f"{base.path}: field 'spec_decode' shows {base.spec.drafts} drafts: the baseline server speculated")


def _records(run: ToolRun, role: str) -> list[RequestRecord]:
    out = []
    for r in run.requests:
        counted = r.drafts >= 0 and r.accepted >= 0
        out.append(RequestRecord(
            request_id=r.key, category=CATEGORY, context_bucket="", entropy_tier="", role=role,
            prompt_tokens=r.prompt_tokens, n_tokens=r.n_tokens, output_ids=(), ttft=r.ttft, tpot=r.tpot, e2e=r.e2e,
            n_steps=max(r.drafts, 0), n_drafts=max(r.drafts, 0), drafted=max(r.drafted, 0), accepted=max(r.accepted, 0),
            al_source="counters" if counted and role == "spec" else "none",
            status=STATUS_FAILED if r.error else STATUS_OK, error=r.error, t_start=r.t_start, chunk_gaps=r.itls))
    return out


def _run_config(base: ToolRun, spec: ToolRun, labels: Labels) -> RunConfig:
    k = labels.num_speculative_tokens or spec.spec.num_speculative_tokens
    temp = base.identity.get("temperature", (base.identity.get("input_config.endpoint.extra") or {}).get("temperature"))
    lens = [r.n_tokens for r in base.requests] or [-1]
    return RunConfig(
        target=ModelConfig(name=labels.target or base.model, path=base.model),
        drafter=DrafterConfig(name=labels.drafter, method=labels.method, num_speculative_tokens=int(k)),
        dataset=DatasetConfig(name=f"imported:{base.tool}", source="imported", path=base.path.name),
        backend=BackendConfig(name=f"imported:{base.tool}", options={"source": base.source}),
        sampling=SamplingConfig(name="imported", temperature=float(temp) if temp not in (None, "(absent)") else math.nan),
        load=LoadConfig(concurrency=base.concurrency if base.concurrency > 0 else None, request_rate=base.request_rate,
                        num_requests=base.n_completed + base.n_failed or None),
        batch_size=max(base.concurrency, 1), max_new_tokens=max(lens), ignore_eos=None, run_id=labels.run_id,
        per_category=False, n_gpus=0)


def _printed(base: ToolRun, spec: ToolRun) -> dict:
    """The columns as the tool printed them (latency percentiles, throughput, acceptance)."""
    cols: dict = {}
    for role, run in (("baseline", base), ("spec", spec)):
        for m in METRICS:
            for s in STATS:
                cols[f"{m}_ms_{s}_{role}"] = run.summary.get(f"{m}_ms_{s}", math.nan)
        cols[f"output_tok_s_{role}"] = run.summary.get("output_tok_s", math.nan)
        cols[f"requests_s_{role}"] = run.summary.get("requests_s", math.nan)
        cols[f"failed_requests_{role}"] = run.n_failed
    s = spec.spec
    cond = tuple(p / q if q > 0 else math.nan for p, q in zip(s.per_pos, (1.0, *s.per_pos[:-1])))
    cols.update(al=s.al, acceptance_rate=s.acceptance_rate, accepted_per_pos=s.per_pos, accepted_per_pos_cond=cond,
                n_accepted=s.accepted, al_source="counters", source=spec.source)
    if s.hist:
        cols["accepted_hist"] = s.hist
    if math.isfinite(s.al_request_mean):
        cols["al_request_mean"] = s.al_request_mean
    return cols


def import_pair(base: ToolRun, spec: ToolRun, labels: Labels) -> tuple[CellResult, list[RequestRecord]]:
    check_pair(base, spec)
    run = _run_config(base, spec, labels)
    b_rec, s_rec = _records(base, "baseline"), _records(spec, "spec")
    prompts = [Request(request_id=r.key, category=CATEGORY, turns=(f"{base.tool} prompt {r.key}: {r.prompt_tokens} tokens",),
                       max_new_tokens=r.n_tokens) for r in base.requests] or None
    key = CellKey.for_run(run, CATEGORY, "", prompts)
    cell = assemble_cell(key, GenerateOutput(b_rec, wall_s=base.duration_s), GenerateOutput(s_rec, wall_s=spec.duration_s),
                         warmup_s=math.nan, device=f"server ({base.source})", n_gpus=0, run=run, requests=prompts or (),
                         notes=PassNotes(instability=lambda _noise: ONE_PAIR, n_repeats=1))
    cols = _printed(base, spec)
    extra = {**cell.extra, "imported": {"baseline": base.path.name, "spec": spec.path.name, **spec.extra}}
    if not b_rec or not s_rec:
        point = base.summary.get("tpot_ms_mean", math.nan) / spec.summary.get("tpot_ms_mean", math.nan)
        cols |= dict(speedup=point, stable=False, unstable_reason=SUMMARY_ONLY, n_requests=spec.n_completed)
        cols |= dict(tpot_ms_baseline=base.summary.get("tpot_ms_p50", math.nan),
                     tpot_ms_spec=spec.summary.get("tpot_ms_p50", math.nan))
    return replace(cell, extra=extra, **cols), b_rec + s_rec


def import_pairs(pairs: Sequence[tuple[Path, Path]], out: Path, labels: Labels, fmt: str = "auto") -> list[CellResult]:
    """Read and check every pair, then write the cells into ``out`` (nothing is written when any pair fails)."""
    from ..results import ResultsStore  # pandas: only once there is something to write

    runs = [(read(b, fmt), read(s, fmt)) for b, s in pairs]
    cells = [import_pair(b, s, labels) for b, s in runs]
    ids = [c.cell_id for c, _ in cells]
    if len(set(ids)) != len(ids):
        raise InputFileError("two pairs give the same cell (the same files, or the same load point and prompts twice)")
    store = ResultsStore(out)
    for cell, records in cells:
        store.write_cell(cell, records)
    store.write_provenance({"imported": [{"baseline": str(b), "spec": str(s)} for b, s in pairs],
                            "source": sorted({c.source for c, _ in cells}), "run_id": labels.run_id})
    return [c for c, _ in cells]
