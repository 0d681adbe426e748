"""Cells: the unit of measurement, its stable id, and its row in the cell table.

A cell = (target, drafter + D, batch size, sampling, dataset slice, category/context
bucket, backend, output length) measured on its prompts. ``setting_id`` is a hash of exactly
those settings; ``prompts_digest`` a hash of the text of every prompt it measured (after
selection, every turn); ``cell_id`` hashes both, so a prompt file edited in place (same path,
same ids, new text) gives new cells and resume does not reuse the old ones. Reruns and resumes
match cells by ``cell_id``; the CI gate matches by ``setting_id`` and compares the digests
(folders written before the digest have ``cell_id == setting_id`` and no digest).
"""
from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from .. import metrics, slurm
from ..backends.base import GenerateOutput
from ..config import AcceptanceConfig, ProtocolConfig, RunConfig
from ..hashing import stable_hash
from ..metrics import latency
from ..metrics.buckets import bucket_notes
from ..metrics.over_time import over_time_notes
from ..metrics.steady import steady_note, steady_pass, window_counts
from ..metrics.trajectory import turn_notes
from ..redact import redact
from ..records import IDENTITY_FIELDS, STATUS_FAILED, STATUS_OK, CellIdentity, CellResult, Request
from .load import active as load_active, columns as load_point, concurrency_note, identity as load_identity

log = logging.getLogger(__name__)
NAN = math.nan


@dataclass(frozen=True)
class CellKey(CellIdentity):
    """A cell's identity (``records.CellIdentity``), built from a run's settings."""

    @staticmethod
    def for_run(run: RunConfig, category: str, context_bucket: str, prompts: "Sequence[Request] | None" = None) -> "CellKey":
        """The cell of ``run`` for one category/bucket; with ``prompts`` (the requests it measures)
        the id includes their digest, without it the id is the settings' alone (``setting_id``)."""
        identity = {
            "target": asdict_clean(run.target, drop=("name",)),
            "drafter": drafter_identity(run.drafter),
            "batch_size": run.batch_size,
            "sampling": asdict_clean(run.sampling, drop=("name",)),
            "backend": asdict_clean(run.backend, drop=("num_threads",)),
            "dataset": dataset_identity(run.dataset),
            "category": category,
            "context_bucket": context_bucket,
            "max_new_tokens": run.max_new_tokens,
            "ignore_eos": run.ignore_eos,
        }
        load = load_identity(run.load)
        if load is not None:  # a load point; runs without load options keep their ids
            identity["load"] = load
        setting = stable_hash(identity)
        digest = prompts_digest(prompts) if prompts is not None else ""
        return CellKey(
            cell_id=stable_hash({"setting": setting, "prompts": digest}) if digest else setting,
            setting_id=setting, prompts_digest=digest,
            run_id=run.run_id, target=run.target.name, drafter=run.drafter.name, method=run.drafter.method,
            num_speculative_tokens=run.drafter.num_speculative_tokens, batch_size=run.batch_size,
            temperature=run.sampling.temperature, top_p=run.sampling.top_p, top_k=run.sampling.top_k,
            backend=run.backend.name, dataset=run.dataset.name, category=category, context_bucket=context_bucket,
            schedule=json.dumps(list(map(list, run.drafter.schedule))) if getattr(run.drafter, "schedule", None) else "",
        )


def prompts_digest(prompts: "Sequence[Request]") -> str:
    """A hash of what a cell measured: every prompt's id, text of every turn and output length, in order."""
    return stable_hash([[r.request_id, list(r.turns), r.max_new_tokens] for r in prompts])


def dataset_identity(dataset) -> dict:
    """The dataset settings that define a cell; ``on_too_long`` and ``control_tokens`` only when
    they change the prompts (their defaults keep the ids of folders written before they existed;
    ``control_tokens=keep`` feeds the prompts as those folders did); ``input_len``/``output_len``
    only when set (``dataset=random``); ``tier`` only when it is not ``all``."""
    unset = tuple(k for k in ("input_len", "output_len") if getattr(dataset, k, None) is None)  # keep older ids
    unset += ("tier",) if getattr(dataset, "tier", "all") == "all" else ()
    ident = asdict_clean(dataset, drop=("name", "on_too_long", "control_tokens") + unset)
    if getattr(dataset, "on_too_long", "error") != "error":
        ident["on_too_long"] = dataset.on_too_long
    if getattr(dataset, "control_tokens", "refuse") == "escape":
        ident["control_tokens"] = dataset.control_tokens
    return ident


def drafter_identity(drafter) -> dict:
    """The drafter's settings that define a cell (fault injection lives outside the drafter: ``faults``)."""
    unset = tuple(k for k in ("synthetic_al", "synthetic_rates", "synthetic_draw", "schedule") if not getattr(drafter, k, None))
    return asdict_clean(drafter, drop=("name",) + unset)  # unset synthetic/schedule keys keep existing cell ids


def asdict_clean(obj, drop: tuple[str, ...] = ()) -> dict:
    return {k: v for k, v in asdict(obj).items() if k not in drop}


