"""Cells, matched baseline/speculative runs, resume.

For each cell the runner measures the baseline (drafter ``none``) and the speculative run on
the same requests, with the same sampling and output length, in this process, after a
warm-up that is timed and reported but not measured. A failing cell is recorded with its
error and the sweep goes on; cells already finished in the results folder are skipped.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from collections import OrderedDict

from ..drafters.registry import is_baseline
from ..backends.base import Backend, GenerateOutput, GenerateSpec
from ..backends.registry import BACKENDS
from ..console import error_line
from ..config import DrafterConfig, RunConfig
from ..records import CellResult, Request, RequestRecord, StepRecord, from_row, to_row
from ..results import provenance, runlock
from ..results.layout import RunFolder
from ..results.store import ResultsReadError, ResultsStore, ResultsWriteError
from . import conversations, protocol, validation
from .load import in_flight, point_requests, sized_requests, warmup_sample
from .validation import dataset_spec  # noqa: F401 - the runner's public helper
from .cells import OVERALL, CellKey, PassNotes, asdict_clean, assemble_cell, failed_cell, overall_key, stable_hash

log = logging.getLogger(__name__)
BASELINE = DrafterConfig(name="none", method="none", num_speculative_tokens=0)
_BACKENDS: dict[str, Backend] = {}


def get_backend(run: RunConfig) -> Backend:
    """One backend per (engine settings, target, seed) per process: a sweep loads the target once.
    They are closed by :func:`close_backends` (``speedbench run`` calls it when it ends; at exit otherwise)."""
    key = stable_hash({"backend": asdict_clean(run.backend), "target": asdict_clean(run.target), "seed": run.seed})
    if key not in _BACKENDS:
        if not _BACKENDS:
            import atexit

            atexit.register(close_backends)  # a sweep job's process: before the engines' own exit hooks run
        _BACKENDS[key] = BACKENDS.get(run.backend.name)(run.target, run.backend, run.seed)
    return _BACKENDS[key]


def close_backends() -> None:
    """Shut every cached engine down now (vLLM: its engine processes stop in order, so vLLM does not
    find them dead at interpreter exit and print "engine core exited unexpectedly")."""
    while _BACKENDS:
        backend = _BACKENDS.popitem()[1]
        try:
            backend.close()
        except Exception:  # noqa: BLE001 - closing is best effort; the measurements are written
            log.debug("closing backend %s failed", type(backend).__name__, exc_info=True)


def group_requests(requests: list[Request], per_category: bool) -> "OrderedDict[tuple[str, str], list[Request]]":
    groups: OrderedDict[tuple[str, str], list[Request]] = OrderedDict()
    for r in requests:
        key = (r.category, r.context_bucket) if per_category else ("all", r.context_bucket)
        groups.setdefault(key, []).append(r)
    return groups


def generate_spec(run: RunConfig, drafter: DrafterConfig, role: str, progress=None) -> GenerateSpec:
    faults = run.faults if not is_baseline(drafter.method) else type(run.faults)()  # faults slow the drafter only
    return GenerateSpec(drafter, in_flight(run), run.sampling, run.max_new_tokens, run.ignore_eos, role, progress, faults,
                        log_dir=str(RunFolder.of(run.results_dir, run.run_id).root), load=run.load)


def warm_up(backend: Backend, run: RunConfig, requests: list[Request]) -> tuple[float, float | None]:
    """Untimed-for-results passes of baseline and speculative decoding; returns their wall time and
    the baseline warm-up's requests/s (what ``load.duration_s`` sizes a closed-loop point from)."""
    sample = warmup_sample(run, requests)
    if not sample:
        return 0.0, None
    t0 = time.perf_counter()
    rate = None
    for drafter in (BASELINE, run.drafter):
        t = time.perf_counter()
        conversations.generate(backend, sample, generate_spec(run, drafter, "warmup"))
        if drafter is BASELINE:
            rate = len(sample) / max(time.perf_counter() - t, 1e-9)
    return time.perf_counter() - t0, rate


def cell_keys(run: RunConfig, requests: list[Request]) -> list[tuple[CellKey, list[Request]]]:
    """Each cell of ``run`` with the requests it measures (its id carries their digest)."""
    groups = group_requests(requests, run.per_category)
    return [(CellKey.for_run(run, cat, bucket, reqs), reqs) for (cat, bucket), reqs in groups.items()]


