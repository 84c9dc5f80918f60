"""The fields of vLLM's `--kv-transfer-config` (KVTransferConfig, config/kv_transfer.py) per
release, and what a release does with a key that is not one of them. Read in the v0.11.0 -
v0.17.0, v0.20.0, v0.26.0, v0.29.0 and v0.31.0 - v0.33.0 wheels.

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
