"""vLLM's refusal of a KV connector under PyTorch's expandable segments
(VllmConfig._verify_kv_transfer_compat, config/vllm.py; read in the v0.20.0 - v0.33.0 wheels):
from v0.21.0, any connector (--kv-transfer-config, or the one --kv-offloading-size names) with
'expandable_segments:True' in PYTORCH_CUDA_ALLOC_CONF fails at startup, as CUDA VMM can remap
the pages a connector pinned, unless --enable-sleep-mode is on (v0.21.x) or the cumem
allocator, which --enable-cumem-allocator or sleep mode turns on (v0.22.0 on:
ModelConfig.__post_init__ 'Enabling cumem allocator because sleep mode requires it.')."""

from __future__ import annotations

from kvtier.engines.deployment import Deployment
from kvtier.engines.version import Version
from kvtier.engines.vllm import offloading
from kvtier.engines.vllm.kv_transfer import TransferConfig
from kvtier.engines.vllm.versions import V0_21, V0_22
from kvtier.errors import KvtierError


def check_kv_transfer_compat(d: Deployment, config: TransferConfig, version: Version) -> None:
    """Refuse in one line the connector (`config`'s, or the flags') and allocator settings vLLM
    `version` refuses."""
    if not d.expandable_segments or version < V0_21:
        return
    name = offloading.connector(d, config, version)
    cumem = d.enable_cumem_allocator and version >= V0_22
    if name is None or d.enable_sleep_mode or cumem:
        return
    raise KvtierError(
        f"KV connector {name:.40} is incompatible with PYTORCH_CUDA_ALLOC_CONF="
        f"expandable_segments:True unless enable_cumem_allocator is also enabled: vLLM {version} "
        "refuses it at startup (unset it, or pass --enable-cumem-allocator / --enable-sleep-mode)"
    )
