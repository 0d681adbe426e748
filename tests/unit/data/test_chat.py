"""render_conversation: chat template when the tokenizer has one, plain format otherwise."""
from speedbench.data import render_conversation
from speedbench.data.testing import CHAT_TEMPLATE, shared_bpe_tokenizer, shared_whitespace_tokenizer
from speedbench.data.tokens import encode_with_defaults

HISTORY = [("What is 2+2?", "4."), ("And 3+3?", "6.")]


def test_plain_format_without_template():
    text = render_conversation(None, HISTORY, "And 4+4?")
    assert text == "User: What is 2+2?\nAssistant: 4.\nUser: And 3+3?\nAssistant: 6.\nUser: And 4+4?\nAssistant:"
    assert render_conversation(shared_whitespace_tokenizer(), [], "Hi") == "User: Hi\nAssistant:"


def test_plain_format_tokenized():
    tok = shared_whitespace_tokenizer()
    ids = render_conversation(tok, [], "Hi there", tokenize=True)
    assert ids == encode_with_defaults(tok, "User: Hi there\nAssistant:")


def test_chat_template_is_used_when_present():
    tok = shared_bpe_tokenizer(CHAT_TEMPLATE)
    text = render_conversation(tok, HISTORY, "And 4+4?")
    assert text == (
        "<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n4.<|end|>\n"
        "<|user|>\nAnd 3+3?<|end|>\n<|assistant|>\n6.<|end|>\n"
        "<|user|>\nAnd 4+4?<|end|>\n<|assistant|>\n"
    )
    ids = render_conversation(tok, HISTORY, "And 4+4?", tokenize=True)
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
    assert tok.decode(ids) == text