def _warn_other_prompts(store: ResultsStore, rows: list[dict], keys: list[CellKey]) -> None:
    """Cells already in the folder with these settings but other prompts (a prompt file edited in place,
    or a folder written before the digest): kept as they are, not reused; say so."""
    ours = {k.cell_id for k in keys}
    settings = {k.setting_id for k in keys}
    other = sorted(r["cell_id"] for r in rows if not r.get("derived") and r.get("cell_id") not in ours
                   and (r.get("setting_id") or r.get("cell_id")) in settings)
    if other:
        log.warning("%d cell(s) in %s measured these settings on other prompts (prompt text changed, or written "
                    "before cells carried a prompt digest); not reused, left as they are: %s",
                    len(other), store.root, ", ".join(other[:5]) + (" ..." if len(other) > 5 else ""))


def run_cells(run: RunConfig, progress: bool = True, prepared: "validation.Prepared | None" = None,
              make_logger=None) -> list[CellResult]:
    """Measure every cell of ``run`` into ``results_dir/run_id``; returns the cell rows.

    ``make_logger(run.logger, folder)`` (the run edge passes ``loggers.build_logger``) builds what
    each written cell is logged to; None logs nowhere.

    Everything that can be checked without weights is checked first (``validation.prepare``,
    the run folder's confinement, writability and cell locks): a bad input raises
    ``validation.ConfigError`` before any model loads.
    """
    prepared = validation.prepare(run) if prepared is None else prepared
    requests = prepared.requests
    store = ResultsStore(runlock.run_folder(run.results_dir, run.run_id))
    rows = store.cell_rows()  # a corrupt cell file already there is named before anything runs (ResultsReadError)
    keys = cell_keys(run, requests)
    _warn_other_prompts(store, rows, [k for k, _ in keys])
    todo = [(k, r) for k, r in keys if not (run.resume and store.finished(k.cell_id))]
    skipped = len(keys) - len(todo)
    if skipped:
        log.info("resume: %d of %d cells already finished in %s", skipped, len(keys), store.root)
    if not todo:
        if store.root.is_dir():
            runlock.clean_temp(store.root, [])  # temp files an interrupted write left, once they are old
        overall_cells(run, store, [k for k, _ in keys], measured=set())  # only a missing overall row is written
        return []
    runlock.check_writable(store.root)
    locks = runlock.CellLocks(store.root)
    locks.acquire([k.cell_id for k, _ in todo])
    try:
        runlock.clean_temp(store.root, locks.held)
        # another process may have finished some of these cells between the check above and the lock
        todo = [(k, r) for k, r in todo if not (run.resume and store.finished(k.cell_id))]
        if not todo:
            return []
        logger = make_logger(run.logger, store.root) if make_logger else _NoLogger()  # after each written cell
        try:
            cells = _measure(run, requests, store, todo, logger, progress, prepared)
            for cell in overall_cells(run, store, [k for k, _ in keys], measured={c.cell_id for c in cells}):
                logger.log_cell(cell, store)  # written and logged, not returned: the measured cells are
            return cells
        finally:
            logger.close()
    finally:
        locks.release()


class _NoLogger:
    """Where cells go when the caller gave no logger."""

    def log_cell(self, cell: CellResult, store: ResultsStore) -> None:
        pass

    def close(self) -> None:
        pass


def _read(store: ResultsStore, cell_id: str) -> tuple[GenerateOutput, GenerateOutput] | None:
    """A finished cell's baseline and speculative passes, read back from its records."""
    req_path, step_path = store.requests_path(cell_id), store.steps_path(cell_id)
    if not req_path.exists():
        return None
    import pandas as pd

    reqs = pd.read_parquet(req_path).to_dict("records")
    steps = pd.read_parquet(step_path).to_dict("records") if step_path.exists() else []
    cell = store.cell(cell_id)
    walls = cell.get("extra", {}) or {}
    out = []
    for role in ("baseline", "spec"):
        records = [from_row(RequestRecord, r) for r in reqs if r.get("role") == role]
        rows = [from_row(StepRecord, s) for s in steps if s.get("role") == role]
        out.append(GenerateOutput(records, rows, float(walls.get(f"wall_s_{role}", math.nan))))
    return out[0], out[1]


