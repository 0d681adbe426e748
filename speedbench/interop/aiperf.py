"""AIPerf (``aiperf profile``, 0.13) ``profile_export_aiperf.json`` (+ ``profile_export.jsonl``) -> :class:`ToolRun`.

Summary: one block per metric ``{unit, avg, p1..p99, min, max, std, count}``; TTFT is
``time_to_first_token``, TPOT ``inter_token_latency`` ((latency - TTFT) / (tokens - 1) per
request), ITL per chunk ``inter_chunk_latency``, E2E ``request_latency`` (ms); throughput
``output_token_throughput`` / ``request_throughput``; speculation (vLLM, SGLang, TRT-LLM servers)
``spec_decode_token_weighted_acceptance_length`` (pooled AL), ``spec_decode_acceptance_length``
(per-request mean), ``spec_decode_overall_draft_acceptance_rate`` (percent),
``pooled_spec_decode_acceptance_histogram`` (steps accepting exactly k drafts), ``total_*``.
The load point and sampling are in ``input_config`` (``phases``, ``endpoint.extra``, ``datasets``).
The per-record export (one JSON line per request, warm-up lines marked ``benchmark_phase``) sits
beside it; requests pair by ``conversation_id`` (the same synthetic prompt under the same seed).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .model import ImportedRequest, InputFileError, SpecSummary, ToolRun, fail, read_json

TOOL = "aiperf"
SUMMARY_FILE = "profile_export_aiperf.json"
RECORDS_FILE = "profile_export.jsonl"
METRIC_KEYS = {"ttft": "time_to_first_token", "tpot": "inter_token_latency", "itl": "inter_chunk_latency",
               "e2e": "request_latency"}


def looks_like(data: Any) -> bool:
    return isinstance(data, dict) and "aiperf_version" in data


def resolve(path: Path) -> Path:
    """An artifact folder or its summary file -> the summary file."""
    path = Path(path)
    return path / SUMMARY_FILE if path.is_dir() else path


def _block(path, data: dict, key: str, required: bool = False) -> dict:
    v = data.get(key)
    if v is None:
        if required:
            raise fail(path, key, "missing")
        return {}
    if not isinstance(v, dict):
        raise fail(path, key, f"must be an object with avg/p50/..., got {type(v).__name__}")
    for stat, x in v.items():
        if stat != "unit" and x is not None and (isinstance(x, bool) or not isinstance(x, (int, float))):
            raise fail(path, f"{key}.{stat}", f"must be a number, got {x!r}")
    return v


def _stat(block: dict, stat: str) -> float:
    v = block.get(stat)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def _summary(path, data) -> dict[str, float]:
    out: dict[str, float] = {}
    for ours, theirs in METRIC_KEYS.items():
        b = _block(path, data, theirs, required=ours in ("ttft", "e2e"))
        out[f"{ours}_ms_mean"] = _stat(b, "avg")
        for p in ("p50", "p90", "p99"):
            out[f"{ours}_ms_{p}"] = _stat(b, p)
    out["output_tok_s"] = _stat(_block(path, data, "output_token_throughput"), "avg")
    out["requests_s"] = _stat(_block(path, data, "request_throughput"), "avg")
    return out


def _profiling_phase(path, config: dict) -> dict:
    phases = [p for p in config.get("phases") or [] if isinstance(p, dict) and p.get("kind") != "warmup"]
    if len(phases) != 1:
        raise fail(path, "input_config.phases", f"expected one profiling phase, found {len(phases)}")
    return phases[0]


def _records(path: Path) -> tuple[ImportedRequest, ...]:
    rec_path = path.with_name(RECORDS_FILE)
    if not rec_path.exists():
        return ()
    rows = []
    try:
        lines = rec_path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{rec_path}: not a UTF-8 text file ({exc})") from exc
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputFileError(f"{rec_path}: line {n}: not a whole JSON record (truncated or malformed: {exc.msg})") from exc
        meta, metrics = row.get("metadata") or {}, row.get("metrics") or {}
        if not isinstance(meta, dict) or not isinstance(metrics, dict):
            raise InputFileError(f"{rec_path}: line {n}: field 'metadata'/'metrics' must be objects")
        if meta.get("benchmark_phase") == "warmup" or meta.get("phase_kind") == "warmup":
            continue
        rows.append((n, meta, metrics, row.get("error")))
    if not rows:
        return ()
    t0 = min(m.get("request_start_ns", math.inf) for _, m, _, _ in rows)
    out = []
    for n, meta, metrics, error in rows:
        def val(key, default=math.nan, _n=n, _m=metrics):
            v = _m.get(key)
            if v is None:
                return default
            v = v.get("value") if isinstance(v, dict) else v
            if isinstance(v, bool) or not isinstance(v, (int, float, list)):
                raise InputFileError(f"{rec_path}: line {_n}: field 'metrics.{key}.value' must be a number, got {v!r}")
            return v
        key = meta.get("conversation_id")
        if not key:
            raise InputFileError(f"{rec_path}: line {n}: field 'metadata.conversation_id' missing")
        itls = val("inter_chunk_latency", [])
        steps = val("spec_decode_steps", -1)
        drafted = val("spec_decode_draft_tokens", -1)
        accepted = val("spec_decode_accepted_draft_tokens", -1)
        start = meta.get("request_start_ns")
        out.append(ImportedRequest(
            key=f"{key}:{meta.get('turn_index', 0)}", prompt_tokens=int(val("input_sequence_length", -1)),
            n_tokens=int(val("output_sequence_length", 0)), ttft=val("time_to_first_token") / 1e3,
            e2e=val("request_latency") / 1e3, tpot=val("inter_token_latency") / 1e3,
            itls=tuple(float(g) / 1e3 for g in (itls if isinstance(itls, list) else [itls])),
            t_start=(start - t0) / 1e9 if isinstance(start, (int, float)) else math.nan,
            error=str(error.get("message", error)) if isinstance(error, dict) else str(error or ""),
            drafts=int(steps), drafted=int(drafted), accepted=int(accepted)))
    return tuple(sorted(out, key=lambda r: r.key))


def _spec(path, data) -> SpecSummary | None:
    if "spec_decode_token_weighted_acceptance_length" not in data:
        return None
    hist_raw = data.get("pooled_spec_decode_acceptance_histogram") or {}
    if not isinstance(hist_raw, dict):
        raise fail(path, "pooled_spec_decode_acceptance_histogram", "must be an object {accepted: steps}")
    try:
        hist_map = {int(k): int(v) for k, v in hist_raw.items()}
    except (TypeError, ValueError) as exc:
        raise fail(path, "pooled_spec_decode_acceptance_histogram", f"must map integers to counts ({exc})") from exc
    k = max(hist_map, default=0)
    hist = tuple(hist_map.get(i, 0) for i in range(k + 1))
    steps = sum(hist)
    per_pos = tuple(sum(hist[j] for j in range(i + 1, k + 1)) / steps for i in range(k)) if steps else ()
    rate = _stat(_block(path, data, "spec_decode_overall_draft_acceptance_rate"), "avg")
    total = lambda key: int(_stat(_block(path, data, key), "avg")) if key in data else -1  # noqa: E731
    al = _stat(_block(path, data, "spec_decode_token_weighted_acceptance_length", required=True), "avg")
    if not math.isfinite(al):
        raise fail(path, "spec_decode_token_weighted_acceptance_length.avg", "missing")
    return SpecSummary(al=al, acceptance_rate=rate / 100.0 if math.isfinite(rate) else rate, per_pos=per_pos,
                       drafts=total("total_spec_decode_steps"), drafted=total("total_draft_tokens"),
                       accepted=total("total_accepted_draft_tokens"),
                       al_request_mean=_stat(_block(path, data, "spec_decode_acceptance_length"), "avg"),
                       hist=hist, num_speculative_tokens=k)


def read(path: Path) -> ToolRun:
    path = resolve(path)
    data = read_json(path)
    if not isinstance(data, dict):
        raise fail(path, "(top level)", f"must be a JSON object, got {type(data).__name__}")
    for key in ("aiperf_version", "input_config"):
        if key not in data:
            raise fail(path, key, f"missing (not an AIPerf {SUMMARY_FILE}?)")
    config = data["input_config"]
    if not isinstance(config, dict):
        raise fail(path, "input_config", "must be an object")
    phase = _profiling_phase(path, config)
    models = [m.get("name") for m in (config.get("models") or {}).get("items", []) if isinstance(m, dict)]
    endpoint = config.get("endpoint") or {}
    conc = phase.get("concurrency")
    rate = phase.get("rate") or phase.get("request_rate")
    datasets = [{k: d.get(k) for k in ("type", "entries", "random_seed", "prompts")} for d in config.get("datasets") or []
                if isinstance(d, dict)]
    identity = {"input_config.models": models, "input_config.tokenizer": (config.get("tokenizer") or {}).get("name"),
                "input_config.endpoint.type": endpoint.get("type"),
                "input_config.endpoint.streaming": endpoint.get("streaming"),
                "input_config.endpoint.extra": endpoint.get("extra") or {},
                "input_config.datasets": datasets, "input_config.phases.type": phase.get("type"),
                "input_config.phases.requests": phase.get("requests"),
                "input_config.phases.concurrency": conc, "input_config.phases.rate": rate}
    requests = _records(path)
    if requests:
        identity["profile_export.jsonl input_sequence_length"] = [(r.key, r.prompt_tokens) for r in requests]
    count = _stat(_block(path, data, "request_count"), "avg")
    errors = data.get("error_summary") or []
    return ToolRun(path=path, tool=TOOL, version=str(data["aiperf_version"]), model=str(models[0] if models else ""),
                   concurrency=int(conc) if isinstance(conc, int) else -1,
                   request_rate=float(rate) if isinstance(rate, (int, float)) else math.inf, identity=identity,
                   summary=_summary(path, data), requests=requests, spec=_spec(path, data),
                   n_completed=int(count) if math.isfinite(count) else len(requests),
                   n_failed=sum(int(e.get("count", 1)) for e in errors if isinstance(e, dict)),
                   duration_s=_stat(_block(path, data, "benchmark_duration"), "avg"),
                   extra={"benchmark_id": data.get("benchmark_id"), "schema_version": data.get("schema_version")})
