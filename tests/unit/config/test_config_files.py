"""Every config file composes against the typed schema; typos and wrong types fail naming the key."""
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ValidationError

from speedbench.cli import CONF_DIR
from speedbench.backends.registry import schemas
from speedbench.config import RunConfig
from speedbench.config import hydra as edge
from speedbench.pipeline.validation import check_settings

GROUPS = sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir() and p.name not in ("hydra", "gate"))  # gate: not a run group


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def to_run_config(cfg):
    return edge.to_run_config(cfg, schemas())


def compose_run(overrides: list[str]):
    GlobalHydra.instance().clear()
    edge.register_configs(schemas())
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=False)


@pytest.mark.parametrize(
    "override",
    [f"{g}={o}" for g in GROUPS if g not in ("experiment", "sweep") for o in options(g)]
    + [f"+experiment={o}" for o in options("experiment")]
    + [f"sweep={o}" for o in options("sweep")],
)
def test_every_config_file_composes(override):
    cfg = compose_run([override, "run_id=test"])
    run = to_run_config(cfg)
    assert isinstance(run, RunConfig)
    assert run.target.path and run.drafter.method


def test_typo_fails_naming_the_key():
    with pytest.raises(ConfigCompositionException, match="num_speculativ_tokens"):
        compose_run(["drafter.num_speculativ_tokens=3"])
    # even forced with '+', the typed schema refuses a key it does not have, naming it
    with pytest.raises(ValueError, match=r"^drafter\.num_speculativ_tokens: unknown key 'num_speculativ_tokens' in "
                                         r"ModelDrafterConfig; did you mean num_speculative_tokens\?$"):
        to_run_config(compose_run(["+drafter.num_speculativ_tokens=3", "run_id=x"]))


@pytest.mark.parametrize("overrides, key", [
    (["drafter=ngram", "+drafter.prompt_lookup_maxx=3"], "drafter.prompt_lookup_maxx"),  # ngram's own schema
    (["drafter=ngram", "+drafter.model=x"], "drafter.model"),  # ngram has no weights
    (["drafter=layer_skip", "+drafter.prompt_lookup_min=2"], "drafter.prompt_lookup_min"),
    (["+drafter.options.delay_ms=5"], "drafter.options"),  # fault knobs live under faults
    (["backend=vllm", "+backend.options.max_engine=3"], "backend.options.max_engine"),
    (["backend=openai", "+backend.options.timeout=3"], "backend.options.timeout"),
    (["backend=hf", "+backend.options.max_engines=3"], "backend.options.max_engines"),  # a vLLM key on hf
    (["backend=synthetic", "+backend.options.alpah=0.5"], "backend.options.alpah"),
    (["+backend.options.anything=1"], "backend.options.anything"),  # torch has no options at all
])
def test_each_method_and_engine_has_its_own_schema(overrides, key):
    with pytest.raises(ValueError, match=rf"^{key.replace('.', '[.]')}: "):
        to_run_config(compose_run([*overrides, "run_id=x"]))


def test_per_method_schemas_are_the_types_the_core_gets():
    from speedbench.config.engine_options import OpenAIOptions, VllmOptions
    from speedbench.config import LayerSkipDrafterConfig, ModelDrafterConfig, NgramDrafterConfig

    assert isinstance(to_run_config(compose_run(["run_id=x"])).drafter, ModelDrafterConfig)
    assert isinstance(to_run_config(compose_run(["drafter=ngram", "run_id=x"])).drafter, NgramDrafterConfig)
    assert isinstance(to_run_config(compose_run(["drafter=layer_skip", "run_id=x"])).drafter, LayerSkipDrafterConfig)
    run = to_run_config(compose_run(["backend=vllm", "+backend.options.engine_args.tensor_parallel_size=2", "run_id=x"]))
    assert isinstance(run.backend.options, VllmOptions) and run.backend.options.engine_args == {"tensor_parallel_size": 2}
    assert isinstance(to_run_config(compose_run(["backend=openai", "run_id=x"])).backend.options, OpenAIOptions)


def test_fault_knobs_are_outside_the_cell_identity_by_construction():
    from speedbench.pipeline.cells import CellKey

    plain = to_run_config(compose_run(["run_id=x"]))
    slowed = to_run_config(compose_run(["run_id=x", "faults.delay_ms=20"]))
    assert slowed.faults.delay_ms == 20 and not hasattr(slowed.drafter, "delay_ms")
    assert CellKey.for_run(plain, "coding", "").cell_id == CellKey.for_run(slowed, "coding", "").cell_id
    # values are the validation pass's (one rule, one place), never the Hydra edge's
    assert any("faults.delay_ms" in p for p in check_settings(to_run_config(compose_run(["run_id=x", "faults.delay_ms=-1"]))))


def test_wrong_type_fails_naming_the_key():
    with pytest.raises((ValidationError, ConfigCompositionException), match="batch_size"):
        compose_run(["batch_size=four"])


def test_cross_field_check_names_the_option():
    cfg = compose_run(["drafter=ngram", "drafter.num_speculative_tokens=0", "run_id=x"])
    assert check_settings(to_run_config(cfg)) == ["drafter.num_speculative_tokens must be >= 1 for method 'ngram'"]


def test_defaults_are_the_embedded_benchmark():
    run = to_run_config(compose_run(["run_id=x"]))
    assert run.backend.name == "torch"
    assert run.target.path.startswith(("builtin:", "random:"))
    assert not run.target.trust_remote_code
    assert Path(CONF_DIR / "config.yaml").exists()
