"""The mechanism table (``speedbench mechanisms``, the report's G5 table) on five real reference-engine
runs (n-gram, the shipped EAGLE-3 head, the shipped Medusa heads, layer skip, and MTP on its own target): each column checked against what it is read from
(the drafter's files, the manifest, the cells, G5's ranking), computed here independently."""
import json
import math

import pytest
from safetensors import safe_open

from speedbench.drafters.registry import METHODS, engine_refusal, is_baseline, make_drafter
from speedbench.models import resolve_path
from speedbench.pipeline import runner
from speedbench.report import mechanism_table
from speedbench.report.mechanism import ranking
from speedbench.report.common import spec_cells
from speedbench.results.load import load
from tests.support.sweep_helpers import make_run, run_speedbench

DRAFTERS = {"ngram": make_drafter("ngram", 4), "tiny_eagle3": make_drafter("eagle3", 3, name="tiny_eagle3",
                                                                           model="builtin:tiny-eagle3"),
            "tiny_medusa": make_drafter("medusa", 3, name="tiny_medusa", model="builtin:tiny-medusa"),
            "layer_skip": make_drafter("layer_skip", 2, num_layers=1),
            "tiny_mtp": make_drafter("mtp", 3, name="tiny_mtp")}
MEASURED_METHODS = {"ngram", "eagle3", "medusa", "layer_skip", "mtp"}
TARGETS = {"tiny_mtp": ("tiny_mtp", "builtin:tiny-mtp-target")}  # MTP drafts with its target's own layer


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("mechanisms")
    for name, drafter in DRAFTERS.items():
        run = make_run(root, f"mt-{name}", categories=("coding", "writing"), max_new_tokens=16)
        (run.target.name, run.target.path), run.drafter = TARGETS.get(name, ("tiny", "builtin:tiny-target")), drafter
        run.protocol.min_repeats = run.protocol.max_repeats = 2
        run.protocol.budget_s = 1.0
        runner.run_cells(run, progress=False)
    data = load([root])
    rank = ranking(spec_cells(data.ok), data.overall)
    return root, data, rank, mechanism_table.table(data.ok, rank)


def _row(frame, mech):
    rows = frame[frame["mechanism"] == mech]
    assert len(rows) == 1, mech
    return rows.iloc[0]


def test_one_row_per_measured_mechanism_and_one_per_unmeasured_method(results):
    _, _, _, frame = results
    measured = {"ngram", "tiny_eagle3", "tiny_medusa", "layer_skip", "tiny_mtp"}
    assert measured <= set(frame["mechanism"])
    others = {m for m in METHODS if not is_baseline(m) and m not in MEASURED_METHODS}
    assert {f"({m})" for m in others} == set(frame["mechanism"]) - measured
    for m in others:
        assert _row(frame, f"({m})")["best speedup by B"].startswith("not measured: ")


def test_memory_from_the_drafters_own_files(results):
    _, _, _, frame = results
    folder = resolve_path("builtin:tiny-eagle3")
    with safe_open(f"{folder}/model.safetensors", "np") as f:
        params = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    cfg = json.loads(open(f"{folder}/config.json").read())
    row = _row(frame, "tiny_eagle3")
    assert row["params"] == params
    assert row["param MiB"] == pytest.approx(params * 4 / 2**20)  # the run's dtype: float32
    kv = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * cfg["head_dim"] * 4
    assert row["KV KiB/token"] == pytest.approx(kv / 1024)
    target = json.loads(open(f"{resolve_path('builtin:tiny-target')}/config.json").read())
    skip = _row(frame, "layer_skip")  # shares the target's weights; its one layer's KV
    assert skip["params"] == 0 and skip["training"] == "shares the target's weights"
    assert skip["KV KiB/token"] == pytest.approx(2 * 1 * target["num_key_value_heads"] * target["head_dim"] * 4 / 1024)
    ngram = _row(frame, "ngram")
    assert ngram["params"] == 0 and ngram["generation"].startswith("lookup") and ngram["training"].startswith("none")


def test_medusa_row_heads_on_the_target_state_in_parallel_with_no_kv(results):
    _, _, _, frame = results
    folder = resolve_path("builtin:tiny-medusa")
    with safe_open(f"{folder}/model.safetensors", "np") as f:
        params = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())  # residual blocks + the LM head
    row = _row(frame, "tiny_medusa")
    assert row["inputs"] == "target's last hidden state (no tokens)"
    assert row["generation"].startswith("parallel")
    assert row["params"] == params and row["param MiB"] == pytest.approx(params * 4 / 2**20)
    assert row["KV KiB/token"] == 0.0  # no attention layer: nothing kept per token
    manifest = json.loads(open(f"{folder}/../MANIFEST.json").read())["provenance"]["models"]["tiny-medusa"]
    assert row["training"] == f"{manifest['steps']} steps, {mechanism_table.fmt(float(manifest['wall_s']))} s"
    assert not any(str(row[c]) in {"n/a", "nan"} for c in mechanism_table.COLUMNS)


