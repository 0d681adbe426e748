"""``backend=hf``: Hugging Face ``generate`` (plain, assisted generation, prompt lookup).

* drafter ``none``: plain ``generate``;
* ``draft_model``: ``assistant_model=`` (assisted generation); a drafter whose vocabulary
  differs from the target's runs as universal assisted generation (``tokenizer=`` +
  ``assistant_tokenizer=``);
* ``ngram``: ``prompt_lookup_num_tokens=D`` with ``max_matching_ngram_size=prompt_lookup_max``
  (HF has no minimum n-gram size: ``prompt_lookup_min`` must be 1).

D is fixed: ``num_assistant_tokens=D``, ``num_assistant_tokens_schedule="constant"`` and
``assistant_confidence_threshold=0`` (HF would otherwise stop drafting early on low confidence).
Assisted generation in transformers is batch-1 only, so this backend runs ``batch_size=1``.

Per-step acceptance comes from the candidate generator itself: its ``get_candidates`` and
``update_candidate_strategy`` are wrapped on the instance for the call, recording drafted
tokens, accepted tokens (greedy: counted before truncation at ``max_new_tokens``, the project's
convention) and the time of each side: draft = ``get_candidates``; verify = from there to the
strategy update (target forward + HF's acceptance). Step times come from a streamer (one
``put`` per target iteration). The first iteration also prefills the prompt: its times are NaN.

Lockstep (``protocol.interleave=step``): each streamer put is an iteration boundary where the
partner pass may take its turn; the two passes share the model, so each assisted call finds its
pass's recorder by lockstep role. Sampling draws from torch's global generator (seeded per
turn), so in lockstep the two passes' draws interleave: sampled outputs are valid draws but not
the ones of passes run back to back (greedy outputs are the same).

``backend.options.full_drafts`` (default true): HF drafts fewer than D when fewer than D + 1
tokens remain; vLLM and the reference engine always draft D and truncate. true lets HF's
drafter draft D there too, so AL means the same on every engine; false keeps HF's own rule.
"""
from __future__ import annotations

import copy
from typing import Any

import torch

from .. import models
from ..drafters.registry import is_baseline
from ..engine.clock import Clock, current_role
from .base import (NAN, default_cpu_threads, Backend, GenerateSpec, Session, StepCounts, TurnInput, TurnResult,
                   finish_reason)


class StepStreamer:
    """Receives the tokens each target iteration emits (``generate(streamer=...)``); the first put is the prompt.

    Each put is an iteration boundary: in a lockstep (``protocol.interleave=step``) the partner
    pass may take its turn there (``Clock.checkpoint``), after this iteration's time is read."""

    def __init__(self, clock: Clock, max_new_tokens: int) -> None:
        self.clock, self.max_new_tokens = clock, max(1, max_new_tokens)
        self.puts: list[tuple[float, int]] = []
        self._prompt_seen = False
        self._emitted = 0

    def put(self, value) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.puts.append((self.clock.now(), int(value.numel())))
        self._emitted += int(value.numel())
        self.clock.checkpoint(self._emitted / self.max_new_tokens)

    def end(self) -> None:
        pass


class CandidateRecorder:
    """Wraps one candidate generator's two hooks to record (drafted, accepted, t_draft, t_verify) per step."""

    def __init__(self, clock: Clock, greedy: bool, extra_len: int) -> None:
        self.clock, self.greedy, self.extra_len = clock, greedy, extra_len
        self.rows: list[tuple[int, int, float, float]] = []
        self._pending: tuple[torch.Tensor, float, float] | None = None

    def attach(self, gen):
        if self.extra_len:
            if isinstance(getattr(gen, "main_model_max_length", None), int):
                gen.main_model_max_length += self.extra_len
            if isinstance(getattr(gen, "max_length", None), int):  # prompt lookup's own cap
                gen.max_length += self.extra_len
        get, update = gen.get_candidates, gen.update_candidate_strategy

        def get_candidates(input_ids, *args, **kwargs):
            t0 = self.clock.now()
            cand, logits = get(input_ids, *args, **kwargs)
            self._pending = (cand[:, input_ids.shape[1] :].detach(), t0, self.clock.now())
            return cand, logits

        def update_candidate_strategy(input_ids, scores, num_matches):
            t2 = self.clock.now()
            drafts, t0, t1 = self._pending
            n = int(drafts.shape[1])
            if self.greedy and n:  # before HF crops at max_length: the project's convention
                same = (drafts[0].to(scores.device) == scores[0, :n].argmax(-1)).long()
                accepted = int(same.cumprod(0).sum())
            else:
                accepted = int(num_matches)
            self.rows.append((n, accepted, t1 - t0, t2 - t1))
            return update(input_ids, scores, num_matches)

        gen.get_candidates = get_candidates
        gen.update_candidate_strategy = update_candidate_strategy
        return gen


