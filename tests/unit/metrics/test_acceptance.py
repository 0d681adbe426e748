"""Acceptance on every convention (docs/acceptance.md): hand-made step streams folded by the one
conversation fold, the SPEED-Bench tool's AL against its own rule written out here, the
degenerate-output rule on constructed outputs, AL along the output, and the reference engine
cutting an accepted run at a stop token."""
import json
import math
import random
import statistics

import pytest
import torch

from speedbench import metrics
from speedbench.backends.base import StepCounts, TurnResult, cut_to_output
from speedbench.pipeline.conversations import fold_turns
from speedbench.records import Request, StepRecord

STOP = 0
D = 4


def turn(steps, n_lead=1, finish="", first=7):
    """A turn as the reference engine reports it: the prefill's token, then each step's kept tokens.

    ``steps``: (drafted, accepted, kept); tokens are made up (never the stop id except where the
    turn ends on it).
    """
    out = [first] + [100 + i for i in range(sum(k for _, _, k in steps))]
    if finish == "stop":
        out[-1] = STOP
    counts = [StepCounts(d, a, kept=k) for d, a, k in steps]
    return TurnResult(out, 5, 0.1, 0.1, 0.2, steps=counts, chunks=[n_lead] + [k for _, _, k in steps if k > 0],
                      finish=finish, lead_tokens=n_lead)


def request(rid, turns):
    return Request(rid, "c", tuple(f"q{i}" for i in range(len(turns))), 8)


def fold(rid, *turns_):
    return fold_turns(request(rid, turns_), "spec", list(turns_))


# A: a stop token inside an accepted run: the last step accepted 2 drafts, but the first of them
#    is the stop token, so the output kept 1 token of that step (the engine still counts 2 accepted)
A = [(4, 4, 5), (4, 1, 2), (4, 2, 1)]
# B: max_new_tokens cut: the last step accepted 3 (emitted 4) but only 2 fitted
B = [(4, 4, 5), (4, 3, 2)]
# C: steps without a proposal (a lookup drafter found nothing) between drafts
C = [(0, 0, 1), (4, 2, 3), (0, 0, 1)]


def test_each_convention_on_hand_made_streams():
    a, sa = fold("a", turn(A, finish="stop"))
    b, sb = fold("b", turn(B, finish="length"))
    c, sc = fold("c", turn(C, finish="length"))
    assert (a.accepted, a.accepted_kept, a.kept) == (7, 6, 8)  # both counts kept, named
    assert (b.accepted, b.accepted_kept, b.kept) == (7, 6, 7)
    assert [s.kept for s in sa] == [5, 2, 1] and [s.position for s in sa] == [1, 6, 8]
    # al: pooled 1 + accepted / drafts, also the accepted drafts the output did not keep
    acc = metrics.acceptance([a, b, c], D)
    assert acc.al == pytest.approx(1 + (7 + 7 + 2) / 6)
    # al_emitted: kept tokens of the drafting steps per draft
    assert acc.al_emitted == pytest.approx((8 + 7 + 3) / 6)
    assert (acc.accepted, acc.accepted_kept) == (16, 14)
    # al_request_mean: every request weighs the same
    assert metrics.al_request_mean([a, b, c]) == pytest.approx(statistics.mean([1 + 7 / 3, 1 + 7 / 2, 1 + 2 / 1]))
    # al_speed_bench: chunks incl. the prefill's; a stop token off the last chunk (here the whole chunk);
    # steps without a proposal are chunks of 1
    assert metrics.speed_bench_lengths(a) == [1, 5, 2]
    assert metrics.speed_bench_lengths(b) == [1, 5, 2]
    assert metrics.speed_bench_lengths(c) == [1, 1, 3, 1]
    assert metrics.al_speed_bench([a, b, c]) == pytest.approx(statistics.mean([8 / 3, 8 / 3, 6 / 4]))
    cols = metrics.acceptance_columns([a, b, c], sa + sb + sc, D)
    assert cols.al_emitted < cols.al and cols.n_accepted_kept == 14 and cols.n_accepted == 16