def test_training_cost_from_the_manifest(results):
    _, _, _, frame = results
    manifest = json.loads(open(f"{resolve_path('builtin:tiny-eagle3')}/../MANIFEST.json").read())
    entry = manifest["provenance"]["models"]["tiny-eagle3"]
    assert _row(frame, "tiny_eagle3")["training"].startswith(f"{entry['steps']} steps, ")
    mtp = manifest["provenance"]["models"]["tiny-mtp-target"]  # the MTP layer's training, in its target's entry
    assert _row(frame, "tiny_mtp")["training"] == f"{mtp['steps']} steps, {mechanism_table.fmt(mtp['wall_s'])} s"


def test_mtp_memory_is_the_targets_own_mtp_layer(results):
    _, _, _, frame = results
    folder = resolve_path("builtin:tiny-mtp-target")
    with safe_open(f"{folder}/model.safetensors", "np") as f:
        mtp = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys() if k.startswith("model.mtp_layers."))
        body = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    cfg = json.loads(open(f"{folder}/config.json").read())
    row = _row(frame, "tiny_mtp")
    assert 0 < row["params"] == mtp < body  # the layer, not the body it shares the embedding and head with
    assert row["param MiB"] == pytest.approx(mtp * 4 / 2**20)
    kv = 2 * cfg["num_nextn_predict_layers"] * cfg["num_key_value_heads"] * cfg["head_dim"] * 4
    assert row["KV KiB/token"] == pytest.approx(kv / 1024)
    assert row["inputs"] == mechanism_table.INPUTS["target_head"] and row["generation"].startswith("serial")


def test_draft_times_al_and_best_speedup_come_from_the_cells_and_the_ranking(results):
    _, data, rank, frame = results
    for mech in DRAFTERS:
        cells = data.ok[data.ok["drafter"] == mech]
        d = int(cells["num_speculative_tokens"].iloc[0])
        t = cells["t_draft_ms"].astype(float)
        row = _row(frame, mech)
        assert row["draft ms/step by D"].startswith(f"D={d}: {mechanism_table.fmt(float(t.mean()))} [")
        for cat, al in cells.groupby("category")["al"].mean().items():
            assert f"{cat} {mechanism_table.fmt(float(al))}" in row["AL by category"]
        top = rank[rank["mechanism"] == mech].iloc[0]
        assert row["best speedup by B"].startswith(f"B=1: {mechanism_table.fmt(float(top['speedup']))} {top['interval']}")


def test_a_method_the_engine_refuses_says_why(results):
    _, data, rank, _ = results
    frame = mechanism_table.table(data.ok, rank, backends=["vllm"])
    refused = [n for n, m in METHODS.items() if "vllm" in m.refusals and not m.unmeasured
               and engine_refusal("vllm", n, on_cpu=True)]
    for name in refused:  # suffix, while arctic-inference is not installed
        assert _row(frame, f"({name})")["best speedup by B"] == f"not measured: {engine_refusal('vllm', name, on_cpu=True)}"
    unrun = [n for n, m in METHODS.items() if not is_baseline(n) and n not in MEASURED_METHODS and not m.unmeasured
             and not engine_refusal("vllm", n, on_cpu=True)]
    assert unrun  # e.g. dflash and draft_model: vLLM runs them here, these results hold no cell of them
    for name in unrun:
        assert _row(frame, f"({name})")["best speedup by B"] == "not measured: no cell in these results"


@pytest.mark.parametrize("backends", [["torch"], ["vllm"], ["torch", "vllm"]])
def test_a_method_nothing_here_runs_shows_the_method_tables_line(results, backends):
    _, data, rank, _ = results
    frame = mechanism_table.table(data.ok, rank, backends=backends)
    for name in ("dspark", "mlp_speculator"):
        row = _row(frame, f"({name})")
        assert row["best speedup by B"] == f"not measured: {METHODS[name].unmeasured}"
        assert row["generation"] == mechanism_table.MODES[METHODS[name].kind]


def test_the_command_prints_the_same_rows_and_a_missing_folder_is_one_line(results, tmp_path):
    root, _, _, frame = results
    done = run_speedbench(tmp_path, "mechanisms", str(root), "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["mechanism"]: r for r in json.loads(done.stdout)}
    assert rows["tiny_eagle3"]["best speedup by B"] == _row(frame, "tiny_eagle3")["best speedup by B"]
    bad = run_speedbench(tmp_path, "mechanisms", str(tmp_path / "nowhere"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "nowhere" in bad.stderr