def _key_fields(key: CellIdentity) -> dict:
    return {name: getattr(key, name) for name in IDENTITY_FIELDS}


def _columns(*groups) -> dict:
    """The cell columns of typed column groups (each field is the column of that name)."""
    return {f.name: getattr(g, f.name) for g in groups for f in fields(g)}


@dataclass(frozen=True)
class PassNotes:
    """What a cell's row carries besides its passes' metrics: the protocol's notes (``protocol.Measured``
    and its noise meter) or, for a derived ``all`` row, what its category cells say."""

    instability: Callable[[float], str] | None = None  # why not stable, from the cell's speedup_noise; None: not judged
    cpu_util: float = NAN
    load_avg: float = NAN
    steal_frac: float = NAN
    threads: int = 0
    n_repeats: int | None = None  # None: the speedup estimate's own
    batch_size_run: int | None = None  # None: from the cell's requests and the run's batch size
    derived: bool = False
    extra: dict = field(default_factory=dict)


WINDOWED_SPEEDUPS = ("speedup", "speedup_throughput", "speedup_goodput")  # each counts its usable windows


def window_notes(cell_id: str, values: dict) -> str:
    """Warn of every window a speedup left out (``<speedup>_nan_windows``, named with why), and return why the cell
    is not stable on that account: a throughput or goodput speedup measured from fewer than two usable windows
    (no interval). The TPOT speedup's own case is the protocol's (``instability``: no finite noise)."""
    reasons = []
    for name in WINDOWED_SPEEDUPS:
        left_out, usable = values.get(f"{name}_nan_windows", ""), values.get(f"{name}_windows", -1)
        if left_out:
            log.warning("cell %s: %s left out %s (%d usable)", cell_id, name, left_out, usable)
        if name != "speedup" and 0 <= usable < 2 and math.isfinite(values.get(name, NAN)) and left_out:
            reasons.append(f"{name} from {usable} usable window(s), no interval ({left_out})")
    return "; ".join(reasons)


def stability(noise_reason: str, n_failed: int) -> dict[str, Any]:
    """``stable`` and ``unstable_reason``: a cell with failed requests is never stable (its interval
    covers the requests that finished, not the point that was asked), whatever its noise."""
    reasons = ([f"{n_failed} request(s) failed"] if n_failed else []) + ([noise_reason] if noise_reason else [])
    return {"stable": not reasons, "unstable_reason": "; ".join(reasons)}


def assemble_cell(
    key: CellKey, base: GenerateOutput, spec: GenerateOutput, *, warmup_s: float, device: str, n_gpus: int,
    run: RunConfig | None = None, notes: PassNotes = PassNotes(), requests: "Sequence[Request]" = (), prepared=None,
) -> CellResult:
    """The cell row from matched baseline and speculative passes on the same requests (every repeat):
    every metric group (``metrics``), the load point's columns, the protocol's notes and, with ``run``,
    the settings that produced it (``run_columns``). The derived ``all`` row is assembled here too."""
    cfg = run.protocol if run is not None else ProtocolConfig()
    acceptance_cfg = run.acceptance if run is not None else AcceptanceConfig()
    ok_s = [r for r in spec.requests if r.status == STATUS_OK]
    failed = [r for r in base.requests + spec.requests if r.status != STATUS_OK]
    windows = run is not None and load_active(run.load)  # a load point: windows are the independent units
    timed_base, timed_spec, steady, steady_extra = base, spec, None, {}
    if windows and run.load.steady_state:  # the speedups and load columns from the steady windows only
        timed_base, base_spans = steady_pass(base, run.load.concurrency, float(run.load.request_rate))
        timed_spec, spec_spans = steady_pass(spec, run.load.concurrency, float(run.load.request_rate))
        steady = (window_counts(base, base_spans), window_counts(spec, spec_spans))
        steady_extra = steady_note(base_spans, spec_spans)
    speedup = metrics.speedup_columns(timed_base.requests, timed_spec.requests, cfg.confidence, cfg.n_resamples,
                                      windows, cfg.process_noise)
    values = _columns(
        metrics.acceptance_columns(ok_s, spec.steps, key.num_speculative_tokens, acceptance_cfg,
                                   run.max_new_tokens if run is not None else None),
        metrics.degenerate_columns(ok_s, acceptance_cfg),
        metrics.timing_columns(base, spec, n_gpus),
        speedup,
        metrics.prediction_columns(base, spec, cfg.confidence),
        metrics.agreement_columns(base.requests, ok_s, key.temperature <= 0),
        latency.load_point_columns(timed_base, timed_spec, run.slo if run is not None else None, cfg.confidence,
                                   cfg.n_resamples, windows, steady),
    )
    syn = spec.extra.get("synthetic_al")
    values["synthetic_al"] = float(syn) if syn is not None else NAN
    if notes.n_repeats is not None:
        values["n_repeats"] = notes.n_repeats
    few = window_notes(key.cell_id, values)
    if notes.instability is not None or failed or few:
        noise = notes.instability(speedup.speedup_noise) if notes.instability else ""
        values |= stability("; ".join(x for x in (noise, few) if x), len(failed))
    extra = {"tokens_per_step": metrics.tokens_per_step(spec.steps), "n_failed_requests": len(failed), **spec.extra,
             **bucket_notes(spec.steps, base.steps, acceptance_cfg.context_edges, cfg.confidence, cfg.n_resamples),
             **turn_notes(base.requests, ok_s, cfg.confidence, cfg.n_resamples),
             **over_time_notes(spec.steps, cfg.confidence), **steady_extra, **notes.extra}
    cell = CellResult(
        **_key_fields(key),
        n_requests=len({r.request_id for r in ok_s}),
        al_source=ok_s[0].al_source if ok_s else "none",
        **values,
        warmup_s=warmup_s,
        wall_s=base.wall_s + spec.wall_s,
        n_gpus=n_gpus,
        device=device,
        status=STATUS_OK if not failed else STATUS_FAILED,
        error="" if not failed else f"{len(failed)} request(s) failed; first: {failed[0].error}",
        extra=extra,
        cpu_util=notes.cpu_util, load_avg=notes.load_avg, steal_frac=notes.steal_frac, threads=notes.threads,
        derived=notes.derived,
    )
    if run is None:
        return cell
    cell = replace(cell, **run_columns(cell, run, requests, prepared))
    return cell if notes.batch_size_run is None else replace(cell, batch_size_run=notes.batch_size_run)


