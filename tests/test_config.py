"""Every config file composes against the typed schema; typos and wrong types fail naming the key."""
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

from speedbench.cli import CONF_DIR
from speedbench.config import RunConfig, register_configs, to_run_config

GROUPS = sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir() and p.name not in ("hydra", "gate"))  # gate: not a run group


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def compose_run(overrides: list[str]):
    GlobalHydra.instance().clear()
    register_configs()
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
    # even forced with '+', the typed schema refuses a key it does not have
    with pytest.raises(ConfigKeyError, match="num_speculativ_tokens"):
        to_run_config(compose_run(["+drafter.num_speculativ_tokens=3", "run_id=x"]))


def test_wrong_type_fails_naming_the_key():
    with pytest.raises((ValidationError, ConfigCompositionException), match="batch_size"):
        compose_run(["batch_size=four"])


def test_cross_field_check_names_the_option():
    cfg = compose_run(["drafter=ngram", "drafter.num_speculative_tokens=0", "run_id=x"])
    with pytest.raises(ValueError, match="drafter.num_speculative_tokens"):
        to_run_config(cfg)


def test_defaults_are_the_embedded_benchmark():
    run = to_run_config(compose_run(["run_id=x"]))
    assert run.backend.name == "torch"
    assert run.target.path.startswith(("builtin:", "random:"))
    assert not run.target.trust_remote_code
    assert Path(CONF_DIR / "config.yaml").exists()
