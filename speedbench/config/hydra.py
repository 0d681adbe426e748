"""The Hydra edge: the schemas in Hydra's ConfigStore, and a composed config as a typed ``RunConfig``.

What depends on the registries (a drafter method's schema, a backend's options schema) comes in
as :class:`Schemas` (``backends.registry.schemas()``), so this package imports no layer above it.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Mapping

from omegaconf import DictConfig, OmegaConf

from .engine_options import retired_options
from .schemas import (BackendConfig, DatasetConfig, DrafterConfig, LoggerConfig, ModelConfig, RunConfig,
                      SamplingConfig, SweepConfig, unknown_backend)


@dataclass(frozen=True)
class Schemas:
    drafter: Callable[[str], type]  # drafter method -> its schema
    drafter_kinds: Mapping[type, str]  # schema -> the name conf/drafter/*.yaml give it (schema_<name>)
    options: Mapping[str, type]  # backend name -> its options schema


def register_resolvers() -> None:
    """The package's OmegaConf resolvers (``${sb_run_dir:...}``, ``${sb_slurm_gpus:...}`` and its
    siblings), registered where a config is composed or a Hydra job starts (``register_configs``; a
    submitit job process: ``launchers.submitit.Stoppable.__call__``), never as a side effect of an import."""
    from .. import slurm
    from ..results import runlock

    for name, resolver in {**runlock.RESOLVERS, **slurm.RESOLVERS}.items():
        OmegaConf.register_new_resolver(name, resolver, replace=True)


def register_configs(schemas: Schemas) -> None:
    """Schemas in Hydra's ConfigStore: ``conf/<group>/*.yaml`` name theirs in their defaults list
    (and the resolvers the files use)."""
    from hydra.core.config_store import ConfigStore

    register_resolvers()
    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    for group, node in [
        ("target", ModelConfig),
        ("dataset", DatasetConfig),
        ("sampling", SamplingConfig),
        ("logger", LoggerConfig),
        ("sweep", SweepConfig),
    ]:
        cs.store(group=group, name=f"{group}_schema", node=node)
    for schema, name in schemas.drafter_kinds.items():  # conf/drafter/X.yaml: defaults: [schema_<kind>, _self_]
        cs.store(group="drafter", name=f"schema_{name}", node=schema)
    for backend, options in schemas.options.items():  # conf/backend/X.yaml: defaults: [schema_<name>, _self_]
        cs.store(group="backend", name=f"schema_{backend}", node=BackendConfig(name=backend, options=options()))


def to_run_config(cfg: DictConfig | Mapping, schemas: Schemas) -> RunConfig:
    """The composed Hydra config (or its resolved container) as a typed ``RunConfig`` (drops the
    ``hydra`` node).

    The drafter is merged into its method's schema and ``backend.options`` into its engine's,
    so a key that a method or an engine does not have fails here, naming it. Value checks are
    the validation pass's (``pipeline.validation``).
    """
    from omegaconf.errors import OmegaConfBaseException

    data = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else copy.deepcopy(dict(cfg))
    data.pop("hydra", None)
    drafter = dict(data.pop("drafter", None) or {})
    backend = dict(data.pop("backend", None) or {})
    try:
        run = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RunConfig(drafter=DrafterConfig(), backend=BackendConfig())), data))
    except OmegaConfBaseException as exc:  # e.g. +sampling.temprature=0.5: one line naming the key
        raise ValueError(omegaconf_line(exc)) from None
    run.drafter = typed(schemas.drafter(str(drafter.get("method", "none"))), drafter, "drafter")
    options = backend.pop("options", None) or {}
    run.backend = typed(BackendConfig, backend, "backend")
    name = run.backend.name
    if name not in schemas.options:
        raise ValueError(unknown_backend(name, schemas.options))
    retired = retired_options(options)
    if retired:
        raise ValueError(retired[0])
    run.backend.options = typed(schemas.options[name], options, "backend.options")
    return run


def omegaconf_line(exc: Exception, where: str = "") -> str:
    """An OmegaConf error as one line naming the key (its message has a multi-line trailer), with
    the help a user needs to fix it: the closest key of the schema for an unknown key, the
    expected type for a value that does not convert."""
    key = getattr(exc, "full_key", None) or getattr(exc, "key", None)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    name = f"{where}.{key}" if where and key else (key or where)
    first = _key_help(exc, first)
    return f"{name}: {first}" if name else first


def _key_help(exc: Exception, first: str) -> str:
    """``first`` (an OmegaConf message's first line) with a did-you-mean over the schema's keys or
    the expected type added, where ``exc`` says which schema and key it was about."""
    import dataclasses

    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    from ..console import did_you_mean

    leaf = str(getattr(exc, "key", "") or "")
    schema = getattr(exc, "object_type", None)
    if not leaf:
        return first
    if isinstance(exc, (ConfigAttributeError, ConfigKeyError)) and "not in" in first:
        keys = schema_keys(schema, getattr(exc, "parent_node", None))
        where = getattr(exc, "object_type_str", None) or "this node"
        if not keys:
            takes_none = isinstance(schema, type) and dataclasses.is_dataclass(schema)  # a schema without fields
            return f"unknown key {leaf!r}: {where} takes no keys" if takes_none else first
        close = did_you_mean(leaf, keys)
        return (f"unknown key {leaf!r} in {where}; did you mean {close}?" if close
                else f"unknown key {leaf!r} in {where}; its keys: {', '.join(keys)}")
    if isinstance(exc, ValidationError) and "could not be converted" in first:
        expected = expected_type(schema, leaf)
        if expected:
            return f"expected {expected}, got {getattr(exc, 'value', None)!r}"
    return first


def schema_keys(schema, node=None) -> list[str]:
    """The keys a config node may hold: its dataclass's fields, else the node's own keys."""
    import dataclasses

    if isinstance(schema, type) and dataclasses.is_dataclass(schema):
        return [f.name for f in dataclasses.fields(schema) if not f.name.startswith("_")]
    try:
        return [str(k) for k in node.keys() if not str(k).startswith("_")] if node is not None else []
    except Exception:  # noqa: BLE001 - a node without keys: no list to offer
        return []


def expected_type(schema, key: str) -> str | None:
    """What a dataclass field ``key`` of ``schema`` takes, in words (``an integer``, ``a number or null``)."""
    import dataclasses
    import typing

    if not (isinstance(schema, type) and dataclasses.is_dataclass(schema)):
        return None
    try:
        hint = typing.get_type_hints(schema).get(key)
    except Exception:  # noqa: BLE001 - an unresolvable annotation: say nothing rather than guess
        return None
    return None if hint is None else _type_words(hint)


def _type_words(hint) -> str:
    import enum
    import typing

    words = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    if hint in words:
        return words[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        kinds = [_type_words(a) for a in args if a is not type(None)]
        return " or ".join(kinds) + (" or null" if type(None) in args else "")
    if origin is typing.Literal:
        return "one of " + ", ".join(map(str, args))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(m.name for m in hint)
    if origin in (list, tuple) or hint in (list, tuple):
        return "a list ([...])"
    if origin is dict or hint is dict:
        return "a mapping ({...})"
    return getattr(hint, "__name__", str(hint))


def internal_config_name(name: str) -> bool:
    """A ConfigStore name :func:`register_configs` gives a schema (``schema_<kind>``, ``<group>_schema``,
    ``run_schema``): config files build on them; a user never picks one."""
    name = name.rsplit("/", 1)[-1]
    return name.startswith("schema_") or name.endswith("_schema")


def missing_option_lines(exc: Exception, argv: list[str] | tuple[str, ...] = ()) -> list[str] | None:
    """Hydra's "Could not find 'GROUP/NAME'" (a ``MissingConfigException``) as a short line with a
    did-you-mean and a line of the group's options (every option on Hydra's search path:
    ``conf/``, ``--config-dir``, search-path plugins; the internal schemas left out); None when
    ``exc`` is not about a group option. ``argv``: the overrides, to spell the option as the user did (``+experiment=``)."""
    from ..console import did_you_mean

    missing = str(getattr(exc, "missing_cfg_file", "") or "")
    options = getattr(exc, "options", None)
    if "/" not in missing or options is None:
        return None
    group, name = missing.rsplit("/", 1)
    shown = sorted(o for o in options if not internal_config_name(o))
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    inside = first.split(":", 1)[0] if first.startswith("In '") and not first.startswith(("In 'config'", "In 'hydra/config'")) else ""
    prefix = next((a.partition("=")[0][: -len(group)] for a in argv if a.partition("=")[0].lstrip("+~") == group), "")
    close = did_you_mean(name, shown)
    line = (f"{inside + ': ' if inside else ''}{prefix}{group}={name}: no {group} config named {name!r}"
            + (f"; did you mean {prefix}{group}={close}?" if close else ""))
    return [line, f"  {group} options: {', '.join(shown) or '(none)'}"]


def hide_internal_help(text: str) -> str:
    """``speedbench run --help`` without the internal schema names in its list of groups' options."""
    out, groups = [], False
    for line in text.splitlines():
        if line.startswith("== "):
            groups = line.startswith("== Configuration groups")
        group, sep, options = line.partition(": ")
        if groups and sep and group and not group.startswith(" "):
            names = [o.strip() for o in options.split(",")]
            line = f"{group}: {', '.join(n for n in names if not internal_config_name(n))}"
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def typed(schema: type, values: dict, where: str):
    """``values`` as an instance of the dataclass ``schema``; an unknown key or a wrong type raises naming it."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), values))
    except OmegaConfBaseException as exc:
        raise ValueError(omegaconf_line(exc, where)) from None
