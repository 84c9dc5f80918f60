"""From a deployment to what the simulator runs: tier sizes in trace blocks, limits, timing.

Every scheduling figure is the ledger's (`kvtier.ledger.plan`), so plan and simulate never
compute one thing two ways: device KV tokens (unless given), page size, chunk size, context
length, the running-request limit (`pool.request_limits` over the device tokens, with the
ledger's flag and state-slot cap) and the bytes of a host token; the host tier is sized as
SGLang's HiCache sizes it (`kvtier.engines.sglang.hicache.host_tokens`). Each figure records its
source.

Granularity: the cache's page key is one trace block (512 tokens for Mooncake), so a tier of T
tokens holds T // (ceil(512 / page_size) x page_size) blocks, and every block, a prompt's partial
last block included, occupies a whole block of capacity.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.figures import SGLangFigures
from kvtier.engines.ledger import Ledger
from kvtier.engines.sglang import pool as sglang
from kvtier.engines.sglang.hicache import host_tokens
from kvtier.engines.sglang.prefetch import prefetch_era
from kvtier.errors import KvtierError
from kvtier.ledger.plan import build_ledger, resolve
from kvtier.sim import setup_timing
from kvtier.sim.scheduler_release import older_release_note
from kvtier.sim.servers.prefetch import PrefetchFlags, PrefetchRules
from kvtier.sim.setup_part import PartInputs
from kvtier.sim.setup_vllm import vllm_part
from kvtier.sim.timing import TimingFlags, TimingModel

# ServerArgs.hicache_write_policy, the same in every release read (v0.5.3 - v0.5.23)
DEFAULT_WRITE_POLICY = "write_through"
GRANULARITY_NOTE = (
    "cache pages are whole trace blocks: each block, a prompt's partial last block included, "
    "takes {block_tokens} tokens of capacity (ceil({block}/page_size) x page_size); hits count "
    "each matched block at its real size"
)

VLLM_GRANULARITY_NOTE = (
    "the block pool counts {engine}-token engine blocks; a trace names prefixes per {block} "
    "tokens, so the full engine blocks ending in one trace block are cached, hit and evicted "
    "together, and a hit counts whole engine blocks (at most the prompt less one token)"
)


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything a timed run needs, with where each figure came from."""

    device_tokens: int
    host_tokens: int
    page_size: int
    block_size: int  # trace tokens per page key
    write_policy: str
    max_running_requests: int
    chunked_prefill_size: int
    timing: TimingModel
    sources: tuple[tuple[str, str], ...]
    context_length: int | None = None  # longest prompt + output the server accepts
    store_tokens: int = 0  # L3 store capacity; 0: no store
    prefetch: PrefetchRules = field(default_factory=PrefetchRules)  # waiting for store hits
    prefetch_capacity: int | None = None  # tokens in prefetch at once; None: v0.5.3-v0.5.9 rule
    engine: Engine = Engine.SGLANG  # whose server model runs it (`kvtier.sim.servers`)
    prefix_caching: bool = True  # vLLM --enable-prefix-caching (SGLang: the radix cache is on)
    scheduling_policy: str = "fcfs"  # vLLM --scheduling-policy
    connector_chunk: int = 0  # vLLM: a connector's hits count in chunks of this (0: blocks)
    long_prefill_threshold: int = 0  # vLLM: a prefill takes at most this a step (0: no cap)
    kv_events_at_schedule: bool = False  # vLLM before v0.12.0: KV events leave at schedule()
    warnings: tuple[str, ...] = ()  # what the deployment gave that the engine does not read

    @property
    def block_tokens(self) -> int:
        """Tokens of tier capacity one trace block takes."""
        return math.ceil(self.block_size / self.page_size) * self.page_size

    @property
    def device_blocks(self) -> int:
        return self.device_tokens // self.block_tokens

    @property
    def host_blocks(self) -> int:
        return self.host_tokens // self.block_tokens

    @property
    def store_blocks(self) -> int:
        return self.store_tokens // self.block_tokens

    def notes(self) -> list[str]:
        note = VLLM_GRANULARITY_NOTE if self.engine is Engine.VLLM else GRANULARITY_NOTE
        return [
            note.format(
                block_tokens=self.block_tokens, block=self.block_size, engine=self.page_size
            ),
            *self.warnings,
        ]


