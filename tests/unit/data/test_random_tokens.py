"""``dataset=random``: seeded random token ids of a fixed length, sent as they are (no weights loaded here)."""
import pytest

from speedbench.config import ConfigError, DatasetConfig
from speedbench.models import load_tokenizer
from speedbench.pipeline import validation
from speedbench.pipeline.cells import CellKey
from speedbench.pipeline.conversations import _prompt
from tests.support.sweep_helpers import make_run


def random_run(tmp_path, **dataset):
    run = make_run(tmp_path, "r", ignore_eos=True)
    run.dataset = DatasetConfig(name="random", source="random", path="", **({"input_len": 48, "n_requests": 5} | dataset))
    return run


def test_prompts_are_seeded_fixed_length_ids_without_special_tokens(tmp_path):
    reqs = validation.prepare(random_run(tmp_path)).requests
    again = validation.prepare(random_run(tmp_path)).requests
    other = validation.prepare(random_run(tmp_path, seed=1)).requests
    assert [r.prompt_ids for r in reqs] == [r.prompt_ids for r in again] != [r.prompt_ids for r in other]
    assert len(reqs) == 5 and all(len(r.prompt_ids) == 48 and r.category == "random" for r in reqs)
    special = set(load_tokenizer("random:tiny-target").all_special_ids)
    assert not special & {t for r in reqs for t in r.prompt_ids}
    assert len({r.prompt_ids for r in reqs}) == 5
    # the first turn goes to the engine as these ids, not through the chat template
    assert _prompt(None, reqs[0], 0, []) == list(reqs[0].prompt_ids)


def test_the_random_settings_are_refused_in_one_line_each(tmp_path):
    run = random_run(tmp_path, input_len=None, output_len=99)
    run.ignore_eos = False
    with pytest.raises(ConfigError) as exc:
        validation.prepare(run)
    text = str(exc.value)
    assert "dataset.input_len" in text and "dataset.output_len=99" in text and "ignore_eos=true" in text


def test_lengths_are_part_of_the_cell_id_only_for_the_random_dataset(tmp_path):
    run = make_run(tmp_path, "x")
    before = CellKey.for_run(run, "coding", "").cell_id
    run.dataset.input_len = None  # unset on every other dataset: ids as before the keys existed
    assert CellKey.for_run(run, "coding", "").cell_id == before
    a, b = random_run(tmp_path, input_len=32), random_run(tmp_path, input_len=64)
    assert CellKey.for_run(a, "random", "").cell_id != CellKey.for_run(b, "random", "").cell_id