def overall_cells(run: RunConfig, store: ResultsStore, keys: list[CellKey], measured: set[str]) -> list[CellResult]:
    """Per context bucket with two or more categories: the derived ``category=all`` row, every metric
    computed from the category cells' records (cells.assemble_cell on their union), written as its own
    cell (``derived=True``; id from ``cells.overall_key``). Not written while a category cell is
    missing or failed; rewritten when one of its category cells was ``measured`` in this invocation
    (or it is missing), so a resumed run keeps it current and a finished one leaves it alone."""
    if not run.per_category:
        return []
    out = []
    buckets: OrderedDict[str, list[CellKey]] = OrderedDict()
    for k in keys:
        buckets.setdefault(k.context_bucket, []).append(k)
    for bucket, parts in buckets.items():
        if len(parts) < 2 or not all(store.finished(k.cell_id) for k in parts):
            continue
        if store.finished(overall_key(run, bucket, parts).cell_id) and not measured & {k.cell_id for k in parts}:
            continue
        try:
            cell = _overall_cell(run, store, bucket, parts)
        except Exception:  # a derived row must not end the run: its category cells are written
            log.exception("overall row of context bucket %r failed", bucket)
            continue
        if cell is not None:
            store.write_cell(cell)
            out.append(cell)
    return out


def first_repeats(out: GenerateOutput, n: int, of: int) -> GenerateOutput:
    """A pass's records and steps of repeats ``0..n-1`` (of ``of``), its wall time split evenly over repeats."""
    if n >= of or n <= 0:
        return out
    return GenerateOutput([r for r in out.requests if r.repeat < n], [s for s in out.steps if s.repeat < n],
                          out.wall_s * n / of, dict(out.extra))


def _overall_cell(run: RunConfig, store: ResultsStore, bucket: str, parts: list[CellKey]) -> CellResult | None:
    """The derived ``all`` row. Pooling rule: the first R repeats of every category cell, R = the fewest
    repeats any of them took, so each category weighs by its requests (and their tokens), never by how
    many repeats the protocol gave it (docs/acceptance.md, "The overall row")."""
    passes = [_read(store, k.cell_id) for k in parts]
    if any(p is None for p in passes):
        return None
    part_cells = [store.cell(k.cell_id) for k in parts]
    reps = [max(1, int(c.get("n_repeats") or 1)) for c in part_cells]
    common = min(reps)
    passes = [tuple(first_repeats(o, common, n) for o in p) for p, n in zip(passes, reps)]
    merged = [protocol.merge_passes([p[i] for p in passes]) for i in (0, 1)]
    key = overall_key(run, bucket, parts)
    target = run.protocol.target_rel_half_width
    reasons = [f"{c['category']}: {c['unstable_reason']}" for c in part_cells if not c.get("stable")]

    def instability(noise: float) -> str:
        head = [] if math.isfinite(noise) and noise <= target else [protocol.noise_above_target(noise, run.protocol)]
        return "; ".join(head + reasons)

    def agg(name, fn):
        vals = [float(c[name]) for c in part_cells if c.get(name) is not None and math.isfinite(float(c[name]))]
        return fn(vals) if vals else math.nan

    notes = PassNotes(
        instability=instability, derived=True, n_repeats=min(int(c.get("n_repeats") or 0) for c in part_cells),
        cpu_util=agg("cpu_util", min), load_avg=agg("load_avg", max), steal_frac=agg("steal_frac", max),
        threads=int(part_cells[0].get("threads") or 0),
        batch_size_run=max(int(c.get("batch_size_run") or -1) for c in part_cells),
        extra={"derived_from": [k.cell_id for k in parts],
               "derived": f"{OVERALL}: every metric on the union of the {len(parts)} category cells' records, "
                          f"the first {common} repeat(s) of each (the fewest any took)"},
    )
    device = str(part_cells[0].get("device", "cpu"))
    cell = assemble_cell(key, merged[0], merged[1], warmup_s=float(part_cells[0].get("warmup_s") or 0),
                         device=device, n_gpus=gpus_used(device, run.n_gpus), run=run, notes=notes)
    ran = max(int(c.get("concurrency") or -1) for c in part_cells)  # a load point is what ran: its parts'
    return replace(cell, concurrency=ran) if ran > 0 else cell


def _measure(run: RunConfig, requests, store: ResultsStore, todo, logger, progress: bool, prepared) -> list[CellResult]:
    bars = _Progress(todo, progress, run)
    try:
        return _measure_with(run, requests, store, todo, logger, prepared, bars)
    finally:
        bars.close()