def _policy_source(d: Deployment, name: str, default: str) -> str:
    value = d.value(name)
    return f"{value} ({d.origin(name)})" if value is not None else default


def running_limit(ledger: Ledger, device_tokens: int) -> tuple[int, str]:
    """The running-request limit and its source: the ledger's own over its pool, else the same
    rule (`pool.request_limits`) over `device_tokens` with the ledger's flag, DP-attention size
    and state-slot cap."""
    figures = _sglang_figures(ledger)
    flag = figures.max_running_requests_flag or None
    slot_cap = figures.state_slot_request_cap
    slots = f", state slots allow {slot_cap:,}" if slot_cap is not None else ""
    dp = figures.dp_attention_size
    rule = f"max_running_requests {flag} // DP-attention size {dp}" if flag else "tokens // 2"
    if device_tokens == ledger.kv_tokens and ledger.max_running_requests is not None:
        limit = ledger.max_running_requests
        where = "the ledger"
    else:
        limit = sglang.request_limits(
            device_tokens, ledger.context_length, flag, dp, slot_cap
        ).running
        where = f"the ledger's rule over {device_tokens:,} device tokens"
    return limit, f"{limit:,} from {where} (min({rule}, request rows{slots}); model_runner)"


def _sglang_figures(ledger: Ledger) -> SGLangFigures:
    if not isinstance(ledger.figures, SGLangFigures):
        raise KvtierError("simulate models SGLang's scheduler: the ledger is not SGLang's")
    return ledger.figures


def build_config(
    deployment: Deployment,
    block_size: int,
    device_tokens: int | None = None,
    timing: TimingFlags | None = None,
    store_tokens: int = 0,
    prefetch: PrefetchFlags | None = None,
) -> SimConfig:
    """Resolve `deployment` through the ledger and the GPU catalog into a `SimConfig`; the
    HiCache write and prefetch policies are the deployment's (a launch command's or kvtier's
    flag), the threshold and timeouts `prefetch`'s."""
    d = deployment
    if d.pp > 1:
        raise KvtierError("simulate models one tensor-parallel group: --pp is not modelled")
    _check_dp_attention(d, store_tokens)
    if d.gpu is None:
        raise KvtierError("the timing model needs the GPU: pass --gpu (e.g. --gpu 'RTX PRO 6000')")
    from kvtier.model.gpu import resolve_gpu

    flags = timing or TimingFlags()
    inputs = resolve(d)
    ledger = build_ledger(inputs)
    gpu = resolve_gpu(d.gpu)
    sources: list[tuple[str, str]] = []
    if device_tokens is None:
        device_tokens = ledger.kv_tokens
        spread = (
            f", range {ledger.kv_tokens_range[0]}-{ledger.kv_tokens_range[1]}"
            if (ledger.kv_tokens_range)
            else ""
        )
        text = f"{device_tokens:,} from the {ledger.engine} ledger ({ledger.era}{spread})"
        sources.append(("device tokens", text))
    else:
        sources.append(("device tokens", "--device-tokens"))
    if device_tokens < 1:
        raise KvtierError(f"device KV tokens must be positive, got {device_tokens}")
    part = _PARTS[d.engine](PartInputs(d, ledger, device_tokens, store_tokens, prefetch, sources))
    timing_model = setup_timing.timing_model(d, inputs, ledger, gpu, flags, sources)
    part["warnings"] = (*older_release_note(d), *part.get("warnings", ()))
    return SimConfig(
        device_tokens=device_tokens,
        page_size=ledger.page_size,
        block_size=block_size,
        timing=timing_model,
        sources=tuple(sources),
        context_length=ledger.context_length,
        engine=d.engine,
        **part,
    )


def refuse_dp_attention(deployment: Deployment, what: str) -> None:
    """`what` (a fleet, a log's calibration) times one scheduler: DP attention is refused."""
    if deployment.enable_dp_attention and deployment.dp > 1:
        raise KvtierError(
            f"{what} with --enable-dp-attention --dp {deployment.dp} is not modelled (simulate "
            "runs DP attention as one server of its DP ranks)"
        )


