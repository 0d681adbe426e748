"""The engine backends' pure parts on data: counters, speculative configs, streamed chunks, record folding.

No engine runs here; the real engines are in test_engines_*.py behind the ``engine`` marker.
"""
import math

import pytest

from speedbench import metrics
from speedbench.backends import spec_counters
from speedbench.backends.base import StepCounts, TurnResult
from speedbench.backends.spec_counters import hist_from_per_pos
from speedbench.pipeline.conversations import fold_turns
from speedbench.backends.openai_stream import chunk_from_event, parse_event
from speedbench.backends.vllm.outputs import put_counters_on_first
from speedbench.backends.vllm.profile import scope_durations
from speedbench.backends.vllm.spec import speculative_config, speedbench_methods
from speedbench.config import DrafterConfig
from speedbench.drafters.registry import make_drafter
from speedbench.records import Request

PROM = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 112.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 392.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 384.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 112.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 96.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 92.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="3"} 84.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="other"} 5.0
vllm:num_requests_running{engine="0",model_name="m"} 0.0
"""


def test_prometheus_counters_parse_and_subtract():
    c = spec_counters.from_prometheus_text(PROM, model="m")
    assert (c.drafts, c.draft_tokens, c.accepted, c.per_pos) == (112, 392, 384, (112, 96, 92, 84))
    assert c.al == pytest.approx(1 + 384 / 112)
    assert spec_counters.from_prometheus_text(PROM).drafts == 117  # all models summed
    d = c - spec_counters.SpecCounters(100, 350, 340, (100, 85, 81, 74))
    assert (d.drafts, d.accepted, d.per_pos) == (12, 44, (12, 11, 11, 10))
    assert sum(d.hist()) == d.drafts and sum(k * n for k, n in enumerate(d.hist())) == d.accepted


ESCAPED = r"""# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="org/m \"v2\" {chat}, x=1"} 40.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="org/m \"v2\" {chat}, x=1"} 1.7e9
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="org/m \"v2\" {chat}, x=1"} 60.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="org/m \"v2\" {chat}, x=1",position="0"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="org/m \"v2\" {chat}, x=1",position="1"} 30.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="back\\slash}"} 2.0
"""


def test_prometheus_label_values_with_escaped_quotes_and_braces():
    wanted = 'org/m "v2" {chat}, x=1'
    c = spec_counters.from_prometheus_text(ESCAPED, model=wanted)
    assert (c.drafts, c.accepted, c.per_pos) == (40, 60, (30, 30))  # _created is not a count
    assert c.al == pytest.approx(2.5)
    assert spec_counters.from_prometheus_text(ESCAPED, model="back\\slash}").drafts == 2
    assert spec_counters.from_prometheus_text(ESCAPED).drafts == 42


def test_an_unreadable_metrics_page_is_an_error_not_zeros():
    with pytest.raises(ValueError, match="/metrics"):
        spec_counters.from_prometheus_text('vllm:spec_decode_num_drafts_total{model_name="m} 3\n')


def test_hist_from_per_pos_inverts_the_cumulative_counts():
    hist = [3, 1, 0, 2, 4]  # drafts that accepted exactly k
    per_pos = [sum(hist[k:]) for k in range(1, len(hist))]
    assert hist_from_per_pos(sum(hist), per_pos) == hist


def test_speculative_config_is_explicit_and_passes_options_through():
    ngram = make_drafter("ngram", 3, name="n", prompt_lookup_min=2, prompt_lookup_max=5)
    assert speculative_config(ngram) == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    eagle = make_drafter("eagle3", 2, name="e", model="/m/eagle",
                         engine_args={"draft_tensor_parallel_size": 1, "rejection_sample_method": "synthetic"})
    assert speculative_config(eagle) == {"method": "eagle3", "num_speculative_tokens": 2, "model": "/m/eagle",
                                         "draft_tensor_parallel_size": 1, "rejection_sample_method": "synthetic"}
    with pytest.raises(TypeError):  # suffix decoding has no weights: its schema has no model
        make_drafter("suffix", 4, model="ignored")
    assert "model" not in speculative_config(make_drafter("suffix", 4))
    assert speculative_config(DrafterConfig()) is None


def test_vllm_runs_the_methods_of_its_build_plus_the_registry_methods_mapped_onto_them():
    assert speedbench_methods({"ngram", "draft_model"}) == {"ngram", "draft_model", "pard"}
    assert "layer_skip" not in speedbench_methods({"ngram", "draft_model", "layer_skip_x"})


def test_stream_chunks_count_tokens_from_ids_logprobs_or_usage():
    assert parse_event("data: [DONE]") is None and parse_event(": keep-alive") is None
    ev = parse_event('data: {"choices": [{"text": "ab", "token_ids": [5, 6, 7]}]}')
    c = chunk_from_event(ev, 1.0, 0)
    assert (c.n_tokens, c.token_ids, c.text) == (3, [5, 6, 7], "ab")
    c = chunk_from_event({"choices": [{"text": "x", "logprobs": {"tokens": ["a", "b"]}}]}, 1.0, 0)
    assert c.n_tokens == 2
    c = chunk_from_event({"choices": [{"delta": {"content": "hi"}, "logprobs": {"content": [{}, {}, {}]}}]}, 1.0, 0)
    assert (c.n_tokens, c.text) == (3, "hi")
    c = chunk_from_event({"choices": [{"text": "hey"}], "usage": {"completion_tokens": 9}}, 1.0, 5)
    assert c.n_tokens == 4
    assert chunk_from_event({"choices": [{"text": "hey"}]}, 1.0, 5).n_tokens is None
    assert chunk_from_event({"choices": [], "usage": {"completion_tokens": 9}}, 1.0, 9) is None
    with pytest.raises(RuntimeError, match="boom"):
        chunk_from_event({"error": "boom"}, 1.0, 0)


REQ = Request("r", "coding", ("q1", "q2"), 8)


def test_fold_turns_pools_steps_over_turns():
    t1 = TurnResult([1, 2, 3, 4], 10, ttft=0.5, decode_s=0.3, e2e=0.8,
                    steps=[StepCounts(4, 2), StepCounts(0, 0), StepCounts(3, 3)])
    t2 = TurnResult([5, 6], 20, ttft=0.4, decode_s=0.1, e2e=0.5, steps=[StepCounts(4, 0)])
    rec, steps = fold_turns(REQ, "spec", [t1, t2])
    assert rec.output_ids == (1, 2, 3, 4, 5, 6) and rec.prompt_tokens == 30
    assert rec.ttft == 0.5 and rec.e2e == pytest.approx(1.3)
    assert rec.tpot == pytest.approx(0.4 / 4)  # (0.3 + 0.1) / ((4 - 1) + (2 - 1))
    assert (rec.n_drafts, rec.drafted, rec.accepted, rec.accepted_hist) == (3, 11, 5, (1, 0, 1, 1))
    assert [s.step for s in steps] == [0, 1, 2, 3] and rec.al_source == "steps"
    assert metrics.acceptance([rec], 4).al == pytest.approx(1 + 5 / 3)


def test_counter_deltas_are_carried_once_per_batch_so_pooling_is_exact():
    delta = spec_counters.SpecCounters(drafts=10, draft_tokens=40, accepted=25, per_pos=(9, 7, 5, 4))
    turns = [[TurnResult([1, 2], 5, 0.1, 0.1, 0.2, steps=None, al_source="counters")] for _ in range(3)]
    put_counters_on_first(turns, delta)
    recs = [fold_turns(REQ, "spec", t)[0] for t in turns]
    assert [r.n_drafts for r in recs] == [10, 0, 0]
    acc = metrics.acceptance(recs, 4)
    assert acc.al == pytest.approx(delta.al) and acc.per_position() == pytest.approx((0.9, 0.7, 0.5, 0.4))
    assert all(r.al_source == "counters" for r in recs)


def test_missing_times_do_not_poison_the_cell_means():
    assert metrics.stats_ms([math.nan, 0.002, 0.004])[0] == pytest.approx(3.0)
    assert all(math.isnan(x) for x in metrics.stats_ms([math.nan]))


def test_profiler_scopes_are_read_in_time_order():
    trace = {"traceEvents": [
        {"ph": "X", "name": "gpu_model_runner: forward", "ts": 30, "dur": 2000},
        {"ph": "X", "name": "gpu_model_runner: forward", "ts": 10, "dur": 9000},
        {"ph": "X", "name": "gpu_model_runner: draft", "ts": 20, "dur": 500},
        {"ph": "X", "name": "aten::mm", "ts": 11, "dur": 100},
        {"ph": "B", "name": "gpu_model_runner: draft", "ts": 40},
    ]}
    d = scope_durations(trace)
    assert d["verify"] == pytest.approx([0.009, 0.002]) and d["draft"] == pytest.approx([0.0005])
