"""Making a prompt exactly N tokens long by cutting natural filler at a token boundary.

A prompt is ``head + cut(body) + separator + tail``. The head (a short intro) and the tail
(the instruction or question) are always kept whole; only the body is cut, at a token
boundary of the body's own tokenization. Because tokenizers may merge across the joins,
the length of the whole prompt is measured, the cut point adjusted and measured again until
it is exact; a few separators are tried if one cannot hit the target.

Length modes:
* ``raw``: ``len(tokenizer(prompt, add_special_tokens=False).input_ids)`` - no BOS/EOS.
* ``chat``: the number of ids ``tokenizer.apply_chat_template([{"role": "user", "content":
  prompt}], add_generation_prompt=True, tokenize=True)`` returns - what a chat engine
  feeds the model for a single-turn request without a system prompt.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .tokens import chat_ids, count_tokens, has_chat_template, text_prefix, token_end_offsets

LENGTH_MODES = ("raw", "chat")
SEPARATORS = ("\n\n", "\n", "\n\n\n", " \n\n", "\n \n")
SCAN_RADIUS = 24


class LengthFitError(ValueError):
    """The exact length could not be reached (e.g. not enough filler)."""


class NotEnoughFiller(LengthFitError):
    """The body is shorter than the prompt needs."""


@dataclass
class PromptParts:
    head: str
    body: str
    tail: str
    src_ids: list[str] = field(default_factory=list)
    must_contain: str = ""  # text that must survive the cut (e.g. a needle)


def length_counter(tokenizer: Any, mode: str = "raw") -> Callable[[str], int]:
    """A function giving the length of a prompt under ``mode`` (see module doc)."""
    if mode == "raw":
        return lambda text: count_tokens(tokenizer, text)
    if mode == "chat":
        if not has_chat_template(tokenizer):
            raise LengthFitError("length_mode='chat' needs a tokenizer with a chat_template")
        return lambda text: len(chat_ids(tokenizer, [{"role": "user", "content": text}]))
    raise LengthFitError(f"unknown length mode {mode!r} (choose from {', '.join(LENGTH_MODES)})")


def fit_exact(parts: PromptParts, target: int, tokenizer: Any, measure: Callable[[str], int]) -> str:
    """The prompt text whose measured length is exactly ``target``."""
    ends = token_end_offsets(tokenizer, parts.body)
    n_body = len(ends) if ends is not None else count_tokens(tokenizer, parts.body)

    def compose(k: int, sep: str) -> str:
        return parts.head + text_prefix(tokenizer, parts.body, k, ends) + sep + parts.tail

    fixed = measure(parts.head + SEPARATORS[0] + parts.tail)
    if fixed > target:
        raise LengthFitError(f"head and instruction alone take {fixed} tokens, more than the target {target}")
    if n_body < target - fixed:
        raise NotEnoughFiller(f"filler has {n_body} tokens, need at least {target - fixed}")

    for sep in SEPARATORS:
        seen: dict[int, int] = {}
        k = min(n_body, max(0, target - fixed))
        for _ in range(12):  # Newton-like steps: the length moves ~1 token per body token
            length = seen[k] = measure(compose(k, sep))
            if length == target:
                return compose(k, sep)
            step = min(n_body, max(0, k + target - length))
            if step in seen:
                break
            k = step
        for candidate in sorted(range(k - SCAN_RADIUS, k + SCAN_RADIUS + 1), key=lambda c: (abs(c - k), c)):
            if 0 <= candidate <= n_body and candidate not in seen:
                if measure(compose(candidate, sep)) == target:
                    return compose(candidate, sep)
        if max(seen.values()) < target and max(seen) >= n_body:
            raise NotEnoughFiller(f"filler of {n_body} tokens is too short for {target}")
    raise LengthFitError(f"could not reach exactly {target} tokens with any separator")