def test_a_stop_that_leaves_part_of_the_last_chunk_loses_only_the_stop_token():
    r, _ = fold("r", turn([(4, 4, 5), (4, 3, 3)], finish="stop"))  # 2 accepted drafts kept, the 3rd draft is the stop
    assert metrics.speed_bench_lengths(r) == [1, 5, 2]
    assert metrics.acceptance([r], D).al_emitted == pytest.approx(8 / 2)
    assert r.accepted_kept == 4 + 3


def test_multi_turn_requests_trim_each_turn_and_pool_turns():
    r, steps = fold("m", turn([(4, 1, 2), (4, 0, 1)], finish="stop"), turn([(4, 3, 4)], finish="length"))
    assert r.turn_chunks == (3, 2) and r.turn_finish == ("stop", "length") and r.turn_tokens == (4, 5)
    assert metrics.speed_bench_lengths(r) == [1, 2, 1, 4]  # turn 1's last chunk was only the stop token
    assert metrics.al_by_turn(steps) == pytest.approx((1 + 1 / 2, 1 + 3))
    assert [s.position for s in steps] == [1, 3, 1]  # positions restart in each turn's reply


def test_repeats_of_a_request_are_one_request():
    r0, _ = fold("x", turn(A, finish="stop"))
    r1 = type(r0)(**{**r0.__dict__, "repeat": 1})
    other, _ = fold("y", turn(B, finish="length"))
    assert metrics.al_request_mean([r0, r1, other]) == pytest.approx(metrics.al_request_mean([r0, other]))
    assert metrics.al_speed_bench([r0, r1, other]) == pytest.approx(metrics.al_speed_bench([r0, other]))


def test_a_request_without_a_known_stream_makes_speed_bench_al_unknown_not_biased():
    r, _ = fold("r", turn(A, finish="stop"))
    unknown = fold_turns(request("u", [0]), "spec", [TurnResult([1, 2], 5, 0.1, 0.1, 0.2, steps=[StepCounts(4, 0)])])[0]
    assert unknown.chunks == () and math.isnan(metrics.al_speed_bench([r, unknown]))
    assert unknown.kept == 1  # kept not reported: read as emitted


# ---- the SPEED-Bench tool's AL, written from its definition -------------------------------------------
def tool_turn_lengths(cumulative: list[int], full_tokens: list[int], end_id: int) -> list[int]:
    """The tool's per-turn acceptance lengths from a stream of cumulative output lengths (one per
    engine output): skip outputs that added nothing; on the last output, if the final token is the
    end id, count that output without it, or not at all if it held only the end id."""
    lengths, start = [], 0
    for i, n in enumerate(cumulative):
        if n == start:
            continue
        if i == len(cumulative) - 1 and full_tokens[-1] == end_id:
            if n - start > 1:
                lengths.append(n - start - 1)
            break
        lengths.append(n - start)
        start = n
    return lengths


def tool_category_al(streams: dict[str, list[tuple[list[int], list[int]]]], end_id: int) -> float:
    """Request AL = mean of its lengths over all its turns; category AL = mean over requests."""
    per_request = []
    for turns in streams.values():
        lengths = [x for cum, toks in turns for x in tool_turn_lengths(cum, toks, end_id)]
        if lengths:  # the tool cannot average an empty request (its only token the end id): left out
            per_request.append(statistics.mean(lengths))
    return statistics.mean(per_request)


def simulate(rng: random.Random, max_new: int, depth: int):
    """One turn of a speculative decode with a random stop: the engine's steps and its stream."""
    vocab = [t for t in range(1, 30)]
    out = [STOP if rng.random() < 0.05 else rng.choice(vocab)]
    steps, cumulative = [], [1]
    finish = "stop" if out[0] == STOP else "length" if max_new <= 1 else ""
    while not finish:
        drafted = depth if rng.random() > 0.2 else 0
        accepted = rng.randint(0, drafted)
        kept = 0
        for _ in range(accepted + 1):
            tok = STOP if rng.random() < 0.04 else rng.choice(vocab)
            out.append(tok)
            kept += 1
            if tok == STOP or len(out) >= max_new:
                finish = "stop" if tok == STOP else "length"
                break
        steps.append(StepCounts(drafted, accepted, kept=kept))
        cumulative.append(len(out))
        if not finish and rng.random() < 0.05:  # an engine output that added no token (mid-stream: the
            cumulative.append(len(out))         # engines here end on the output that carries the last token)
    result = TurnResult(out, 5, 0.1, 0.1, 0.2, steps=steps, chunks=[1] + [s.kept for s in steps if s.kept > 0],
                        finish=finish)
    return result, cumulative


