"""``backend=torch``: the project's PyTorch reference engine (same code on CPU and CUDA).

One ``run_turns`` call is one static batch through ``engine.decode.generate``: every target
iteration is timed (draft / verify / accept / whole step, device-synced) and shared by the
batch's rows, so each step carries the iteration's id.
"""
from __future__ import annotations

from collections import Counter

from typing import Any

import torch

from .. import models
from ..drafters.registry import is_baseline
from ..drafters.faults import with_faults
from ..drafters.registry import build_drafter, reference_options
from ..engine.schedule import parse_plan as parse_schedule
from ..engine.build import LMBuilder
from ..engine.clock import Clock
from ..engine.decode import generate
from ..engine.drafting import DraftContext
from ..engine.sampling import SamplingParams
from .base import default_cpu_threads, Backend, GenerateSpec, Session, StepCounts, TurnInput, TurnResult


class TorchBackend(Backend):
    in_process = True
    lockstep = True
    inference_passes = True

    def __init__(self, target, engine, seed: int = 0) -> None:
        super().__init__(target, engine, seed)
        engine = self.engine  # options typed
        self.build_lm = LMBuilder(engine.impl)
        self.device = models.pick_device(engine.device)
        if engine.num_threads or self.device == "cpu":
            torch.set_num_threads(engine.num_threads or default_cpu_threads())
        self.clock = Clock(self.device)
        self.model = self._load(target.path)
        self.tokenizer = models.load_tokenizer(target.path, target.revision, target.trust_remote_code)
        self.max_positions = int(getattr(self.model.config, "max_position_embeddings", 0) or 0)
        self._acceptance: dict = {}  # synthetic acceptance rules by (D, AL, rates, draw, seed)
        self._drafter_state: dict = {}  # what drafters keep for the engine's lifetime (DraftContext.engine_state)

    def _load(self, path: str):
        t = self.target
        return models.load_model(path, t.dtype, self.device, t.revision, t.trust_remote_code)

    @classmethod
    def preflight(cls, engine, batch_size: int, drafter=None) -> list[str]:
        from .base import device_problems

        p = device_problems(engine)
        try:
            LMBuilder(engine.impl)  # refuses an unknown impl, naming the choices
        except ValueError as exc:
            p.append(str(exc))
        if drafter is not None and not is_baseline(drafter.method):
            try:
                synthetic_acceptance(drafter, 0)  # a bad profile fails before anything runs
            except ValueError as exc:
                p.append(str(exc))
        return p

    def build_drafter(self, cfg, faults):
        ctx = DraftContext(self.model, self.build_lm, torch.device(self.device), self._load, self._drafter_state)
        return with_faults(build_drafter(cfg.method, ctx, reference_options(cfg)), faults)

    def info(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "engine": "speedbench-reference",
            "impl": "LeanLlama" if self.build_lm.uses_lean(self.model) else "HFCachedLM",
            "device": self.device,
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
        }

    def session(self, spec: GenerateSpec) -> Session:
        return _TorchSession(self, spec)


class _TorchSession(Session):
    def __init__(self, backend: TorchBackend, spec: GenerateSpec) -> None:
        super().__init__(backend, spec)
        self.drafter = backend.build_drafter(spec.drafter, spec.faults)
        self.target = backend.build_lm(backend.model)
        s = spec.sampling
        self.params = SamplingParams(s.temperature, s.top_p, s.top_k, s.seed)
        self.generator = torch.Generator(device=backend.device).manual_seed(s.seed)
        eos = backend.tokenizer.eos_token_id
        self.stop = set() if spec.ignore_eos or eos is None else {eos}
        # one draw sequence per backend and profile: the protocol opens a session per block, and a
        # sequence restarted every block would repeat its short-run error in every block
        key = (spec.drafter.num_speculative_tokens, spec.drafter.synthetic_al,
               tuple(spec.drafter.synthetic_rates or ()), getattr(spec.drafter, "synthetic_draw", None), s.seed)
        if key not in backend._acceptance:
            backend._acceptance[key] = synthetic_acceptance(spec.drafter, s.seed)
        self.acceptance = backend._acceptance[key]
        self.schedule = parse_schedule(getattr(spec.drafter, "schedule", None))

    def run_turns(self, turns: list[TurnInput]) -> list[TurnResult]:
        b, spec = self.backend, self.spec
        depth = spec.drafter.num_speculative_tokens
        prompts = [t.prompt for t in turns]
        for t in turns:
            need = len(t.prompt) + spec.max_new_tokens + depth + 1
            if b.max_positions and need > b.max_positions:
                raise ValueError(
                    f"request {t.request.request_id}: {len(t.prompt)} prompt tokens + max_new_tokens "
                    f"{spec.max_new_tokens} exceed the target's context of {b.max_positions}"
                )
        if self.acceptance is not None:
            self.acceptance.reset(len(prompts))
        with torch.inference_mode():
            out = generate(self.target, self.drafter, prompts, depth, spec.max_new_tokens, self.params, self.stop,
                           b.clock, self.generator, self.acceptance, self.schedule)
        results = []
        live = Counter(rs.step for rows in out.row_steps for rs in rows)  # rows in each step's forward
        for row, toks in enumerate(out.outputs):
            steps = []
            for rs in out.row_steps[row]:
                st = out.steps[rs.step]
                steps.append(StepCounts(rs.drafted, rs.accepted, emitted=rs.accepted + 1, t_step=st.t_step,
                                        t_draft=st.t_draft, t_verify=st.t_verify, t_accept=st.t_accept,
                                        verify_tokens=st.verify_tokens, iteration=rs.step, kept=rs.kept,
                                        live_batch=live[rs.step]))
            results.append(TurnResult(
                list(toks), out.prompt_lens[row], out.t_first - out.t_start, out.t_last[row] - out.t_first,
                out.t_last[row] - out.t_start, steps=steps, al_source="steps",
                # a streaming client sees the prefill's token, then each step's kept tokens
                chunks=[1] + [s.kept for s in steps if s.kept > 0], finish=out.finish[row], lead_tokens=1,
            ))
        return results

    def finish(self, records, steps) -> dict[str, Any]:
        extra: dict[str, Any] = {"timing_source": "reference-loop-synced-clock"}
        if self.acceptance is not None:
            extra |= {"synthetic_al": self.acceptance.expected_al, "synthetic": SYNTHETIC_NOTE,
                      "synthetic_draw": self.acceptance.draw_mode}
        return extra


SYNTHETIC_NOTE = ("synthetic acceptance: real draft and verification forwards, accepted counts drawn from "
                  "a fixed profile; outputs are not the target's (no losslessness claim)")


def synthetic_acceptance(drafter, seed: int):
    """The forced-acceptance rule of a cost-surface cell, or None for a normal cell."""
    al, rates = getattr(drafter, "synthetic_al", None), list(getattr(drafter, "synthetic_rates", None) or [])
    if al is None and not rates:
        if getattr(drafter, "synthetic_draw", None):
            raise ValueError("drafter.synthetic_draw needs drafter.synthetic_al or drafter.synthetic_rates")
        return None
    if is_baseline(drafter.method):
        raise ValueError("drafter.synthetic_al/synthetic_rates need a speculative drafter (method != none)")
    from ..engine.synthetic_acceptance import SyntheticAcceptance

    return SyntheticAcceptance(drafter.num_speculative_tokens, al, rates, seed, getattr(drafter, "synthetic_draw", None))