class HFBackend(Backend):
    in_process = True
    lockstep = True  # the streamer's put is an iteration boundary (StepStreamer)
    inference_passes = True

    def __init__(self, target, engine, seed: int = 0) -> None:
        super().__init__(target, engine, seed)
        engine = self.engine  # options typed
        self.device = models.pick_device(engine.device)
        if engine.num_threads or self.device == "cpu":
            torch.set_num_threads(engine.num_threads or default_cpu_threads())
        self.clock = Clock(self.device)
        t = target
        self.model = models.load_model(t.path, t.dtype, self.device, t.revision, t.trust_remote_code)
        self.tokenizer = models.load_tokenizer(t.path, t.revision, t.trust_remote_code)
        self.full_drafts = bool(engine.options.full_drafts)
        self._recorders = _recorders_of(self.model)

    @classmethod
    def preflight(cls, engine, batch_size: int, drafter=None) -> list[str]:
        from .base import device_problems

        lookup = [] if drafter is None or drafter.method != "ngram" or drafter.prompt_lookup_min == 1 else [
            "backend=hf: prompt lookup has no minimum n-gram size; set drafter.prompt_lookup_min=1"]
        return device_problems(engine) + lookup  # batch_size / load.concurrency: validation.check_in_flight

    def info(self) -> dict[str, Any]:
        import transformers

        return {"backend": self.name, "engine": "hf-generate", "transformers": transformers.__version__,
                "device": self.device, "torch_threads": torch.get_num_threads(), "full_drafts": self.full_drafts}

    def _assistant(self, drafter) -> dict[str, Any]:
        """generate() kwargs for the drafter, with D fixed (prompt lookup goes in the generation config)."""
        d = drafter.num_speculative_tokens
        if drafter.method != "draft_model":
            return {}
        t = self.target
        asst = models.load_model(drafter.model, t.dtype, self.device, None, t.trust_remote_code)
        gc = asst.generation_config
        gc.num_assistant_tokens, gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold = d, "constant", 0.0
        kwargs: dict[str, Any] = {"assistant_model": asst}
        target_vocab = self.model.config.get_text_config().vocab_size
        if asst.config.get_text_config().vocab_size != target_vocab:  # HF's own test for "different tokenizers"
            kwargs |= {"tokenizer": self.tokenizer, "assistant_tokenizer": models.load_tokenizer(drafter.model)}
        return kwargs

    def session(self, spec: GenerateSpec) -> Session:
        return _HFSession(self, spec)

    def _generation_config(self, spec: GenerateSpec):
        s = spec.sampling
        gc = copy.deepcopy(self.model.generation_config)
        gc.max_new_tokens, gc.min_new_tokens, gc.max_length = spec.max_new_tokens, None, None
        gc.do_sample = s.temperature > 0
        gc.temperature = s.temperature if s.temperature > 0 else 1.0
        gc.top_p, gc.top_k = s.top_p, (s.top_k or None)
        gc.pad_token_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        # ignore_eos: HF refills a None eos from the model's defaults, so use an id outside the vocabulary
        vocab = self.model.config.get_text_config().vocab_size
        gc.eos_token_id = vocab if spec.ignore_eos else self.tokenizer.eos_token_id
        if spec.drafter.method == "ngram":
            gc.prompt_lookup_num_tokens = spec.drafter.num_speculative_tokens
            gc.max_matching_ngram_size = spec.drafter.prompt_lookup_max
        return gc

    def turn(self, prompt: list[int], spec: GenerateSpec, assist: dict[str, Any]) -> TurnResult:
        ids = torch.tensor([prompt], dtype=torch.long, device=self.device)
        streamer = StepStreamer(self.clock, spec.max_new_tokens)
        greedy = spec.sampling.temperature <= 0
        recorder = CandidateRecorder(self.clock, greedy, spec.drafter.num_speculative_tokens + 1 if self.full_drafts else 0)
        role = current_role()  # the two passes of a lockstep share the model: each finds its own recorder
        self._recorders[role] = recorder
        torch.manual_seed(spec.sampling.seed)
        try:
            self.clock.begin()
            t_start = self.clock.now()
            out = self.model.generate(
                ids, attention_mask=torch.ones_like(ids), generation_config=self._generation_config(spec),
                streamer=streamer, **assist,
            )
        finally:
            del self._recorders[role]
        output = out[0, len(prompt) :].tolist()
        puts = streamer.puts
        if not puts:
            raise RuntimeError("generate emitted no tokens")
        t_first, t_last = puts[0][0], puts[-1][0]
        result = TurnResult(output, len(prompt), t_first - t_start, t_last - t_first, t_last - t_start)
        # the streamer's puts are what a streaming client sees (HF crops at EOS / max_new_tokens first)
        result.chunks = [n for _, n in puts if n > 0]
        eos = self.tokenizer.eos_token_id
        result.finish = finish_reason(output, set() if spec.ignore_eos or eos is None else {eos}, spec.max_new_tokens)
        if is_baseline(spec.drafter.method):
            # the first put is the prefill's token; each later put is one plain decode step
            # one plain decode step is one target forward of B tokens: T_verif(B) is the step (loop included)
            result.steps = [StepCounts(0, 0, emitted=n, t_step=t - tp, t_verify=t - tp) for (tp, _), (t, n) in zip(puts, puts[1:])]
            result.al_source = "none"
            return result
        if len(recorder.rows) != len(puts):
            raise RuntimeError(f"hf: {len(recorder.rows)} candidate rounds but {len(puts)} streamed steps")
        result.steps = []
        result.lead_tokens = 0  # the first iteration's put holds the prefill's token and its verified drafts
        for i, ((t, n), (drafted, accepted, t_d, t_v)) in enumerate(zip(puts, recorder.rows)):
            first = i == 0  # prefill + first verification in one forward: no clean per-step time
            result.steps.append(
                StepCounts(drafted, accepted, emitted=accepted + 1, kept=min(n, accepted + 1),
                           t_step=NAN if first else t - puts[i - 1][0],
                           t_draft=NAN if first else t_d, t_verify=NAN if first else t_v)
            )
        result.al_source = "steps"
        return result


