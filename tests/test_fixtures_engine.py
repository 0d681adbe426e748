"""Quality bars of the shipped drafters (two draft models, one EAGLE-3 head), measured by the reference engine on the project's own prompts.

Greedy, B=1, D=4, 8 coding and 8 writing prompts of datasets/qualitative.jsonl, 64 new tokens.
The large drafter's lead over the small one is thin (about 0.03-0.07 AL) for this family.
Recorded values come from the shipped weights (fp32); greedy decoding makes them deterministic
up to floating-point reduction order, hence the small tolerance.
"""
import pytest

from speedbench.config import BackendConfig, DatasetConfig, ModelConfig, RunConfig, SamplingConfig
from speedbench.drafters.registry import make_drafter
from speedbench.pipeline.runner import run_cells

RECORDED_AL = {
    ("tiny-draft-small", "coding"): 3.158,
    ("tiny-draft-small", "writing"): 2.920,
    ("tiny-draft-large", "coding"): 3.231,
    ("tiny-draft-large", "writing"): 2.949,
    ("tiny-eagle3", "coding"): 2.549,
    ("tiny-eagle3", "writing"): 2.549,
}


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    out = {}
    for name, method in (("tiny-draft-small", "draft_model"), ("tiny-draft-large", "draft_model"),
                         ("tiny-eagle3", "eagle3")):
        run = RunConfig(
            target=ModelConfig(name="tiny", path="builtin:tiny-target"),
            drafter=make_drafter(method, 4, name=name, model=f"builtin:{name}"),
            dataset=DatasetConfig(name="q", path="qualitative.jsonl", categories=["coding", "writing"], n_requests=16),
            backend=BackendConfig(), sampling=SamplingConfig(), max_new_tokens=64,
            results_dir=str(tmp_path_factory.mktemp("q")), run_id=name, warmup_batches=0,
        )
        for cell in run_cells(run, progress=False):
            assert cell.status == "ok" and cell.greedy_match_rate == 1.0
            out[(name, cell.category)] = cell.al
    return out


def test_quality_bars_on_real_prompts(measured):
    assert measured[("tiny-draft-small", "coding")] >= 2.5  # an external drafter at D=4 reaches AL >= 2.5 on code
    for name in ("tiny-draft-small", "tiny-draft-large"):
        assert measured[(name, "coding")] > measured[(name, "writing")]
    for cat in ("coding", "writing"):
        assert measured[("tiny-draft-large", cat)] > measured[("tiny-draft-small", cat)]
        assert measured[("tiny-eagle3", cat)] >= 2.0  # the EAGLE-3 head is accepted, not just lossless


def test_greedy_al_equals_recorded_values(measured):
    for key, value in RECORDED_AL.items():
        assert measured[key] == pytest.approx(value, abs=0.02), key
