"""A vLLM deployment's scheduling figures and host tier for the simulator, from the vLLM ledger.

  block size             the ledger's block_size (--block-size, else the platform's default)
  max_num_batched_tokens the ledger's (the flag, else the release's rule per GPU)
  max_num_seqs           the ledger's (the flag, else the release's rule per GPU)
  prefix caching         --enable-prefix-caching / --no-enable-prefix-caching (V1: on)
  host / store tiers     the CPU offloading connector or LMCache (`kvtier.sim.vllm_tiers`)
SGLang's HiCache flags and kvtier's L3 store model SGLang only and are refused by name.
"""

from __future__ import annotations

from typing import Any

from kvtier.engines.deployment import Deployment
from kvtier.engines.figures import VllmFigures
from kvtier.engines.ledger import Ledger
from kvtier.engines.vllm import versions
from kvtier.engines.vllm.versions import V0_12
from kvtier.errors import KvtierError
from kvtier.sim.servers.prefetch import PrefetchFlags
from kvtier.sim.setup_part import PartInputs
from kvtier.sim.vllm_tiers import vllm_tiers

# Deployment fields that only SGLang reads, and the flag that sets each
_SGLANG_ONLY = (
    ("hicache.ratio", "--hicache-ratio"),
    ("hicache.size_gb", "--hicache-size"),
    ("hicache.enable", "--enable-hierarchical-cache"),
    ("hicache.write_policy", "--hicache-write-policy"),
    ("hicache.storage_prefetch_policy", "--hicache-storage-prefetch-policy"),
)


def _refuse_sglang_flags(d: Deployment, store_tokens: int, prefetch: PrefetchFlags | None) -> None:
    for name, flag in _SGLANG_ONLY:
        if d.value(name):
            raise KvtierError(
                f"{flag} is an SGLang HiCache flag; a vLLM deployment's host tier is "
                "--kv-offloading-size"
            )
    if store_tokens:
        raise KvtierError(
            "--store-tokens models SGLang HiCache's L3 store; it does not apply to --engine vllm"
        )
    if prefetch is not None and prefetch != PrefetchFlags():
        raise KvtierError("the --prefetch-* flags set SGLang HiCache's L3 prefetch, not vLLM's")


def _input(ledger: Ledger, name: str) -> tuple[int, str]:
    for row in ledger.inputs:
        if row.name == name:
            return int(row.value), row.origin
    raise KvtierError(f"the vLLM ledger states no {name}")


def vllm_part(inputs: PartInputs) -> dict[str, Any]:
    """SimConfig's vLLM figures; each appends its source to `sources`."""
    d, ledger, sources = inputs.deployment, inputs.ledger, inputs.sources
    _refuse_sglang_flags(d, inputs.store_tokens, inputs.prefetch)
    tiers = vllm_tiers(d, ledger)
    sources.extend(tiers.sources)
    seqs, seqs_from = _input(ledger, "max_num_seqs")
    sources.append(("max_num_seqs", f"{seqs:,} ({seqs_from})"))
    if not isinstance(ledger.figures, VllmFigures):
        raise KvtierError(f"simulate needs the vLLM ledger's figures, got {ledger.engine}'s")
    batched = ledger.figures.max_num_batched_tokens
    _, batched_from = _input(ledger, "max_num_batched_tokens")
    sources.append(("max_num_batched_tokens", f"{batched:,} ({batched_from})"))
    caching = d.hybrid.enable_prefix_caching is not False
    given = "V1's default"
    if d.hybrid.enable_prefix_caching is not None:
        given = f"--{'' if caching else 'no-'}enable-prefix-caching"
    sources.append(("prefix caching", f"{'on' if caching else 'off'} ({given})"))
    blocks = inputs.device_tokens // ledger.page_size
    sources.append(
        (
            "block pool",
            f"{blocks:,} blocks of {ledger.page_size} tokens, one the null block "
            "(BlockPool.__init__)",
        )
    )
    threshold = d.long_prefill_token_threshold or 0
    if threshold < 0:
        raise KvtierError(f"--long-prefill-token-threshold must be 0 or more, got {threshold}")
    if threshold:
        sources.append(("long prefill threshold", f"{threshold:,} tokens a step per request"))
    policy = d.scheduling_policy or "fcfs"
    given = "--scheduling-policy" if d.scheduling_policy else "vLLM's default"
    sources.append(("scheduling policy", f"{policy} ({given})"))
    return {
        "scheduling_policy": policy,
        "long_prefill_threshold": threshold,
        "kv_events_at_schedule": versions.DEFAULT.resolve(d.engine_version) < V0_12,
        "host_tokens": tiers.host_tokens,
        "store_tokens": tiers.store_tokens,
        "connector_chunk": tiers.chunk_tokens,
        "write_policy": "",
        "max_running_requests": seqs,
        "chunked_prefill_size": batched,
        "prefix_caching": caching,
        "warnings": tiers.notes,
    }
