"""A vLLM deployment's tiers behind the GPU pool, from its flags, for the simulator.

  native offloading   --kv-offloading-size GiB over all ranks (--kv-offloading-backend native,
                      the default): the ledger's CPUOffloadingSpec host pool; or
                      --kv-transfer-config {"kv_connector": "OffloadingConnector",
                      "kv_connector_extra_config": {"cpu_bytes_to_use": B | "num_cpu_blocks": N}}
                      and optionally "block_size" (tokens, a multiple of the GPU block) or
                      "blocks_per_chunk": the connector stores and hits whole chunks of that
                      many tokens, and counts num_cpu_blocks in them (one GPU block each by
                      default; vLLM's offloading config, blocks_per_chunk from v0.32)
  LMCache             --kv-transfer-config {"kv_connector": "LMCacheConnectorV1", ...}, or
                      --kv-offloading-backend lmcache with --kv-offloading-size S (vLLM sets
                      LMCache's local CPU to S / ranks GiB per rank). LMCache's settings come from
                      LMCACHE_* assignments before the command, overridden by
                      kv_connector_extra_config keys `lmcache.<name>`: chunk_size (256),
                      local_cpu (true), max_local_cpu_size (5.0 GiB per rank), local_disk,
                      max_local_disk_size (0 GiB), remote_url. The local CPU is the host tier;
                      the disk (or, with remote_url, the remote store, unbounded) the store tier.

A config that is not a JSON object, a connector other than these two, or an LMCache size that
is not a number exits 2 naming it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from kvtier.engines.deployment import Deployment
from kvtier.engines.ledger import Ledger
from kvtier.errors import KvtierError

GiB = 1 << 30
NATIVE, LMCACHE = "OffloadingConnector", "LMCacheConnectorV1"
UNBOUNDED_TOKENS = 1 << 40  # a remote store: no capacity is stated
# LMCacheEngineConfig's defaults (LMCache 0.3)
LMCACHE_DEFAULTS = {
    "chunk_size": "256",
    "local_cpu": "true",
    "max_local_cpu_size": "5.0",
    "max_local_disk_size": "0.0",
}


@dataclass(frozen=True, slots=True)
class VllmTiers:
    host_tokens: int = 0
    store_tokens: int = 0
    chunk_tokens: int = 0  # hits beyond the GPU count in whole chunks of this; 0: engine blocks
    sources: tuple[tuple[str, str], ...] = ()


def _config(raw: str) -> tuple[str, dict[str, object]]:
    try:
        config = json.loads(raw)
    except (ValueError, RecursionError):
        raise KvtierError(f"--kv-transfer-config is not JSON: {raw[:60]!r}") from None
    if not isinstance(config, dict):
        raise KvtierError("--kv-transfer-config must be a JSON object")
    name = config.get("kv_connector")
    if name not in (NATIVE, LMCACHE):
        raise KvtierError(
            f"--kv-transfer-config names connector {name!r:.60}; simulate models "
            f"{NATIVE} and {LMCACHE}"
        )
    extra = config.get("kv_connector_extra_config") or {}
    if not isinstance(extra, dict):
        raise KvtierError("--kv-transfer-config: kv_connector_extra_config must be an object")
    return str(name), extra


def _number(settings: dict[str, str], key: str, where: str) -> float:
    raw = settings[key]
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise KvtierError(f"LMCache {key} ({where}) must be a number of GiB, got {raw!r:.40}")
    return value


def _lmcache(
    d: Deployment, extra: dict[str, object], per_token: int, cpu_gib: float | None
) -> VllmTiers:
    settings = dict(LMCACHE_DEFAULTS)
    origin = {k: "LMCache's default" for k in settings}
    for name, value in d.lmcache_env:
        key = name.removeprefix("LMCACHE_").lower()
        settings[key], origin[key] = value, name
    if cpu_gib is not None:
        settings["max_local_cpu_size"] = repr(cpu_gib)
        origin["max_local_cpu_size"] = "--kv-offloading-size / ranks"
    for name, given in extra.items():
        if name.startswith("lmcache."):
            key = name.removeprefix("lmcache.")
            settings[key], origin[key] = str(given), f"kv_connector_extra_config {name}"
    chunk = _number(settings, "chunk_size", origin["chunk_size"])
    if chunk < 1 or chunk != int(chunk):
        raise KvtierError(f"LMCache chunk_size must be a whole number of tokens, got {chunk:g}")
    host = 0
    sources = [("host tier", "LMCache local CPU")]
    if settings["local_cpu"].lower() not in ("false", "0", "no"):
        gib = _number(settings, "max_local_cpu_size", origin["max_local_cpu_size"])
        host = int(gib * GiB) // per_token
        sources = [
            (
                "host tier",
                f"LMCache local CPU {gib:g} GiB per rank "
                f"({origin['max_local_cpu_size']}): {host:,} tokens",
            )
        ]
    store = 0
    if settings.get("remote_url"):
        store = UNBOUNDED_TOKENS
        sources.append(
            (
                "store tier",
                f"LMCache remote {settings['remote_url']} (no capacity stated: unbounded)",
            )
        )
    elif settings.get("local_disk"):
        gib = _number(settings, "max_local_disk_size", origin["max_local_disk_size"])
        store = int(gib * GiB) // per_token
        sources.append(("store tier", f"LMCache local disk {gib:g} GiB per rank: {store:,} tokens"))
    sources.append(("connector granularity", f"LMCache chunks of {int(chunk)} tokens"))
    return VllmTiers(host, store, int(chunk), tuple(sources))


def _native_chunk(extra: dict[str, object], page: int) -> tuple[int, tuple[tuple[str, str], ...]]:
    """The OffloadingConnector's chunk in tokens (0: one GPU block) and its source line, from
    `block_size` (tokens) or `blocks_per_chunk` (vLLM's offloading config: one of the two, a
    whole number of GPU blocks)."""
    tokens, per = extra.get("block_size"), extra.get("blocks_per_chunk")
    if tokens is None and per is None:
        return 0, ()
    if tokens is not None and per is not None:
        raise KvtierError(
            f"--kv-transfer-config: {NATIVE} takes block_size or blocks_per_chunk, not both"
        )
    key, value = ("block_size", tokens) if tokens is not None else ("blocks_per_chunk", per)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise KvtierError(
            f"--kv-transfer-config: {NATIVE} {key} must be a positive whole number, "
            f"got {value!r:.40}"
        )
    chunk = value if key == "block_size" else value * page
    if chunk % page:
        raise KvtierError(
            f"--kv-transfer-config: {NATIVE} block_size {chunk} must be a multiple of the GPU "
            f"block ({page} tokens)"
        )
    return chunk, (("connector granularity", f"{NATIVE} blocks of {chunk} tokens ({key})"),)


def vllm_tiers(d: Deployment, ledger: Ledger) -> VllmTiers:
    """The host and store tiers `d`'s flags give, in tokens per rank."""
    per_token = ledger.kv_bytes_per_token
    world = d.tp * d.pp
    if d.kv_transfer_config is not None:
        name, extra = _config(d.kv_transfer_config)
        if name == LMCACHE:
            return _lmcache(d, extra, per_token, None)
        chunk, chunk_source = _native_chunk(extra, ledger.page_size)
        blocks, size = extra.get("num_cpu_blocks"), extra.get("cpu_bytes_to_use")
        if isinstance(blocks, int) and not isinstance(blocks, bool) and blocks > 0:
            tokens = blocks * (chunk or ledger.page_size)
            host = f"{NATIVE} num_cpu_blocks {blocks:,}: {tokens:,} tokens"
            return VllmTiers(tokens, 0, chunk, (("host tier", host), *chunk_source))
        if isinstance(size, (int, float)) and not isinstance(size, bool) and size > 0:
            tokens = int(size) // (per_token * world)
            host = f"{NATIVE} cpu_bytes_to_use {int(size):,} over {world} ranks: {tokens:,} tokens"
            return VllmTiers(tokens, 0, chunk, (("host tier", host), *chunk_source))
        raise KvtierError(
            f"--kv-transfer-config: {NATIVE} needs kv_connector_extra_config num_cpu_blocks "
            "or cpu_bytes_to_use, a positive number"
        )
    if d.kv_offloading_backend == "lmcache":
        if not d.kv_offloading_size_gib:
            raise KvtierError("--kv-offloading-backend lmcache needs --kv-offloading-size")
        return _lmcache(d, {}, per_token, d.kv_offloading_size_gib / world)
    if ledger.host_pool is not None:
        pool = ledger.host_pool
        return VllmTiers(
            pool.tokens, sources=(("host tier", f"{pool.tokens:,} tokens: {pool.source}"),)
        )
    return VllmTiers()
