"""The data contracts that cross module boundaries.

Every record is a frozen dataclass with an explicit schema. Data flows one way:

    Request  -> Backend -> StepRecord / RequestRecord -> metrics -> CellResult -> results store

Times are seconds (float) read with a device sync before each clock read.
Token counts are integers. A failure is data: ``status`` + ``error``, never a crash.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .columns import (AcceptanceColumns, AgreementColumns, DegenerateColumns, LoadPointColumns, PredictionColumns,
                      SpeedupColumns, TimingColumns)

STATUS_OK = "ok"
STATUS_FAILED = "failed"


@dataclass(frozen=True)
class Request:
    """One benchmark prompt (SPEED-Bench record shape, reduced to what engines need).

    ``turns`` are user turns; for multi-turn requests the engine's own reply to turn i
    is appended as the assistant message before turn i+1.
    """

    request_id: str
    category: str
    turns: tuple[str, ...]
    max_new_tokens: int
    sub_category: str = ""
    context_bucket: str = ""  # e.g. "1k", "8k"; empty for the qualitative suite
    entropy_tier: str = ""  # "low" | "mixed" | "high"; empty for the qualitative suite
    source: str = ""
    prompt_ids: tuple[int, ...] = ()  # set: the first turn's prompt as token ids, sent as they are (dataset=random)

    @property
    def multiturn(self) -> bool:
        return len(self.turns) > 1


@dataclass(frozen=True)
class StepRecord:
    """One target iteration of one sequence in a batch.

    ``drafted``: draft tokens proposed for this sequence in this step (0 for plain decoding
    or when a lookup drafter found no match). ``accepted``: leading draft tokens accepted.
    ``emitted`` = accepted + 1 (the target's own correction or bonus token), before any
    truncation at max_new_tokens. ``kept``: the tokens of this step the output kept (<= emitted:
    a stop token or max_new_tokens cut the rest; = emitted where the engine cannot say).
    ``position``: the output position, within the turn's reply, of the step's first token.
    ``context_len``: tokens in the sequence before the step (the turn's prompt + ``position``): the
    live context the step drafted and verified against. ``live_batch``: sequences in the engine's
    forward of this step (-1 where the engine does not say).
    Times are shared by the batch (one forward for all rows).
    """

    request_id: str
    step: int
    batch_index: int
    drafted: int
    accepted: int
    emitted: int
    t_draft: float
    t_verify: float
    t_accept: float
    t_step: float  # wall time of the whole iteration as the loop saw it (>= the three parts)
    verify_tokens: int  # tokens in flight in the verification forward (= B*(1+D) when drafting)
    iteration: int = -1  # id of the target forward within the pass; the rows of one batch share it
    turn: int = 0  # the user turn (0-based) this step belongs to
    repeat: int = 0  # the measurement repeat (pipeline.protocol) the step belongs to
    kept: int = -1  # tokens of this step kept in the output (-1: results written before it existed)
    position: int = -1  # output position (within the turn) of the step's first token; -1 unknown
    context_len: int = -1  # prompt + output tokens before the step; -1 unknown
    live_batch: int = -1  # sequences in this step's forward; -1 unknown


@dataclass(frozen=True)
class RequestRecord:
    """The outcome of one request in one run (baseline or speculative)."""

    request_id: str
    category: str
    context_bucket: str
    entropy_tier: str
    role: str  # "baseline" | "spec"
    prompt_tokens: int
    n_tokens: int  # generated tokens kept (after EOS / max_new_tokens truncation)
    output_ids: tuple[int, ...]
    ttft: float  # seconds from submission to first generated token
    tpot: float  # (t_last - t_first) / (n_tokens - 1); nan when n_tokens < 2
    e2e: float  # seconds from submission to last token
    n_steps: int
    n_drafts: int  # steps in which at least one draft token was proposed
    drafted: int
    accepted: int
    accepted_hist: tuple[int, ...] = ()  # accepted_hist[k] = #steps that accepted exactly k drafts
    al_source: str = "steps"  # where acceptance came from: steps | counters | chunks | none
    status: str = STATUS_OK
    error: str = ""
    repeat: int = 0  # the measurement repeat (pipeline.protocol); baseline and spec of one repeat are paired
    # what the output kept (docs/acceptance.md): ``accepted`` above is the engine's count, also
    # drafts accepted in a step whose output a stop token or max_new_tokens cut
    kept: int = -1  # tokens kept from the drafting steps (<= n_drafts + accepted); -1: not known
    accepted_kept: int = -1  # accepted draft tokens the output kept (<= accepted); -1: not known
    # the stream as a client sees it, for the SPEED-Bench tool's AL: tokens per chunk (all turns
    # in order; the prefill's token is the first chunk of a turn), chunks and tokens per turn,
    # and how each turn ended ("stop": a stop token; "length": max_new_tokens; "": not known)
    chunks: tuple[int, ...] = ()
    turn_chunks: tuple[int, ...] = ()
    turn_tokens: tuple[int, ...] = ()
    turn_finish: tuple[str, ...] = ()
    # load points (metrics.latency): when the request was sent, seconds from the pass's first send
    # (NaN: not known), and the gaps between its streamed chunks with tokens, per turn in order
    # (a turn of c chunks gives c - 1 gaps; chunk j + 1 of the turn ends gap j)
    t_start: float = float("nan")
    chunk_gaps: tuple[float, ...] = ()


@dataclass(frozen=True)
class CellIdentity:
    """What a cell is: its ids and the settings it is labelled by (``pipeline.cells.CellKey`` builds
    one; ``CellResult`` starts with it). Add an identity field here and every reader has it.

    ``setting_id``, ``prompts_digest`` and ``schedule`` are "" in folders written before they existed.
    """

    cell_id: str
    run_id: str
    target: str
    drafter: str
    method: str
    num_speculative_tokens: int
    batch_size: int
    temperature: float
    top_p: float
    top_k: int
    backend: str
    dataset: str
    category: str
    context_bucket: str
    # what the cell measured (pipeline.cells): its settings alone, and the text of its prompts; "" in
    # folders written before they existed (there ``cell_id`` is the settings' hash alone)
    setting_id: str = field(default="", kw_only=True)
    prompts_digest: str = field(default="", kw_only=True)  # the measured prompts' text ("" when not given)
    schedule: str = field(default="", kw_only=True)  # drafter.schedule as JSON ([[start, end, K], ...]); "" = static D


@dataclass(frozen=True)
class CellResult(CellIdentity, AcceptanceColumns, TimingColumns, SpeedupColumns, PredictionColumns, AgreementColumns,
                 DegenerateColumns, LoadPointColumns):
    """One row of the per-cell table: everything the report, the gate and W&B read.

    The identity (``CellIdentity``), every metric group (``speedbench.columns``: each column is
    declared once there, with the default a cell that measured nothing holds) and the columns below,
    which the protocol, the run and the noise accounting set. ``al`` counts the target's
    bonus/correction token, so 1 <= al <= 1 + num_speculative_tokens; ``speedup`` =
    tpot_ms_baseline / tpot_ms_spec from matched runs in one process. Missing measurements are NaN,
    never 0.
    """

    n_requests: int
    al_source: str  # where acceptance came from: steps | counters | chunks | none
    warmup_s: float
    wall_s: float
    n_gpus: int
    device: str
    status: str
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    stable: bool = False  # speedup_noise within the protocol's target and no contention seen
    unstable_reason: str = ""
    # noise accounting over the cell's measured passes
    cpu_util: float = float("nan")  # process CPU time / (wall time x threads), in-process engines only
    load_avg: float = float("nan")  # 1-minute load average, max over the cell
    steal_frac: float = float("nan")  # CPU steal time / total CPU time over the cell
    threads: int = 0  # compute threads of an in-process engine (0: not known)
    # output length and the batch actually formed; -1 / None in folders written before they existed
    max_new_tokens: int = -1
    ignore_eos: Any = None
    batch_size_run: int = -1  # largest batch run: min(batch_size, prompts in the cell)
    derived: bool = False  # computed from other cells' records (category=all), not measured on its own
    synthetic_al: float = float("nan")  # set: acceptance was forced to this mean AL (cost surface; not lossless)
    source: str = ""  # another tool's measurement imported ("<tool> <version>", speedbench.interop); "": speedbench's own




def to_row(record: Any) -> dict[str, Any]:
    """A dataclass record as a flat dict (tuples become lists) for pandas/JSON."""
    row = asdict(record)
    for k, v in row.items():
        if isinstance(v, tuple):
            row[k] = list(v)
    return row


def field_names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


IDENTITY_FIELDS = tuple(field_names(CellIdentity))  # the identity columns of a cell row, in order


def from_row(cls: type, row: dict[str, Any]):
    """A record read back from a results table row: lists become tuples, missing columns keep
    their defaults (results written before a field existed), unknown columns are dropped."""
    import math

    values = {}
    for f in fields(cls):
        if f.name not in row:
            continue
        v = row[f.name]
        if hasattr(v, "tolist"):  # numpy scalars and arrays from parquet
            v = v.tolist()
        if isinstance(v, list):
            v = tuple(v)
        elif isinstance(v, float) and math.isnan(v) and f.type in ("str", "int"):
            continue
        values[f.name] = v
    return cls(**values)
