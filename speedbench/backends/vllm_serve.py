"""``backend=vllm_serve``: the harness starts the baseline and speculative servers itself.

The servers are built from the same target and drafter configs as offline vLLM (the drafter's
``speculative_config`` comes from ``vllm.spec``; ``builtin:`` and ``random:`` models are
folders via ``models.local_dir``) and run as their own processes (``server_set.ServerSet``:
free loopback ports, health check, logs in ``<run folder>/engine-logs/``, stopped on every
exit path). They are started in :meth:`ready`, which the runner calls before the warm-up, so
start-up is never measured; its time is in the cell's ``extra["servers"]``. Measuring then goes
through ``backend=openai``'s code path unchanged (this class only fills in the two URLs).

The server command is ``backend.options.server_command`` (default
``python -m vllm.entrypoints.openai.api_server``; ``python`` is this interpreter). With
``vllm_flags: true`` vLLM's flags are added (``--model``, ``--dtype``, ``--seed``,
``--max-num-seqs``, CPU defaults, ``--speculative-config`` and per-request spec-decode metrics
for the speculative server, ``engine_args`` as ``--key-with-dashes value``). Any other
OpenAI-compatible server (SGLang, TensorRT-LLM serve) runs with ``vllm_flags: false`` and its
own flags in ``server_command`` / ``server_args`` / ``spec_server_args``, where ``{model}``, ``{draft_model}``,
``{num_speculative_tokens}`` and ``{speculative_config}`` are filled in (docs/engines.md).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

from .. import models
from ..drafters.registry import is_baseline
from ..results.layout import RunFolder
from ..config import DrafterConfig
from .base import Backend
from .openai_backend import OpenAIBackend, _server_problems
from ..config.engine_options import SPEC_METRICS, choice_problem
from .server_health import server_root
from .server_set import PORT_PLACEHOLDERS, ServerSet, fill_placeholders, placeholder_names
from .vllm.spec import on_cpu, speculative_config, synthetic_problems

log = logging.getLogger(__name__)
CPU_FLAGS = {"enforce_eager": True, "kv_cache_memory_bytes": 512 << 20}
PLACEHOLDERS = ("model", "draft_model", "num_speculative_tokens", "speculative_config")
# the options whose {name}s are filled in, and the names each knows (port_args: by server_set.Server)
ARG_OPTIONS = {"server_command": PLACEHOLDERS, "server_args": PLACEHOLDERS, "spec_server_args": PLACEHOLDERS,
               "port_args": PORT_PLACEHOLDERS}


def placeholder_problems(opts: dict[str, Any]) -> list[str]:
    """A ``{name}`` that is not a placeholder (a typo such as ``{modle}``) would reach the server as it is."""
    p = []
    for key, known in ARG_OPTIONS.items():
        for arg in opts.get(key) or ():
            for name in placeholder_names(arg):
                if name not in known:
                    p.append(f"backend.options.{key}: unknown placeholder {{{name}}} in {arg!r} "
                             f"(known: {', '.join('{' + k + '}' for k in known)})")
    return p


def engine_flags(args: dict[str, Any]) -> list[str]:
    """``{"max_model_len": 512, "enforce_eager": True}`` -> ``--max-model-len 512 --enforce-eager``."""
    out: list[str] = []
    for key, value in args.items():
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False:
            out.append("--no-" + flag[2:])
        elif value is None:
            continue
        else:
            out += [flag, json.dumps(value) if isinstance(value, (dict, list)) else str(value)]
    return out


def _options(engine) -> dict[str, Any]:
    """The options as a dict with every default (a config built in code gives only what it sets)."""
    o = engine.options
    if not dataclasses.is_dataclass(o):
        from ..config.engine_options import VllmServeOptions
        from ..config.hydra import typed

        o = typed(VllmServeOptions, dict(o or {}), "backend.options")
    return dataclasses.asdict(o)


class VllmServeBackend(OpenAIBackend):
    @classmethod
    def preflight(cls, engine, batch_size: int, drafter=None) -> list[str]:
        opts = _options(engine)
        p = []
        for key in ("base_url", "baseline_url"):
            if opts.get(key):
                p.append(f"backend.options.{key} is set, but backend=vllm_serve starts its own servers; "
                         "use backend=openai to attach to given URLs")
        cmd = opts.get("server_command")
        if not cmd or not all(isinstance(a, str) and a for a in cmd):
            p.append(f"backend.options.server_command must be a non-empty list of strings, got {cmd!r}")
        t = opts.get("ready_timeout_s")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < math.inf:
            p.append(f"backend.options.ready_timeout_s must be a positive number of seconds, got {t!r}")
        if not isinstance(opts.get("max_engines"), int) or opts["max_engines"] < 2:
            p.append(f"backend.options.max_engines must be >= 2 (baseline + speculative server), got {opts.get('max_engines')!r}")
        p += choice_problem("spec_metrics", opts.get("spec_metrics"), SPEC_METRICS)
        p += placeholder_problems(opts)
        p += [x for x in _server_problems(opts | {"base_url": "http://127.0.0.1:1/v1"})]
        if drafter is not None and opts.get("vllm_flags"):
            p += synthetic_problems(drafter, on_cpu)
        return p

    def __init__(self, target, engine, seed: int = 0) -> None:
        Backend.__init__(self, target, engine, seed)
        self.opts = _options(self.engine)
        self._open_client(target, self.preflight(self.engine, 1))
        self.model_dir = models.local_dir(target.path)
        self._tmp_logs: str | None = None
        self.servers: ServerSet | None = None
        self._log_dir: Path | None = None
        self._on_cpu: bool | None = None
        self._current: list = []  # the servers of the current drafter (baseline first)

    # ---- servers -----------------------------------------------------------------------------------
    def attach_run_folder(self, folder) -> None:
        """Server logs go to ``<folder>/engine-logs/`` (the runner calls this before :meth:`ready`)."""
        if self._log_dir is None:
            self._log_dir = RunFolder(folder).engine_logs_dir

    def _set(self) -> ServerSet:
        if self.servers is None:
            if self._log_dir is None:
                self._tmp_logs = tempfile.mkdtemp(prefix="speedbench-servers-")
                self._log_dir = Path(self._tmp_logs)
            o = self.opts
            self.servers = ServerSet(self._log_dir, o["ready_timeout_s"], o["max_engines"], o["health_path"],
                                     tuple(o["port_args"]))
        return self.servers

    def on_cpu(self) -> bool:
        if self._on_cpu is None:
            from vllm.platforms import current_platform

            self._on_cpu = bool(current_platform.is_cpu())
        return self._on_cpu

    def argv(self, drafter, seqs: int) -> list[str]:
        """The command line of the server for ``drafter`` (method none: the baseline)."""
        o, t = self.opts, self.target
        spec_cfg = speculative_config(drafter) if o["vllm_flags"] or not is_baseline(drafter.method) else None
        fill = {"model": self.model_dir, "draft_model": (spec_cfg or {}).get("model", ""),
                "num_speculative_tokens": drafter.num_speculative_tokens,
                "speculative_config": json.dumps(spec_cfg) if spec_cfg else ""}
        args = [sys.executable if a == "python" else fill_placeholders(a, fill) for a in o["server_command"]]
        if o["vllm_flags"]:
            args += ["--model", self.model_dir, "--dtype", t.dtype, "--seed", str(self.seed), "--max-num-seqs", str(seqs),
                     "--no-enable-prefix-caching"]  # the warm-up runs the measured prompts first
            if t.revision:
                args += ["--revision", t.revision]
            if t.trust_remote_code:
                args.append("--trust-remote-code")
            user = dict(o["engine_args"])
            defaults = dict(CPU_FLAGS) if self.on_cpu() else {"gpu_memory_utilization": round(0.85 / o["max_engines"], 3)}
            if "gpu_memory_utilization" in user or "kv_cache_memory_bytes" in user:
                defaults.pop("kv_cache_memory_bytes", None)
                defaults.pop("gpu_memory_utilization", None)
            args += engine_flags(defaults | user)
            if spec_cfg is not None:
                args += ["--speculative-config", json.dumps(spec_cfg)]
                if o["spec_metrics"] != "counters":
                    args += ["--per-request-spec-decode-metrics", "detailed"]
        args += [fill_placeholders(a, fill) for a in o["server_args"]]
        if not is_baseline(drafter.method):
            args += [fill_placeholders(a, fill) for a in o["spec_server_args"]]
        return args

    def ready(self, drafter, batch_size: int) -> None:
        """Start (or reuse) the baseline server and the server for ``drafter``; set the URLs."""
        seqs = max(int(self.opts["max_num_seqs"]), int(batch_size))
        base_drafter = DrafterConfig(name="none", method="none", num_speculative_tokens=0)
        items = [(self._key(base_drafter, seqs), "baseline", self.argv(base_drafter, seqs))]
        if not is_baseline(drafter.method):
            role = f"spec-{drafter.name}-d{drafter.num_speculative_tokens}".replace("/", "_")
            items.append((self._key(drafter, seqs), role, self.argv(drafter, seqs)))
        self._restart_down()
        running = {id(s) for s in self._set().servers.values()}
        found = self.servers.ensure(items)
        for server in found:
            if id(server) not in running:  # started now: a port a down server had is a new server's
                self.down.forget(server_root(server.url))
        self.opts["baseline_url"] = found[0].url
        self.opts["base_url"] = found[-1].url if not is_baseline(drafter.method) else found[0].url
        self._current = found

    def _restart_down(self) -> None:
        """A server found dead or wedged (``server_health``) is stopped, so ``ensure`` starts it again."""
        for server in list(self.servers.servers.values()) if self.servers else ():
            if self.down.reason(server_root(server.url)):
                log.warning("server %s was found dead or wedged: stopping it to start it again", server.role)
                server.stop()
                self.down.forget(server_root(server.url))  # that URL is gone; its port may serve a new server

    def _key(self, drafter, seqs: int) -> str:
        cfg = speculative_config(drafter) if not is_baseline(drafter.method) else None
        return json.dumps({"spec": cfg, "argv_seqs": seqs}, sort_keys=True, default=str)

    def extra(self, spec, records, steps, before, after) -> dict[str, Any]:
        out = super().extra(spec, records, steps, before, after)
        out["engine"] = "harness-started server (backend=vllm_serve)"
        out["servers"] = {s.role: s.info() for s in self._current}
        out["server_starts"] = list(self.servers.starts) if self.servers else []
        return out

    def info(self) -> dict[str, Any]:
        device = ("cpu" if self.on_cpu() else "cuda") if self.opts["vllm_flags"] else "server"
        return {"backend": self.name, "engine": "harness-started OpenAI-compatible servers", "device": device,
                "server_command": list(self.opts["server_command"]), "endpoint": self.opts["endpoint"]}

    def close(self) -> None:
        if self.servers is not None:
            self.servers.close()
