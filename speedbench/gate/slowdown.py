"""Slowdowns that cost what they say: ``faults.delay_ms`` calibrated on the measured paired loss.

A drafter slowed by ``faults.delay_ms`` (``speedbench.drafters.faults``) is how the gate's power is
measured (``scripts/gate_false_alarms.py``) and how a step is put into a history series
(``scripts/gate_history_series.py``). The delay that costs a fraction ``f`` of the speedup is not
known in advance: a first guess from the run's own speculative step time (``T_step f / (1 - f)``)
overshot by about a third on the CI benchmark, and the loss moves with the machine. So the delay is
found by measuring: each probe is one slowed run of the benchmark in a fresh process, its loss is
``1 - median`` of the pooled (geometric mean over cells) speedup ratios of the gate against every
identical reference run, and the next probe's delay comes from a least-squares line through the
origin of the probes' loss odds ``L / (1 - L)`` against their delays (a delay ``d`` added to a step
of ``T`` gives odds ``d / T``: linear in ``d``). It stops when a probe's loss is within ``tolerance``
of the asked loss (or after ``max_probes``); the delay returned is that line's at the asked loss.

Every slowed run states what it achieved: ``slowdown.json`` in its folder (asked loss, delay, the
achieved loss and the reference runs it was measured against), written by ``record_slowed_run``.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .core import GateConfig, run_gate
from ..results.layout import RunFolder
from ..results.store import atomic_write_text

SLOWDOWN_FILE = "slowdown.json"


@dataclass(frozen=True)
class Probe:
    delay_ms: float
    loss: float  # 1 - median pooled speedup ratio against the reference runs
    run: str


@dataclass
class Calibration:
    asked: float
    delay_ms: float
    probes: list[Probe] = field(default_factory=list)

    def describe(self) -> str:
        tried = ", ".join(f"{p.delay_ms:.3f} ms -> {p.loss:.1%}" for p in self.probes)
        return f"asked {self.asked:.1%}: faults.delay_ms={self.delay_ms:.4f} (probes: {tried})"


def run_benchmark(out: Path, run_id: str, overrides: list[str], repo: Path, experiment: str = "ci_gate") -> Path:
    """One run of ``+experiment=EXPERIMENT`` in a fresh process into ``out/run_id``; the run folder."""
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    cmd = [sys.executable, "-m", "speedbench.cli", "run", f"+experiment={experiment}", f"results_dir={out}",
           f"run_id={run_id}", "hydra/job_logging=disabled", *overrides]
    subprocess.run(cmd, check=True, env=env, cwd=repo, stdout=subprocess.DEVNULL)
    return out / run_id


def pooled_speedup_ratios(references: list[Path], run: Path, cfg: GateConfig) -> list[float]:
    """The gate's pooled speedup ratio of ``run`` against each reference run."""
    ratios = []
    for ref in references:
        report = run_gate(ref, run, cfg)
        ratios += [c.ratio for c in report.checks if c.metric == "speedup" and c.cell_id == "ALL"]
    return ratios


def achieved_loss(references: list[Path], run: Path, cfg: GateConfig) -> float:
    """What a slowed run cost: 1 - the median of its pooled speedup ratios against the reference runs."""
    ratios = pooled_speedup_ratios(references, run, cfg)
    return 1.0 - statistics.median(ratios) if ratios else float("nan")


def step_time_guess(run: Path, frac: float) -> float:
    """The first probe: the delay that would cost ``frac`` if the step's time were all that a delay added to."""
    from ..results import ResultsStore

    cells = ResultsStore(run).cells()
    return float(cells["t_step_ms_spec"].mean()) * frac / (1.0 - frac)


def _odds(loss: float) -> float:
    return loss / (1.0 - loss)


def next_delay(probes: list[Probe], asked: float) -> float:
    """The delay at the asked loss on the least-squares line through the origin of odds against delay."""
    usable = [p for p in probes if 0.0 < p.loss < 1.0 and p.delay_ms > 0]
    if not usable:  # every probe lost nothing (or everything): double the largest delay tried
        return 2.0 * max(p.delay_ms for p in probes)
    slope = sum(p.delay_ms * _odds(p.loss) for p in usable) / sum(p.delay_ms ** 2 for p in usable)
    return _odds(asked) / slope


def calibrate(asked: float, references: list[Path], cfg: GateConfig, probe, tolerance: float = 0.005,
              max_probes: int = 4, first_delay: float | None = None) -> Calibration:
    """The delay that costs ``asked`` of the pooled speedup, measured: ``probe(k, delay_ms)`` runs the
    k-th slowed probe run and returns its folder (or an existing one to reuse)."""
    if not 0.0 < asked < 1.0:
        raise ValueError(f"asked loss must be in (0, 1), got {asked}")
    delay = first_delay if first_delay is not None else step_time_guess(references[0], asked)
    cal = Calibration(asked, delay)
    for k in range(max_probes):
        run = probe(k, delay)
        cal.probes.append(Probe(delay, achieved_loss(references, run, cfg), Path(run).name))
        print(f"calibration {asked:.0%}: probe {k + 1}: faults.delay_ms={delay:.4f} cost {cal.probes[-1].loss:.2%}",
              file=sys.stderr)
        delay = next_delay(cal.probes, asked)
        if abs(cal.probes[-1].loss - asked) <= tolerance:
            break
    cal.delay_ms = delay
    return cal


def record_slowed_run(run: Path, asked: float, delay_ms: float, references: list[Path], cfg: GateConfig) -> float:
    """Measure and write what a slowed run achieved (``slowdown.json`` in its folder); the achieved loss."""
    ratios = pooled_speedup_ratios(references, run, cfg)
    achieved = 1.0 - statistics.median(ratios) if ratios else float("nan")
    record = {"asked_loss": asked, "delay_ms": delay_ms, "achieved_loss": achieved,
              "estimator": "1 - median over reference runs of the gate's pooled speedup ratio",
              "pooled_ratios": ratios, "references": [Path(r).name for r in references]}
    atomic_write_text(Path(run) / SLOWDOWN_FILE, json.dumps(record, indent=2) + "\n")
    return achieved


def read_slowed_run(run: Path) -> dict | None:
    """A slowed run's ``slowdown.json`` (None for a run that was not slowed)."""
    path = Path(run) / SLOWDOWN_FILE
    return json.loads(path.read_text()) if path.exists() else None


def calibration_record(out: Path, cal: Calibration) -> None:
    atomic_write_text(out / f"calib{round(cal.asked * 100)}.json", json.dumps(asdict(cal), indent=2) + "\n")


def load_calibration(out: Path, asked: float) -> Calibration | None:
    """A calibration written before into ``out`` (reused by ``--reuse``), or None."""
    path = out / f"calib{round(asked * 100)}.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return Calibration(data["asked"], data["delay_ms"], [Probe(**p) for p in data["probes"]])


def existing_runs(out: Path, prefix: str) -> list[Path]:
    """The finished run folders ``out/PREFIX-<i>``, in order of i."""
    runs = [p for p in out.iterdir() if p.name.startswith(prefix + "-") and p.name[len(prefix) + 1:].isdigit()
            and RunFolder(p).has_cells]
    return sorted(runs, key=lambda p: int(p.name[len(prefix) + 1:]))
