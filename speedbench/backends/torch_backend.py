"""``backend=torch``: the project's PyTorch reference engine (same code on CPU and CUDA)."""
from __future__ import annotations

import math
from typing import Any

import torch

from .. import models
from ..data.chat import render_conversation
from ..drafters.base import DraftContext, build_drafter
from ..drafters.faults import with_faults
from ..engine.cached_lm import CachedLM, HFCachedLM
from ..engine.clock import Clock
from ..engine.decode import BatchOutput, generate
from ..engine.lean_llama import LeanLlama, LeanWeights, lean_supported
from ..engine.sampling import SamplingParams
from ..records import STATUS_FAILED, Request, RequestRecord, StepRecord
from .base import Backend, GenerateOutput, GenerateSpec

DRAFTER_OPTIONS = {
    "none": (),
    "ngram": ("prompt_lookup_min", "prompt_lookup_max"),
    "draft_model": ("model",),
    "layer_skip": ("num_layers",),
    "eagle3": ("model",),
}


class TorchBackend(Backend):
    name = "torch"

    def __init__(self, run) -> None:
        super().__init__(run)
        cfg = run.backend
        if cfg.impl not in ("auto", "lean", "hf"):
            raise ValueError(f"backend.impl must be auto, lean or hf, got {cfg.impl!r}")
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        self.device = models.pick_device(cfg.device)
        self.clock = Clock(self.device)
        t = run.target
        self.model = self._load(t.path)
        self.tokenizer = models.load_tokenizer(t.path, t.revision, t.trust_remote_code)
        self._weights: dict[int, LeanWeights] = {}
        self.max_positions = int(getattr(self.model.config, "max_position_embeddings", 0) or 0)

    def _load(self, path: str):
        t = self.run.target
        return models.load_model(path, t.dtype, self.device, t.revision, t.trust_remote_code)

    def make_lm(self, hf_model, num_layers: int | None = None) -> CachedLM:
        impl = self.run.backend.impl
        reason = lean_supported(hf_model)
        if impl == "lean" and reason:
            raise ValueError(f"backend.impl=lean: {reason}")
        if impl == "hf" or (impl == "auto" and reason):
            if num_layers is None:
                return HFCachedLM(hf_model)
            return HFCachedLM(_first_layers(hf_model, num_layers))
        key = id(hf_model)
        if key not in self._weights:
            self._weights[key] = LeanWeights(hf_model)
        return LeanLlama(self._weights[key], num_layers)

    def check(self, drafter) -> None:
        if drafter.method not in DRAFTER_OPTIONS:
            raise ValueError(
                f"drafter.method={drafter.method!r} is not supported by backend=torch; "
                f"supported: {sorted(DRAFTER_OPTIONS)}"
            )

    def _drafter(self, cfg):
        self.check(cfg)
        ctx = DraftContext(self.model, self.make_lm, torch.device(self.device), self._load)
        options = {k: getattr(cfg, k) for k in DRAFTER_OPTIONS[cfg.method]}
        return with_faults(build_drafter(cfg.method, ctx, options), cfg.options)  # test-only knobs

    def info(self) -> dict[str, Any]:
        lm = self.make_lm(self.model)
        return {
            "backend": self.name,
            "engine": "speedbench-reference",
            "impl": type(lm).__name__,
            "device": self.device,
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
        }

    def generate(self, requests: list[Request], spec: GenerateSpec) -> GenerateOutput:
        drafter = self._drafter(spec.drafter)
        target = self.make_lm(self.model)
        s = spec.sampling
        params = SamplingParams(s.temperature, s.top_p, s.top_k, s.seed)
        generator = torch.Generator(device=self.device).manual_seed(s.seed)
        stop = set() if spec.ignore_eos or self.tokenizer.eos_token_id is None else {self.tokenizer.eos_token_id}
        records: list[RequestRecord] = []
        steps: list[StepRecord] = []
        t0 = self.clock.now()
        for start in range(0, len(requests), spec.batch_size):
            batch = requests[start : start + spec.batch_size]
            try:
                with torch.inference_mode():
                    runs = self._run_batch(batch, target, drafter, spec, params, stop, generator)
            except Exception as exc:  # a failed batch is data; the cell goes on
                records += [_failed(r, spec.role, exc) for r in batch]
                continue
            finally:
                if spec.progress:
                    spec.progress(len(batch))
            for b, req in enumerate(batch):
                rec, st = _request_record(req, spec.role, [(out, i) for out, i in runs if i.get(b) is not None], b)
                records.append(rec)
                steps += st
        return GenerateOutput(records, steps, self.clock.now() - t0)

    def _run_batch(self, batch, target, drafter, spec, params, stop, generator):
        """One generate call per turn; multi-turn replies go back as the assistant message."""
        conversations: list[list[tuple[str, str]]] = [[] for _ in batch]
        runs: list[tuple[BatchOutput, dict[int, int]]] = []
        for turn in range(max(len(r.turns) for r in batch)):
            rows = [b for b, r in enumerate(batch) if len(r.turns) > turn]
            prompts = [render_conversation(self.tokenizer, conversations[b], batch[b].turns[turn], tokenize=True) for b in rows]
            for b, p in zip(rows, prompts):
                need = len(p) + spec.max_new_tokens + spec.drafter.num_speculative_tokens + 1
                if self.max_positions and need > self.max_positions:
                    raise ValueError(
                        f"request {batch[b].request_id}: {len(p)} prompt tokens + max_new_tokens "
                        f"{spec.max_new_tokens} exceed the target's context of {self.max_positions}"
                    )
            out = generate(
                target, drafter, prompts, spec.drafter.num_speculative_tokens, spec.max_new_tokens,
                params, stop, self.clock, generator,
            )
            for row, b in enumerate(rows):
                text = self.tokenizer.decode(out.outputs[row], skip_special_tokens=True)
                conversations[b].append((batch[b].turns[turn], text))
            runs.append((out, {b: row for row, b in enumerate(rows)}))
        return runs


