"""Small tokenizers built in-process from local text, for tests (no hub, no downloads)."""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterable

from . import material

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def training_text() -> list[str]:
    """Project paragraphs plus a few stdlib sources: enough to train a toy vocabulary."""
    texts = list(material.project_paragraphs())
    texts.extend(material.read_source(path) for path in material.stdlib_files()[:12])
    return texts


def tiny_bpe_tokenizer(texts: Iterable[str] | None = None, vocab_size: int = 1000, chat_template: str | None = None) -> Any:
    """A byte-level BPE tokenizer (GPT-2 style) wrapped as a transformers tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    tok.train_from_iterator(list(texts or training_text()), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    wrapped.chat_template = chat_template
    return wrapped


def whitespace_tokenizer(texts: Iterable[str] | None = None) -> Any:
    """A word-level tokenizer (whitespace/punctuation split, unknown words -> [UNK])."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()  # joins words with spaces
    trainer = trainers.WordLevelTrainer(vocab_size=5000, special_tokens=["[UNK]"], show_progress=False)
    tok.train_from_iterator(list(texts or training_text()), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


@lru_cache(maxsize=None)
def shared_bpe_tokenizer(chat_template: str | None = None) -> Any:
    """One BPE tokenizer per process (per chat template); treat it as read-only."""
    return tiny_bpe_tokenizer(chat_template=chat_template)


@lru_cache(maxsize=None)
def shared_whitespace_tokenizer() -> Any:
    """One word-level tokenizer per process; treat it as read-only."""
    return whitespace_tokenizer()
