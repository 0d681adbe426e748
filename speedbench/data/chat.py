"""Rendering a (multi-turn) conversation into a prompt for the next user turn."""
from __future__ import annotations

from typing import Any, Sequence

from .tokens import _ids, encode_with_defaults, has_chat_template


def conversation_messages(turns_so_far: Sequence[tuple[str, str]], next_user_turn: str) -> list[dict[str, str]]:
    """Chat messages: earlier (user, assistant) pairs, then the next user turn."""
    messages: list[dict[str, str]] = []
    for user, assistant in turns_so_far:
        messages.append({"role": "user", "content": user})
        messages.append({"role": "assistant", "content": assistant})
    messages.append({"role": "user", "content": next_user_turn})
    return messages


def plain_conversation(turns_so_far: Sequence[tuple[str, str]], next_user_turn: str) -> str:
    """The fallback format for tokenizers without a chat template::

        User: first question
        Assistant: first reply
        User: next question
        Assistant:
    """
    lines = []
    for user, assistant in turns_so_far:
        lines.append(f"User: {user}")
        lines.append(f"Assistant: {assistant}")
    lines.append(f"User: {next_user_turn}")
    lines.append("Assistant:")
    return "\n".join(lines)


def render_conversation(
    tokenizer: Any,
    turns_so_far: Sequence[tuple[str, str]],
    next_user_turn: str,
    tokenize: bool = False,
) -> str | list[int]:
    """The prompt that asks the model for its reply to ``next_user_turn``.

    ``turns_so_far`` holds (user turn, the engine's own reply) pairs from earlier turns.
    With a chat template (``tokenizer.chat_template``) the template renders the messages
    with the generation prompt appended; otherwise the plain ``User:/Assistant:`` format
    is used. ``tokenize=True`` returns token ids (template: as the template tokenizes;
    plain: the tokenizer's default special tokens, e.g. a BOS) instead of text.
    ``tokenizer`` may be None for plain text.
    """
    if tokenizer is not None and has_chat_template(tokenizer):
        messages = conversation_messages(turns_so_far, next_user_turn)
        out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=tokenize)
        return _ids(out) if tokenize else out
    text = plain_conversation(turns_so_far, next_user_turn)
    if not tokenize:
        return text
    if tokenizer is None:
        raise ValueError("render_conversation(tokenize=True) needs a tokenizer")
    return encode_with_defaults(tokenizer, text)
