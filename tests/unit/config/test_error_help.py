"""The help a refused override carries: the schema's closest key, the type expected, the options of a group."""
from __future__ import annotations

from speedbench.config import DatasetConfig, ProtocolConfig, RunConfig
from speedbench.config.hydra import expected_type, hide_internal_help, internal_config_name, schema_keys


def test_expected_types_in_words():
    assert expected_type(RunConfig, "batch_size") == "an integer"
    assert expected_type(ProtocolConfig, "budget_s") == "a number"
    assert expected_type(DatasetConfig, "max_prompt_tokens") == "an integer or null"
    assert expected_type(DatasetConfig, "categories") == "a list ([...])"
    assert expected_type(dict, "anything") is None  # no schema: no guess


def test_schema_keys_are_the_dataclass_fields():
    keys = schema_keys(ProtocolConfig)
    assert "budget_s" in keys and "min_repeats" in keys and not any(k.startswith("_") for k in keys)


def test_help_drops_internal_schemas_from_the_groups_only():
    text = ("== Configuration groups ==\nCompose your configuration\n\n"
            "backend: hf, schema_hf, torch\nlogger: logger_schema, none, wandb\n\n"
            "== Config ==\nschema_note: schema_x\n")
    out = hide_internal_help(text)
    assert "backend: hf, torch\n" in out and "logger: none, wandb\n" in out
    assert "schema_note: schema_x" in out  # the config itself is printed as it is
    assert internal_config_name("drafter/schema_plain") and internal_config_name("run_schema")
    assert not internal_config_name("tiny_draft_small")
