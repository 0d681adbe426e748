"""Load points (``load.*``): how many requests are in flight, when they arrive, which requests run.

* Closed loop: ``load.concurrency`` = C requests in flight (servers: at most C streams open at
  once; offline vLLM: static batches of C, or every request submitted with ``max_num_seqs=C``
  under ``backend.options.batching=continuous``). Unset: today's ``batch_size`` semantics.
* Open loop: ``load.request_rate`` requests/s; inter-arrival times are gamma distributed with
  shape ``load.burstiness`` and mean 1 / rate (shape 1 = Poisson; < 1 burstier, > 1 more
  regular), as ``vllm bench serve`` draws them (``speedbench.arrivals``); seeded, so baseline and speculative windows of
  a point see the same arrival times. Both can be set: arrivals at the rate, at most C in flight.
* ``load.num_requests``: requests per point (the cell's prompts cycled, each copy its own id
  ``<id>#k``); ``load.warmup_requests``: warm-up requests before the point, never measured.
* ``load.steady_state``: count only each pass's steady window (no ramp, no drain; ``metrics.steady``),
  recorded per pass and repeat in ``extra.steady_window``; the cell id carries it.
* ``load.duration_s``: a duration per window instead of a count. The count is fixed once per
  point, before anything is measured, so the baseline and speculative windows still run the same
  requests (a matched pair): ``ceil(request_rate x duration_s)`` in open loop; in closed loop
  ``duration_s`` x the baseline warm-up's requests/s, at least C (:func:`sized_requests`).
  Windows then last about ``duration_s`` on the baseline (shorter with a speedup); each cell
  records the sizing in ``extra.duration_sizing`` and its windows' seconds in ``wall_s_*``.

A run without load options keeps today's cell ids (``identity`` returns None).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from ..backends.registry import server_backends, why_no_load_points
from ..records import Request


def active(load) -> bool:
    """True when any load option that changes what is measured is set."""
    return (load.concurrency is not None or math.isfinite(load.request_rate) or load.num_requests is not None
            or load.duration_s is not None)


def in_flight(run) -> int:
    """The in-flight bound of a pass: ``load.concurrency`` when set, else ``batch_size``."""
    return int(run.load.concurrency) if run.load.concurrency is not None else int(run.batch_size)


def identity(load) -> dict[str, Any] | None:
    """The load settings that define a cell; None without load options (cell ids stay as they were)."""
    if not active(load):
        return None
    ident: dict[str, Any] = {"concurrency": load.concurrency, "num_requests": load.num_requests}
    if load.duration_s is not None:
        ident["duration_s"] = float(load.duration_s)
    if math.isfinite(load.request_rate):
        ident |= {"request_rate": float(load.request_rate), "burstiness": float(load.burstiness)}
    if getattr(load, "steady_state", False):  # set only when on: ids of points counted whole stay as they were
        ident["steady_state"] = True
    return ident


def stepped_point(backend, load) -> bool:
    """True when a pass of this load point runs under the in-process load driver: load options set, on
    an engine whose passes step in this process (the whole cell is then one block of the protocol)."""
    return load is not None and active(load) and bool(getattr(backend, "steps_load_points", False))


def columns(run, n_requests: int | None = None) -> dict[str, Any]:
    """The cell columns ``concurrency`` (-1: not set) and ``request_rate`` (inf: all at once).

    A load point is what ran: with ``n_requests`` requests in the point, never more than that many
    are in flight, so ``concurrency`` is ``min(load.concurrency, n_requests)`` (``ran_concurrency``)."""
    c = run.load.concurrency
    return {"concurrency": ran_concurrency(c, n_requests), "request_rate": float(run.load.request_rate)}


def ran_concurrency(asked: int | None, n_requests: int | None) -> int:
    """The in-flight bound a closed-loop point can reach: ``asked``, lowered to the requests it has."""
    if asked is None:
        return -1
    return min(int(asked), int(n_requests)) if n_requests else int(asked)


def concurrency_note(asked: int | None, n_requests: int | None) -> str:
    """The cell's note when the point could not reach ``load.concurrency`` ("" when it could)."""
    ran = ran_concurrency(asked, n_requests)
    if asked is None or ran >= int(asked):
        return ""
    return (f"only {n_requests} request(s) in this load point: at most {ran} in flight, not "
            f"load.concurrency={int(asked)}; recorded as concurrency {ran}")