@pytest.mark.parametrize("seed", range(6))
def test_speed_bench_al_equals_the_tools_formula_on_the_same_steps(seed):
    rng = random.Random(seed)
    records, streams = [], {}
    for i in range(12):
        turns = [simulate(rng, rng.choice([1, 6, 17, 40]), rng.choice([1, 3, 4, 7])) for _ in range(rng.choice([1, 1, 2, 3]))]
        rid = f"r{i}"
        records.append(fold_turns(request(rid, turns), "spec", [t for t, _ in turns])[0])
        streams[rid] = [(cum, t.output_ids) for t, cum in turns]
    assert metrics.al_speed_bench(records) == pytest.approx(tool_category_al(streams, STOP), rel=1e-12)


# ---- degenerate output ---------------------------------------------------------------------------------
def distinct(n, start=1000):
    return list(range(start, start + n))


@pytest.mark.parametrize("ids,expected", [
    ([5] * 40, True),  # one token repeated
    (distinct(20) + [7, 8, 9] * 10, True),  # a 3-token loop over 30 of 50 tokens
    (distinct(64), False),  # no repeat at all
    (distinct(40) + [7, 8] * 4, False),  # a loop of 8 tokens: shorter than loop_min_tokens
    (distinct(60) + [1, 2, 3, 4] * 5, False),  # a loop over 25% of the reply: less than loop_min_frac
    (distinct(10) + distinct(10, 50) * 2, False),  # a 10-token block twice: fewer than loop_min_repeats
    (distinct(5) + distinct(40, 50) * 3, False),  # a 40-token period: longer than loop_max_period
    (distinct(10) + [1, 2] * 3 + distinct(30, 60), False),  # a loop that ended is not a tail
])
def test_degenerate_rule_on_constructed_outputs(ids, expected):
    assert metrics.degenerate_output(ids, metrics.LoopRule()) is expected


def test_degenerate_rule_follows_its_settings_and_counts_requests_by_turn():
    long_period = distinct(5) + distinct(40, 50) * 3
    assert metrics.degenerate_output(long_period, metrics.LoopRule(max_period=40))
    clean, _ = fold("clean", turn([(4, 3, 4)] * 10, finish="length"))
    looped = turn([(4, 3, 4)] * 10, finish="length")
    looped.output_ids = [9] * len(looped.output_ids)  # the second turn of this request loops
    bad, _ = fold("bad", turn([(4, 3, 4)] * 10, finish="length"), looped)
    assert bad.turn_tokens == (41, 41)
    assert metrics.degenerate_frac([clean, bad]) == 0.5
    cols = metrics.degenerate_columns([clean, bad])
    assert cols.degenerate and cols.degenerate_frac == 0.5


# ---- AL along the output --------------------------------------------------------------------------------
def step(pos, drafted, accepted, turn_=0):
    return StepRecord("r", 0, 0, drafted, accepted, accepted + 1, 0, 0, 0, 0, 5, turn=turn_, kept=accepted + 1,
                      position=pos)


def test_al_along_the_output_bins_drafts_by_their_first_token():
    steps = [step(1, 4, 4), step(6, 4, 0), step(7, 0, 0), step(8, 4, 2), step(20, 4, 1)]
    al, drafts = metrics.al_along_output(steps, window=8)
    assert drafts == (2, 1, 1)
    assert al == pytest.approx((1 + 4 / 2, 1 + 2, 1 + 1))
    al, drafts = metrics.al_along_output(steps, window=4)
    assert drafts == (1, 1, 1, 0, 0, 1) and math.isnan(al[3])


