"""Partial and reshaped results: gaps render as n/a (never 0); categories, buckets, G come from data."""
import json
import math
import re
import shutil

import pytest

from speedbench.report import build_report
from speedbench.report import attention_start, attention_tiles, plots
from speedbench.results.load import load
from speedbench.report.modelling import resolve

from tests.support.synthetic_results import shared_results


@pytest.fixture
def run_copy(tmp_path_factory, tmp_path):
    src = shared_results(tmp_path_factory)
    dst = tmp_path / "run"
    shutil.copytree(src, dst)
    return dst


def drop(run, pred):
    """Delete the cells matching ``pred`` (as if they were never measured)."""
    n = 0
    for p in (run / "cells").glob("*.json"):
        if pred(json.loads(p.read_text())):
            p.unlink()
            n += 1
    assert n > 0


def edit(run, fn):
    for p in (run / "cells").glob("*.json"):
        p.write_text(json.dumps(fn(json.loads(p.read_text()))))


def test_missing_mechanism_and_batch_size_are_gaps_not_zeros(run_copy, tmp_path):
    drop(run_copy, lambda c: c["drafter"] == "ngram" and c["batch_size"] == 4)
    drop(run_copy, lambda c: c["num_speculative_tokens"] == 4 and c["batch_size"] == 1)
    files = build_report([run_copy], tmp_path / "out")
    md = files.markdown.read_text()
    values = json.loads(files.json.read_text())
    # G5 at B=4: the ngram column exists for every category and is n/a
    for row in values["g5"]["by_category"]["4"]:
        assert math.isnan(row["ngram"]) and row["tiny_draft"] > 0 and row["winner"] == "tiny_draft"
    assert re.search(r"^\| coding \| n/a \| [0-9.]+ \| \[[0-9.]+, [0-9.]+\] \| tiny_draft \|$", md, re.M), "G5 gap must render as n/a"
    # G1: D=4 measured at B=4 only -> the B=1 entry is a gap
    assert re.search(r"^\| 4 \| n/a \| [0-9.]+ \|$", md, re.M), "G1 gap must render as n/a"
    assert not re.search(r"^\| 4 \| 0 \|", md, re.M)
    # the ranking at B=4 no longer lists ngram; B=1 still does
    assert {r["mechanism"] for r in values["g5"]["ranking"] if r["B"] == 4} == {"tiny_draft"}
    assert {r["mechanism"] for r in values["g5"]["ranking"] if r["B"] == 1} == {"tiny_draft", "ngram"}


def test_no_cells_at_b1_leaves_g4_not_available(run_copy, tmp_path):
    drop(run_copy, lambda c: c["batch_size"] == 1)
    md = build_report([run_copy], tmp_path / "out", plots=False).markdown.read_text()
    assert "No speculative cell at B = 1: n/a." in md
    assert "## G5" in md  # the rest still renders


def test_failed_cells_are_listed_and_do_not_count(run_copy, tmp_path):
    def fail(c):
        if c["drafter"] == "ngram" and c["num_speculative_tokens"] == 2:
            c.update(status="failed", error="boom: engine crashed", al=None, speedup=None)
        return c

    edit(run_copy, fail)
    files = build_report([run_copy], tmp_path / "out", plots=False)
    md = files.markdown.read_text()
    assert "Failed cells" in md and "boom: engine crashed" in md
    configs = json.loads(files.json.read_text())["summary"]["configs"]
    assert not any(r["drafter"] == "ngram" and r["num_speculative_tokens"] == 2 for r in configs)


def test_categories_and_buckets_are_data(run_copy, tmp_path):
    def relabel(c):
        c["category"] = {"writing": "creative-writing"}.get(c["category"], c["category"])
        c["context_bucket"] = "8k" if c["category"] == "coding" else "1k"
        return c

    edit(run_copy, relabel)
    files = build_report([run_copy], tmp_path / "out", plots=False)
    values = json.loads(files.json.read_text())
    cats = {r["category"] for r in values["g5"]["by_category"]["1"]}
    assert cats == {"coding", "math", "creative-writing"}
    buckets = {r["context bucket"] for r in values["g5"]["by_bucket"]["1"]}
    assert buckets == {"1k", "8k"}
    assert "creative-writing" in files.markdown.read_text()


def test_merging_two_folders(run_copy, tmp_path, tmp_path_factory):
    other = tmp_path / "other"
    shutil.copytree(run_copy, other)
    drop(run_copy, lambda c: c["drafter"] == "ngram")
    drop(other, lambda c: c["drafter"] == "tiny_draft")
    values = json.loads(build_report([run_copy, other], tmp_path / "out", plots=False).json.read_text())
    assert {r["mechanism"] for r in values["g5"]["ranking"]} == {"ngram", "tiny_draft"}


@pytest.mark.parametrize("heads,kv,d0,aligned", [
    (8, 8, 127, [255, 383, 511, 639]),  # G=1
    (8, 4, 63, [127, 191, 255, 319]),  # G=2
    (32, 8, 31, [63, 95, 127, 159]),  # G=4
    (32, 4, 15, [31, 47, 63, 79]),  # G=8
    (64, 4, 7, [15, 23, 31, 39]),  # G=16
])
def test_g2_g3_for_several_group_sizes(run_copy, tmp_path, heads, kv, d0, aligned):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "hidden_size": 64 * heads, "intermediate_size": 256 * heads, "num_hidden_layers": 4,
        "num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": 1000, "torch_dtype": "bfloat16"}))
    prov = json.loads((run_copy / "provenance.json").read_text())
    prov["config"]["target"]["path"] = str(model)
    (run_copy / "provenance.json").write_text(json.dumps(prov))
    data = load([run_copy])
    ctx = resolve(data, "h100")
    with plots.enabled(False):
        s2, s3 = attention_start.build(data, ctx), attention_tiles.build(data, ctx, tmp_path / "out")
    t2, t3 = s2.values["targets"]["tiny"], s3.values["targets"]["tiny"]
    assert t2["G"] == heads // kv and t2["D0"] == d0
    assert t3["aligned"] == aligned
    assert all(x > d0 and (heads // kv) * (1 + x) % 128 == 0 for x in t3["aligned"])