def _measure_with(run: RunConfig, requests, store: ResultsStore, todo, logger, prepared, bars: "_Progress") -> list[CellResult]:
    bars.phase(f"starting the engine (backend={run.backend.name}: loading target {run.target.path}"
               + (f", drafter {run.drafter.name}" if not is_baseline(run.drafter.method) else "") + ")")
    backend = get_backend(run)
    backend.attach_run_folder(store.root)
    try:  # a server or engine that cannot start: every cell is recorded failed with the reason, nothing else lost
        backend.ready(run.drafter, in_flight(run))
        not_started = None
    except Exception as exc:  # noqa: BLE001 - recorded in the cells, named in the run's summary
        not_started = f"start: {type(exc).__name__}: {exc}"
        log.error("engine start failed: %s", error_line(exc))  # data, not a bug: one line (the cells hold the rest)
        log.debug("engine start failed", exc_info=True)
    info = backend.info()
    device = str(info.get("device", "cpu"))
    n_gpus = gpus_used(device, run.n_gpus)
    store.write_provenance(provenance.collect(run, info, device))

    def all_failed(reason: str) -> list[CellResult]:
        cells = [failed_cell(k, reason, device, n_gpus, run, r, prepared) for k, r in todo]
        for c in cells:
            store.write_cell(c)
            logger.log_cell(c, store)
        return cells

    if not_started:
        return all_failed(not_started)
    try:
        bars.phase("warm-up (excluded from every metric)")
        warmup_s, warm_rate = warm_up(backend, run, requests)
    except Exception as exc:  # the engine cannot run at all: record every cell as failed
        log.exception("warm-up failed")
        return all_failed(f"warm-up: {type(exc).__name__}: {exc}")

    threads = int(info.get("torch_threads", 0)) if backend.in_process else 0
    done: dict[str, CellResult] = {}
    started, given = [], {}

    def record(key: CellKey, cell: CellResult) -> None:
        logger.log_cell(cell, store)
        done[key.cell_id] = cell
        bars.cell_done()

    def failed(key: CellKey, reqs, exc: Exception) -> None:  # one broken cell must not end the sweep
        log.error("cell %s failed", key.cell_id, exc_info=exc)
        cell = failed_cell(key, f"{type(exc).__name__}: {exc}", device, n_gpus, run, reqs, prepared)
        store.write_cell(cell)
        record(key, cell)

    for key, reqs in todo:
        try:
            n_point, sizing = sized_requests(run, warm_rate)
            reqs = point_requests(reqs, n_point)
            specs = {"baseline": generate_spec(run, BASELINE, "baseline", bars.requests_done),
                     "spec": generate_spec(run, run.drafter, "spec", bars.requests_done)}
            started.append((key, protocol.CellMeasurement(backend, reqs, specs, run.protocol, threads)))
            given[key.cell_id] = (reqs, sizing)
        except Exception as exc:  # noqa: BLE001
            failed(key, reqs, exc)
    announced = [(key, _Announced(key, m, bars)) for key, m in started]
    for key, m in protocol.in_rounds(announced, interleave=run.protocol.cell_order == "rounds"):
        m = m.measurement if isinstance(m, _Announced) else m
        reqs, sizing = given[key.cell_id]
        if isinstance(m, Exception):  # a pass raised: the cell left the rotation
            failed(key, reqs, m)
            continue
        try:
            cell, records, steps = _measured_cell(key, m.result(), run, reqs, sizing, warmup_s, device, n_gpus,
                                                  threads, prepared)
            store.write_cell(cell, records, steps)
            record(key, cell)
        except (ResultsWriteError, ResultsReadError):  # the folder takes no files (disk full), or the table
            raise  # cannot be rebuilt (a corrupt cell file): the cells written stay as they are; stop, named
        except Exception as exc:  # noqa: BLE001
            failed(key, reqs, exc)
    return [done[k.cell_id] for k, _ in todo if k.cell_id in done]


class _Announced:
    """A cell's measurement that tells the progress which cell and repeat run now (``in_rounds`` calls
    ``run_repeat``; everything else is the measurement's own)."""

    def __init__(self, key: CellKey, measurement: "protocol.CellMeasurement", bars: "_Progress") -> None:
        self.key, self.measurement, self.bars, self.repeats = key, measurement, bars, 0

    def run_repeat(self) -> None:
        self.repeats += 1
        self.bars.measuring(self.key, self.repeats)
        self.measurement.run_repeat()

    def __getattr__(self, name):
        return getattr(self.measurement, name)


