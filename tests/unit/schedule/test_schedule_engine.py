"""drafter.schedule on the reference engine and its pass-through to vLLM; refusals before anything loads."""
import copy
import subprocess
import sys

import pytest
import torch

from speedbench.backends.vllm.spec import speculative_config
from speedbench.config import BackendConfig
from speedbench.drafters.registry import make_drafter
from speedbench.drafters import build_drafter
from speedbench.drafters.registry import DRAFTERS, schedule_methods
from speedbench.engine.schedule import k_at, k_for, parse, parse_plan
from speedbench.engine.decode import generate
from speedbench.engine.sampling import SamplingParams
from speedbench.pipeline.cells import CellKey
from speedbench.pipeline.validation import check_schedule

from tests.support.drafting import make_context
from tests.support.sweep_helpers import make_run, subprocess_env
from tests.unit.engine.test_lossless import prompts

SCHEDULE = parse([[1, 1, 0], [2, 3, 1], [4, 64, 3]])  # K by live rows: 4 -> 3, 2..3 -> 1, 1 -> plain decode


@pytest.mark.parametrize("bad, words", [
    ([[2, 4, 1]], "must start at 1"),
    ([[1, 4, 2], [4, 8, 1]], "overlaps"),
    ([[1, 4, 2], [6, 8, 1]], "gap"),
    ([[1, 4, -1]], "K=-1"),
    ([[1, 4, 2], [9, 8, 1]], "start 9 > end 8"),
    ([[1, 4]], "three integers"),
    ("1,4,2", "list of"),
])
def test_malformed_schedules_are_refused_naming_the_range(bad, words):
    with pytest.raises(ValueError, match=words):
        parse(bad)


def test_k_by_live_rows_is_clamped_and_past_the_last_range_keeps_its_k():
    s = parse([[1, 4, 6], [5, 8, 2]])
    assert [k_for(s, b, 4) for b in (1, 4, 5, 8, 20)] == [4, 4, 2, 2, 2]


@pytest.mark.parametrize("method, options", [("draft_model", {"model": "draft"}), ("ngram", {"prompt_lookup_max": 3})])
def test_greedy_output_with_a_schedule_equals_baseline_and_each_step_ran_the_scheduled_k(
        tiny_target, tiny_draft, clock, method, options):
    ctx = make_context(tiny_target, tiny_draft, "lean")

    def gen(name, opts, depth, stop, **kw):
        return generate(ctx.make_lm(ctx.target_model), build_drafter(name, ctx, opts), prompts(4), depth, 24,
                        SamplingParams(), stop, clock, **kw)

    with torch.inference_mode():
        free = gen("none", {}, 0, set())
        lengths = {b: free.outputs[b].index(free.outputs[0][3]) if free.outputs[0][3] in free.outputs[b] else 99
                   for b in range(4)}  # a stop token that ends row 0 early: the live batch shrinks
        assert len(set(lengths.values())) > 1
        stop = {free.outputs[0][3]}
        base = gen("none", {}, 0, stop)
        out = gen(method, options, 3, stop, schedule=SCHEDULE)
    assert out.outputs == base.outputs
    live = {}  # step -> rows still generating at that step
    for row in out.row_steps:
        for s in row:
            live[s.step] = live.get(s.step, 0) + 1
    steps = [s for row in out.row_steps for s in row]
    for s in steps:
        assert s.drafted <= k_for(SCHEDULE, live[s.step], 3)
        if method == "draft_model":  # a model drafter always proposes the full K
            assert s.drafted == k_for(SCHEDULE, live[s.step], 3)
    if method == "draft_model":
        assert set(live.values()) != {4}, "rows finished together: the schedule never switched"


CONTEXT_PLAN = [[0, 29, [[1, 64, 3]]], [30, 100000, [[1, 2, 0], [3, 64, 1]]]]  # short: K=3; long: by live rows