def run_columns(cell: CellResult, run: RunConfig, requests: "Sequence[Request]" = (), prepared=None) -> dict:
    """Each cell carries the (redacted) settings that produced it: a sweep's cells differ; the output
    length, the batch actually formed, what happened to over-long prompts, and the load point."""
    config = redact(run)  # the one redaction every sink uses
    config.pop("logger", None)
    extra = {**cell.extra, "config": config, "measured_on": slurm.where()}  # node, Slurm job and array task
    ran = min(run.batch_size, len(requests)) if requests else -1
    if 0 < ran < run.batch_size:
        extra["batch_size_note"] = (f"only {len(requests)} prompt(s) in this cell: batches of {ran}, "
                                    f"not batch_size={run.batch_size}")
        log.warning("cell %s: %s", cell.cell_id, extra["batch_size_note"])
    n_point = len(requests) or None
    if concurrency_note(run.load.concurrency, n_point):  # a load point is what ran (pipeline.load.columns)
        extra["concurrency_note"] = concurrency_note(run.load.concurrency, n_point)
        log.warning("cell %s: %s", cell.cell_id, extra["concurrency_note"])
    if (cell.extra.get("steady_window") or {}).get("warning"):  # load.steady_state (metrics.steady)
        log.warning("cell %s: %s", cell.cell_id, cell.extra["steady_window"]["warning"])
    if prepared is not None:
        ids = {r.request_id for r in requests}
        extra["on_too_long"] = prepared.on_too_long
        extra["prompt_token_limit"] = prepared.limit
        extra["prompts_skipped"] = sum(1 for cat, _ in prepared.skipped.values()
                                       if not run.per_category or cat == cell.category)
        extra["prompts_truncated"] = len(ids & set(prepared.truncated))
        if prepared.escaped:
            extra["prompts_escaped"] = len(ids & prepared.escaped)  # dataset.control_tokens=escape
    return dict(extra=extra, max_new_tokens=run.max_new_tokens, ignore_eos=run.ignore_eos, batch_size_run=ran,
                **load_point(run, n_point))


OVERALL = "all"


def overall_key(run: RunConfig, context_bucket: str, parts: "Sequence[CellKey]" = ()) -> CellKey:
    """The id of a configuration's derived overall row (``category=all``, pooled from its category cells
    ``parts``, whose prompt digests it carries).

    ``derived`` is part of the identity, so it never collides with a measured ``per_category=false``
    cell of the same settings (which pools the same prompts in one measurement).
    """
    key = CellKey.for_run(run, OVERALL, context_bucket)
    ident = {"measured_cell": key.cell_id, "derived": "pooled per-category cells"}
    setting = stable_hash(ident)
    digest = stable_hash([p.prompts_digest for p in parts]) if parts and all(p.prompts_digest for p in parts) else ""
    cell_id = stable_hash({"setting": setting, "prompts": digest}) if digest else setting
    return CellKey(**{**asdict(key), "cell_id": cell_id, "setting_id": setting, "prompts_digest": digest})


def failed_cell(key: CellKey, error: str, device: str, n_gpus: int, run: RunConfig | None = None,
                requests: "Sequence[Request]" = (), prepared=None) -> CellResult:
    """A cell that could not be measured: every metric column its declared default (``speedbench.columns``:
    NaN, -1, ()), the error recorded (with ``run``: its settings)."""
    cell = CellResult(**_key_fields(key), n_requests=0, al_source="none", warmup_s=NAN, wall_s=NAN, device=device,
                      n_gpus=n_gpus, status=STATUS_FAILED, error=error)
    return cell if run is None else replace(cell, **run_columns(cell, run, requests, prepared))