def _recorders_of(model) -> dict[str | None, CandidateRecorder]:
    """The recorders of the passes running on ``model`` by lockstep role (None outside a lockstep):
    its candidate generator of each assisted call is wrapped by the recorder of the pass that made
    it. Installed once per model object (loaded models are shared between backends)."""
    recorders = getattr(model, "_speedbench_recorders", None)
    if recorders is None:
        recorders = model._speedbench_recorders = {}
        original = model._get_candidate_generator
        model._get_candidate_generator = lambda *a, **k: recorders[current_role()].attach(original(*a, **k))
    return recorders


class _HFSession(Session):
    def __init__(self, backend: HFBackend, spec: GenerateSpec) -> None:
        super().__init__(backend, spec)
        self.assist = backend._assistant(spec.drafter)

    def run_turns(self, turns: list[TurnInput]) -> list[TurnResult]:
        with torch.inference_mode():
            return [self.backend.turn(t.prompt, self.spec, self.assist) for t in turns]

    def finish(self, records, steps) -> dict[str, Any]:
        extra = {"engine": "hf-generate", "timing_split": "measured around HF's candidate generator (draft) and "
                 "from there to its strategy update (verify, acceptance included: t_accept NaN); first iteration "
                 "(with prefill) NaN; baseline T_verif(B) = the plain decode step (one forward of B tokens)",
                 "timing_source": "hf-candidate-generator-hooks" if not is_baseline(self.spec.drafter.method)
                 else "hf-streamer-step"}
        if "tokenizer" in self.assist:
            extra["universal_assisted_generation"] = True
        return extra
