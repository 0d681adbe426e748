"""A load point is what ran (issue 36 finding 17) and the derived ``all`` row pools categories by their
requests, not their repeats (issue 35 item 1). Real runs of the synthetic backend, real folders."""
import json

import pandas as pd

from speedbench.config import (BackendConfig, DatasetConfig, LoadConfig, ModelConfig, ProtocolConfig, RunConfig,
                               SamplingConfig)
from speedbench.drafters.registry import make_drafter
from speedbench.pipeline import runner
from speedbench.results import ResultsStore
from tests.support.synthetic_results import OPTIONS, raw_cells, write_prompts


def _run(root, run_id, **kw) -> RunConfig:
    root.mkdir(parents=True, exist_ok=True)
    prompts = write_prompts(root / "prompts.jsonl")
    return RunConfig(
        target=ModelConfig(name="tiny", path="random:tiny-target"), drafter=make_drafter("ngram", 2, name="ngram"),
        dataset=DatasetConfig(name="prompts", path=str(prompts)),
        backend=BackendConfig(name="synthetic", options=dict(OPTIONS)), sampling=SamplingConfig(), batch_size=1,
        max_new_tokens=16, results_dir=str(root), run_id=run_id, resume=False, warmup_batches=0,
        protocol=ProtocolConfig(min_repeats=2, max_repeats=2), **kw)


def test_a_closed_loop_point_with_fewer_requests_than_its_concurrency_is_recorded_as_what_ran(tmp_path):
    run = _run(tmp_path, "c8", load=LoadConfig(concurrency=8, num_requests=2))
    runner.run_cells(run, progress=False)
    measured = raw_cells(tmp_path / "c8")
    assert measured and all(c["concurrency"] == 2 for c in measured)
    assert all("at most 2 in flight, not load.concurrency=8" in c["extra"]["concurrency_note"] for c in measured)
    assert [c["concurrency"] for c in raw_cells(tmp_path / "c8", derived=True)] == [2]


def test_a_point_that_reaches_its_concurrency_has_no_note(tmp_path):
    run = _run(tmp_path, "c2", load=LoadConfig(concurrency=2, num_requests=4))
    runner.run_cells(run, progress=False)
    assert all(c["concurrency"] == 2 and "concurrency_note" not in c["extra"] for c in raw_cells(tmp_path / "c2"))


def _more_repeats(store: ResultsStore, cell_id: str, copies: int) -> None:
    """The category cell as if the protocol had given it ``copies`` x its repeats (same records each time)."""
    path = store.requests_path(cell_id)
    req = pd.read_parquet(path)
    n = int(req["repeat"].max()) + 1
    req = pd.concat([req.assign(repeat=req["repeat"] + k * n) for k in range(copies)], ignore_index=True)
    req.to_parquet(path)
    steps_path = store.steps_path(cell_id)
    if steps_path.exists():
        st = pd.read_parquet(steps_path)
        pd.concat([st.assign(repeat=st["repeat"] + k * n) for k in range(copies)], ignore_index=True).to_parquet(steps_path)
    cell_path = store.root / "cells" / f"{cell_id}.json"
    cell = json.loads(cell_path.read_text())
    cell["n_repeats"] = n * copies
    cell_path.write_text(json.dumps(cell))


def test_the_all_row_does_not_depend_on_how_many_repeats_a_category_took(tmp_path):
    run = _run(tmp_path, "rep")
    runner.run_cells(run, progress=False)
    store = ResultsStore(tmp_path / "rep")
    before = raw_cells(tmp_path / "rep", derived=True)[0]
    coding = next(c for c in raw_cells(tmp_path / "rep") if c["category"] == "coding")
    _more_repeats(store, coding["cell_id"], 3)
    keys = [k for k, _ in runner.cell_keys(run, runner.validation.prepare(run).requests)]
    runner.overall_cells(run, store, keys, measured={coding["cell_id"]})
    after = raw_cells(tmp_path / "rep", derived=True)[0]
    assert after["al"] == before["al"] and after["n_requests"] == before["n_requests"]
    assert after["n_repeats"] == 2 and "the first 2 repeat(s) of each" in after["extra"]["derived"]


def test_the_console_table_tells_load_points_apart(tmp_path):
    from speedbench.pipeline.summary import format_table

    for c in (1, 4):
        runner.run_cells(_run(tmp_path, "lp", load=LoadConfig(concurrency=c, num_requests=4)), progress=False)
    lines = format_table(ResultsStore(tmp_path / "lp").cells()).splitlines()
    head = lines[0].split()
    assert head[head.index("B") + 1] == "C" and "rate" not in head  # closed loop only: no rate column
    col = head.index("C")
    assert sorted({line.split()[col] for line in lines[1:] if not line.startswith(("left out", "(more"))}) == ["1", "4"]
    plain = format_table(ResultsStore(_plain(tmp_path)).cells()).splitlines()[0].split()
    assert "C" not in plain and "rate" not in plain  # no load point ran: no columns


def _plain(tmp_path):
    runner.run_cells(_run(tmp_path, "plain"), progress=False)
    return tmp_path / "plain"
