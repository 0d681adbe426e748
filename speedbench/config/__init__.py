"""The run's configuration: ``schemas`` (the dataclasses), ``engine_options`` (each engine's
``backend.options``), ``hydra`` (the edge: ConfigStore registration and loading). Imports no
layer above it; the registries that map names to schemas live in ``backends`` and ``drafters``.
"""
from .schemas import (CELL_ORDERS, INTERLEAVE, AcceptanceConfig, BackendConfig, ConfigError, DatasetConfig,
                      DrafterConfig, FaultConfig, LayerSkipDrafterConfig, LoadConfig, LoggerConfig, ModelConfig,
                      ModelDrafterConfig, NgramDrafterConfig, ProtocolConfig, RunConfig, SamplingConfig, SloConfig,
                      SuffixDrafterConfig, SweepConfig)

__all__ = ["CELL_ORDERS", "INTERLEAVE", "AcceptanceConfig", "BackendConfig", "ConfigError", "DatasetConfig",
           "DrafterConfig", "FaultConfig", "LayerSkipDrafterConfig", "LoadConfig", "LoggerConfig", "ModelConfig",
           "ModelDrafterConfig", "NgramDrafterConfig", "ProtocolConfig", "RunConfig", "SamplingConfig", "SloConfig",
           "SuffixDrafterConfig", "SweepConfig"]
