"""``backend.options.max_engines`` bounds the vLLM engines alive in the *process*, not per backend: a
sweep over the target (``target=tiny,tiny_long -m``) keeps the first job's backend cached while the
second starts its engines. Two backends of ``max_engines=2`` one after the other, as the sweep runs
them: never more than two engine-core processes alive (counted from each engine's own process
handles), the least recently used closed first, and an engine an open pass holds is never closed.
Runs in a subprocess (engine-core processes: ``lockstep=false``), apart from the session's engines."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]
SCRIPT = r'''
import json, sys
from tests.support.engine_support import drafter, generate, make_backend
from speedbench.backends.base import GenerateSpec
from speedbench.backends.vllm import engines
from speedbench.config import SamplingConfig

started = []  # every LLM this process started, closed or not

def processes():
    """Engine-core processes alive now, over every engine ever started here."""
    return sum(p.is_alive() for llm in started for p in llm.llm_engine.engine_core.resources.engine_manager.processes)

def track(pool):
    real = pool.get
    def get(*a, **k):
        eng = real(*a, **k)
        if all(eng.llm is not s for s in started):
            started.append(eng.llm)
        return eng
    pool.get = get

if __name__ == "__main__":
    out = {"alive": [], "processes": []}
    def note():
        out["alive"].append(engines.alive())
        out["processes"].append(processes())
    opts = {"max_engines": 2, "lockstep": "false", "profile_split": "false"}
    first, second = make_backend("vllm", sys.argv[1], opts), make_backend("vllm", sys.argv[1], opts)
    track(first.engines)
    track(second.engines)
    generate(first, "none"); note()
    generate(first, "ngram"); note()         # the first job: baseline + n-gram, both alive
    generate(second, "none"); note()         # the second job: the first job's oldest (its baseline) makes room
    out["first_left"] = [json.loads(k)["spec"] is not None for k in first.engines._engines]
    generate(second, "ngram"); note()
    out["first_left_after"] = len(first.engines._engines)
    # a held engine is not closed: a session open on the second backend's n-gram engine, then one more start
    held = second.session(GenerateSpec(drafter("ngram"), 1, SamplingConfig(), 8, True, "spec"))
    third = make_backend("vllm", sys.argv[1], {**opts, "max_engines": 1})
    track(third.engines)
    generate(third, "none"); note()
    out["held_alive"] = held.eng.key in second.engines._engines
    engines.release(held)
    for b in (first, second, third):
        b.close()
    note()
    print("RESULT " + json.dumps(out))
'''


def test_max_engines_bounds_the_process_not_the_backend(tmp_path, engine_models):
    script = tmp_path / "max_engines.py"
    script.write_text(SCRIPT)
    # engine cores in processes of their own: an in-process (lockstep) engine earlier in this worker set
    # VLLM_ENABLE_V1_MULTIPROCESSING=0 in its environment, which the script would inherit
    env = {**os.environ, "PYTHONPATH": str(REPO), "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    proc = subprocess.run([sys.executable, str(script), engine_models["target"]], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(next(line[7:] for line in proc.stdout.splitlines() if line.startswith("RESULT ")))
    # per backend this was 1, 2, 3, 4 engines (and engine processes) alive
    assert out["alive"][:4] == [1, 2, 2, 2] and out["processes"][:4] == [1, 2, 2, 2]
    assert out["first_left"] == [True]  # the oldest (the first job's baseline) closed first
    assert out["first_left_after"] == 0
    # max_engines=1 with the second backend's n-gram engine held by an open pass: the idle baseline closes,
    # the held one stays (two alive: the new one and the held one, with a warning), nothing else
    assert out["held_alive"] and out["alive"][4] == 2 and out["processes"][4] == 2
    assert out["alive"][5] == 0 and out["processes"][5] == 0
