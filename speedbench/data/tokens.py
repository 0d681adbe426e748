"""Counting tokens and cutting text at token boundaries, for any tokenizer.

Accepted tokenizers: a ``transformers`` tokenizer (``PreTrainedTokenizerBase``) or a raw
``tokenizers.Tokenizer``. Lengths are counted WITHOUT special tokens (no BOS/EOS) unless the
chat template is used, in which case the template decides.
"""
from __future__ import annotations

from typing import Any


def _ids(encoded: Any) -> list[int]:
    """Token ids from whatever an encode call returned (list, BatchEncoding, Encoding)."""
    if hasattr(encoded, "ids"):  # tokenizers.Encoding
        return list(encoded.ids)
    if isinstance(encoded, dict) or hasattr(encoded, "keys"):
        encoded = encoded["input_ids"]
    ids = list(encoded)
    if ids and isinstance(ids[0], list):  # batched output of one sequence
        ids = ids[0]
    return ids


def is_raw_tokenizer(tokenizer: Any) -> bool:
    """True for a ``tokenizers.Tokenizer`` (no transformers wrapper)."""
    return hasattr(tokenizer, "encode_batch") and not hasattr(tokenizer, "apply_chat_template")


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens."""
    if is_raw_tokenizer(tokenizer):
        return _ids(tokenizer.encode(text, add_special_tokens=False))
    return _ids(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_with_defaults(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` with the tokenizer's default special tokens (e.g. a BOS)."""
    if is_raw_tokenizer(tokenizer):
        return _ids(tokenizer.encode(text))
    return _ids(tokenizer(text)["input_ids"])


def count_tokens(tokenizer: Any, text: str) -> int:
    return len(encode(tokenizer, text))


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def chat_ids(tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
    """Token ids of ``messages`` rendered by the tokenizer's chat template."""
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True)
    return _ids(out)


def token_end_offsets(tokenizer: Any, text: str) -> list[int] | None:
    """Character offset where each token of ``text`` ends, or None if the tokenizer
    cannot report offsets (then callers fall back to decoding a prefix)."""
    try:
        if is_raw_tokenizer(tokenizer):
            offsets = tokenizer.encode(text, add_special_tokens=False).offsets
        else:
            offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    except (NotImplementedError, TypeError, ValueError, KeyError):
        return None
    ends: list[int] = []
    for _, end in offsets:
        ends.append(max(end, ends[-1] if ends else 0))
    return ends


def text_prefix(tokenizer: Any, text: str, n_tokens: int, ends: list[int] | None = None) -> str:
    """The part of ``text`` covered by its first ``n_tokens`` tokens (a token-boundary cut)."""
    if n_tokens <= 0:
        return ""
    if ends is None:
        ends = token_end_offsets(tokenizer, text)
    if ends is not None:
        return text if n_tokens >= len(ends) else text[: ends[n_tokens - 1]]
    ids = encode(tokenizer, text)[:n_tokens]
    if is_raw_tokenizer(tokenizer):
        return tokenizer.decode(ids, skip_special_tokens=True)
    return tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
