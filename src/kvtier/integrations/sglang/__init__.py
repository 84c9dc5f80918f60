"""kvtier's page store as an L3 storage backend of SGLang's hierarchical cache (HiCache).

SGLang loads it with its `dynamic` storage backend:

    --enable-hierarchical-cache --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "kvtier",
        "module_path": "kvtier.integrations.sglang", "class_name": "KvtierHiCacheStorage",
        "interface_v1": 1, "url": "file:///var/cache/kvtier"}'

`url` is any `kvtier.store.open_store` URL: a directory (`file:///dir`) or Redis
(`redis://host:6379/0`). Supported SGLang: 0.5.23 (`TESTED_SGLANG_VERSIONS`); another version
loads with a warning if its `HiCacheStorage` has the calls used, and fails with a message naming
what is missing otherwise. See docs/sglang-hicache.md.

Importing this package imports neither SGLang nor torch: `KvtierHiCacheStorage` is built on
first access, on SGLang's `HiCacheStorage`. Nothing else in kvtier imports this package.
"""

from __future__ import annotations

from typing import Any

from kvtier.integrations.sglang.config import (
    CLASS_NAME,
    MODULE_PATH,
    TESTED_SGLANG_VERSIONS,
    BackendOptions,
    page_hash,
)

__all__ = [
    "CLASS_NAME",
    "MODULE_PATH",
    "TESTED_SGLANG_VERSIONS",
    "BackendOptions",
    "KvtierHiCacheStorage",
    "extra_config",
    "page_hash",
]


def extra_config(url: str, *, interface_v1: bool = True, **options: Any) -> dict[str, Any]:
    """The `--hicache-storage-backend-extra-config` dict that loads this backend on `url`;
    `options` are `open_store`'s (`capacity_bytes`, `ttl_s`, `timeout_s`) or `model_id`."""
    config: dict[str, Any] = {
        "backend_name": "kvtier",
        "module_path": MODULE_PATH,
        "class_name": CLASS_NAME,
        "url": url,
    }
    if interface_v1:
        config["interface_v1"] = 1
    config.update(options)
    BackendOptions.from_extra_config(config)  # refuse a bad option here, not at launch
    return config


def __getattr__(name: str) -> Any:
    if name == CLASS_NAME:
        from kvtier.integrations.sglang.backend import sglang_class

        cls = sglang_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
