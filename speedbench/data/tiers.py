"""The six throughput tasks, two per entropy tier.

* low: ``code_continue`` (continue stdlib Python source), ``sort_items`` (sort a list of names)
* mixed: ``needle`` (find a fact hidden in filler passages), ``exam`` (study text + exam questions)
* high: ``creative_writing`` (open brief after loose notes), ``dialogue`` (continue a conversation)

Each task returns ``PromptParts``: a short head, a long natural body that ``fit_exact`` cuts
at a token boundary, and the final instruction (kept whole).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from . import banks, material
from .fit import PromptParts
from .tokens import count_tokens, token_end_offsets


@dataclass
class TaskContext:
    rng: random.Random
    tokenizer: Any
    need: int  # body tokens to gather (more than the cut will keep)
    keep: int  # approximate body tokens the final prompt keeps


def gather(pieces: Iterator[tuple[str, str]], joiner: str, ctx: TaskContext) -> tuple[str, list[str]]:
    """Join (text, source id) pieces until they hold ``ctx.need`` tokens."""
    texts: list[str] = []
    sources: list[str] = []
    total = 0
    for text, source in pieces:
        texts.append(text)
        if source not in sources:
            sources.append(source)
        total += count_tokens(ctx.tokenizer, text) + 1
        if total >= ctx.need:
            break
    return joiner.join(texts), sources


def _random_files(rng: random.Random) -> Iterator[Any]:
    files = material.stdlib_files()
    while True:
        yield files[rng.randrange(len(files))]


def _deck(rng: random.Random, items: tuple[str, ...]) -> Iterator[str]:
    """Items in shuffled order, reshuffled after each full pass (no early repeats)."""
    while items:
        order = list(items)
        rng.shuffle(order)
        yield from order


def _prose(rng: random.Random) -> Iterator[tuple[str, str]]:
    """Written paragraphs and stdlib docstrings, interleaved at random, without repeats
    until a pool is exhausted."""
    paragraphs = _deck(rng, material.project_paragraphs())
    files = _random_files(rng)
    used: set[str] = set()
    while True:
        if rng.random() < 0.5:
            paragraph = next(paragraphs, None)
            if paragraph is not None:
                yield paragraph, "speedbench:datasets"
                continue
        path = next(files)
        docs = [d for d in material.docstrings(path) if d not in used]
        if docs:
            doc = docs[rng.randrange(len(docs))]
            used.add(doc)
            yield doc, f"stdlib:{material.stdlib_name(path)}"


def _sentences(rng: random.Random) -> Iterator[tuple[str, str]]:
    for paragraph, source in _prose(rng):
        for sentence in material.sentences(paragraph):
            yield sentence, source


# -- low entropy ------------------------------------------------------------------------

def code_continue(ctx: TaskContext) -> PromptParts:
    def pieces() -> Iterator[tuple[str, str]]:
        for path in _random_files(ctx.rng):
            name = material.stdlib_name(path)
            yield f"# ---- file: {name} ----\n{material.read_source(path)}", f"stdlib:{name}"

    body, sources = gather(pieces(), "\n\n", ctx)
    return PromptParts("", body, "---\nTask: " + ctx.rng.choice(banks.CODE_INSTRUCTIONS), sources)


def sort_items(ctx: TaskContext) -> PromptParts:
    def pieces() -> Iterator[tuple[str, str]]:
        seen: set[str] = set()
        for path in _random_files(ctx.rng):
            names = [n for n in material.defined_names(path) if n not in seen]
            ctx.rng.shuffle(names)
            for name in names[:40]:
                seen.add(name)
                yield f"- {name}", f"stdlib:{material.stdlib_name(path)}"

    body, sources = gather(pieces(), "\n", ctx)
    return PromptParts("Items to sort:\n", body, ctx.rng.choice(banks.SORT_INSTRUCTIONS), sources)


# -- mixed ------------------------------------------------------------------------------

def _passages(ctx: TaskContext) -> tuple[str, list[str]]:
    numbered = ((f"Passage {i}.\n{text}", src) for i, (text, src) in enumerate(_prose(ctx.rng), start=1))
    return gather(numbered, "\n\n", ctx)


def needle(ctx: TaskContext) -> PromptParts:
    body, sources = _passages(ctx)
    place = ctx.rng.choice(banks.NEEDLE_PLACES)
    first, second = ctx.rng.sample(banks.NEEDLE_WORDS, 2)
    code = f"{first}-{second}-{ctx.rng.randrange(10, 100)}"
    fact = banks.NEEDLE_FACT.format(place=place, code=code)
    head, question = "Read the passages below.\n\n", banks.NEEDLE_QUESTION.format(place=place)
    depth = ctx.rng.uniform(0.1, 0.8)
    ends = token_end_offsets(ctx.tokenizer, body) or []
    at = ends[min(len(ends) - 1, int(depth * ctx.keep))] if ends else int(depth * len(body) * ctx.keep / max(ctx.need, 1))
    before, after = body.rfind("\n\n", 0, at), body.find("\n\n", at)
    # a paragraph break that the cut keeps together with the fact after it (with long paragraphs,
    # e.g. byte tokens, the next break can lie past what the cut keeps); none: the token boundary itself
    room = ctx.keep - sum(count_tokens(ctx.tokenizer, t) for t in (head, question, fact)) - 8
    limit = ends[min(len(ends) - 1, max(room, 0))] if ends else len(body)
    candidates = [c + 2 for c in (before, after) if c >= 0 and c + 2 <= limit] or [min(at, limit)]
    cut = min(candidates, key=lambda c: abs(c - at))
    body = body[:cut] + fact + "\n\n" + body[cut:]
    return PromptParts(head, body, question, sources, must_contain=fact)


def exam(ctx: TaskContext) -> PromptParts:
    body, sources = _passages(ctx)
    questions = ctx.rng.sample(banks.EXAM_QUESTIONS, 5)
    tail = banks.EXAM_INTRO + "\n".join(f"{i}. {q}" for i, q in enumerate(questions, start=1))
    return PromptParts("Study material:\n\n", body, tail, sources)


# -- high entropy -----------------------------------------------------------------------

def creative_writing(ctx: TaskContext) -> PromptParts:
    body, sources = gather(_prose(ctx.rng), "\n\n", ctx)
    return PromptParts("Notes collected for a writing workshop:\n\n", body, ctx.rng.choice(banks.CREATIVE_BRIEFS), sources)


def dialogue(ctx: TaskContext) -> PromptParts:
    a, b = ctx.rng.choice(banks.DIALOGUE_PAIRS)

    def turns() -> Iterator[tuple[str, str]]:
        sentences = _sentences(ctx.rng)
        speaker = 0
        while True:
            said = [next(sentences) for _ in range(ctx.rng.randint(1, 3))]
            yield f"{(a, b)[speaker]}: " + " ".join(s for s, _ in said), said[0][1]
            speaker = 1 - speaker

    body, sources = gather(turns(), "\n", ctx)
    head = banks.DIALOGUE_INTRO.format(a=a, b=b)
    return PromptParts(head, body, banks.DIALOGUE_INSTRUCTION.format(a=a, b=b), sources)


TASKS: dict[str, tuple[Callable[[TaskContext], PromptParts], ...]] = {
    "low": (code_continue, sort_items),
    "mixed": (needle, exam),
    "high": (creative_writing, dialogue),
}
TIER_CATEGORY = {"low": "low_entropy", "mixed": "mixed", "high": "high_entropy"}
