"""``backend.options.max_engines`` is a limit per process, not per backend (issue 54 item 4): a sweep over
targets keeps one vLLM backend per target in the process, and the second target's engines must not start
while the first one's stay alive. Real vLLM (CPU), two backends of ``max_engines=1``, one baseline engine
each; the live engine-core processes of the process are counted (``lockstep=false``: each engine core in
a process of its own). Run in a subprocess so that no other test's engines are counted or evicted."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]
SCRIPT = r'''
import json, os, sys, time
import psutil
from tests.support.engine_support import drafter, make_backend

def engine_cores():
    time.sleep(1.0)  # a closed engine's process is reaped by then (its shutdown waits for it)
    return sum(1 for p in psutil.Process(os.getpid()).children(recursive=True)
               if "EngineCore" in " ".join([p.name(), *p.cmdline()]) and p.status() != psutil.STATUS_ZOMBIE)

opts = {"max_engines": 1, "lockstep": "false", "timers": "false", "profile_split": "false"}
first, second = make_backend("vllm", sys.argv[1], opts), make_backend("vllm", sys.argv[1], opts)
counts = []
first.engines.get(drafter("none"), 1)
counts.append(engine_cores())
second.engines.get(drafter("none"), 1)  # another backend (the next target of a sweep): the first's engine goes
counts.append(engine_cores())
first.engines.get(drafter("none"), 1)  # back to the first: started again, the second's closed
counts.append(engine_cores())
first.close(); second.close()
counts.append(engine_cores())
print(json.dumps(counts))
'''


def test_max_engines_counts_every_backend_of_the_process(engine_models):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, engine_models["target"]], capture_output=True, text=True,
                          cwd=REPO, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    print("live engine-core processes after each start, then after close:", counts)
    assert counts == [1, 1, 1, 0], counts  # never more than max_engines=1 alive; none left after close