def _first_layers(hf_model, num_layers: int):
    """A shallow HF model sharing the target's embedding, first layers, norm and head."""
    import copy

    inner = hf_model.model
    if not 1 <= num_layers <= len(inner.layers):
        raise ValueError(f"drafter.num_layers must be in [1, {len(inner.layers)}], got {num_layers}")
    shallow = copy.copy(hf_model)
    shallow._modules = dict(hf_model._modules)
    shallow.model = copy.copy(inner)
    shallow.model._modules = dict(inner._modules)
    shallow.model.layers = torch.nn.ModuleList(list(inner.layers)[:num_layers])
    shallow.config = copy.copy(hf_model.config)
    shallow.config.num_hidden_layers = num_layers
    shallow.model.config = shallow.config
    return shallow


def _failed(req: Request, role: str, exc: Exception) -> RequestRecord:
    return RequestRecord(
        request_id=req.request_id, category=req.category, context_bucket=req.context_bucket,
        entropy_tier=req.entropy_tier, role=role, prompt_tokens=0, n_tokens=0, output_ids=(),
        ttft=math.nan, tpot=math.nan, e2e=math.nan, n_steps=0, n_drafts=0, drafted=0, accepted=0,
        status=STATUS_FAILED, error=f"{type(exc).__name__}: {exc}",
    )


def _request_record(req: Request, role: str, runs, b: int) -> tuple[RequestRecord, list[StepRecord]]:
    """Fold the turns of one request (row ``b`` of each turn's batch) into its records."""
    output: list[int] = []
    decode_time, decode_tokens, e2e, ttft, prompt_tokens = 0.0, 0, 0.0, math.nan, 0
    steps: list[StepRecord] = []
    hist: list[int] = []
    step_no = 0
    for out, index in runs:
        row = index[b]
        toks = out.outputs[row]
        output += toks
        prompt_tokens += out.prompt_lens[row]
        if math.isnan(ttft):
            ttft = out.t_first - out.t_start
        decode_time += out.t_last[row] - out.t_first
        decode_tokens += len(toks) - 1
        e2e += out.t_last[row] - out.t_start
        for rs in out.row_steps[row]:
            st = out.steps[rs.step]
            steps.append(
                StepRecord(
                    request_id=req.request_id, step=step_no, batch_index=row, drafted=rs.drafted,
                    accepted=rs.accepted, emitted=rs.accepted + 1, t_draft=st.t_draft,
                    t_verify=st.t_verify, t_accept=st.t_accept, t_step=st.t_step,
                    verify_tokens=st.verify_tokens,
                )
            )
            step_no += 1
            if rs.drafted:
                while len(hist) <= rs.accepted:
                    hist.append(0)
                hist[rs.accepted] += 1
    drafting = [s for s in steps if s.drafted > 0]
    record = RequestRecord(
        request_id=req.request_id, category=req.category, context_bucket=req.context_bucket,
        entropy_tier=req.entropy_tier, role=role, prompt_tokens=prompt_tokens, n_tokens=len(output),
        output_ids=tuple(output), ttft=ttft, tpot=decode_time / decode_tokens if decode_tokens > 0 else math.nan,
        e2e=e2e, n_steps=len(steps), n_drafts=len(drafting), drafted=sum(s.drafted for s in drafting),
        accepted=sum(s.accepted for s in drafting), accepted_hist=tuple(hist), al_source="steps",
    )
    return record, steps
