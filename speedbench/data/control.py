"""Control strings in prompt text (``dataset.control_tokens``).

A tokenizer turns the text of its special tokens (``<|eos|>``, ``<|assistant|>``, ...) into
the control tokens themselves, wherever that text appears, prompt text included: a prompt that
quotes one would end a turn or open a new one. The control strings of a tokenizer are its
special tokens and its added tokens written as markup (``<...>`` or ``[...]``).

``refuse`` (the default): the run is refused naming the file, line, prompt and string.
``escape``: a zero-width space (U+200B) goes after the first character of every occurrence, so
the text tokenizes as plain text (the prompt changes by those characters; cells record how many
prompts were escaped). ``keep``: the text is fed as it is (control tokens included).

``speedbench data validate`` reports the same strings (``--tokenizer``: that tokenizer's;
without one, strings shaped like the common chat-template markers, ``<|name|>``).
"""
from __future__ import annotations

import re
from typing import Any

CONTROL_TOKENS = ("refuse", "escape", "keep")
ZERO_WIDTH = "\u200b"
MARKER_SHAPE = re.compile(r"<\|[A-Za-z0-9_.\-]{1,40}\|>")  # <|eos|>, <|im_start|>, <|eot_id|> ...


def control_strings(tokenizer: Any) -> tuple[str, ...]:
    """The strings ``tokenizer`` turns into control tokens, longest first."""
    found: set[str] = set(getattr(tokenizer, "all_special_tokens", None) or ())
    for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        text = str(getattr(token, "content", token))
        if getattr(token, "special", False) or re.fullmatch(r"<[^<>\s]+>|\[[^\[\]\s]+\]", text):
            found.add(text)
    return tuple(sorted((s for s in found if s.strip()), key=len, reverse=True))


def _pattern(strings: tuple[str, ...]) -> re.Pattern | None:
    return re.compile("|".join(re.escape(s) for s in strings)) if strings else None


def find(text: str, strings: tuple[str, ...]) -> str | None:
    """The first control string in ``text``, if any."""
    pattern = _pattern(strings)
    match = pattern.search(text) if pattern and isinstance(text, str) else None
    return match.group(0) if match else None


def escape(text: str, strings: tuple[str, ...]) -> str:
    """``text`` with a zero-width space after the first character of every control string."""
    pattern = _pattern(strings)
    if pattern is None:
        return text
    for _ in range(4):  # an insertion cannot create a new occurrence, but stay safe with overlaps
        out = pattern.sub(lambda m: m.group(0)[0] + ZERO_WIDTH + m.group(0)[1:], text)
        if out == text or pattern.search(out) is None:
            return out
        text = out
    return text


def row_issues(rows, strings: tuple[str, ...] | None, field_label=str) -> list:
    """One issue per record whose turns hold a control string (``strings`` None: the marker shape)."""
    from .errors import Issue

    issues = []
    pattern = _pattern(strings) if strings is not None else MARKER_SHAPE
    for row in rows:
        turns = row.record.get("turns") if isinstance(row.record, dict) else None
        for i, turn in enumerate(turns if isinstance(turns, list) else []):
            match = pattern.search(turn) if pattern and isinstance(turn, str) else None
            if match:
                issues.append(Issue(row.path, row.line, field_label(f"turns[{i}]"),
                                    f"contains {match.group(0)!r}, a control string of the tokenizer (it would become a "
                                    "control token); run with dataset.control_tokens=escape or keep, or edit the text"))
                break
    return issues
