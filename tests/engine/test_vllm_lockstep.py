"""``backend.options.lockstep`` (auto: on for vLLM's CPU build): the baseline and speculative vLLM
engines in one process, stepped in turn through ``LLMEngine.add_request/step`` under the protocol's
lockstep, each pass on its own clock. Runs in a subprocess: the mode puts vLLM's engine cores in the
calling process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), which must not leak into other tests."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]
SCRIPT = r'''
import json, math, sys, threading
import numba  # loaded, as after an n-gram engine ran here: vLLM's kernel scan at engine start broke on llvmlite
from tests.support.engine_support import drafter, make_backend, requests
from speedbench.backends.base import GenerateSpec, default_cpu_threads
from speedbench.config import SamplingConfig
from speedbench.engine.clock import Lockstep
from speedbench.pipeline import conversations, protocol
from speedbench.config import ProtocolConfig

if __name__ == "__main__":
    b = make_backend("vllm", sys.argv[1])  # lockstep=auto: on for the CPU build
    reqs = requests(16)
    specs = {role: GenerateSpec(drafter(m, sys.argv[2] if m == "draft_model" else None), 3, SamplingConfig(), 16, True, role)
             for role, m in (("baseline", "none"), ("spec", "draft_model"))}
    alone = {role: conversations.generate(b, reqs, s) for role, s in specs.items()}  # starts both engines
    order, threads = [], set()
    for role, s in specs.items():  # which engine steps, in order (the engines' own step, counted)
        eng = b.engines.get(s.drafter, b.engine_seqs(3)).llm.llm_engine
        def logged(step=eng.step, role=role):
            order.append(role)
            threads.add(threading.get_ident())
            return step()
        eng.step = logged
    paired = Lockstep("baseline", "spec").run({role: (lambda s=s: conversations.generate(b, reqs, s)) for role, s in specs.items()})
    switches = sum(1 for x, y in zip(order, order[1:]) if x != y)
    out = {
        "mode": protocol.interleaving(b, ProtocolConfig()), "info": b.info()["lockstep"], "switches": switches,
        "steps": {r: order.count(r) for r in specs},
        "same_tokens": {r: [x.output_ids for x in alone[r].requests] == [x.output_ids for x in paired[r].requests] for r in specs},
        "tpot_ok": all(math.isfinite(x.tpot) and x.tpot > 0 for r in specs for x in paired[r].requests),
        "ttft_ok": all(math.isfinite(x.ttft) and x.ttft > 0 for r in specs for x in paired[r].requests),
        "wall": {r: paired[r].wall_s for r in specs},
        "drafts": sum(x.n_drafts for x in paired["spec"].requests),
        "accepted": sum(x.accepted for x in paired["spec"].requests),
        "timed_steps": sum(1 for s in paired["spec"].steps if math.isfinite(s.t_verify)),
        "on_builder_thread": threads == {threading.main_thread().ident},
        "torch_threads": b.info()["torch_threads"], "cpu_threads": default_cpu_threads(),
    }
    # an engine shut down while another is alive in this process (an eviction) leaves the other working
    from speedbench.backends.vllm.engines import _shutdown
    spec_engine = b.engines.get(specs["spec"].drafter, b.engine_seqs(3))
    b.engines._engines.pop(spec_engine.key)
    _shutdown(spec_engine.llm)
    again = conversations.generate(b, reqs, specs["baseline"])
    out["after_eviction"] = all(r.status == "ok" for r in again.requests) and \
        [x.output_ids for x in again.requests] == [x.output_ids for x in alone["baseline"].requests]
    # an n-gram engine started next (numba loaded): vLLM's proposer resets OpenMP's count to numba's after each call
    ngram = conversations.generate(b, reqs, GenerateSpec(drafter("ngram"), 3, SamplingConfig(), 16, True, "spec"))
    out["ngram_ok"] = all(r.status == "ok" for r in ngram.requests) and sum(r.n_drafts for r in ngram.requests) > 0
    out["threads_after"] = __import__("torch").get_num_threads()
    b.close()
    print("RESULT " + json.dumps(out))
'''


def test_vllm_lockstep_steps_both_engines_in_turn(tmp_path, engine_models):
    script = tmp_path / "lockstep.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script), engine_models["target"], engine_models["draft"]], capture_output=True, text=True,
                          cwd=REPO, env={**__import__("os").environ, "PYTHONPATH": str(REPO)}, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(next(line[7:] for line in proc.stdout.splitlines() if line.startswith("RESULT ")))
    assert out["mode"] == "step" and out["info"] is True
    assert out["same_tokens"] == {"baseline": True, "spec": True}  # stepping changes no token
    assert out["ttft_ok"] and out["tpot_ok"] and all(w > 0 for w in out["wall"].values())
    # both passes step in turn (the one behind in output goes next), not one after the other
    assert out["switches"] >= 4, out
    assert out["steps"]["baseline"] > out["steps"]["spec"]  # more tokens per speculative step
    assert out["drafts"] > 0 and out["accepted"] > 0 and out["timed_steps"] > 0
    # every step on the thread that built the engines: a second thread issuing forwards gets a second
    # OpenMP team, and with more OpenMP threads than cores a step took 8 ms instead of 4.5 ms
    assert out["on_builder_thread"], out
    # the reference engine's rule (1 on a small CPU), still in force after vLLM's n-gram proposer (numba) ran
    assert out["torch_threads"] == out["cpu_threads"] == out["threads_after"], out
    # vLLM's in-process engine core tears down process-wide distributed state at shutdown: skipped while another lives
    assert out["after_eviction"] and out["ngram_ok"], out
