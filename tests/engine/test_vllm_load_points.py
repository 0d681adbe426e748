"""In-process load points on ``backend=vllm`` (``pipeline.conversations._run_load``): both passes
fed the same seeded arrivals, each on its own clock, stepped in lockstep. Closed loop: never more
than C in flight, a request sent when a slot frees; open loop: a request sent at its arrival, the
idle engine's clock moved on to it (idle time is the pass's elapsed time, not compute). Runs in a
subprocess, as the lockstep test does (the engine cores live in the calling process)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]
SCRIPT = r'''
import json, math, sys, time
from tests.support.engine_support import drafter, make_backend, requests
from speedbench.arrivals import arrival_times
from speedbench.backends.base import GenerateSpec
from speedbench.config import LoadConfig, ProtocolConfig, SamplingConfig
from speedbench.engine.clock import Lockstep
from speedbench.metrics.latency import load_point_columns
from speedbench.pipeline import conversations, protocol

def specs(load, batch=2):
    return {role: GenerateSpec(drafter(m, sys.argv[2] if m == "draft_model" else None), batch, SamplingConfig(), 16, True,
                               role, load=load) for role, m in (("baseline", "none"), ("spec", "draft_model"))}

def paired(b, reqs, load):
    s = specs(load)
    t = time.perf_counter()
    out = Lockstep("baseline", "spec").run({r: (lambda sp=sp: conversations.generate(b, reqs, sp)) for r, sp in s.items()})
    return out, time.perf_counter() - t

if __name__ == "__main__":
    b = make_backend("vllm", sys.argv[1])
    reqs = requests(16)[:6]
    static = {r: conversations.generate(b, reqs, sp) for r, sp in specs(None).items()}  # static batches of 2
    closed, _ = paired(b, reqs, LoadConfig(concurrency=2))
    rate = 4.0
    opened, real_s = paired(b, reqs, LoadConfig(request_rate=rate))
    arrivals = arrival_times(len(reqs), rate, 1.0, 0)
    cols = load_point_columns(closed["baseline"], closed["spec"])
    out = {
        "same_tokens": all([x.output_ids for x in static[r].requests] == [x.output_ids for x in d[r].requests]
                           for d in (closed, opened) for r in d),
        "closed_live_max": {r: max(s.live_batch for s in closed[r].steps) for r in closed},
        "open_live_max": {r: max(s.live_batch for s in opened[r].steps) for r in opened},
        "closed_starts": {r: sorted(x.t_start for x in closed[r].requests) for r in closed},
        "open_starts": {r: [x.t_start for x in opened[r].requests] for r in opened},
        "arrivals": arrivals, "open_wall": {r: opened[r].wall_s for r in opened}, "open_real_s": real_s,
        "context_ok": all(s.context_len > s.position >= 0 for d in (closed, opened) for r in d for s in d[r].steps),
        "itl": [cols.itl_ms_mean_baseline, cols.itl_ms_mean_spec, cols.itl_token_ms_mean_spec],
        "throughput": [cols.output_tok_s_baseline, cols.speedup_throughput],
        "whole_block": protocol.stepped_point(b, LoadConfig(concurrency=2)),
        "drafts": sum(x.n_drafts for x in closed["spec"].requests),
    }
    b.close()
    print("RESULT " + json.dumps(out))
'''


def test_vllm_in_process_load_points(tmp_path, engine_models):
    script = tmp_path / "load_points.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script), engine_models["target"], engine_models["draft"]], capture_output=True,
                          text=True, cwd=REPO, env={**__import__("os").environ, "PYTHONPATH": str(REPO)}, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(next(line[7:] for line in proc.stdout.splitlines() if line.startswith("RESULT ")))
    assert out["same_tokens"]  # the load driver changes when requests run, not what they generate
    assert out["whole_block"]  # the protocol runs the whole point as one block
    assert out["drafts"] > 0
    # closed loop C=2: never more than 2 in one forward, and it reached 2; requests 3.. sent as slots freed
    assert out["closed_live_max"] == {"baseline": 2, "spec": 2}
    for starts in out["closed_starts"].values():
        assert starts[:2] == [0.0, 0.0] and all(t > 0 for t in starts[2:])
    # open loop at 4 requests/s: each request sent at its seeded arrival (the same on both passes), or later
    # when the engine was still busy; the idle clock jumps, so the window spans the arrivals while the
    # real time spent is far less than the window of both passes together
    arrivals = out["arrivals"]
    for role, starts in out["open_starts"].items():
        assert all(s >= a - 1e-9 for s, a in zip(starts, arrivals)), role
        assert out["open_wall"][role] >= arrivals[-1]
    assert out["open_real_s"] < 0.9 * (out["open_wall"]["baseline"] + out["open_wall"]["spec"])
    assert max(out["open_live_max"].values()) <= 6
    assert out["context_ok"]  # every step knows its live context
    itl_base, itl_spec, itl_token_spec = out["itl"]
    assert itl_base > 0 and itl_spec > itl_token_spec > 0  # a speculative chunk carries several tokens
    assert out["throughput"][0] > 0 and out["throughput"][1] > 0
