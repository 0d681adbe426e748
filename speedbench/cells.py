"""Cells: the unit of measurement, its stable id, and its row in the cell table.

A cell = (target, drafter + D, batch size, sampling, dataset slice, category/context
bucket, backend, output length). Its id is a hash of exactly those settings, so reruns,
resumes and the CI gate match cells across runs and machines.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, fields

from . import metrics
from .backends.base import GenerateOutput
from .config import RunConfig
from .records import RUN_SETTING_FIELDS, STATUS_FAILED, STATUS_OK, CellResult

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

    @staticmethod
    def for_run(run: RunConfig, category: str, context_bucket: str) -> "CellKey":
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
        return CellKey(
            cell_id=stable_hash(identity),
            run_id=run.run_id, target=run.target.name, drafter=run.drafter.name, method=run.drafter.method,
            num_speculative_tokens=run.drafter.num_speculative_tokens, batch_size=run.batch_size,
            temperature=run.sampling.temperature, top_p=run.sampling.top_p, top_k=run.sampling.top_k,
            backend=run.backend.name, dataset=run.dataset.name, category=category, context_bucket=context_bucket,
        )


def dataset_identity(dataset) -> dict:
    """The dataset settings that define a cell; ``on_too_long`` only when it changes the prompts
    (its default, ``error``, keeps the ids of folders written before it existed)."""
    ident = asdict_clean(dataset, drop=("name", "on_too_long"))
    if getattr(dataset, "on_too_long", "error") != "error":
        ident["on_too_long"] = dataset.on_too_long
    return ident


def drafter_identity(drafter) -> dict:
    """The drafter's settings that define a cell; fault-injection options are not among them."""
    from .drafters.faults import FAULT_OPTIONS

    ident = asdict_clean(drafter, drop=("name",))
    ident["options"] = {k: v for k, v in ident["options"].items() if k not in FAULT_OPTIONS}
    return ident


def asdict_clean(obj, drop: tuple[str, ...] = ()) -> dict:
    return {k: v for k, v in asdict(obj).items() if k not in drop}


def stable_hash(obj) -> str:
    text = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _key_fields(key: CellKey) -> dict:
    return asdict(key)


def summarize(
    key: CellKey, base: GenerateOutput, spec: GenerateOutput, warmup_s: float, device: str, n_gpus: int
) -> CellResult:
    """The cell row from a matched baseline and speculative run on the same requests."""
    ok_b = [r for r in base.requests if r.status == STATUS_OK]
    ok_s = [r for r in spec.requests if r.status == STATUS_OK]
    failed = [r for r in base.requests + spec.requests if r.status != STATUS_OK]
    acc = metrics.acceptance(ok_s, key.num_speculative_tokens)
    it_b, it_s = metrics.iteration_times(base.steps), metrics.iteration_times(spec.steps)
    draft = metrics.stats_ms([s.t_draft for s in it_s])
    ver = metrics.stats_ms([s.t_verify for s in it_s])
    ver_b = metrics.stats_ms([s.t_verify for s in it_b])
    tpot_b = metrics.median([r.tpot for r in ok_b])
    tpot_s = metrics.median([r.tpot for r in ok_s])
    greedy = key.temperature <= 0
    agree = metrics.agreement(ok_b, ok_s)
    tps = metrics.tokens_per_step(spec.steps)
    # AL drives the prediction only where every step drafts; tokens/step is the general form
    pred = metrics.predicted_speedup(ver_b[0], ver[0], draft[0] if not math.isnan(draft[0]) else 0.0, tps)
    tok_b, tok_s = sum(r.n_tokens for r in ok_b), sum(r.n_tokens for r in ok_s)
    return CellResult(
        **_key_fields(key),
        n_requests=len({r.request_id for r in ok_s}),
        al=acc.al,
        al_source=ok_s[0].al_source if ok_s else "none",
        acceptance_rate=acc.rate,
        accepted_per_pos=acc.per_position(),
        accepted_per_pos_cond=acc.per_position_conditional(),
        accepted_hist=acc.hist,
        t_draft_ms=draft[0], t_draft_ms_p50=draft[1], t_draft_ms_p90=draft[2],
        t_verify_ms=ver[0], t_verify_ms_p50=ver[1], t_verify_ms_p90=ver[2],
        t_verify_ms_baseline=ver_b[0],
        t_accept_ms=metrics.stats_ms([s.t_accept for s in it_s])[0],
        t_step_ms_baseline=metrics.stats_ms([s.t_step for s in it_b])[0],
        t_step_ms_spec=metrics.stats_ms([s.t_step for s in it_s])[0],
        overhead_frac=metrics.overhead_fraction(it_s),
        ttft_ms_baseline=metrics.median([r.ttft for r in ok_b]) * 1e3,
        ttft_ms_spec=metrics.median([r.ttft for r in ok_s]) * 1e3,
        tpot_ms_baseline=tpot_b * 1e3,
        tpot_ms_spec=tpot_s * 1e3,
        tpot_ms_spec_iqr=metrics.iqr([r.tpot for r in ok_s]) * 1e3,
        tpot_ms_baseline_iqr=metrics.iqr([r.tpot for r in ok_b]) * 1e3,
        tokens_per_s_user_baseline=metrics.median([1 / r.tpot for r in ok_b if r.tpot > 0]),
        tokens_per_s_user_spec=metrics.median([1 / r.tpot for r in ok_s if r.tpot > 0]),
        tokens_per_s_baseline=tok_b / base.wall_s if base.wall_s > 0 else NAN,
        tokens_per_s_spec=tok_s / spec.wall_s if spec.wall_s > 0 else NAN,
        tokens_per_s_per_gpu_baseline=tok_b / base.wall_s / n_gpus if base.wall_s > 0 else NAN,
        tokens_per_s_per_gpu_spec=tok_s / spec.wall_s / n_gpus if spec.wall_s > 0 else NAN,
        speedup=tpot_b / tpot_s if tpot_s > 0 else NAN,
        speedup_predicted=pred,
        greedy_match_rate=agree.match_rate if greedy else NAN,
        token_match_rate=agree.token_match_rate if greedy else NAN,
        first_divergence=agree.first_divergence if greedy else -1,
        warmup_s=warmup_s,
        wall_s=base.wall_s + spec.wall_s,
        n_gpus=n_gpus,
        device=device,
        status=STATUS_OK if not failed else STATUS_FAILED,
        error="" if not failed else f"{len(failed)} request(s) failed; first: {failed[0].error}",
        extra={"tokens_per_step": tps, "n_failed_requests": len(failed), **spec.extra},
    )


def failed_cell(key: CellKey, error: str, device: str, n_gpus: int) -> CellResult:
    """A cell that could not be measured: every metric NaN, the error recorded."""
    values = {}
    for f in fields(CellResult):
        if f.name in _key_fields(key) or f.name in ("status", "error", "extra", "device", "n_gpus", *RUN_SETTING_FIELDS):
            continue
        values[f.name] = () if f.name.startswith("accepted_") else (-1 if f.name == "first_divergence" else NAN)
    values["n_requests"] = 0
    values["al_source"] = "none"
    return CellResult(**_key_fields(key), **values, device=device, n_gpus=n_gpus, status=STATUS_FAILED, error=error)
