"""The measurement protocol: paired, interleaved, repeated passes of one cell.

A cell's requests are cut into blocks (one static batch of B requests; for an asynchronous
server backend the whole cell, since its B requests are in flight together). In repeat r,
each block runs its baseline pass (A) and its speculative pass (B), the one starting first
alternating from block to block and flipping from repeat to repeat (ABBA). How the two
passes of a block share time (``protocol.interleave``):

* ``step`` (engines whose loop can take turns: the reference engine, HF generate, offline
  vLLM's CPU build): in lockstep, handing over at every few iterations so both passes end
  together, each on its own clock (``engine.clock.Lockstep``). Machine speed that drifts at
  every time scale (a shared CPU) hits both sides of a pair within milliseconds, so it cancels
  in the ratio.
* ``pass`` (every other engine; ``why_pass`` says why, in each cell's ``extra.protocol``):
  back to back, so drift slower than a pass cancels.

A run's cells take turns as well (``protocol.cell_order``, ``in_rounds``): by default round r
runs one repeat of every cell still measuring, so each cell's repeats are spread over the whole
run. On a shared machine the speedup itself moves with the machine's state over tens of seconds
to minutes (the draft's and verification's times against plain decoding's do not move alike), which
no pairing within a cell cancels; spread repeats sample that state, back-to-back ones see one.

Repeats go on until the speedup's measurement noise (``metrics.paired_speedup`` with the prompts held fixed) is within
``protocol.target_rel_half_width`` of it,
after at least ``min_repeats``, and stop at ``max_repeats`` or when the cell has used
``budget_s`` seconds of its own passes. Every pass of every repeat is kept in the results (``repeat`` column).

A cell is ``stable`` when its measurement noise reached the target and no contention was seen
(``pipeline.noise``); otherwise ``unstable_reason`` says why. One repeat gives no noise estimate
(``min_repeats=1`` goes on to a second repeat unless ``max_repeats`` or ``budget_s`` stops it),
so a one-repeat cell is never stable; nor is a cell whose drafter proposed no token at all
(``no_drafts``: its speedup compares plain decoding with itself). The report draws verdicts from
stable cells only.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, replace

import numpy as np
import torch

from .. import metrics
from ..drafters.registry import is_baseline
from ..backends.base import Backend, GenerateOutput, GenerateSpec
from ..config import ProtocolConfig
from ..engine.clock import Lockstep
from ..metrics.latency import client_columns, client_cost
from ..records import Request
from . import conversations
from .load import active as load_active, stepped_point
from .noise import NoiseMeter


@dataclass
class Measured:
    base: GenerateOutput
    spec: GenerateOutput
    n_repeats: int
    stopped_by: str  # "target" | "max_repeats" | "budget_s"
    interleave: str  # "step" (lockstep passes) | "pass" (back to back)
    contention: str  # why the machine was not quiet ('' when it was)
    noise: NoiseMeter
    elapsed_s: float
    drafting: bool = True  # the speculative pass has a drafter (not ``none``)
    why_pass: str = ""  # why the passes ran back to back ('' when they stepped): ``why_pass``
    n_blocks: int = 1  # blocks per repeat (``blocks``)

    def instability(self, rel_half_width: float, cfg: ProtocolConfig) -> str:
        """Why a cell with this interval is not stable ('' when it is)."""
        reasons = []
        if self.drafting and self.spec.requests and not any(r.drafted for r in self.spec.requests):
            reasons.append("no_drafts: the drafter proposed no token, so the speedup compares plain decoding with itself")
        if self.n_repeats < 2:
            reasons.append(f"one repeat ({self.stopped_by} reached): no estimate of the measurement noise")
        elif not math.isfinite(rel_half_width):
            reasons.append("no finite speedup interval (too few requests with two or more tokens)")
        elif rel_half_width > cfg.target_rel_half_width:
            reasons.append(f"{noise_above_target(rel_half_width, cfg)} after {self.n_repeats} repeats ({self.stopped_by} reached)")
        if self.contention:
            reasons.append(f"contention: {self.contention}")
        client = client_columns(self.base, self.spec)
        if client["client_bound"]:
            reasons.append(f"client_bound: the client set the pace ({client['burst_frac']:.0%} of requests delivered in "
                           f"bursts, client CPU {client['client_cpu_share']:.0%} of a core)")
        return "; ".join(reasons)


def noise_above_target(rel_half_width: float, cfg: ProtocolConfig) -> str:
    """The unstable-cell reason for a measurement noise above the protocol's target (measured and derived cells)."""
    return f"measurement noise +-{rel_half_width:.1%} above the target +-{cfg.target_rel_half_width:.0%}"


def blocks(requests: list[Request], batch_size: int, asynchronous: bool) -> list[list[Request]]:
    if asynchronous:
        return [list(requests)]
    return [requests[i : i + batch_size] for i in range(0, len(requests), batch_size)]