def point_requests(requests: list[Request], num_requests: int | None) -> list[Request]:
    """The requests of one load point: ``requests`` cycled or cut to ``num_requests``."""
    if num_requests is None or not requests:
        return list(requests)
    out = []
    for i in range(int(num_requests)):
        r = requests[i % len(requests)]
        k = i // len(requests)
        out.append(r if k == 0 else replace(r, request_id=f"{r.request_id}#{k}"))
    return out


def sized_requests(run, warm_requests_s: float | None) -> tuple[int | None, dict[str, Any] | None]:
    """The requests per point and how they were sized: ``load.num_requests`` as given, or from
    ``load.duration_s`` (open loop: rate x duration; closed loop: the baseline warm-up's requests/s
    x duration, at least the in-flight bound)."""
    ld = run.load
    duration = ld.duration_s
    if duration is None:
        return ld.num_requests, None
    if math.isfinite(ld.request_rate):
        n = math.ceil(float(ld.request_rate) * float(duration))
        how = {"duration_s": float(duration), "from": "request_rate", "requests_s": float(ld.request_rate)}
    else:
        if not warm_requests_s or not math.isfinite(warm_requests_s) or warm_requests_s <= 0:
            raise ValueError("load.duration_s in closed loop sizes the point from the baseline warm-up's requests/s; "
                             "the warm-up ran no request (set load.warmup_requests >= 1, or load.num_requests)")
        n = round(float(warm_requests_s) * float(duration))
        how = {"duration_s": float(duration), "from": "warmup", "requests_s": float(warm_requests_s)}
    n = max(int(n), in_flight(run), 1)
    return n, how | {"num_requests": n}


def warmup_sample(run, requests: list[Request]) -> list[Request]:
    """The warm-up requests: ``load.warmup_requests`` when set, else ``warmup_batches`` x B."""
    if run.load.warmup_requests is not None:
        return point_requests(requests, run.load.warmup_requests) if run.load.warmup_requests else []
    return requests[: run.batch_size * run.warmup_batches]


def load_problems(run) -> list[str]:
    """The load and SLO options' values (messages name the option)."""
    ld, p = run.load, []

    def bad_int(name, v, low):
        return v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < low)

    if bad_int("concurrency", ld.concurrency, 1):
        p.append(f"load.concurrency must be an integer >= 1 (or unset), got {ld.concurrency!r}")
    if bad_int("num_requests", ld.num_requests, 1):
        p.append(f"load.num_requests must be an integer >= 1 (or unset), got {ld.num_requests!r}")
    duration = ld.duration_s
    if duration is not None:
        if not (isinstance(duration, (int, float)) and not isinstance(duration, bool) and 0 < duration < math.inf):
            p.append(f"load.duration_s must be a positive number of seconds (or unset), got {duration!r}")
        elif ld.num_requests is not None:
            p.append("load.duration_s and load.num_requests both size a point: set one of them")
        elif not math.isfinite(ld.request_rate) and (ld.warmup_requests == 0 or (ld.warmup_requests is None
                                                                                  and not run.warmup_batches)):
            p.append("load.duration_s in closed loop is sized from the warm-up: load.warmup_requests must be >= 1")
    steady = getattr(ld, "steady_state", False)
    if not isinstance(steady, bool):
        p.append(f"load.steady_state must be true or false, got {steady!r}")
    elif steady and ld.concurrency is None and not math.isfinite(ld.request_rate):
        p.append("load.steady_state needs a load point: set load.concurrency or load.request_rate")
    if bad_int("warmup_requests", ld.warmup_requests, 0):
        p.append(f"load.warmup_requests must be an integer >= 0 (or unset), got {ld.warmup_requests!r}")
    if not (isinstance(ld.request_rate, (int, float)) and ld.request_rate > 0):
        p.append(f"load.request_rate must be > 0 requests/s (inf = all at once), got {ld.request_rate!r}")
    elif math.isfinite(ld.request_rate) and (why := why_no_load_points(run.backend.name, run.backend)):
        p.append(f"load.request_rate needs a server backend ({' or '.join(server_backends())}) or an engine stepped "
                 f"in this process (backend=vllm, backend.options.lockstep): {why}")
    if not (isinstance(ld.burstiness, (int, float)) and 0 < ld.burstiness < math.inf):
        p.append(f"load.burstiness must be a positive number (1.0 = Poisson), got {ld.burstiness!r}")
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        v = getattr(run.slo, key)
        if v is not None and not (isinstance(v, (int, float)) and v > 0):
            p.append(f"slo.{key} must be a positive number of milliseconds (or unset), got {v!r}")
    return p
