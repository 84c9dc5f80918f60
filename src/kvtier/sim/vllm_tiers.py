"""A vLLM deployment's tiers behind the GPU pool, from its flags, for the simulator.

  native offloading   the ledger's host pool (engines/vllm/offloading.py: the release's
                      num_cpu_blocks, v0.11.0 - v0.13.x, or cpu_bytes_to_use, v0.14.0 on, from
                      --kv-transfer-config {"kv_connector": "OffloadingConnector", ...} or
                      --kv-offloading-size); with "block_size" (tokens) or "blocks_per_chunk"
                      (v0.26.0 on) in kv_connector_extra_config the connector stores and hits
                      whole chunks of that many tokens
  simple offloading   SimpleCPUOffloadConnector (v0.19.0 on: VLLM_USE_SIMPLE_KV_OFFLOAD=1 with
                      --kv-offloading-size, or --kv-transfer-config naming it), the ledger's pool
                      (engines/vllm/simple_offload.py) in engine blocks: the same tier as the native
                      one, a vLLM BlockPool evicting least recently used first from its free queue,
                      written as blocks are computed (eager mode,
                      SimpleCPUOffloadScheduler._prepare_eager_store_specs), hit after the GPU
                      prefix up to one token short of the prompt and loaded on admission
                      (get_num_new_matched_tokens, update_state_after_alloc); not modelled: it
                      stores a block the step after it is computed, and a store does not refresh
                      a block it holds. lazy_offload true
                      stores only GPU blocks about to be evicted (_prepare_lazy_store_specs), a
                      write policy the simulator does not model: exit 2.
  LMCache             --kv-transfer-config {"kv_connector": "LMCacheConnectorV1", ...}, or
                      --kv-offloading-backend lmcache with --kv-offloading-size S, per release
                      (config/vllm.py _post_init_kv_transfer_config):
                        v0.12.0 - v0.22.x  LMCacheConnectorV1, kv_connector_extra_config replaced
                                           by local_cpu true and max_local_cpu_size S / (TP x PP)
                                           GiB per rank (the config's own lmcache.* keys dropped:
                                           a note says so)
                        v0.23.0 on         LMCacheMPConnector, S not read: the tier is a standalone
                                           LMCache server's, sized by that server's own
                                           --l1-size-gb, which no vLLM flag or variable sets:
                                           exit 2
                      LMCache's settings come from LMCACHE_* assignments before the command,
                      overridden by kv_connector_extra_config keys `lmcache.<name>`: chunk_size
                      (256), local_cpu (true), max_local_cpu_size (5.0 GiB per rank), local_disk,
                      max_local_disk_size (0 GiB), remote_url. The local CPU is the host tier;
                      the disk (or, with remote_url, the remote store, unbounded) the store tier.
                      Another lmcache.* key is named in a note, not read: LMCache 0.3.15 skips
                      a key its config lacks with a warning (_apply_extra_config).

A config that is not a JSON object, a key that is not a KVTransferConfig field from v0.16.0 (a
note before: engines/vllm/kv_transfer.py), a connector other than these three, or an LMCache size
that is not a number exits 2 naming it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from kvtier.engines.deployment import Deployment
from kvtier.engines.launch import LMCACHE_SETTINGS
from kvtier.engines.ledger import Ledger
from kvtier.engines.version import Version
from kvtier.engines.vllm import kv_transfer, versions
from kvtier.engines.vllm.kv_transfer import TransferConfig
from kvtier.engines.vllm.offloading import NATIVE, chunk_blocks, connector
from kvtier.engines.vllm.simple_offload import SIMPLE, lazy_offload
from kvtier.engines.vllm.versions import V0_12, V0_23
from kvtier.errors import KvtierError
from kvtier.sim.trace import MAX_LENGTH

GiB = 1 << 30
MAX_GIB = 1e7  # an LMCache size per rank beyond any host's RAM or disk
LMCACHE = "LMCacheConnectorV1"
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
    notes: tuple[str, ...] = ()  # what the deployment gave that the release does not read


def _number(settings: dict[str, str], key: str, where: str, unit: str = "GiB") -> float:
    """A size from 0 to MAX_GIB (GiB), or a count of tokens up to MAX_LENGTH."""
    raw = settings[key]
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    most = MAX_GIB if unit == "GiB" else MAX_LENGTH
    if not 0 <= value <= most:  # NaN fails too
        raise KvtierError(
            f"LMCache {key} ({where}) must be a number of {unit} from 0 to {most:,.0f}, "
            f"got {raw!r:.40}"
        )
    return value


def _switch(settings: dict[str, str], key: str, where: str) -> bool:
    word = settings[key].lower()
    if word not in ("true", "1", "yes", "false", "0", "no"):
        raise KvtierError(f"LMCache {key} ({where}) must be true or false, got {word!r:.40}")
    return word in ("true", "1", "yes")


def _lmcache(
    d: Deployment, extra: dict[str, object], per_token: int, where: str | None = None
) -> VllmTiers:
    """LMCache's tiers from its settings: defaults, LMCACHE_* assignments, then `extra`'s
    lmcache.* keys (from `where`, else kv_connector_extra_config)."""
    settings = dict(LMCACHE_DEFAULTS)
    origin = {k: "LMCache's default" for k in settings}
    for name, value in d.lmcache_env:
        key = name.removeprefix("LMCACHE_").lower()
        settings[key], origin[key] = value, name
    for name, given in extra.items():
        if name.startswith("lmcache."):
            key = name.removeprefix("lmcache.")
            settings[key] = str(given)
            origin[key] = where or f"kv_connector_extra_config {name}"
    chunk = _number(settings, "chunk_size", origin["chunk_size"], "tokens")
    if chunk < 1 or chunk != int(chunk):
        raise KvtierError(f"LMCache chunk_size must be a whole number of tokens, got {chunk:g}")
    host = 0
    sources = [("host tier", "LMCache local CPU")]
    if _switch(settings, "local_cpu", origin["local_cpu"]):
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
    return VllmTiers(host, store, int(chunk), tuple(sources), _unread(extra))


def _unread(extra: dict[str, object]) -> tuple[str, ...]:
    """A note naming the lmcache.* keys kvtier does not read. LMCache itself skips a key its
    LMCacheEngineConfig lacks with a warning, "Config key '...' does not exist in configuration"
    (LMCache 0.3.15, integration/vllm/vllm_v1_adapter.py _apply_extra_config ->
    v1/config_base.py validate_and_set_config_value): a misspelt size leaves its default."""
    unread = [k for k in extra if k.startswith("lmcache.") and k[8:] not in LMCACHE_SETTINGS]
    if not unread:
        return ()
    read = ", ".join(f"lmcache.{name}" for name in LMCACHE_SETTINGS)
    return (
        f"kv_connector_extra_config {', '.join(unread)} not modelled (ignored): kvtier reads "
        f"{read}; LMCache skips a key its config lacks with a warning",
    )


def _native(d: Deployment, ledger: Ledger, config: TransferConfig, version: Version) -> VllmTiers:
    """The connector's pool the ledger sized (engines/vllm/offloading.py), hit in whole chunks
    when the config sets `block_size` or `blocks_per_chunk`."""
    pool, extra = ledger.host_pool, config.extra
    assert pool is not None
    page = ledger.page_size
    sources = [("host tier", f"{pool.tokens:,} tokens: {pool.source}")]
    if connector(d, config, version) == SIMPLE:
        if lazy_offload(extra):
            raise KvtierError(
                f"{SIMPLE} lazy_offload stores GPU blocks only as they near eviction, a write "
                "policy simulate does not model (it writes blocks as they are computed); drop "
                "lazy_offload for its eager mode"
            )
        return VllmTiers(pool.tokens, sources=tuple(sources))
    per, given = chunk_blocks(extra, page, version)
    if not given:
        return VllmTiers(pool.tokens, sources=tuple(sources))
    sources.append(("connector granularity", f"{NATIVE} blocks of {per * page} tokens"))
    return VllmTiers(pool.tokens, 0, per * page, tuple(sources))


def vllm_tiers(d: Deployment, ledger: Ledger) -> VllmTiers:
    """The host and store tiers `d`'s flags give, in tokens per rank; a note names the
    --kv-transfer-config keys a release before v0.16.0 drops."""
    version = versions.DEFAULT.resolve(d.engine_version)
    config = kv_transfer.read(d.kv_transfer_config, version)
    tiers = _tiers(d, ledger, config, version)
    ignored = config.notes
    return dataclasses.replace(tiers, notes=(*tiers.notes, *ignored)) if ignored else tiers


def _tiers(d: Deployment, ledger: Ledger, config: TransferConfig, version: Version) -> VllmTiers:
    per_token, extra = ledger.kv_bytes_per_token, config.extra
    name = config.connector
    if d.kv_transfer_config is not None and name not in (NATIVE, SIMPLE, LMCACHE):
        named = "no connector" if name is None else f"connector {name!r:.60}"
        raise KvtierError(
            f"--kv-transfer-config names {named}; simulate models {NATIVE}, {SIMPLE} and {LMCACHE}"
        )
    if ledger.host_pool is not None:  # a CPU offloading connector, as the ledger sized it
        return _native(d, ledger, config, version)
    lmcache_backend = d.kv_offloading_backend == "lmcache"
    if lmcache_backend and d.kv_offloading_size_gib is not None:
        return _lmcache_backend(d, version, d.kv_offloading_size_gib, extra, per_token)
    if name == LMCACHE:
        return _lmcache(d, extra, per_token)
    if lmcache_backend:
        raise KvtierError("--kv-offloading-backend lmcache needs --kv-offloading-size")
    return VllmTiers()


def _lmcache_backend(
    d: Deployment, version: Version, size: float, extra: dict[str, object], per_token: int
) -> VllmTiers:
    """--kv-offloading-backend lmcache as `version`'s _post_init_kv_transfer_config sets the
    connector: LMCacheConnectorV1 with S / (TP x PP) GiB of local CPU a rank (its extra config
    replaced) in v0.12.0 - v0.22.x; from v0.23.0 LMCacheMPConnector, sized by no vLLM input."""
    if version < V0_12:
        raise KvtierError(f"vLLM {version} has no --kv-offloading-backend (it arrives in v0.12.0)")
    if version >= V0_23:
        raise KvtierError(
            f"--kv-offloading-backend lmcache in vLLM {version} names LMCacheMPConnector "
            f"(v0.23.0 on), which ignores --kv-offloading-size {size:g}: its tier is a "
            "standalone LMCache server's, sized by that server's own --l1-size-gb, which "
            "kvtier does not read; give --kv-transfer-config naming LMCacheConnectorV1 with "
            "lmcache.max_local_cpu_size, or --vllm-version before 0.23.0"
        )
    gib = size / (d.tp * d.pp)
    forced: dict[str, object] = {"lmcache.local_cpu": True, "lmcache.max_local_cpu_size": gib}
    where = f"--kv-offloading-size {size:g} GiB / {d.tp * d.pp} ranks, vLLM {version}"
    tiers = _lmcache(d, forced, per_token, where)
    dropped = sorted(k for k in extra if k.startswith("lmcache.") and k not in forced)
    if not dropped:
        return tiers
    note = (
        f"vLLM {version} replaces kv_connector_extra_config under --kv-offloading-backend "
        f"lmcache (LMCacheConnectorV1 with local_cpu and max_local_cpu_size only): "
        f"{', '.join(dropped)} not read"
    )
    return dataclasses.replace(tiers, notes=(*tiers.notes, note))
