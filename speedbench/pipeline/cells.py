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
import math
from collections.abc import Sequence
from dataclasses import MISSING, asdict, dataclass, fields

from .. import metrics, metrics_latency
from ..backends.base import GenerateOutput
from ..config import AcceptanceConfig, ProtocolConfig, RunConfig
from ..hashing import stable_hash
from ..records import RUN_SETTING_FIELDS, STATUS_FAILED, STATUS_OK, CellResult, Request
from .load import identity as load_identity

NAN = math.nan


@dataclass(frozen=True)
class CellKey:
    cell_id: str
    run_id: str
    target: str
    drafter: str
    method: str
    num_speculative_tokens: int
    batch_size: int
    temperature: float
    top_p: float
    top_k: int
    backend: str
    dataset: str
    category: str
    context_bucket: str
    setting_id: str = ""  # the settings alone (the cell id of folders written before the digest)
    prompts_digest: str = ""  # the measured prompts' text ("" when not given)
    schedule: str = ""  # drafter.schedule as JSON ([[start, end, K], ...]); "" = a static D

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
    only when set (``dataset=random``)."""
    unset = tuple(k for k in ("input_len", "output_len") if getattr(dataset, k, None) is None)  # keep older ids
    ident = asdict_clean(dataset, drop=("name", "on_too_long", "control_tokens") + unset)
    if getattr(dataset, "on_too_long", "error") != "error":
        ident["on_too_long"] = dataset.on_too_long
    if getattr(dataset, "control_tokens", "refuse") == "escape":
        ident["control_tokens"] = dataset.control_tokens
    return ident


def drafter_identity(drafter) -> dict:
    """The drafter's settings that define a cell (fault injection lives outside the drafter: ``faults``)."""
    unset = tuple(k for k in ("synthetic_al", "synthetic_rates", "schedule") if not getattr(drafter, k, None))
    return asdict_clean(drafter, drop=("name",) + unset)  # unset synthetic/schedule keys keep existing cell ids


def asdict_clean(obj, drop: tuple[str, ...] = ()) -> dict:
    return {k: v for k, v in asdict(obj).items() if k not in drop}


def _key_fields(key: CellKey) -> dict:
    return asdict(key)


def summarize(
    key: CellKey, base: GenerateOutput, spec: GenerateOutput, warmup_s: float, device: str, n_gpus: int,
    protocol: ProtocolConfig | None = None, acceptance: AcceptanceConfig | None = None, slo=None,
) -> CellResult:
    """The cell row from matched baseline and speculative passes on the same requests (every repeat)."""
    protocol = protocol or ProtocolConfig()
    ok_s = [r for r in spec.requests if r.status == STATUS_OK]
    failed = [r for r in base.requests + spec.requests if r.status != STATUS_OK]
    values = metrics.pass_metrics(base, spec, key.num_speculative_tokens, key.temperature <= 0, n_gpus,
                                  protocol.confidence, protocol.n_resamples, acceptance or AcceptanceConfig())
    tps = values.pop("tokens_per_step")
    values |= timing_columns(base, spec, values, tps)
    values |= metrics_latency.load_point_columns(base, spec, slo, protocol.confidence, protocol.n_resamples)
    return CellResult(
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
        extra={"tokens_per_step": tps, "n_failed_requests": len(failed), **spec.extra},
    )


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


def timing_columns(base: GenerateOutput, spec: GenerateOutput, values: dict, tokens_per_step: float) -> dict:
    """``timing_source``, ``split_error``, ``synthetic_al``; a separate timed pass fills the split columns.

    The engine's pass notes say how the split was measured (``extra.timing_source``); an engine
    that times in a separate pass (vLLM on CUDA) gives per-part means in ``extra.timed_split``,
    which fill the cell's columns when the measured pass's steps carry none (never guessed); so
    does vLLM's counters fallback, whose steps have no per-step acceptance to carry times.
    """
    out: dict = {"timing_source": str(spec.extra.get("timing_source") or base.extra.get("timing_source") or "")}
    timed = spec.extra.get("timed_split") or {}
    out["split_error"] = float(timed.get("span_error", NAN))
    if math.isnan(out["split_error"]):
        out["split_error"] = metrics.span_error(spec.requests, spec.steps)
    if math.isnan(values.get("t_verify_ms", NAN)):  # a separate timed pass, or no per-step rows (counters)
        split = timed.get("split_ms") or {}
        base_split = (base.extra.get("timed_split") or {}).get("split_ms") or {}
        if split:
            out |= {"t_draft_ms": split["draft"], "t_verify_ms": split["verify"], "t_accept_ms": split["accept"],
                    "t_other_ms": split["other"], "t_verify_ms_baseline": base_split.get("verify", NAN)}
            out["speedup_predicted"] = metrics.predicted_speedup(
                out["t_verify_ms_baseline"], split["verify"], split["draft"], tokens_per_step,
                base_split.get("accept", 0.0), split["accept"])
    syn = spec.extra.get("synthetic_al")
    out["synthetic_al"] = float(syn) if syn is not None else NAN
    return out


def failed_cell(key: CellKey, error: str, device: str, n_gpus: int) -> CellResult:
    """A cell that could not be measured: every metric NaN, the error recorded."""
    values = {}
    for f in fields(CellResult):
        if f.name in _key_fields(key) or f.name in ("status", "error", "extra", "device", "n_gpus", *RUN_SETTING_FIELDS):
            continue
        if f.default is not MISSING:  # protocol and noise columns: their own defaults (NaN, 0, False)
            continue
        values[f.name] = () if f.name.startswith("accepted_") else (-1 if f.name == "first_divergence" else NAN)
    values["n_requests"] = 0
    values["al_source"] = "none"
    return CellResult(**_key_fields(key), **values, device=device, n_gpus=n_gpus, status=STATUS_FAILED, error=error)