def test_kept_is_derived_from_the_output_length_where_the_counts_account_for_it():
    steps = [StepCounts(4, 4), StepCounts(4, 2), StepCounts(4, 3)]
    assert cut_to_output(steps, 1 + 5 + 3 + 2, lead=1) and [s.kept for s in steps] == [5, 3, 2]
    missing = [StepCounts(4, 4), StepCounts(4, 2)]
    assert not cut_to_output(missing, 12, lead=1) and [s.kept for s in missing] == [-1, -1]  # unlisted steps
    assert not cut_to_output([StepCounts(4, 4), StepCounts(4, 1)], 5, lead=1)  # a step after the output ended


# ---- the reference engine reports what it kept -----------------------------------------------------------
def test_reference_engine_cuts_an_accepted_run_at_a_stop_token(clock):
    from speedbench import models
    from speedbench.drafters import build_drafter
    from speedbench.engine.decode import generate
    from speedbench.engine.sampling import SamplingParams

    from tests.support.drafting import make_context

    target, draft = models.load_model("builtin:tiny-target"), models.load_model("builtin:tiny-draft-small")
    ctx = make_context(target, draft, "lean")
    tok = models.load_tokenizer("builtin:tiny-target")
    prompt = [tok("The history of the city begins with", add_special_tokens=False)["input_ids"]]

    def run(stop, max_new=40):
        drafter = build_drafter("draft_model", ctx, {"model": "draft"})
        with torch.inference_mode():
            return generate(ctx.make_lm(target), drafter, prompt, 4, max_new, SamplingParams(), stop, clock)

    free = run(set())
    out = free.outputs[0]
    assert len(out) == 1 + sum(rs.kept for rs in free.row_steps[0]) and free.finish == ["length"]
    # a stop token that first appears as an accepted draft (not the bonus) of a step that accepted >= 2
    pos, found = 1, None
    for rs in free.row_steps[0]:
        for j in range(rs.accepted if rs.accepted >= 2 else 0):
            if out[pos + j] not in out[: pos + j]:
                found = (rs.accepted, j, out[pos + j])
                break
        if found:
            break
        pos += rs.kept
    assert found is not None, "no accepted run to cut in the test prompt"
    accepted, j, stop_tok = found
    cut = run({stop_tok})
    last = cut.row_steps[0][-1]
    assert cut.outputs[0] == out[: pos + j + 1] and cut.finish == ["stop"]
    assert (last.accepted, last.kept) == (accepted, j + 1)  # the engine's count and what the output kept
    # max_new_tokens inside a step: the step's tokens past the limit are not kept
    steps = free.row_steps[0]
    k = next(i for i, rs in enumerate(steps) if rs.kept >= 3)
    limit = 1 + sum(rs.kept for rs in steps[:k]) + 1
    short = run(set(), max_new=limit)
    assert short.finish == ["length"] and len(short.outputs[0]) == limit
    assert (short.row_steps[0][-1].accepted + 1, short.row_steps[0][-1].kept) == (steps[k].accepted + 1, 1)


