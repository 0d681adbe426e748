"""One validation pass over a whole run, before any model loads.

:func:`prepare` checks the configuration against the target's and the drafter's configs
(``config.json`` and tokenizer files, never weights; ``builtin:`` names resolve to the shipped
folders, ``random:`` presets to their in-code configs) and the prompts against the target's
context, and returns the requests to run. Every problem found is reported at once in one
:class:`ConfigError` naming the key (or ``file:line: field``); the CLI prints it without a
traceback and exits 2, having written nothing.

Prompt length: each request's prompt is counted as the engine feeds it, through the target's
chat template (earlier turns with empty replies, plus ``max_new_tokens`` per earlier reply),
against ``dataset.max_prompt_tokens`` or, when unset, the target's context minus
``max_new_tokens`` minus D minus 1 (the bonus token). ``dataset.on_too_long`` decides what
happens to a prompt over the limit: ``error`` (refuse the run), ``skip`` (drop it) or
``truncate`` (cut its longest turn at a token boundary until it fits); each cell records the
choice and how many of its prompts it affected.

Control strings: prompt text that holds one of the target tokenizer's control strings
(``<|eos|>``, ``<|assistant|>``, any special token; ``data.control``) is refused, escaped or
kept as ``dataset.control_tokens`` says (refuse by default), before the length check.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..drafters.registry import is_baseline
from ..backends import registry as backends
from ..config import CELL_ORDERS, INTERLEAVE
from ..config import ConfigError  # noqa: F401 - re-exported: the error every check raises
from ..data.control import CONTROL_TOKENS
from ..data.spec import DATASET_TIERS
from ..metrics.buckets import check_edges
from ..drafters import registry as drafters

ON_TOO_LONG = ("error", "skip", "truncate")
PROGRESS = {"auto", "true", "false", "1", "0", "yes", "no", "on", "off"}


@dataclass
class Prepared:
    requests: list
    on_too_long: str = "error"
    limit: int | None = None
    skipped: dict[str, tuple[str, int]] = field(default_factory=dict)  # request_id -> (category, prompt tokens)
    truncated: dict[str, int] = field(default_factory=dict)  # request_id -> prompt tokens before the cut
    escaped: set[str] = field(default_factory=set)  # request_ids whose control strings were escaped


def _check_number(problems, key, value, low=None, high=None, low_open=False, integer=False):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and integer:
        ok = float(value).is_integer()
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        rng = f"{'(' if low_open else '['}{low if low is not None else '-inf'}, {high if high is not None else 'inf'}]"
        problems.append(f"{key}={value!r}: must be {'an integer' if integer else 'a number'} in {rng}")


def check_settings(run) -> list[str]:
    """Ranges and cross-field checks that need no file."""
    p: list[str] = []
    s, d = run.sampling, run.drafter
    _check_number(p, "sampling.temperature", s.temperature, 0)
    _check_number(p, "sampling.top_p", s.top_p, 0, 1, low_open=True)
    _check_number(p, "sampling.top_k", s.top_k, 0, integer=True)
    _check_number(p, "batch_size", run.batch_size, 1, integer=True)
    _check_number(p, "max_new_tokens", run.max_new_tokens, 1, integer=True)
    _check_number(p, "warmup_batches", run.warmup_batches, 0, integer=True)
    _check_number(p, "n_gpus", run.n_gpus, 0, integer=True)
    if run.n_gpus == 0 and str(run.backend.device).lower().startswith("cuda"):
        p.append(f"n_gpus=0: backend.device={run.backend.device} runs on GPUs; n_gpus counts them (>= 1)")
    _check_number(p, "drafter.num_speculative_tokens", d.num_speculative_tokens, 0, integer=True)
    if is_baseline(d.method) and d.num_speculative_tokens != 0:
        p.append("drafter.num_speculative_tokens must be 0 for drafter.method=none")
    if not is_baseline(d.method) and d.num_speculative_tokens < 1:
        p.append(f"drafter.num_speculative_tokens must be >= 1 for method {d.method!r}")
    p += check_schedule(run)
    if hasattr(d, "prompt_lookup_min"):
        _check_number(p, "drafter.prompt_lookup_min", d.prompt_lookup_min, 1, integer=True)
        _check_number(p, "drafter.prompt_lookup_max", d.prompt_lookup_max, d.prompt_lookup_min, integer=True)
    _check_number(p, "faults.delay_ms", run.faults.delay_ms, 0)
    ds = run.dataset
    if ds.control_tokens not in CONTROL_TOKENS:
        p.append(f"dataset.control_tokens={ds.control_tokens!r}: must be one of {', '.join(CONTROL_TOKENS)}")
    if ds.tier not in DATASET_TIERS:
        p.append(f"dataset.tier={ds.tier!r}: must be one of {', '.join(DATASET_TIERS)}")
    if ds.on_too_long not in ON_TOO_LONG:
        p.append(f"dataset.on_too_long={ds.on_too_long!r}: must be one of {', '.join(ON_TOO_LONG)}")
    if ds.max_prompt_tokens is not None:
        _check_number(p, "dataset.max_prompt_tokens", ds.max_prompt_tokens, 1, integer=True)
    if ds.n_requests is not None:
        _check_number(p, "dataset.n_requests", ds.n_requests, 1, integer=True)
    return p + check_protocol(run)


def check_protocol(run) -> list[str]:
    """How cells are measured and analysed (protocol, acceptance, progress, load and SLO options)."""
    from .load import load_problems

    p, pr, ac = [], run.protocol, run.acceptance
    if not 1 <= pr.min_repeats <= pr.max_repeats:
        p.append(f"protocol.min_repeats ({pr.min_repeats}) must be >= 1 and <= protocol.max_repeats ({pr.max_repeats})")
    if not 0 < pr.confidence < 1:
        p.append(f"protocol.confidence must be in (0, 1), got {pr.confidence}")
    if pr.interleave not in INTERLEAVE:
        p.append(f"protocol.interleave must be one of {', '.join(INTERLEAVE)}, got {pr.interleave!r}")
    if pr.cell_order not in CELL_ORDERS:
        p.append(f"protocol.cell_order must be one of {', '.join(CELL_ORDERS)}, got {pr.cell_order!r}")
    if pr.target_rel_half_width <= 0 or pr.budget_s <= 0 or pr.n_resamples < 1:
        p.append("protocol.target_rel_half_width, protocol.budget_s and protocol.n_resamples must be > 0")
    if not 0 <= pr.process_noise < 1:
        p.append(f"protocol.process_noise must be in [0, 1) (a relative SD), got {pr.process_noise}")
    if str(run.progress).lower() not in PROGRESS:
        p.append(f"progress must be auto, true or false, got {run.progress!r}")
    if (ac.window is not None and ac.window < 1) or ac.loop_max_period < 1 or ac.loop_min_repeats < 2 or ac.loop_min_tokens < 1:
        p.append("acceptance.window, acceptance.loop_max_period and acceptance.loop_min_tokens must be >= 1 "
                 "and acceptance.loop_min_repeats >= 2")
    if not 0 <= ac.loop_min_frac <= 1 or not 0 <= ac.degenerate_max_frac <= 1:
        p.append("acceptance.loop_min_frac and acceptance.degenerate_max_frac must be in [0, 1]")
    try:
        check_edges(list(ac.context_edges or ()))
    except ValueError as exc:
        p.append(str(exc))
    return p + load_problems(run)


def check_schedule(run) -> list[str]:
    """``drafter.schedule``: well-formed ranges, on an engine that can vary K for this method
    (``drafters.registry``: each method's ``schedule``; ``backends.registry``: ``can_schedule``)."""
    from ..engine.schedule import BY_CONTEXT_ONLY, is_by_context, parse_plan

    d, backend = run.drafter, run.backend.name
    raw = getattr(d, "schedule", None)
    if not raw or backend not in backends.ENTRIES:
        return []
    try:
        parse_plan(raw)
    except ValueError as exc:
        return [str(exc)]
    entry = backends.entry(backend)
    if is_by_context(raw) and entry.build != "torch":
        return [f"drafter.schedule: backend={backend}: {BY_CONTEXT_ONLY}"]
    if not entry.can_schedule:
        return [f"drafter.schedule: backend={backend} cannot run a schedule (engines that can: "
                f"{', '.join(backends.schedule_backends())})"]
    methods = drafters.schedule_methods(entry.build)
    if d.method not in methods:
        why = drafters.method(d.method).fixed_k_why
        return [f"drafter.schedule: drafter.method={d.method!r} cannot vary K on backend={backend} ({why}); "
                f"methods that can: {', '.join(sorted(methods))}"]
    for key, why in entry.schedule_fixed_by:
        if getattr(d, key, False) or d.engine_args.get(key):
            return [f"drafter.schedule: drafter.method={d.method!r} with {key}=true cannot vary K on "
                    f"backend={backend} ({why})"]
    return []


def check_method(run) -> list[str]:
    """The drafter method against the backend's entry and the method's (which builds run it, what they refuse)."""
    backend, d = run.backend.name, run.drafter
    methods = backends.methods(backend)
    if methods is None:
        return []
    if d.method not in methods:
        return [f"drafter.method={d.method!r} is not supported by backend={backend}; supported: {sorted(methods)}"]
    refused = drafters.engine_refusal(backend, d.method, lambda: backends.on_cpu(backend), build=backends.entry(backend).build)
    return [refused] if refused else []


def check_in_flight(run) -> list[str]:
    """A load point is what ran: an engine that has fewer requests in flight than asked (``load.concurrency``,
    else ``batch_size``; the registry's ``max_in_flight``) is refused, never recorded at a load it did not run."""
    from .load import in_flight

    entry = backends.entry(run.backend.name)
    asked = in_flight(run)
    if entry.max_in_flight is None or asked <= entry.max_in_flight:
        return []
    option = "load.concurrency" if run.load.concurrency is not None else "batch_size"
    return [f"{option}={asked}: backend={run.backend.name} runs at most {entry.max_in_flight} request(s) in flight "
            f"({entry.in_flight_why}); a point measured there is not a point at {option}={asked}"]


def check_models(run) -> tuple[list[str], dict[str, Any] | None]:
    """The drafter against the target, from their configs. Returns problems and the target's config."""
    from .. import models

    p: list[str] = []
    backend, d = run.backend.name, run.drafter
    try:
        entry = backends.entry(backend)
    except ValueError as exc:  # an unknown name: the registry's one line
        return [str(exc)], None
    p += check_method(run)
    p += check_in_flight(run)
    p += backends.backend_class(backend).preflight(run.backend, run.batch_size, d)  # nothing built, no server contacted
    if not entry.tokenizer:
        return p, None
    target = None
    try:
        target = models.model_config(run.target.path)
    except (OSError, ValueError, KeyError) as exc:
        p.append(f"target.path={run.target.path!r}: {exc}")
    if not entry.local_models:
        return p, target
    if target is not None:  # the target loads before any cell: a broken file would end the run, not a cell
        try:
            models.check_weights(run.target.path)
        except ValueError as exc:
            p.append(f"target.path={run.target.path!r}: {exc}")
    draft, method = None, drafters.method(d.method)
    if method.needs_model and method.runs_on(entry.build):
        model = getattr(d, "model", None) or d.engine_args.get("model")
        if not model:
            p.append(f"drafter.model: drafter.method={d.method} needs a model (a folder, hub id or builtin:NAME)")
        elif isinstance(model, str):
            try:
                draft = models.model_config(model)
            except (OSError, ValueError, KeyError) as exc:
                p.append(f"drafter.model={model!r}: {exc}")
    if target and draft and entry.build in method.same_vocab:
        tv, dv = target.get("vocab_size"), draft.get("vocab_size")
        if tv is not None and dv is not None and tv != dv:
            p.append(f"drafter.model={model!r} has vocab_size {dv} but the target {run.target.path!r} has {tv}; "
                     f"method {d.method} on backend={backend} needs the target's tokenizer")
    if target and hasattr(d, "num_layers"):  # self-speculation: the target's first layers draft
        n = target.get("num_hidden_layers")
        if n is not None and not (isinstance(d.num_layers, int) and 1 <= d.num_layers <= n):
            p.append(f"drafter.num_layers={d.num_layers!r}: must be in [1, {n}] (the target has {n} layers)")
    return p, target


# ---- prompts ---------------------------------------------------------------------------------------------------
def _where(spec) -> dict[str, tuple[str, int]]:
    from ..data.sources import get_source

    try:
        rows, _ = get_source(spec.source).load(spec)
    except Exception:  # noqa: BLE001 - positions are a courtesy; load_requests reported real problems
        return {}
    return {str(r.record.get("question_id")): (r.path, r.line) for r in rows if isinstance(r.record, dict)}


def prompt_tokens(tokenizer, turns, max_new_tokens: int) -> int:
    """Tokens the engine feeds for the last turn: the chat-templated conversation, earlier replies
    counted at their longest (``max_new_tokens`` each)."""
    from ..data.chat import render_conversation

    history = [(u, "") for u in turns[:-1]]
    ids = render_conversation(tokenizer, history, turns[-1], tokenize=True)
    return len(ids) + max_new_tokens * (len(turns) - 1)


def _truncate(tokenizer, turns, limit: int, max_new_tokens: int):
    turns = list(turns)
    for _ in range(8):
        n = prompt_tokens(tokenizer, turns, max_new_tokens)
        if n <= limit:
            return tuple(turns)
        i = max(range(len(turns)), key=lambda j: len(turns[j]))
        ids = tokenizer(turns[i], add_special_tokens=False)["input_ids"]
        keep = len(ids) - (n - limit) - 1
        if keep < 1:
            return None
        turns[i] = tokenizer.decode(ids[:keep], skip_special_tokens=True)
    return tuple(turns) if prompt_tokens(tokenizer, turns, max_new_tokens) <= limit else None


def _tokenizes(run) -> bool:
    name = run.backend.name
    return name in backends.ENTRIES and backends.entry(name).tokenizer


def check_prompts(run, requests, target_cfg) -> tuple[list[str], Prepared]:
    from dataclasses import replace

    from ..models import load_tokenizer

    ds, mode = run.dataset, run.dataset.on_too_long
    prepared = Prepared(requests, mode)
    if mode not in ON_TOO_LONG or (not _tokenizes(run) and ds.max_prompt_tokens is None):
        return [], prepared  # a backend without the target's tokenizer (synthetic) counts only an explicit limit
    context = (target_cfg or {}).get("max_position_embeddings")
    need = run.max_new_tokens + run.drafter.num_speculative_tokens + 1
    limits = [v for v in (ds.max_prompt_tokens, context - need if context else None) if v is not None]
    if not limits:
        return [], prepared
    limit = prepared.limit = min(limits)
    if limit < 1:
        return [f"max_new_tokens={run.max_new_tokens} + D={run.drafter.num_speculative_tokens} + 1 leave no room "
                f"for a prompt in the target's context of {context}"], prepared
    t = run.target
    try:
        tokenizer = load_tokenizer(t.path, t.revision, t.trust_remote_code)
    except Exception as exc:  # noqa: BLE001 - a tokenizer that cannot load is a config problem
        return [f"target.path={t.path!r}: cannot load its tokenizer: {exc}"], prepared
    where = None
    problems, kept = [], []
    origin = "dataset.max_prompt_tokens" if ds.max_prompt_tokens is not None and ds.max_prompt_tokens == limit else \
        f"context {context} - max_new_tokens {run.max_new_tokens} - D {run.drafter.num_speculative_tokens} - 1"
    for req in requests:
        n = prompt_tokens(tokenizer, req.turns, run.max_new_tokens)
        if n <= limit:
            kept.append(req)
            continue
        if mode == "skip":
            prepared.skipped[req.request_id] = (req.category, n)
            continue
        if mode == "truncate":
            turns = _truncate(tokenizer, req.turns, limit, run.max_new_tokens)
            if turns is not None:
                prepared.truncated[req.request_id] = n
                kept.append(replace(req, turns=turns))
                continue
        where = _where(dataset_spec(run)) if where is None else where
        path, line = where.get(req.request_id, (ds.path, 0))
        problems.append(f"{path}:{line}: turns: request {req.request_id!r} is {n} tokens after the chat template, "
                        f"over the limit of {limit} ({origin}); set dataset.on_too_long=skip|truncate to run without it")
    prepared.requests = kept
    if not problems and not kept:
        problems.append(f"dataset {ds.name!r}: every prompt is over the limit of {limit} tokens ({origin})")
    return problems, prepared


def check_control(run, requests, target_cfg) -> tuple[list[str], list, set[str]]:
    """Prompts holding a control string of the target's tokenizer: refused (one line naming the
    first, with its file and line), escaped or kept per ``dataset.control_tokens``. A target known
    only as a hub id (``target_cfg`` None) is not looked up: validation never reaches the network."""
    from dataclasses import replace

    from ..data import control
    from ..models import load_tokenizer

    mode = run.dataset.control_tokens
    if mode not in ("refuse", "escape") or not _tokenizes(run) or target_cfg is None:
        return [], requests, set()
    t = run.target
    try:
        strings = control.control_strings(load_tokenizer(t.path, t.revision, t.trust_remote_code))
    except Exception:  # noqa: BLE001 - a tokenizer that cannot load is reported by the length check
        return [], requests, set()
    hits = [(req, i, found) for req in requests for i, turn in enumerate(req.turns)
            if (found := control.find(turn, strings))]
    if not hits:
        return [], requests, set()
    if mode == "escape":
        ids = {req.request_id for req, _, _ in hits}
        out = [replace(r, turns=tuple(control.escape(x, strings) for x in r.turns)) if r.request_id in ids else r
               for r in requests]
        return [], out, ids
    req, i, found = hits[0]
    path, line = _where(dataset_spec(run)).get(req.request_id, (run.dataset.path, 0))
    more = len({r.request_id for r, _, _ in hits}) - 1
    return [f"{path}:{line}: turns[{i}]: prompt {req.request_id!r} contains {found!r}, a control string of the target's "
            f"tokenizer (it would become a control token){f' (and {more} more prompt(s))' if more else ''}; "
            "set dataset.control_tokens=escape to run it as plain text, or keep to feed it as it is"], requests, set()


def dataset_spec(run):
    """The data layer's DatasetSpec for a run: what to load, how many, the length limit."""
    from ..data import DatasetSpec

    d = run.dataset
    return DatasetSpec(
        source=d.source, path=d.path, config=d.config, split=d.split, categories=tuple(d.categories),
        n_requests=d.n_requests, seed=d.seed, max_new_tokens=run.max_new_tokens, tier=d.tier,
        column_map=dict(d.column_map), max_prompt_tokens=d.max_prompt_tokens,
    )


def prepare(run) -> Prepared:
    """Validate ``run`` end to end (no weights loaded) and return the requests it will measure."""
    from ..data import load_requests
    from ..data.errors import DatasetError

    problems = check_settings(run)
    model_problems, target_cfg = check_models(run)
    problems += model_problems
    if run.dataset.tier not in DATASET_TIERS:
        raise ConfigError(problems)  # the tier's own line; loading would only repeat it
    if run.dataset.source == "random":
        return _prepare_random(run, problems, target_cfg)
    try:
        spec = dataset_spec(run)
        requests = load_requests(spec, None)
    except DatasetError as exc:
        raise ConfigError([*problems, str(exc)]) from None
    if not requests:
        problems.append(f"dataset {run.dataset.name!r} selected no requests (categories={run.dataset.categories})")
    if problems:
        raise ConfigError(problems)
    control_problems, requests, escaped = check_control(run, requests, target_cfg)
    if control_problems:
        raise ConfigError(control_problems)
    prompt_problems, prepared = check_prompts(run, requests, target_cfg)
    if prompt_problems:
        raise ConfigError(prompt_problems)
    prepared.escaped = escaped
    return prepared


def _prepare_random(run, problems: list[str], target_cfg) -> Prepared:
    """``dataset.source=random``: seeded random token ids from the target's vocabulary (``data.random_tokens``)."""
    from ..data import random_tokens
    from ..models import load_tokenizer

    problems = problems + random_tokens.problems(run, target_cfg, _tokenizes(run))
    if problems:
        raise ConfigError(problems)
    t = run.target
    try:
        tokenizer = load_tokenizer(t.path, t.revision, t.trust_remote_code)
    except Exception as exc:  # noqa: BLE001 - a tokenizer that cannot load is a config problem
        raise ConfigError(f"target.path={t.path!r}: cannot load its tokenizer: {exc}") from None
    vocab = int((target_cfg or {}).get("vocab_size") or len(tokenizer))
    return Prepared(random_tokens.requests(run, tokenizer, vocab))
