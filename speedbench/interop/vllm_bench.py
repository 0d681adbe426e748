"""``vllm bench serve --save-result [--save-detailed]`` (and vllm-bench, same schema) -> :class:`ToolRun`.

Summary keys: ``{mean,median,p<N>}_{ttft,tpot,itl,e2el}_ms`` (ms), ``output_throughput``,
``request_throughput``, ``completed``, ``failed``, ``max_concurrency``, ``request_rate`` ("inf" for
closed loop), ``burstiness``, ``model_id``, ``tokenizer_id``, ``num_prompts``; on a speculative
server ``spec_decode_*`` (whole-server /metrics deltas over the run). ``--save-detailed`` adds the
per-request lists ``input_lens``, ``output_lens``, ``ttfts``, ``itls``, ``latencies``,
``start_times``, ``errors`` (seconds), in prompt order. The file carries no sampling settings and
no vLLM version: ``--metadata KEY=VALUE`` pairs (e.g. ``vllm_version=0.32.0 temperature=0``) are
saved at the top level and read here (docs/interop.md).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .model import ImportedRequest, SpecSummary, ToolRun, fail, number, number_list, read_json

TOOL = "vllm bench serve"
METRIC_KEYS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2el"}
# --metadata keys that describe sampling or the prompts: a pair must agree on every one either file sets
METADATA_IDENTITY = ("temperature", "top_p", "top_k", "seed", "dataset_name", "random_input_len",
                     "random_output_len", "ignore_eos")
REQUIRED = ("completed", "model_id", "num_prompts", "duration", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms",
            "median_tpot_ms")


def looks_like(data: Any) -> bool:
    return isinstance(data, dict) and "model_id" in data and "completed" in data


def _rate(path, data) -> float:
    v = data.get("request_rate", "inf")
    if v in ("inf", None) or (isinstance(v, float) and math.isinf(v)):
        return math.inf
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise fail(path, "request_rate", f"must be a number or 'inf', got {v!r}")
    return float(v)


def _summary(path: Path, data: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for ours, theirs in METRIC_KEYS.items():
        out[f"{ours}_ms_mean"] = number(path, data, f"mean_{theirs}_ms", required=False)
        out[f"{ours}_ms_p50"] = number(path, data, f"median_{theirs}_ms", required=False)
        for p in ("p90", "p99"):  # present when --metric-percentiles asked for them (default: 99 only)
            out[f"{ours}_ms_{p}"] = number(path, data, f"{p}_{theirs}_ms", required=False)
    out["output_tok_s"] = number(path, data, "output_throughput", required=False)
    out["requests_s"] = number(path, data, "request_throughput", required=False)
    return out


def _requests(path: Path, data: dict) -> tuple[ImportedRequest, ...]:
    ttfts = number_list(path, data, "ttfts")
    if ttfts is None:
        return ()
    n = len(ttfts)
    lists = {k: number_list(path, data, k, n) for k in ("input_lens", "output_lens", "latencies", "itls")}
    for k, v in lists.items():
        if v is None:
            raise fail(path, k, "missing (the file has 'ttfts' but not the other --save-detailed lists)")
    starts = number_list(path, data, "start_times", n) or [math.nan] * n
    errors = number_list(path, data, "errors", n) or [""] * n
    t0 = min((s for s in starts if isinstance(s, (int, float))), default=math.nan)
    out = []
    for i in range(n):
        try:
            n_out, ttft, lat = int(lists["output_lens"][i]), float(ttfts[i]), float(lists["latencies"][i])
            itls = tuple(float(g) for g in lists["itls"][i])
            prompt = int(lists["input_lens"][i])
        except (TypeError, ValueError) as exc:
            raise fail(path, f"request {i}", f"not a number in the per-request lists ({exc})") from exc
        tpot = (lat - ttft) / (n_out - 1) if n_out > 1 else math.nan  # vllm bench's own TPOT
        start = float(starts[i]) - t0 if isinstance(starts[i], (int, float)) else math.nan
        out.append(ImportedRequest(key=str(i), prompt_tokens=prompt, n_tokens=n_out, ttft=ttft, e2e=lat, tpot=tpot,
                                   itls=itls, t_start=start, error=str(errors[i] or "")))
    return tuple(out)


def _spec(path: Path, data: dict) -> SpecSummary | None:
    if "spec_decode_acceptance_length" not in data:
        return None
    per_pos = number_list(path, data, "spec_decode_per_position_acceptance_rates") or []
    try:
        per_pos = tuple(float(p) for p in per_pos)  # fractions in the file (printed as percent)
    except (TypeError, ValueError) as exc:
        raise fail(path, "spec_decode_per_position_acceptance_rates", f"must hold numbers ({exc})") from exc
    rate = number(path, data, "spec_decode_acceptance_rate", required=False)
    return SpecSummary(
        al=number(path, data, "spec_decode_acceptance_length"),
        acceptance_rate=rate / 100.0 if math.isfinite(rate) else rate,  # percent in the file
        per_pos=per_pos, drafts=int(number(path, data, "spec_decode_num_drafts", required=False) or -1),
        drafted=int(number(path, data, "spec_decode_draft_tokens", required=False) or -1),
        accepted=int(number(path, data, "spec_decode_accepted_tokens", required=False) or -1),
        num_speculative_tokens=len(per_pos))


def read(path: Path) -> ToolRun:
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict):
        raise fail(path, "(top level)", f"must be a JSON object, got {type(data).__name__}")
    for key in REQUIRED:
        if key not in data:
            raise fail(path, key, f"missing (not a `{TOOL} --save-result` file?)")
    conc = data.get("max_concurrency")
    if conc is not None and (isinstance(conc, bool) or not isinstance(conc, int)):
        raise fail(path, "max_concurrency", f"must be an integer or null, got {conc!r}")
    requests = _requests(path, data)
    identity: dict[str, Any] = {"model_id": data["model_id"], "tokenizer_id": data.get("tokenizer_id"),
                                "num_prompts": data["num_prompts"], "max_concurrency": conc,
                                "request_rate": _rate(path, data), "burstiness": data.get("burstiness", 1.0)}
    if requests:
        identity["input_lens"] = [r.prompt_tokens for r in requests]
    else:
        identity["total_input_tokens"] = data.get("total_input_tokens")
    for key in METADATA_IDENTITY:
        if key in data:
            identity[key] = str(data[key])
    return ToolRun(path=path, tool=TOOL, version=str(data.get("vllm_version") or "(version not in file)"),
                   model=str(data["model_id"]), concurrency=int(conc) if conc is not None else -1,
                   request_rate=identity["request_rate"], identity=identity, summary=_summary(path, data),
                   requests=requests, spec=_spec(path, data), n_completed=int(number(path, data, "completed")),
                   n_failed=int(number(path, data, "failed", required=False) or 0),
                   duration_s=number(path, data, "duration"),
                   extra={"date": data.get("date"), "metadata_keys": sorted(k for k in METADATA_IDENTITY if k in data)})