def order(block: int, repeat: int) -> tuple[str, str]:
    """ABBA: baseline first on even (block + repeat), speculative first on odd."""
    return ("baseline", "spec") if (block + repeat) % 2 == 0 else ("spec", "baseline")


def merge_passes(outs: list[GenerateOutput]) -> GenerateOutput:
    """Passes of one role (blocks, repeats, or several cells) as one output: records, steps, summed wall time.

    Iteration ids are unique within a pass only (each pass counts from 0); the merged steps get
    ids unique within the merge (each pass's shifted past the previous ones), so a per-iteration
    time is counted once per forward, from every pass. The inputs are left as they were.
    """
    extra: dict = {}
    steps: list = []
    offset = 0
    for o in outs:
        extra.update(o.extra)
        top = max((s.iteration for s in o.steps), default=-1)
        steps += [replace(s, iteration=s.iteration + offset) if offset and s.iteration >= 0 else s for s in o.steps]
        offset += top + 1
    extra |= pooled_extra([o.extra for o in outs])
    return GenerateOutput([r for o in outs for r in o.requests], steps, sum(o.wall_s for o in outs), extra)


def pooled_extra(extras: list[dict]) -> dict:
    """Pass notes that are counts, pooled over every pass (as ``al`` pools every repeat): the
    engine's counter deltas (``counters``) and the merged-chunk counts; the rest is the last pass's."""
    from ..backends.spec_counters import SpecCounters

    out: dict = {}
    deltas = [e["counters"] for e in extras if isinstance(e.get("counters"), dict)]
    if deltas:
        total = SpecCounters()
        for c in deltas:
            total = total + SpecCounters(int(c.get("drafts", 0)), int(c.get("draft_tokens", 0)), int(c.get("accepted", 0)),
                                         tuple(int(x) for x in c.get("per_pos", ())))
        out["counters"] = total.as_dict() | {"passes": len(deltas)}
    clients = [e["client"] for e in extras if isinstance(e.get("client"), dict)]
    if clients:  # a server client's cost, every pass pooled
        out["client"] = client_cost(sum(c["cpu_s"] for c in clients), sum(c["window_s"] for c in clients),
                                                    sum(c["chunks"] for c in clients)) | {"passes": len(clients)}
    merged = [(e["merged_chunks"], e["stream_chunks"]) for e in extras if "stream_chunks" in e]
    if merged:
        m, n = sum(a for a, _ in merged), sum(b for _, b in merged)
        out |= {"merged_chunks": m, "stream_chunks": n, "merged_chunk_frac": m / n if n else math.nan}
    return out


def interleaving(backend: Backend, cfg: ProtocolConfig) -> str:
    """``step`` where asked and the engine's loop can take turns; else ``pass``."""
    return "pass" if why_pass(backend, cfg) else "step"


def why_pass(backend: Backend, cfg: ProtocolConfig) -> str:
    """Why a cell's passes run back to back instead of in lockstep ('' when they step)."""
    if cfg.interleave != "step":
        return f"protocol.interleave={cfg.interleave}"
    if backend.asynchronous:
        return "a server's requests are in flight together: the whole cell is one block, timed by the server"
    if not backend.lockstep:
        return backend.no_lockstep
    return ""


def run_block(backend: Backend, block: list[Request], specs: dict[str, GenerateSpec], first_second: tuple[str, str],
              mode: str, noise: NoiseMeter) -> dict[str, GenerateOutput]:
    """One block's baseline and speculative passes: in lockstep (``step``) or one after the other."""
    def job(role):
        return lambda: conversations.generate(backend, block, specs[role])

    if mode == "step":
        def together():
            # both passes are greenlets on this thread and share torch's grad-mode state: a pass's own
            # inference_mode spans its turns, and the first to leave it would turn it off for the other
            with torch.inference_mode() if backend.inference_passes else contextlib.nullcontext():
                return Lockstep(*first_second).run({role: job(role) for role in first_second})
        return noise.measure(together)
    return {role: noise.measure(job(role)) for role in first_second}


