"""AL after a fine-tune: a real (short) fine-tune of the shipped target into a private cache, the
shipped drafters run against both targets on the reference engine, and the report section's numbers
checked against the cells; the verdict rule on its three outcomes; an unbuilt fine-tuned target is a
one-line error before any model loads."""
import math
from dataclasses import replace

import pandas as pd
import pytest

from speedbench.drafters.registry import make_drafter
from speedbench.fixtures.finetune import FinetuneConfig, build
from speedbench.models import finetuned_source
from speedbench.pipeline import runner
from speedbench.report import finetune
from speedbench.results.load import load
from tests.support.sweep_helpers import make_run, subprocess_env

DRAFTERS = (make_drafter("draft_model", 4, name="tiny_draft_small", model="builtin:tiny-draft-small"),
            make_drafter("eagle3", 4, name="tiny_eagle3", model="builtin:tiny-eagle3"))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("SPEEDBENCH_CACHE", str(cache))
    info = build(replace(FinetuneConfig(), steps=3), log=lambda _: None)
    root = tmp_path_factory.mktemp("finetune")
    for tname, tpath in (("tiny", "builtin:tiny-target"), ("tiny_ft", "finetuned:tiny-target-shifted")):
        for drafter in DRAFTERS:
            run = make_run(root, f"ft-{tname}-{drafter.name}", max_new_tokens=24)
            run.target.name, run.target.path, run.drafter = tname, tpath, drafter
            run.protocol.min_repeats = run.protocol.max_repeats = 1
            run.protocol.budget_s = 0.5
            runner.run_cells(run, progress=False)
    data = load([root])
    yield info, data, finetune.comparisons(data)
    patch.undo()


def test_the_finetune_is_recorded_and_names_its_source(results):
    info, _, _ = results
    assert info["steps"] == 3 and info["source"] == "builtin:tiny-target"
    assert finetuned_source("finetuned:tiny-target-shifted") == "builtin:tiny-target"
    assert math.isfinite(info["shifted_val_loss_before"]) and math.isfinite(info["shifted_val_loss_after"])


def test_each_drafter_has_its_al_on_both_targets_from_the_cells(results):
    _, data, frame = results
    assert sorted(frame["drafter"]) == ["tiny_draft_small", "tiny_eagle3"]
    overall = data.overall
    for _, row in frame.iterrows():
        for target, col in (("tiny", "AL original"), ("tiny_ft", "AL fine-tuned")):
            cell = overall[(overall["drafter"] == row["drafter"]) & (overall["target"] == target)]
            assert row[col] == pytest.approx(float(cell["al"].iloc[0]))
        assert row["ratio"] == pytest.approx(row["AL fine-tuned"] / row["AL original"])
        assert row["ratio_low"] <= row["ratio"] <= row["ratio_high"] and row["ratio_low"] < row["ratio_high"]
        assert row["prompts"] == 6
    assert dict(zip(frame["drafter"], frame["family"])) == {"tiny_draft_small": "external", "tiny_eagle3": "attached"}


def test_the_section_states_a_verdict_its_intervals_support(results):
    _, data, frame = results
    sec = finetune.build(data)
    text = sec.values["verdict"]
    att, ext = frame[frame["family"] == "attached"].iloc[0], frame[frame["family"] == "external"].iloc[0]
    expected = ("Confirmed" if att["ratio_high"] < ext["ratio_low"] else
                "Refuted" if att["ratio_low"] > ext["ratio_high"] else "Undecided")
    assert text.startswith(expected)


def _frame(rows):
    return pd.DataFrame([{"family": f, "ratio": r, "ratio_low": lo, "ratio_high": hi} for f, r, lo, hi in rows])


@pytest.mark.parametrize("rows, word", [
    ([("attached", 0.7, 0.6, 0.8), ("external", 0.95, 0.9, 1.0)], "Confirmed"),
    ([("attached", 0.95, 0.9, 1.0), ("external", 0.7, 0.6, 0.8)], "Refuted"),
    ([("attached", 0.8, 0.7, 0.92), ("external", 0.9, 0.85, 0.95)], "Undecided"),
    ([("external", 0.9, 0.85, 0.95)], "The claim"),
])
def test_the_verdict_rule(rows, word):
    assert finetune.verdict(_frame(rows)).startswith(word)


def test_an_unbuilt_finetuned_target_is_one_line_before_any_model_loads(tmp_path):
    import subprocess
    import sys

    env = subprocess_env(SPEEDBENCH_CACHE=str(tmp_path / "empty-cache"))
    done = subprocess.run([sys.executable, "-m", "speedbench.cli", "run", "target=tiny_ft", f"results_dir={tmp_path}"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [l for l in done.stderr.strip().splitlines() if l.strip()]
    assert len(lines) == 1 and "speedbench fixtures finetune" in lines[0], done.stderr