@pytest.mark.parametrize("bad, words", [
    ([[1, 29, [[1, 4, 2]]]], "must start at 0"),
    ([[0, 29, [[1, 4, 2]]], [20, 40, [[1, 4, 1]]]], "follow each other"),
    ([[0, 29, [[2, 4, 2]]]], r"drafter.schedule\[0\]\[2\]\[0\].*must start at 1"),
    ([[0, 9, [[1, 4, 2]]], [10, 5, [[1, 4, 1]]]], "context start 10 > end 5"),
])
def test_malformed_context_schedules_are_refused_naming_the_entry(bad, words):
    with pytest.raises(ValueError, match=words):
        parse_plan(bad)


def test_k_by_live_rows_and_live_context():
    plan = parse_plan(CONTEXT_PLAN)
    assert [k_at(plan, b, c, 4) for b, c in ((1, 0), (4, 29), (1, 30), (2, 30), (3, 50), (9, 10 ** 7))] == \
        [3, 3, 0, 0, 1, 1]
    assert parse_plan([[1, 4, 2]]) == ((0, 1 << 62, ((1, 4, 2),)),)  # a batch schedule: one range over every context
    with pytest.raises(ValueError, match="backend=torch only"):
        parse(CONTEXT_PLAN)  # vLLM's reader (batch size only) refuses it


def test_greedy_output_with_a_batch_context_schedule_equals_baseline_and_k_follows_the_live_context(
        tiny_target, tiny_draft, clock):
    ctx = make_context(tiny_target, tiny_draft, "lean")
    ps = prompts(4)
    plan = parse_plan(CONTEXT_PLAN)

    def gen(name, opts, depth, stop, **kw):
        return generate(ctx.make_lm(ctx.target_model), build_drafter(name, ctx, opts), ps, depth, 24,
                        SamplingParams(), stop, clock, **kw)

    with torch.inference_mode():
        free = gen("none", {}, 0, set())
        stop = {free.outputs[0][3]}
        base = gen("none", {}, 0, stop)
        out = gen("draft_model", {"model": "draft"}, 3, stop, schedule=plan)
    assert out.outputs == base.outputs
    seen, n_steps = {}, max(s.step for row in out.row_steps for s in row) + 1
    for step in range(n_steps):
        rows = [(b, [s for s in row if s.step < step], next(s for s in row if s.step == step))
                for b, row in enumerate(out.row_steps) if any(s.step == step for s in row)]
        context = max(len(ps[b]) + 1 + sum(s.kept for s in before) for b, before, _ in rows)
        want = k_at(plan, len(rows), context, 3)
        assert all(now.drafted == want for _, _, now in rows), (step, context, len(rows))
        seen[want] = seen.get(want, 0) + 1
    assert len(seen) >= 2, f"the schedule never switched K: {seen}"


def test_vllm_refuses_a_batch_context_schedule_before_loading(tmp_path):
    problems = check_schedule(_run(tmp_path, "vllm", "ngram", schedule=CONTEXT_PLAN))
    assert len(problems) == 1 and "backend=torch only" in problems[0]
    assert check_schedule(_run(tmp_path, "torch", "ngram", schedule=CONTEXT_PLAN)) == []


def test_the_schedule_enters_the_cell_identity_only_when_set(tmp_path):
    run = make_run(tmp_path, "x")
    plain = CellKey.for_run(run, "coding", "")
    same = copy.deepcopy(run)
    same.drafter.schedule = []
    assert CellKey.for_run(same, "coding", "").cell_id == plain.cell_id
    sched = copy.deepcopy(run)
    sched.drafter.schedule = [[1, 4, 4], [5, 64, 2]]
    key = CellKey.for_run(sched, "coding", "")
    assert key.cell_id != plain.cell_id and key.schedule == "[[1, 4, 4], [5, 64, 2]]" and plain.schedule == ""


def test_vllm_gets_the_schedule_clamped_with_num_speculative_tokens_the_largest_k():
    cfg = speculative_config(make_drafter("ngram", 3, schedule=[[1, 4, 4], [5, 64, 2], [65, 256, 0]]))
    assert cfg["num_speculative_tokens_per_batch_size"] == [[1, 4, 3], [5, 64, 2], [65, 256, 0]]
    assert cfg["num_speculative_tokens"] == 3
    assert "num_speculative_tokens_per_batch_size" not in speculative_config(make_drafter("ngram", 3))


