"""Processes under faults: Ctrl-C on a run, SIGTERM on a sweep through hydra/launcher=local."""
import signal
import subprocess
import threading
import time
import _thread
from pathlib import Path

import pytest
import torch

from speedbench.engine.clock import Clock, Lockstep

from tests.support.sweep_helpers import speedbench_cmd, subprocess_env


def _pass(clock: Clock, seconds: float, ended: list):
    def run():
        a = torch.randn(64, 64)
        clock.begin()
        end = time.perf_counter() + seconds
        try:
            while time.perf_counter() < end:
                a = torch.tanh(a @ a)  # a native op, as an engine's forward
                clock.checkpoint(0.0)
        finally:
            ended.append(True)
        return True
    return run


def test_ctrl_c_in_a_lockstep_unwinds_both_passes():
    """The cause of "terminate called without an active exception" (exit 134) on Ctrl-C was a
    pass still inside torch when the interpreter exits: both passes must have unwound, the running
    one by the interrupt, the suspended one from its checkpoint, before the interrupt propagates."""
    clock = Clock("cpu")
    ended: list = []
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        Lockstep("baseline", "spec").run({"baseline": _pass(clock, 5, ended), "spec": _pass(clock, 5, ended)})
    assert time.perf_counter() - t0 < 3  # stopped at once, not after the passes' 5 s
    assert ended == [True, True]


@pytest.mark.slow
def test_ctrl_c_on_a_real_run_exits_130_in_one_line(tmp_path):
    """Three real runs interrupted at different moments (it aborted about 1 in 4 before)."""
    for attempt in range(3):
        root = tmp_path / str(attempt)
        root.mkdir()
        proc = subprocess.Popen(
            speedbench_cmd("run", f"results_dir={root}", "run_id=int", "dataset=mini", "dataset.categories=[coding]",
                           "max_new_tokens=32", "warmup_batches=0", "drafter=ngram", "target.path=random:tiny-target",
                           "protocol.budget_s=30"),
            cwd=root, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 120
        while not (root / "int" / "provenance.json").exists():  # written before the cells start measuring
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:] if proc.poll() else "slow"
            time.sleep(0.05)
        time.sleep(0.8 + 0.6 * attempt)  # while loading, then while measuring
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err[-2000:]
        assert "terminate called" not in err and err.strip().splitlines()[-1] == "speedbench: interrupted", err[-2000:]