def _check_dp_attention(d: Deployment, store_tokens: int) -> None:
    """DP attention is simulated rank by rank (`kvtier.sim.servers.sglang_dp`) without host
    tiers or a draft model, whose per-rank timing is not modelled: those are refused."""
    if not (d.enable_dp_attention and d.dp > 1):
        return
    refused = [
        name
        for name, used in (
            ("the hierarchical cache", d.hicache.enable or d.hicache.ratio is not None
             or bool(d.hicache.size_gb)),
            ("an L3 store", bool(store_tokens)),
            ("speculative decoding", d.speculative_algorithm is not None),
        )
        if used
    ]  # fmt: skip
    if refused:
        raise KvtierError(
            f"simulate with --enable-dp-attention --dp {d.dp}: {' and '.join(refused)} under DP "
            "attention is not modelled"
        )


def _sglang_part(inputs: PartInputs) -> dict[str, Any]:
    """SGLang's scheduling figures and HiCache tiers (host, store, prefetch) from the ledger."""
    d, ledger, device_tokens = inputs.deployment, inputs.ledger, inputs.device_tokens
    store_tokens, prefetch, sources = inputs.store_tokens, inputs.prefetch, inputs.sources
    write_policy = d.hicache.write_policy or DEFAULT_WRITE_POLICY
    host = 0
    rules, capacity = PrefetchRules(), 0
    if d.hicache.enable or d.hicache.ratio is not None or d.hicache.size_gb:
        per_token = _sglang_figures(ledger).host_bytes_per_token
        host = host_tokens(
            device_tokens, ledger.page_size, per_token, d.hicache.ratio, d.hicache.size_gb
        )
        sources.append(("host tokens", "HostKVCache sizing (--hicache-size / --hicache-ratio)"))
        default = f"{write_policy} (SGLang's default)"
        sources.append(("write policy", _policy_source(d, "hicache.write_policy", default)))
    if store_tokens:
        if not host:
            raise KvtierError(
                "an L3 store (--store-tokens or --shared-store-tokens) stages its pages in "
                "the host tier: pass --hicache-ratio or --hicache-size with it"
            )
        sources.append(("store tokens", "--store-tokens"))
        era = prefetch_era(d.engine_version)
        given = prefetch or PrefetchFlags()
        policy = d.hicache.storage_prefetch_policy
        if policy is not None and given.policy is not None and policy != given.policy:
            origin = d.origin("hicache.storage_prefetch_policy")
            raise KvtierError(
                f"prefetch policy {given.policy} contradicts the deployment's "
                f"--hicache-storage-prefetch-policy {policy} ({origin})"
            )
        rules = dataclasses.replace(given, policy=policy or given.policy).rules(era)
        capacity = era.capacity_tokens(host, device_tokens)
        cap = f" (at most {rules.timeout_max_s:g} s)" if math.isfinite(rules.timeout_max_s) else ""
        sources.append(
            (
                "store prefetch",
                f"{rules.policy.value}, threshold {rules.threshold_tokens} tokens, timeout "
                f"{rules.timeout_base_s:g} s + {rules.timeout_per_ki_token_s:g} s per 1024 tokens"
                f"{cap}, up to {capacity:,} tokens in prefetch "
                f"({era.label} HiCache rules; policy "
                f"{_policy_source(d, 'hicache.storage_prefetch_policy', 'the version default')})",
            )
        )
    max_running, text = running_limit(ledger, device_tokens)
    sources.append(("max running requests", text))
    chunk = _sglang_figures(ledger).chunked_prefill_size
    how = "--chunked-prefill-size" if d.chunked_prefill_size is not None else "the GPU's default"
    if d.enable_dp_attention and d.dp > 1:
        # server_args under DP attention: chunked_prefill_size // dp_size, each rank's
        # (v0.5.3 line 957, v0.5.9 line 2117, v0.5.23 arg_groups/parallel_hook.py line 331)
        how += f", // --dp {d.dp} a DP rank"
        chunk //= d.dp
    sources.append(("chunked prefill size", f"{chunk:,} from the ledger ({how}, server_args)"))
    return {
        "host_tokens": host,
        "write_policy": write_policy,
        "max_running_requests": max_running,
        "chunked_prefill_size": chunk,
        "store_tokens": store_tokens,
        "prefetch": rules,
        "prefetch_capacity": capacity,
    }


_PARTS: dict[Engine, Callable[[PartInputs], dict[str, Any]]] = {
    Engine.SGLANG: _sglang_part,
    Engine.VLLM: vllm_part,
}
