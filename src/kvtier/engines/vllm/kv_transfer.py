"""The fields of vLLM's `--kv-transfer-config` (KVTransferConfig, config/kv_transfer.py) per
release, and what a release does with a key that is not one of them. Read in the v0.11.0 -
v0.17.0, v0.20.0, v0.26.0, v0.29.0 and v0.31.0 - v0.33.0 wheels. `read` parses and checks it
once a plan, in the order vLLM does (pydantic's fields, then KVTransferConfig.__post_init__'s
kv_role), into the `TransferConfig` the offloading connector, the hybrid KV cache manager's rule
and the allocator check read.

  through v0.15.x  a pydantic dataclass with pydantic's default config (extra "ignore"): the key
                   is dropped without a word, and so is the setting it meant (a misspelt
                   kv_connector_extra_config leaves the connector unsized); kvtier notes it
  v0.16.0 on       config/utils.py config() makes it one with extra="forbid": startup fails
                   naming the key; kvtier refuses it in one line

The fields: kv_connector, engine_id, kv_buffer_device, kv_role, kv_port,
kv_connector_extra_config and kv_connector_module_path in every release read;
enable_permute_local_kv from v0.12.0 and kv_load_failure_policy from v0.13.0; kv_buffer_size,
kv_rank, kv_parallel_size and kv_ip until v0.31.x. A release before v0.11.0 is taken with
v0.11.0's fields, under which only a note can follow.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from kvtier.engines.version import Version
from kvtier.engines.vllm.versions import V0_12, V0_13, V0_16, V0_32
from kvtier.errors import KvtierError, shown

# the fields in every release read
_ALWAYS = (
    "kv_connector",
    "engine_id",
    "kv_buffer_device",
    "kv_role",
    "kv_port",
    "kv_connector_extra_config",
    "kv_connector_module_path",
)
_UNTIL_V0_32 = ("kv_buffer_size", "kv_rank", "kv_parallel_size", "kv_ip")
_SINCE = {"enable_permute_local_kv": V0_12, "kv_load_failure_policy": V0_13}
KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")  # config/kv_transfer.py KVRole


@dataclass(frozen=True, slots=True)
class TransferConfig:
    """`--kv-transfer-config` as a release reads it; the default: none given."""

    connector: str | None = None  # kv_connector (None: none named)
    extra: dict[str, object] = field(default_factory=dict)  # kv_connector_extra_config
    module_path: bool = False  # kv_connector_module_path set
    notes: tuple[str, ...] = ()  # the keys a release before v0.16.0 drops (`ignored_note`)


def read(raw: str | None, version: Version) -> TransferConfig:
    """`raw` (JSON) as vLLM `version` takes it; a key that is not a field is refused from
    v0.16.0 (`unknown_keys`), a bad kv_connector_extra_config, kv_connector or kv_role in every
    release."""
    if raw is None:
        return TransferConfig()
    config = _object(raw)
    unknown = unknown_keys(config, version)
    extra = config.get("kv_connector_extra_config") or {}
    if not isinstance(extra, dict):
        raise KvtierError("--kv-transfer-config: kv_connector_extra_config must be an object")
    name, role = config.get("kv_connector"), config.get("kv_role")
    if name is not None and not isinstance(name, str):
        raise KvtierError(
            f"--kv-transfer-config: kv_connector must be a connector's name (a string), "
            f"got {json.dumps(name)[:60]}"
        )
    if (name is not None or role is not None) and role not in KV_ROLES:
        # config/kv_transfer.py KVTransferConfig.__post_init__: an unknown role, or a
        # connector without one, is a ValueError at startup
        raise KvtierError(
            f"--kv-transfer-config: kv_role {role!r:.40} (kv_connector {name!r:.40}); vLLM "
            f"takes {', '.join(KV_ROLES)}"
        )
    return TransferConfig(
        None if name == "None" else name,  # the name "None" names none, as no kv_connector
        extra,
        bool(config.get("kv_connector_module_path")),
        (ignored_note(unknown, version),) if unknown else (),
    )


def logged(raw: dict[str, object]) -> str:
    """A printed `KVTransferConfig(...)` repr's pairs as `--kv-transfer-config` JSON: the fields
    kvtier reads in any release, unset ones (None) left out (the engine printed only its
    release's fields, so one kvtier's table lacks is dropped, not refused)."""
    known = (*_ALWAYS, *_UNTIL_V0_32, *_SINCE)
    return json.dumps({k: v for k, v in raw.items() if k in known and v is not None})


def _object(raw: str) -> dict[str, object]:
    try:
        config = json.loads(raw)
    except (ValueError, RecursionError):
        raise KvtierError(f"--kv-transfer-config is not JSON: {raw[:60]!r}") from None
    if not isinstance(config, dict):
        raise KvtierError("--kv-transfer-config must be a JSON object")
    return config


def fields(version: Version) -> tuple[str, ...]:
    """KVTransferConfig's fields in `version`."""
    gone = _UNTIL_V0_32 if version < V0_32 else ()
    return (*_ALWAYS, *gone, *(name for name, since in _SINCE.items() if version >= since))


def unknown_keys(config: dict[str, object], version: Version) -> list[str]:
    """The keys of `config` that are not KVTransferConfig fields in `version`; from v0.16.0 the
    first is refused, as vLLM refuses it at startup."""
    known = fields(version)
    unknown = [key for key in config if key not in known]
    if unknown and version >= V0_16:
        raise KvtierError(
            f"--kv-transfer-config: {unknown[0]!r:.60} is not a field of vLLM {version}'s "
            f"KVTransferConfig, which refuses it at startup (extra fields forbidden from "
            f"v0.16.0); its fields: {', '.join(known)}"
        )
    return unknown


def ignored_note(unknown: list[str], version: Version) -> str:
    """The note for keys a release before v0.16.0 drops without a word."""
    return (
        f"--kv-transfer-config {', '.join(f'{shown(key):.60}' for key in unknown)}: not a "
        f"KVTransferConfig field in vLLM {version}, which drops it without a word (ignored), "
        "and so does kvtier"
    )