class CellMeasurement:
    """One cell's protocol state: its blocks, the passes so far, its own noise meter and its own
    measured time. ``run_repeat`` runs one repeat of every block and then applies the stopping rule
    (``stopped`` says which ended it; '' while it goes on); ``result`` is the cell's ``Measured``.
    A cell's repeats may be spread over a run (``in_rounds``): ``budget_s`` counts its own passes only."""

    def __init__(self, backend: Backend, requests: list[Request], specs: dict[str, GenerateSpec], cfg: ProtocolConfig,
                 threads: int = 0) -> None:
        self.backend, self.specs, self.cfg = backend, specs, cfg
        self.noise = NoiseMeter(threads=threads)
        self.why_pass = why_pass(backend, cfg)
        self.mode = "pass" if self.why_pass else "step"
        whole = backend.asynchronous or backend.submits_all or stepped_point(backend, specs["spec"].load)
        # a load point (see metrics.speedup) is one block: its requests share the engine
        self.windows = specs["spec"].load is not None and load_active(specs["spec"].load)
        self.parts = blocks(requests, specs["spec"].batch_size, whole)
        self.outs: dict[str, list[GenerateOutput]] = {"baseline": [], "spec": []}
        self.repeats = 0
        self.elapsed_s = 0.0
        self.stopped = ""  # "target" | "max_repeats" | "budget_s" once the stopping rule ended it
        self._merged: tuple[int, GenerateOutput, GenerateOutput] | None = None  # (repeats, baseline, spec)

    def run_repeat(self) -> None:
        """One repeat: every block's baseline and speculative passes, then the stopping rule."""
        t0 = time.perf_counter()
        for b, block in enumerate(self.parts):
            these = {role: replace(self.specs[role], repeat=self.repeats, extras=self.repeats == 0 and b == 0)
                     for role in self.specs}
            done = run_block(self.backend, block, these, order(b, self.repeats), self.mode, self.noise)
            for role in ("baseline", "spec"):
                self.outs[role].append(done[role])
        self.repeats += 1
        self.elapsed_s += time.perf_counter() - t0
        self.stopped = self._stop_rule()

    def merged(self) -> tuple[GenerateOutput, GenerateOutput]:
        """The baseline's and the speculative passes so far, each role merged (once per repeat: the
        stopping rule's merge is the result's when the cell stops)."""
        if self._merged is None or self._merged[0] != self.repeats:
            self._merged = (self.repeats, merge_passes(self.outs["baseline"]), merge_passes(self.outs["spec"]))
        return self._merged[1], self._merged[2]

    def _stop_rule(self) -> str:
        cfg = self.cfg
        if self.repeats < cfg.min_repeats:
            return ""
        base, spec_out = self.merged()
        ratios = metrics.tpot_ratios(base.requests, spec_out.requests)
        est = metrics.paired_speedup(ratios, cfg.confidence, min(cfg.n_resamples, 400),
                                     np.random.default_rng(self.repeats), requests=False,
                                     windows=self.windows)  # the measurement's noise: more repeats shrink it
        if math.isfinite(est.rel_half_width) and est.rel_half_width <= cfg.target_rel_half_width:
            return "target"
        if self.repeats >= cfg.max_repeats:
            return "max_repeats"
        if self.elapsed_s >= cfg.budget_s:
            return "budget_s"
        return ""

    def result(self) -> Measured:
        base, spec_out = self.merged()
        cfg = self.cfg
        contention = self.noise.verdict(cfg.min_cpu_util, cfg.max_load_per_cpu) if self.backend.wall_clock else ""
        drafting = not is_baseline(self.specs["spec"].drafter.method)
        return Measured(base, spec_out, self.repeats, self.stopped, self.mode, contention, self.noise, self.elapsed_s,
                        drafting, self.why_pass, len(self.parts))


def measure(backend: Backend, requests: list[Request], specs: dict[str, GenerateSpec], cfg: ProtocolConfig,
            threads: int = 0) -> Measured:
    """Run the protocol for one cell, its repeats back to back; ``specs`` maps "baseline" and "spec" to
    their pass settings."""
    cell = CellMeasurement(backend, requests, specs, cfg, threads)
    while not cell.stopped:
        cell.run_repeat()
    return cell.result()


def in_rounds(cells: list, interleave: bool):
    """Measure ``cells`` (pairs of (key, ``CellMeasurement``)); yields (key, cell) as each one stops,
    or (key, exception) when one of its passes raised (that cell leaves the rotation; the rest go on).

    ``interleave=False``: each cell's repeats back to back, one cell after the other. ``True``
    (``protocol.cell_order=rounds``): round r runs one repeat of every cell that has not stopped,
    in order on even rounds and in reverse on odd ones, so each cell's repeats are spread over the
    whole run and the machine state that drifts over tens of seconds (it moves the ratio of draft,
    verification and plain-decoding times, not only their level) is sampled by every cell's repeats:
    their spread then shows it, and their median averages it out, where back-to-back repeats
    all see one state. A crashed cell leaves the rotation; a stopped one is yielded at once (the
    runner writes it, so a resumed run skips it).
    """
    if not interleave:
        for pair in cells:
            yield from _rounds([pair])  # one cell alone: its rounds are its repeats back to back
        return
    yield from _rounds(cells)


def _rounds(cells: list):
    """Round r: one repeat of every cell of ``cells`` that has not stopped (forward on even rounds,
    backward on odd); yields each cell as it stops or raises (see ``in_rounds``)."""
    active = list(cells)
    r = 0
    while active:
        for pair in list(active if r % 2 == 0 else reversed(active)):
            key, cell = pair
            try:
                cell.run_repeat()
            except Exception as exc:  # noqa: BLE001 - the caller records it; the run goes on
                active.remove(pair)
                yield key, exc
                continue
            if cell.stopped:
                active.remove(pair)
                yield key, cell
        r += 1
