"""The report's 'Speculation against context' section: tables, curves, best D per bucket, agentic turns, n/a."""
import pandas as pd

from speedbench.config import BackendConfig, DatasetConfig, ModelConfig, RunConfig, SamplingConfig
from speedbench.drafters.registry import make_drafter
from speedbench.pipeline import runner
from speedbench.report.context import build as section
from speedbench.results.load import ReportData, load

from tests.support.synthetic_results import OPTIONS, shared_results


def texts(sec):
    return "\n".join(b.text for b in sec.blocks if hasattr(b, "text") and isinstance(b.text, str))


def test_the_section_has_the_buckets_curves_and_best_d_from_a_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("context-report")
    sec = section(load([shared_results(tmp_path_factory)]), out)
    rows = pd.DataFrame(sec.values["by_context"])
    assert rows["context"].nunique() >= 2 and set(rows["B"]) == {1, 4}
    assert rows["speedup"].notna().all() and (rows["AL"].dropna() >= 1).all()
    assert (out / "context_speedup_B1.png").stat().st_size > 0 and (out / "context_speedup_B4.png").exists()
    assert set(sec.values["best_d"]) == {"ngram", "tiny_draft"}
    table = sec.values["best_d"]["ngram"]["table"]
    assert {int(e["context_bucket"]) for e in table} == set(rows["context"]) and all(e["cells"] for e in table)
    assert "where D should change with the live context" in texts(sec)


def test_agentic_turns_show_their_growing_context(tmp_path):
    run = RunConfig(target=ModelConfig(name="tiny", path="random:tiny-target"), drafter=make_drafter("ngram", 2),
                    dataset=DatasetConfig(name="agentic", source="agentic", path="agentic/mini.jsonl"),
                    backend=BackendConfig(name="synthetic", options=dict(OPTIONS)), sampling=SamplingConfig(),
                    max_new_tokens=16, results_dir=str(tmp_path), run_id="ag", resume=False, warmup_batches=0)
    runner.run_cells(run, progress=False)
    sec = section(load([tmp_path / "ag"]), tmp_path / "rep")
    turns = pd.DataFrame(sec.values["by_turn"])
    assert list(turns["turn"]) == [1, 2, 3, 4] and turns["context tokens"].is_monotonic_increasing
    assert (turns["n"] == 6).all() and turns["speedup"].notna().all()


def test_results_without_context_render_na():
    cells = pd.DataFrame([{"cell_id": "a", "status": "ok", "derived": False, "category": "qa", "drafter": "ngram",
                           "method": "ngram", "num_speculative_tokens": 2, "batch_size": 1, "extra": {}}])
    sec = section(ReportData(roots=[], cells=cells, provenance=[]), None)
    assert "n/a" in texts(sec) and "by_context" not in sec.values
    assert "n/a" in texts(section(ReportData(roots=[], cells=pd.DataFrame(), provenance=[]), None))


def test_random_against_real_and_the_tiers_at_each_length(tmp_path):
    def cell(cid, dataset, category, al):
        return {"cell_id": cid, "status": "ok", "derived": False, "category": category, "drafter": "ngram",
                "method": "ngram", "num_speculative_tokens": 2, "batch_size": 1, "dataset": dataset, "schedule": "",
                "extra": {"by_context": [{"bucket": e, "steps": 5, "al": al, "speedup": al / 2,
                                          "speedup_ci_low": al / 2 - 0.1, "speedup_ci_high": al / 2 + 0.1}
                                         for e in (512, 1024)]}}

    cells = pd.DataFrame([cell("a", "random", "low_entropy", 1.1), cell("b", "throughput_1k", "low_entropy", 2.5),
                          cell("c", "throughput_1k", "high_entropy", 1.4)])
    sec = section(ReportData(roots=[], cells=cells, provenance=[]), tmp_path)
    assert (tmp_path / "context_speedup_B1.png").exists()
    contrast = pd.DataFrame(sec.values["contrast"]).set_index("context")
    assert list(contrast.index) == [512, 1024]
    assert (contrast["AL random"] == 1.1).all() and (contrast["AL low_entropy"] == 2.5).all()
    assert (contrast["speedup high_entropy"] == 0.7).all()
