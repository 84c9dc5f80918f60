"""Whether vLLM runs the hybrid KV cache manager (HMA) under a KV connector, as
VllmConfig.__post_init__ (config/vllm.py) decides it; read in the v0.12.0 - v0.33.0 wheels. Off,
every sliding-window layer is sized as full attention (unify_hybrid_kv_cache_specs), and a
hybrid linear-attention model cannot start.

  v0.12.x          SchedulerConfig.disable_hybrid_kv_cache_manager is a bool (default False):
                   any --kv-transfer-config turns the manager off, whatever the flag says
  v0.13.0 - 0.21.x a tri-state (default None): with no flag, any connector turns it off
                   ('Turning off hybrid kv cache manager because `--kv-transfer-config` is
                   set'); --no-disable-hybrid-kv-cache-manager keeps it on, and the connector
                   then starts only if it subclasses SupportsHMA (not modelled here)
  v0.22.0 on       with no flag, only a connector that does not subclass SupportsHMA
                   (KVConnectorFactory.supports_hma_config; MultiConnector: every child) turns
                   it off; an explicit --no-disable-... with such a connector fails at startup
                   (KVConnectorFactory.create_connector)

--disable-hybrid-kv-cache-manager turns it off in every release, and so does --kv-events-config
(any, `kv_events_config is not None`) before v0.20.0 ('not compatible with KV events'; gone
in v0.20.0). A model with attention_chunk_size (Llama 4's chunked local attention) runs it off
under an EAGLE, EAGLE3 or MTP draft (SpeculativeConfig.use_eagle) or when
VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE is 0 (envs.py bool(int(...)): default "0"
to v0.13.x, "1" from v0.14.0); otherwise vLLM keeps chunked-local KV groups of their own
(ChunkedLocalAttentionSpec), grouped as sliding-window ones are (`chunked_off_reason`;
pool.hybrid_blocks_per_request).
From v0.13.0 an explicit --no-disable-... with any of these reasons fails at startup ('Hybrid
KV cache manager was explicitly enabled but is not supported in this configuration').

--kv-offloading-size names OffloadingConnector or SimpleCPUOffloadConnector
(offloading.connector), and with the lmcache backend an LMCache connector, which never
subclasses SupportsHMA. The v0.10.2 and v0.11.0 wheels hold v0.12.0's rule (the flag a bool;
a connector, KV events, chunked attention as above): a release before v0.12.0 takes it.
"""

from __future__ import annotations

from kvtier.engines.deployment import Deployment
from kvtier.engines.version import Version
from kvtier.engines.vllm import offloading
from kvtier.engines.vllm.kv_transfer import TransferConfig
from kvtier.engines.vllm.pool import MTP_METHODS
from kvtier.engines.vllm.versions import V0_13, V0_14, V0_20, V0_22, V0_23, V0_30
from kvtier.errors import KvtierError, shown

# the registered connectors that subclass SupportsHMA, from the release they do (v1/*.py)
_HMA_SINCE = {
    "DecodeBenchConnector": V0_22,
    "ExampleHiddenStatesConnector": V0_22,
    "MooncakeConnector": V0_22,
    "MooncakeStoreConnector": V0_22,
    "NixlConnector": V0_22,
    "NixlPullConnector": V0_22,
    "NixlPushConnector": V0_22,
    "OffloadingConnector": V0_22,
    "SimpleCPUOffloadConnector": V0_22,
    "HiSparseConnector": V0_30,
    "MoRIIOConnector": V0_30,
}
MULTI = "MultiConnector"
ALLOW_CHUNKED = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"
_EAGLE = frozenset({"EAGLE", "EAGLE3", *MTP_METHODS})  # SpeculativeConfig.use_eagle


def _names(d: Deployment, config: TransferConfig, version: Version) -> list[str]:
    """The connectors the flags configure (a MultiConnector's children); [] without one."""
    name = offloading.connector(d, config, version)
    if name is None:
        return []
    if name != MULTI:
        return [name]
    children = config.extra.get("connectors", [])
    if not isinstance(children, list) or not all(isinstance(c, dict) for c in children):
        raise KvtierError("--kv-transfer-config: MultiConnector's connectors must be a list")
    if not children and version >= V0_23:
        return [MULTI]  # MultiConnector.all_children_support_hma: none is not support
    for index, child in enumerate(children):
        if not isinstance(child.get("kv_connector"), str):
            raise KvtierError(
                f"--kv-transfer-config: MultiConnector's connectors[{index}] has no kv_connector "
                "name: vLLM cannot build it (KVConnectorFactory.get_connector_class)"
            )
    return [c["kv_connector"] for c in children]


def off_reason(d: Deployment, config: TransferConfig, version: Version) -> str | None:
    """Why vLLM `version` runs `d`, its --kv-transfer-config `config`, with the hybrid KV cache
    manager off (None: it keeps it)."""
    if d.disable_hybrid_kv_cache_manager:
        return "--disable-hybrid-kv-cache-manager"
    if d.kv_events_config is not None and version < V0_20:
        return _forced_off(d, version, f"--kv-events-config in vLLM {version}")
    names = _names(d, config, version)
    if not names:
        return None
    if version < V0_22:
        if version >= V0_13 and d.disable_hybrid_kv_cache_manager is False:
            raise KvtierError(
                f"--no-disable-hybrid-kv-cache-manager with a KV connector in vLLM {version}: "
                "whether the connector supports the hybrid KV cache manager is not modelled "
                "before v0.22.0"
            )
        return f"a KV connector ({', '.join(f'{shown(n):.40}' for n in names)}) in vLLM {version}"
    if config.module_path:  # from v0.22.0 only a connector without SupportsHMA turns it off
        raise KvtierError(
            f"--kv-transfer-config: {config.connector!r:.40} from kv_connector_module_path; "
            "whether it subclasses SupportsHMA (vLLM's hybrid KV cache manager) is not known"
        )
    lacking = [n for n in names if n not in _HMA_SINCE or version < _HMA_SINCE[n]]
    if not lacking:
        return None
    if d.disable_hybrid_kv_cache_manager is False:
        raise KvtierError(
            f"Connector {shown(lacking[0]):.40} does not support HMA but HMA is enabled "
            "(--no-disable-hybrid-kv-cache-manager): vLLM refuses it at startup"
        )
    return f"{shown(lacking[0]):.40} does not support it (SupportsHMA)"


def _forced_off(d: Deployment, version: Version, reason: str) -> str:
    """`reason` turns the manager off; from v0.13.0 an explicit --no-disable-... then fails."""
    if version >= V0_13 and d.disable_hybrid_kv_cache_manager is False:
        raise KvtierError(
            f"--no-disable-hybrid-kv-cache-manager with {reason}: vLLM refuses it at startup "
            "('Hybrid KV cache manager was explicitly enabled but is not supported')"
        )
    return reason


def chunked_off_reason(d: Deployment, config: TransferConfig, version: Version) -> str | None:
    """Why vLLM `version` runs a chunked-local-attention model (attention_chunk_size) with the
    manager off, every layer then full attention (None: it keeps chunked-local groups)."""
    if off := off_reason(d, config, version):
        return off
    if (method := (d.speculative_algorithm or "").upper()) in _EAGLE:
        return _forced_off(d, version, f"chunked local attention with {method}")
    allow = d.allow_chunked_local_hma
    if allow is None:
        allow = version >= V0_14
    if not allow:
        return _forced_off(d, version, f"chunked local attention with {ALLOW_CHUNKED}=0")
    return None