def _measured_cell(key: CellKey, m: "protocol.Measured", run: RunConfig, reqs, sizing, warmup_s: float, device: str,
                   n_gpus: int, threads: int, prepared) -> tuple[CellResult, list, list]:
    """A measured cell's row, its request records and its step rows, as the store writes them."""
    notes = PassNotes(
        instability=lambda noise: m.instability(noise, run.protocol), cpu_util=m.noise.cpu_util,
        load_avg=m.noise.load_max, steal_frac=m.noise.steal_frac, threads=threads,
        extra={"wall_s_baseline": m.base.wall_s, "wall_s_spec": m.spec.wall_s,
               **({"duration_sizing": sizing} if sizing else {}),
               "protocol": {"stopped_by": m.stopped_by, "elapsed_s": m.elapsed_s, "interleave": m.interleave,
                            **({"why_pass": m.why_pass} if m.why_pass else {}),
                            "blocks": m.n_blocks, "cell_order": run.protocol.cell_order}})
    cell = assemble_cell(key, m.base, m.spec, warmup_s=warmup_s, device=device, n_gpus=n_gpus, run=run,
                         notes=notes, requests=reqs, prepared=prepared)
    steps = [to_row(s) | {"role": "baseline"} for s in m.base.steps]
    steps += [to_row(s) | {"role": "spec"} for s in m.spec.steps]
    return cell, m.base.requests + m.spec.requests, steps


class _Progress:
    """Two bars on a terminal: cells, and requests (each cell runs its requests twice: baseline and
    speculative). Where no bars are drawn (output piped into a log), a heartbeat line instead, at
    least every ``console.heartbeat_interval()`` seconds: the phase (engine start, warm-up, which
    cell and repeat) and how far the run got."""

    def __init__(self, todo, enabled: bool, run: RunConfig) -> None:
        from tqdm.auto import tqdm

        from ..columns import load_label
        from ..console import Heartbeat, heartbeat_interval, progress_enabled

        bars = enabled and progress_enabled(run.progress)
        load = getattr(run, "load", None)  # a load point is named by its C or rate, never by B
        point = load_label({"concurrency": getattr(load, "concurrency", None) or -1,
                            "request_rate": getattr(load, "request_rate", float("inf"))}).strip()
        self.what = f"{run.drafter.name} D={run.drafter.num_speculative_tokens} {point or f'B={run.batch_size}'}"
        self.cells = tqdm(total=len(todo), desc=self.what, unit="cell", disable=not bars, position=0)
        # each cell runs its requests twice (baseline, speculative) per repeat; the repeats are not known ahead
        self._requests = tqdm(desc="requests", unit="req", disable=not bars, position=1, leave=False)
        self.n_cells, self.n_done, self.n_requests = len(todo), 0, 0
        self.heartbeat = Heartbeat(heartbeat_interval() if enabled and not bars else 0)
        self._cell = ""

    def phase(self, text: str) -> None:
        self.heartbeat.phase(text)

    def measuring(self, key: CellKey, repeat: int) -> None:
        where = key.category + (f"/{key.context_bucket}" if key.context_bucket else "")
        self._cell = f"{self.what} {where}, repeat {repeat}"
        self._tell()

    def _tell(self) -> None:
        if not self._cell:  # no cell is measuring yet (one failed before it started)
            return
        self.heartbeat.phase(f"measuring {self._cell}",
                             f"{self.n_done} of {self.n_cells} cells written, {self.n_requests} requests run")

    def cell_done(self) -> None:
        self.cells.update(1)
        self.n_done += 1
        self._tell()

    def requests_done(self, n: int) -> None:
        self._requests.update(n)
        self.n_requests += n
        self._tell()

    def close(self) -> None:
        self.heartbeat.close()
        self._requests.close()
        self.cells.close()


def gpus_used(device: str, n_gpus: int) -> int:
    """The GPUs a cell's engine ran on, as its row records them: ``n_gpus`` on a GPU, 0 on a CPU (whatever
    ``n_gpus`` says: its default is 1); per-device rates then count the CPU as one device."""
    return 0 if device.lower().startswith("cpu") else n_gpus
