"""What a model and a GPU are: KV geometry, parameter groups, weight bytes, built-in catalogs.

Public entry points: `resolve_model`, `model_from_config`, `weight_bytes`, `resolve_gpu`.
"""

from __future__ import annotations

from kvtier.model.catalog import catalog_ids, model_for_architecture, resolve_model
from kvtier.model.config import model_from_config
from kvtier.model.description import AttentionKind, KVGeometry, LayerKind, ModelSpec, ParamGroup
from kvtier.model.gpu import GpuSpec, resolve_gpu
from kvtier.model.weights import WeightBytes, weight_bytes

__all__ = [
    "AttentionKind",
    "GpuSpec",
    "KVGeometry",
    "LayerKind",
    "ModelSpec",
    "ParamGroup",
    "WeightBytes",
    "catalog_ids",
    "model_for_architecture",
    "model_from_config",
    "resolve_gpu",
    "resolve_model",
    "weight_bytes",
]
