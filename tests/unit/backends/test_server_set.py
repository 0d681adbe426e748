"""ServerSet lifecycle with a small real HTTP server (Python's http.server on 127.0.0.1), and the
server command lines ``backend=vllm_serve`` builds (fast; the vLLM servers are in engine/test_vllm_serve.py)."""
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from speedbench.backends.server_set import ServerSet
from speedbench.backends.vllm_serve import VllmServeBackend, engine_flags
from speedbench.config import BackendConfig, ModelConfig
from speedbench.drafters.registry import make_drafter

HTTP = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1"]  # serves GET / with 200
PORT = ("{port}",)


def alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_servers_start_on_free_ports_log_and_stop_with_their_group(tmp_path):
    with ServerSet(tmp_path, ready_timeout_s=30, health_path="/", port_args=PORT) as servers:
        a, b = servers.ensure([("a", "baseline", HTTP), ("b", "spec-x", HTTP)])
        assert a.port != b.port and a.url.startswith("http://127.0.0.1:")
        assert all(s["startup_s"] > 0 for s in servers.starts) and len(servers.starts) == 2
        assert servers.ensure([("a", "baseline", HTTP)])[0] is a  # running: reused, not restarted
        pids = servers.pids()
        assert all(alive(p) for p in pids)
        assert "# pid" in (tmp_path / "server-baseline.log").read_text()
    assert not any(alive(p) for p in pids)


