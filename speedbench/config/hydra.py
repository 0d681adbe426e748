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
    """An OmegaConf error as one line naming the key (its message has a multi-line trailer)."""
    key = getattr(exc, "full_key", None) or getattr(exc, "key", None)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    name = f"{where}.{key}" if where and key else (key or where)
    return f"{name}: {first}" if name else first


def typed(schema: type, values: dict, where: str):
    """``values`` as an instance of the dataclass ``schema``; an unknown key or a wrong type raises naming it."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), values))
    except OmegaConfBaseException as exc:
        raise ValueError(omegaconf_line(exc, where)) from None
