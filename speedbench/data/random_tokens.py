"""``dataset=random``: seeded random token ids of a fixed length, as ``vllm bench serve``'s random dataset.

Each request's prompt is ``dataset.input_len`` token ids drawn uniformly (seed ``dataset.seed``
and the request's index) from the target's vocabulary without its special tokens; it is sent
as token ids as it is (no chat template), once (one turn). Outputs are fixed-length:
``max_new_tokens`` (``dataset.output_len``, when set, must equal it) with ``ignore_eos=true``.
Random tokens make lookup and small drafters look different from real text (SPEED-Bench's
first finding: up to 2x on throughput); the report's load section says by how much per point.
"""
from __future__ import annotations

import random

from ..records import Request

SOURCE = "random"
CATEGORY = "random"


def problems(run, target_cfg: dict | None, tokenizes: bool) -> list[str]:
    """The random dataset's settings against the run (one line each, naming the option).
    ``tokenizes``: whether the backend tokenizes with the target's tokenizer (its registry entry)."""
    ds, p = run.dataset, []
    if ds.input_len is None or isinstance(ds.input_len, bool) or not isinstance(ds.input_len, int) or ds.input_len < 1:
        p.append(f"dataset.input_len must be an integer >= 1 for dataset.source=random, got {ds.input_len!r}")
    if ds.output_len is not None and ds.output_len != run.max_new_tokens:
        p.append(f"dataset.output_len={ds.output_len} but max_new_tokens={run.max_new_tokens}: set max_new_tokens to it")
    if not run.ignore_eos:
        p.append("dataset.source=random needs ignore_eos=true (fixed output lengths, as vllm bench's random dataset)")
    if getattr(run.backend.options, "endpoint", "completions") == "chat":  # the server backends' option
        p.append("dataset.source=random sends token ids: it needs backend.options.endpoint=completions")
    if not tokenizes:
        p.append(f"dataset.source=random needs the target's tokenizer; backend={run.backend.name} has none")
    context = (target_cfg or {}).get("max_position_embeddings")
    if context and isinstance(ds.input_len, int) and ds.input_len + run.max_new_tokens + run.drafter.num_speculative_tokens + 1 > context:
        p.append(f"dataset.input_len={ds.input_len} + max_new_tokens={run.max_new_tokens} + D + 1 exceed the "
                 f"target's context of {context}")
    return p


def requests(run, tokenizer, vocab_size: int) -> list[Request]:
    """``dataset.n_requests`` (default 32) requests of random token ids."""
    ds = run.dataset
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    pool = [i for i in range(vocab_size) if i not in special]
    out = []
    for k in range(ds.n_requests or 32):
        rng = random.Random(f"{ds.seed}:{k}")
        ids = tuple(rng.choice(pool) for _ in range(ds.input_len))
        out.append(Request(request_id=f"random-{k:04d}", category=CATEGORY, turns=(tokenizer.decode(ids),),
                           max_new_tokens=run.max_new_tokens, source=SOURCE, prompt_ids=ids))
    return out