def test_a_server_that_exits_or_never_gets_ready_fails_with_its_log(tmp_path):
    with ServerSet(tmp_path, ready_timeout_s=30, health_path="/", port_args=PORT) as servers:
        with pytest.raises(RuntimeError, match="exited with code 3.*boom"):
            servers.ensure([("x", "bad", [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"])])
    with ServerSet(tmp_path, ready_timeout_s=2, health_path="/", port_args=()) as servers:
        t0 = time.perf_counter()
        with pytest.raises(TimeoutError, match="not ready after 2 s"):
            servers.ensure([("y", "mute", [sys.executable, "-c", "import time; time.sleep(60)"])])
        assert time.perf_counter() - t0 < 15 and servers.pids() == []


# a server that starts two workers as vLLM's API server starts its engine core: one in its process group,
# one in a process group of its own (same session); it writes their pids to a file, then serves GET /
FAMILY = textwrap.dedent("""
    import http.server, os, sys, time
    kids = []
    for own_group in (False, True):
        pid = os.fork()
        if pid == 0:
            if own_group:
                os.setpgid(0, 0)
            while True:
                time.sleep(1)
        kids.append(pid)
    with open(sys.argv[1], "a") as f:
        f.write(" ".join(map(str, kids)) + "\\n")
    http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), http.server.SimpleHTTPRequestHandler).serve_forever()
""")


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _gone(pids, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(pid_alive(p) for p in pids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork, /proc")
def test_a_server_that_died_is_replaced_and_its_workers_are_stopped(tmp_path):
    kids = tmp_path / "kids.txt"
    argv = [sys.executable, "-c", FAMILY, str(kids)]
    with ServerSet(tmp_path, ready_timeout_s=30, health_path="/", port_args=("{port}",)) as servers:
        (first,) = servers.ensure([("a", "baseline", argv)])
        workers = [int(p) for p in kids.read_text().split()]
        assert len(workers) == 2 and all(pid_alive(p) for p in workers)
        os.kill(first.pid, signal.SIGKILL)  # the API process only, as the OOM killer would
        first.proc.wait(timeout=10)
        (second,) = servers.ensure([("a", "baseline", argv)])
        assert second is not first and second.alive()
        assert _gone(workers), [p for p in workers if pid_alive(p)]  # its engine core and worker: stopped too
        workers = [int(p) for p in kids.read_text().split()[2:]]
    assert _gone(workers)  # stopping the set stops the new server's own-group worker too


def test_a_key_on_the_server_command_line_or_from_the_environment_never_reaches_its_log(tmp_path, monkeypatch):
    # server_args=[--api-key, ${oc.env:MY_SERVER_KEY}]: the server echoes its arguments (vLLM logs its non-default args)
    monkeypatch.setenv("MY_SERVER_KEY", "ServerKey-8u7y-ii")
    echo = [sys.executable, "-c", "import sys, os, runpy; print('args', sys.argv, os.environ['MY_SERVER_KEY'], flush=True); "
            "sys.argv = ['http.server', '--bind', '127.0.0.1', sys.argv[-1]]; runpy.run_module('http.server', "
            "run_name='__main__')", "--api-key", "ServerKey-8u7y-ii"]
    flag_only = [*echo[:3], "--api-key", "FlagOnly-3e4r-oo"]  # known only as the value after --api-key
    with ServerSet(tmp_path, ready_timeout_s=30, health_path="/", port_args=("{port}",)) as servers:
        servers.ensure([("a", "baseline", echo), ("b", "spec-x", flag_only)])
    for name in ("server-baseline.log", "server-spec-x.log"):
        text = (tmp_path / name).read_text()
        assert "args" in text and "<redacted>" in text, text
        assert "ServerKey-8u7y-ii" not in text and "FlagOnly-3e4r-oo" not in text, text


def test_at_most_max_servers_alive_over_every_set_of_the_process(tmp_path):
    """A sweep over a backend setting (target, dtype, engine_args, timeout_s) makes one backend, so one ServerSet,
    per job: the bound counts every set's servers (6 were alive during job 3 with max_engines=2)."""
    sets = [ServerSet(tmp_path / f"job{j}", ready_timeout_s=30, max_servers=2, health_path="/", port_args=PORT)
            for j in range(3)]
    try:
        seen = []
        for job in sets:
            base, spec = job.ensure([("base", "baseline", HTTP), ("spec", "spec-x", HTTP)])
            alive_now = [s for owner in sets for s in owner.servers.values() if s.alive()]
            seen.append(len(alive_now))
            assert base.alive() and spec.alive()  # the job's own servers run
        assert seen == [2, 2, 2]
        assert sets[0].servers == {} and sets[1].servers == {}
        (again,) = sets[0].ensure([("base", "baseline", HTTP)])  # an earlier job's backend used again: restarted
        assert again.alive() and sum(len(s.servers) for s in sets) == 2
    finally:
        for job in sets:
            job.close()


def test_a_slow_start_says_where_it_is(tmp_path, monkeypatch, capfd):
    """Before: a vllm_serve start printed nothing for about 90 s. Now a line every STARTUP_NOTE_S."""
    from speedbench.backends import server_set

    monkeypatch.setattr(server_set, "STARTUP_NOTE_S", 0.5)
    slow = [sys.executable, "-c", "import sys, time; print('loading weights', flush=True); time.sleep(2.0); "
            "sys.argv[1:] = ['--bind', '127.0.0.1', sys.argv[1]]; import runpy; runpy.run_module('http.server', run_name='__main__')"]
    with ServerSet(tmp_path, ready_timeout_s=30, health_path="/", port_args=PORT) as servers:
        servers.ensure([("s", "slow", slow)])
    notes = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("server slow: starting")]
    assert len(notes) >= 2 and "s so far" in notes[0] and any("loading weights" in n for n in notes)


def _harness(tmp_path, then: str = "", **popen) -> tuple[subprocess.Popen, list[int]]:
    """A harness process that starts one server, prints its pids, runs ``then`` and sleeps."""
    script = textwrap.dedent(f"""
        import json, sys, time
        from speedbench.backends.server_set import ServerSet
        s = ServerSet({str(tmp_path)!r}, 30, health_path="/", port_args=("{{port}}",))
        s.ensure([("a", "baseline", {HTTP!r})])
        print(json.dumps(s.pids()), flush=True)
    """) + textwrap.dedent(then) + "time.sleep(60)\n"
    harness = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, **popen)
    return harness, json.loads(harness.stdout.readline())


def test_sigterm_of_the_harness_stops_its_servers(tmp_path):
    harness, pids = _harness(tmp_path)
    assert pids and all(alive(p) for p in pids)
    harness.send_signal(signal.SIGTERM)
    assert harness.wait(timeout=60) == -signal.SIGTERM  # it still dies of the signal
    assert not any(alive(p) for p in pids)


@pytest.mark.parametrize("ending", ["ctrl-c", "error"])
def test_ctrl_c_or_an_error_in_the_harness_stops_its_servers(tmp_path, ending):
    then = 'raise RuntimeError("a failed run")\n' if ending == "error" else ""
    harness, pids = _harness(tmp_path, then, stderr=subprocess.DEVNULL)
    if ending == "ctrl-c":
        harness.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C sends (the servers' own sessions get nothing)
    assert harness.wait(timeout=60) != 0
    assert not any(alive(p) for p in pids)


def test_sigkill_of_the_harness_still_stops_its_servers(tmp_path):
    harness, pids = _harness(tmp_path)
    harness.kill()
    harness.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(p) for p in pids)  # PR_SET_PDEATHSIG


# a server that notes every SIGTERM (time.time(), to the file it is given) and goes on: as vLLM's does while it starts
DEAF = [sys.executable, "-c", "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: open(sys.argv[1], 'a').write(repr(time.time()) + '\\n'))\n"
        "time.sleep(600)\n"]
DEAF_HTTP = [sys.executable, "-c", "import runpy, signal, sys\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
             "sys.argv = ['http.server', '--bind', '127.0.0.1', *sys.argv[1:]]\nrunpy.run_module('http.server', run_name='__main__')\n"]


def test_servers_still_starting_are_killed_together_after_the_short_grace(tmp_path, monkeypatch):
    """Stopping two servers that ignore SIGTERM while they start: both get SIGTERM at once (one thread each,
    not one after the other's grace) and SIGKILL after STARTING_GRACE_S, not the ready servers' STOP_GRACE_S."""
    from speedbench.backends import server_set

    monkeypatch.setattr(server_set, "STOP_GRACE_S", 600.0)
    notes = [tmp_path / "a.sigterm", tmp_path / "b.sigterm"]
    servers = [server_set.Server(role, [*DEAF, str(note)], tmp_path / f"{role}.log", port_args=PORT)
               for role, note in zip(("a", "b"), notes)]
    for server in servers:
        server.start()
    time.sleep(1.0)  # both have installed their handler
    t0 = time.monotonic()
    server_set.stop_servers(servers)
    assert time.monotonic() - t0 < 60  # not the 600-s grace of a ready server
    assert [s.proc.returncode for s in servers] == [-signal.SIGKILL] * 2
    first = [float(n.read_text().split()[0]) for n in notes]
    assert abs(first[0] - first[1]) < server_set.STARTING_GRACE_S  # one after the other would be a grace apart


def test_a_ready_server_gets_the_long_grace(tmp_path, monkeypatch):
    from speedbench.backends import server_set

    monkeypatch.setattr(server_set, "STOP_GRACE_S", 3.0)
    monkeypatch.setattr(server_set, "STARTING_GRACE_S", 0.1)
    with ServerSet(tmp_path, ready_timeout_s=30, health_path="/", port_args=PORT) as servers:
        (server,) = servers.ensure([("a", "baseline", DEAF_HTTP)])
        assert server.ready()
        t0 = time.monotonic()
        servers.close()
        assert time.monotonic() - t0 >= 2.9 and server.proc.returncode == -signal.SIGKILL


def _backend(**options):
    b = VllmServeBackend(ModelConfig(name="tiny", path="random:tiny-target"),
                         BackendConfig(name="vllm_serve", options=options))
    b._on_cpu = True  # the command line only; no vLLM import needed
    return b


def test_vllm_command_lines_for_the_baseline_and_the_speculative_server():
    b = _backend(engine_args={"max_model_len": 512, "enforce_eager": False})
    ngram = make_drafter("ngram", 4, prompt_lookup_min=1, prompt_lookup_max=3)
    spec = b.argv(ngram, 8)
    base = b.argv(make_drafter("none", 0), 8)
    assert spec[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    cfg = json.loads(spec[spec.index("--speculative-config") + 1])
    assert cfg == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    assert spec[spec.index("--per-request-spec-decode-metrics") + 1] == "detailed"
    assert "--speculative-config" not in base and "--per-request-spec-decode-metrics" not in base
    for argv in (spec, base):
        assert argv[argv.index("--max-num-seqs") + 1] == "8" and argv[argv.index("--dtype") + 1] == "float32"
        assert "--no-enforce-eager" in argv and argv[argv.index("--max-model-len") + 1] == "512"
        assert "--no-enable-prefix-caching" in argv and "--kv-cache-memory-bytes" in argv


def test_any_server_command_with_its_own_flags():
    b = _backend(server_command=["sglang-ish", "{model}"], vllm_flags=False, server_args=["--mem", "0.5"],
                 spec_server_args=["--draft", "{draft_model}", "--k", "{num_speculative_tokens}"])
    spec = b.argv(make_drafter("draft_model", 3, model="builtin:tiny-draft-small"), 8)
    assert spec[0] == "sglang-ish" and spec[1] == b.model_dir and "--speculative-config" not in spec
    assert spec[2:4] == ["--mem", "0.5"] and spec[-1] == "3" and spec[-3].endswith("tiny-draft-small")
    assert b.argv(make_drafter("none", 0), 8) == ["sglang-ish", b.model_dir, "--mem", "0.5"]
    assert engine_flags({"a_b": 1, "c": True, "d": False, "e": None, "f": {"x": 1}}) == \
        ["--a-b", "1", "--c", "--no-d", "--f", '{"x": 1}']


def test_server_args_with_json_values_reach_the_server_as_written():
    # vLLM's documented form for dict-valued flags; str.format read '"max_position_embeddings"' as a placeholder
    overrides = '{"max_position_embeddings": 2048}'
    b = _backend(server_args=["--hf-overrides", overrides, "--served-model-name", "{model}"],
                 spec_server_args=["--note", "{num_speculative_tokens}{x"])
    spec = b.argv(make_drafter("ngram", 4), 8)
    assert spec[spec.index("--hf-overrides") + 1] == overrides
    assert spec[spec.index("--served-model-name") + 1] == b.model_dir and spec[-1] == "4{x"
    problems = VllmServeBackend.preflight(BackendConfig(name="vllm_serve", options={
        "server_args": ["--hf-overrides", overrides], "spec_server_args": ["--draft", "{draft_modle}"]}), 1)
    assert problems == ["backend.options.spec_server_args: unknown placeholder {draft_modle} in '{draft_modle}' "
                        "(known: {model}, {draft_model}, {num_speculative_tokens}, {speculative_config})"]


def test_given_urls_and_bad_server_options_are_refused_before_anything_starts():
    problems = VllmServeBackend.preflight(BackendConfig(name="vllm_serve", options={
        "base_url": "http://127.0.0.1:8000/v1", "server_command": [], "ready_timeout_s": 0}), 1)
    assert any("backend=openai to attach" in p for p in problems)
    assert any("server_command" in p for p in problems) and any("ready_timeout_s" in p for p in problems)


def test_a_server_that_cannot_start_fails_every_cell_with_its_reason_and_leaves_nothing(tmp_path, caplog):
    """A harness-started server that exits before it is ready (a bad flag, a missing model) is data: every cell of
    the job is recorded failed, naming the server and its log, and no server process is left; the console gets
    one line, no traceback."""
    from speedbench.pipeline import runner
    from speedbench.results import ResultsStore
    from tests.support.sweep_helpers import make_run

    opts = {"server_command": [sys.executable, "-c", "import sys; print('no such flag'); sys.exit(3)"],
            "vllm_flags": False, "ready_timeout_s": 60}
    run = make_run(tmp_path, "s", backend=BackendConfig(name="vllm_serve", options=opts))
    try:
        cells = runner.run_cells(run, progress=False)
    finally:
        runner.close_backends()
    assert cells and all(c.status == "failed" for c in cells)
    assert all(c.error.startswith("start: RuntimeError: server ") and "exited with code 3" in c.error for c in cells)
    assert "no such flag" in (tmp_path / "s" / "engine-logs" / "server-baseline.log").read_text()
    assert len(ResultsStore(tmp_path / "s").cells()) == len(cells)  # recorded, not lost
    said = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("speedbench")]
    assert [r.getMessage().count("\n") for r in said] == [0] and said[0].exc_info is None, said
    assert "exited with code 3" in said[0].getMessage()