# ---- end to end: the default tiny pair ---------------------------------------------------------------------
def test_default_tiny_pair_end_to_end_has_every_convention_and_an_overall_row(tmp_path):
    from speedbench import models
    from speedbench.records import RequestRecord, from_row
    from speedbench.report import build_report
    from speedbench.results import ResultsStore

    from tests.support.sweep_helpers import run_speedbench

    args = ["run", f"results_dir={tmp_path}", "run_id=e2e", "dataset.categories=[coding,roleplay,math]",
            "dataset.n_requests=6", "max_new_tokens=40", "protocol.min_repeats=1", "protocol.max_repeats=1",
            "warmup_batches=0", "acceptance.window=8"]
    proc = run_speedbench(tmp_path, *args, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    store = ResultsStore(tmp_path / "e2e")
    cells = store.cells()
    assert sorted(cells.category) == ["all", "coding", "math", "roleplay"] and (cells.status == "ok").all()
    parts, (overall,) = cells[~cells.derived.astype(bool)], cells[cells.derived.astype(bool)].to_dict("records")
    for _, c in cells.iterrows():
        assert 1 <= c.al_emitted <= c.al <= 1 + c.num_speculative_tokens  # emitted tokens only: never more
        assert 1 <= c.al_request_mean <= 5 and 1 <= c.al_speed_bench <= 5
        assert 0 <= c.n_accepted_kept <= c.n_accepted
        assert 0 <= c.degenerate_frac <= 1 and c.al_window == 8
        assert sum(c.drafts_by_position) > 0 and len(c.al_by_position) == len(c.drafts_by_position)
    # the overall row pools the category cells' records with each convention
    reqs = store.requests()
    spec = [from_row(RequestRecord, r) for r in reqs[(reqs.role == "spec") & reqs.cell_id.isin(parts.cell_id)]
            .to_dict("records")]
    assert overall["n_requests"] == parts.n_requests.sum() == 6
    assert overall["al"] == pytest.approx(metrics.acceptance(spec).al)
    assert overall["al"] == pytest.approx(1 + parts.n_accepted.sum() / sum(r.n_drafts for r in spec))
    assert overall["al_speed_bench"] == pytest.approx(metrics.al_speed_bench(spec))
    assert overall["n_accepted"] == parts.n_accepted.sum() and overall["extra"]["derived_from"]
    assert len(overall["al_by_turn"]) == 3  # roleplay prompts have up to 3 turns
    # al_speed_bench equals the tool's rule on the stream rebuilt from the stored steps and output ids
    eos = models.load_tokenizer("builtin:tiny-target").eos_token_id
    steps = store.steps()
    for cid in parts.cell_id:
        streams = {}
        rq = reqs[(reqs.cell_id == cid) & (reqs.role == "spec")]
        st = steps[(steps.cell_id == cid) & (steps.role == "spec")]
        for r in rq.itertuples():
            turns, start = [], 0
            for t, n in enumerate(r.turn_tokens):
                kept = st[(st.request_id == r.request_id) & (st.turn == t)].sort_values("step").kept.tolist()
                assert 1 + sum(kept) == n  # the prefill's token and every step's kept tokens make the reply
                turns.append(([1 + sum(kept[:i]) for i in range(len(kept) + 1)], list(r.output_ids[start : start + n])))
                start += n
            streams[r.request_id] = turns
        assert cells.set_index("cell_id").loc[cid, "al_speed_bench"] == pytest.approx(tool_category_al(streams, eos))
    # a rerun with everything finished measures nothing and leaves the overall row alone
    before = {p.name: p.stat().st_mtime_ns for p in (store.root / "cells").iterdir()}
    assert run_speedbench(tmp_path, *args, timeout=600).returncode == 0
    assert {p.name: p.stat().st_mtime_ns for p in (store.root / "cells").iterdir()} == before
    # the report shows the conventions side by side and plots AL along the output
    files = build_report(store.root, tmp_path / "report")
    text = files.markdown.read_text()
    assert "SPEED-Bench AL" in text and "AL (emitted tokens)" in text
    assert any(p.name == "acceptance_along_output.png" for p in files.plots)
    assert json.loads(files.json.read_text())["acceptance"]["overall"][0]["al_speed_bench"] == pytest.approx(
        overall["al_speed_bench"])


def test_every_draft_accepted_with_a_length_cut_gives_5_00_pooled_and_4_57_in_the_tool():
    # D = 4, max_new_tokens = 64: the prefill's token, 12 full steps of 5, the 13th step cut to 3 tokens
    r, _ = fold("all-accepted", turn([(4, 4, 5)] * 12 + [(4, 4, 3)], finish="length"))
    assert len(r.output_ids) == 64
    acc = metrics.acceptance([r], D)
    assert acc.al == 5.0 and acc.al_emitted == pytest.approx(63 / 13)
    assert metrics.al_speed_bench([r]) == pytest.approx(64 / 14) and round(metrics.al_speed_bench([r]), 2) == 4.57


def test_al_along_output_has_about_eight_windows_when_acceptance_window_is_unset():
    from speedbench.config import AcceptanceConfig
    from speedbench.metrics.acceptance import acceptance_columns, auto_window

    assert auto_window(32) == 4  # 8 windows of 4 over 32 tokens (was 2 windows of 16)
    assert auto_window(512) == 16 and auto_window(0) == 1
    assert acceptance_columns([], [], 4, AcceptanceConfig(), max_new_tokens=32).al_window == 4
    assert acceptance_columns([], [], 4, AcceptanceConfig(window=16), max_new_tokens=32).al_window == 16
