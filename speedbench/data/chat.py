"""Rendering a conversation into prompt token ids for engines that take ids."""
from __future__ import annotations


def render_conversation(tokenizer, turns_so_far: list[tuple[str, str]], next_user_turn: str) -> list[int]:
    """Token ids of (user, assistant) pairs so far plus the next user turn, ready for generation.

    Uses the tokenizer's chat template when it has one; otherwise a plain
    ``User: ...\\nAssistant: ...`` transcript.
    """
    if getattr(tokenizer, "chat_template", None):
        messages = []
        for user, assistant in turns_so_far:
            messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        messages.append({"role": "user", "content": next_user_turn})
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):  # some tokenizers return a BatchEncoding
            ids = ids["input_ids"]
        return list(ids)
    text = "".join(f"User: {u}\nAssistant: {a}\n" for u, a in turns_so_far)
    text += f"User: {next_user_turn}\nAssistant:"
    return tokenizer(text, add_special_tokens=True)["input_ids"]