def _run(tmp_path, backend, method, **fields):
    run = make_run(tmp_path, "x", backend=BackendConfig(name=backend))
    run.drafter = make_drafter(method, 4, **fields)
    return run


@pytest.mark.parametrize("method, fields, why", [
    ("suffix", {}, "suffix decoding asserts a fixed K"),
    ("medusa", {"model": "m"}, "medusa drafts exactly its num_heads tokens (asserts a fixed K)"),
    ("draft_model", {"model": "m", "engine_args": {"parallel_drafting": True}}, "parallel drafting"),
])
def test_vllm_refuses_a_schedule_for_methods_with_a_fixed_k(tmp_path, method, fields, why):
    problems = check_schedule(_run(tmp_path, "vllm", method, schedule=[[1, 4, 2]], **fields))
    assert len(problems) == 1 and why in problems[0] and f"drafter.method={method!r}" in problems[0]


def test_every_reference_engine_drafter_accepts_a_schedule(tmp_path):
    assert set(DRAFTERS.names()) <= schedule_methods("torch")
    for method in ("ngram", "draft_model", "eagle"):
        assert check_schedule(_run(tmp_path, "vllm" if method == "eagle" else "torch", method,
                                   schedule=[[1, 4, 2]], **({} if method == "ngram" else {"model": "m"}))) == []
    assert "backend=hf cannot run a schedule" in check_schedule(_run(tmp_path, "hf", "ngram", schedule=[[1, 4, 2]]))[0]


@pytest.mark.parametrize("schedule, words, extra", [
    ("[[2,4,1]]", "must start at 1", ["drafter=ngram"]),
    ("[[1,4,2],[3,8,1]]", "overlaps", ["drafter=ngram"]),
    ("[[1,4,2]]", "drafter.method='medusa' cannot vary K on backend=vllm",  # suffix is refused outright here
     ["backend=vllm", "drafter=tiny_draft", "drafter.method=medusa", "drafter.num_speculative_tokens=2"]),  # its weights
])
def test_run_refuses_a_bad_schedule_in_one_line_before_loading(tmp_path, schedule, words, extra):
    cmd = [sys.executable, "-m", "speedbench.cli", "run", f"results_dir={tmp_path / 'r'}", "run_id=v",
           "dataset=smoke", "max_new_tokens=8", "target=tiny", *extra,
           f"drafter.schedule={schedule}", "hydra/job_logging=disabled"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120, env=subprocess_env())
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.strip().splitlines() if not ln.startswith("Triton is installed")]  # vLLM's import
    assert len(lines) == 1 and "drafter.schedule" in lines[0] and words in lines[0], proc.stderr
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").rglob("*.json"))


def test_k0_steps_are_recorded_and_counted_in_n_steps_not_in_drafts(tmp_path):
    from speedbench.pipeline import runner
    from speedbench.results import ResultsStore

    run = make_run(tmp_path, "k0", categories=("math",), max_new_tokens=16, batch_size=2)
    run.drafter.schedule = [[1, 1, 0], [2, 64, 4]]  # both rows live: K=4; the last row alone: plain decode
    runner.run_cells(run, progress=False)
    store = ResultsStore(tmp_path / "k0")
    req = store.requests()
    spec = req[req["role"] == "spec"]
    steps = store.steps()
    steps = steps[steps["role"] == "spec"]
    assert (steps["drafted"] == 0).any() and (steps["drafted"] > 0).any(), steps["drafted"].value_counts()
    assert (spec["n_steps"] > spec["n_drafts"]).any()  # a K=0 step is a step, not a draft
    assert (spec["n_steps"] >= spec["n_drafts"]).all()
    cells = store.cells()
    assert (cells["status"] == "ok").all() and (cells["greedy_match_rate"] == 1.0).all()
