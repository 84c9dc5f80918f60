"""Ways to more KV capacity for a planned deployment, each priced, and the inverse question.

Every option is a variant of the deployment re-run through the same engine rules as `plan`, so its
token count is as exact as the plan's. Options: a higher memory fraction (as far as a margin of
free memory at the end of startup allows), an FP8 KV cache, a host-RAM tier (SGLang HiCache /
vLLM CPU offloading), and the smaller knobs (page size, max running requests, chunked prefill,
CUDA-graph batch size) with what each frees or costs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import StrEnum

from kvtier.engines.deployment import Engine
from kvtier.engines.figures import SGLangFigures, VllmFigures
from kvtier.engines.host import load_seconds
from kvtier.engines.inputs import PlanInputs
from kvtier.engines.launch import flag_table
from kvtier.engines.ledger import Ledger
from kvtier.engines.rules import rules_for
from kvtier.errors import KvtierError
from kvtier.ledger.plan import build_ledger
from kvtier.units import GB, GiB

DEFAULT_MARGIN_GIB = 2.0
HOST_RATIOS = (2.0, 4.0, 8.0)
FRACTION_STEPS = (0.80, 0.85, 0.88, 0.90, 0.92, 0.94, 0.96)
SUGGESTED_MAX_RUNNING_REQUESTS = 256
# vLLM's --kv-offloading-backend: no memory effect of its own, so not a Deployment field
OFFLOADING_BACKEND = "--kv-offloading-backend"


class OptionKind(StrEnum):
    """What an option changes: advise --workload pairs options of different kinds only."""

    FRACTION = "fraction"
    KV_DTYPE = "kv-dtype"
    HOST_TIER = "host-tier"
    PAGE_SIZE = "page-size"
    RUNNING_CAP = "running-cap"
    CHUNKED_PREFILL = "chunked-prefill"
    CUDA_GRAPH = "cuda-graph"
    COMBINATION = "combination"  # the inverse question's FP8 KV at a higher fraction


@dataclass(frozen=True, slots=True)
class Option:
    name: str
    kind: OptionKind
    flags: tuple[str, ...]
    kv_tokens: int | None  # GPU KV tokens with the option; None when it does not change them
    concurrency: tuple[tuple[int, float], ...]
    cost: str
    figures: tuple[tuple[str, float], ...] = ()  # option-specific numbers (GB, seconds, ...)


@dataclass(frozen=True, slots=True)
class HostSetup:
    """What the host side offers: RAM available on the node (GB) and link speeds (GB/s)."""

    ram_available_gb: float | None = None
    load_tokens: int = 32768
    node_gbps: float | None = None  # node-wide host-to-GPU bandwidth shared by its GPUs


def variant(p: PlanInputs, **values: object) -> Ledger | None:
    """The ledger with `values` changed, or None when the engine would refuse to start."""
    changed = dataclasses.replace(p, deployment=p.deployment.with_values("option", **values))
    try:
        return build_ledger(changed)
    except KvtierError:
        return None


def _conc(ledger: Ledger) -> tuple[tuple[int, float], ...]:
    return tuple((c.context, c.requests) for c in ledger.concurrency)


def spelled(p: PlanInputs, field: str) -> str:
    """The engine's own flag for Deployment `field` (its flag table's first spelling)."""
    flag = flag_table(p.deployment.engine).spelling(field)
    if flag is None:
        raise ValueError(f"{p.deployment.engine} has no flag for {field}")
    return flag


def fraction_flag(p: PlanInputs) -> str:
    """The engine's memory-fraction flag."""
    return spelled(p, "mem_fraction")


def _kv_gib(ledger: Ledger) -> float:
    """GPU memory the KV pools take: target pool plus, where there is one, the draft pool."""
    return sum(i.gib for i in ledger.items if i.item in ("KV cache pool", "draft KV pool"))


def free_at_end(base: Ledger) -> float:
    """What stays free on one GPU at the end of startup: SGLang's reserve left after the draft,
    request table and graphs; vLLM's share outside the budget less unbudgeted CUDA graphs."""
    return base.figures.free_end_gib


def max_safe_fraction(p: PlanInputs, base: Ledger, margin_gib: float) -> float:
    """Highest fraction (2 decimals) keeping `margin_gib` free at the end of startup."""
    free = free_at_end(base)
    f = base.figures
    if isinstance(f, SGLangFigures):
        pre = f.free_before_load_gib
        grow = 1 + f.draft_cell_bytes / f.cell_bytes  # the draft pool follows
        top = base.mem_fraction + (free - margin_gib) / (pre * grow)
    else:
        total = f.total_gib
        top = base.mem_fraction + (free - margin_gib) / total if total else base.mem_fraction
    return math.floor(min(top, 0.99) * 100) / 100


def fraction_options(p: PlanInputs, base: Ledger, margin_gib: float) -> list[Option]:
    """Tokens at higher fractions, up to the highest that keeps the margin free."""
    if p.deployment.kv_cache_memory_bytes is not None:
        return []  # the KV size is fixed by --kv-cache-memory-bytes
    top = max_safe_fraction(p, base, margin_gib)
    free = free_at_end(base)
    flag = fraction_flag(p)
    if top <= base.mem_fraction:
        return [
            Option(
                f"raise {flag}",
                OptionKind.FRACTION,
                (),
                None,
                (),
                f"no room: {free:.2f} GiB stays free at the end of startup, margin "
                f"{margin_gib:.2f} GiB",
                (("max_safe_fraction", top),),
            )
        ]
    options = []
    for f in sorted({s for s in FRACTION_STEPS if base.mem_fraction < s < top} | {top}):
        led = variant(p, mem_fraction=f)
        if led is None:
            continue
        left = free - (_kv_gib(led) - _kv_gib(base))
        options.append(
            Option(
                f"{flag} {f:.2f}",
                OptionKind.FRACTION,
                (flag, f"{f:.2f}"),
                led.kv_tokens,
                _conc(led),
                f"{left:.2f} GiB left free at end of startup (margin {margin_gib:.2f}); less room "
                "for activation peaks: OOM risk grows as it shrinks",
                (("fraction", f), ("free_at_end_gib", left)),
            )
        )
    return options


def stores_fp8(base: Ledger) -> bool:
    """Whether the pool already stores fp8, as the ledger's input states it: `auto` may be fp8
    (a ModelOpt checkpoint on vLLM, a DSA model on SGLang from compute capability 10.0)."""
    return any(i.name == "kv cache dtype" and i.value.startswith("fp8") for i in base.inputs)


def fp8_options(p: PlanInputs, base: Ledger) -> list[Option]:
    d = p.deployment
    if stores_fp8(base):
        return []
    sglang = d.engine is Engine.SGLANG
    names = ("fp8_e4m3", "fp8_e5m2") if sglang else ("fp8",)
    scales = (
        "the checkpoint or --quantization-param-path"
        if sglang
        else ("the checkpoint or --calculate-kv-scales")
    )
    options = []
    for name in names:
        led = variant(p, kv_cache_dtype=name)
        if led is None:
            continue
        options.append(
            Option(
                f"KV cache {name}",
                OptionKind.KV_DTYPE,
                (spelled(p, "kv_cache_dtype"), name),
                led.kv_tokens,
                _conc(led),
                f"~2x tokens; quality risk: per-tensor scales, 1.0 unless {scales} gives k/v "
                "scales; e4m3 keeps more precision, e5m2 more range",
            )
        )
    return options


def host_options(p: PlanInputs, base: Ledger, host: HostSetup) -> list[Option]:
    """Host-RAM tiers at several sizes: tokens, GB per rank and node, RAM checks, reload time;
    a ratio whose pool holds no more than the deployment's own is left out (its configured
    --hicache-size keeps its row). None for Gemma 4, whose host tiers are not modelled on
    either engine."""
    d = p.deployment
    if not p.model.kv.is_uniform:
        return []
    if d.engine is Engine.VLLM:
        return _vllm_offload_options(p, base)
    tier = rules_for(d.engine).host_tier
    assert tier is not None and isinstance(base.figures, SGLangFigures)  # vLLM returned above
    per_token = base.figures.host_bytes_per_token  # in the pool's own KV dtype
    sizes: list[tuple[str, tuple[str, ...], float | None, float | None]] = [
        (f"ratio {r:g}", (spelled(p, "hicache.ratio"), f"{r:g}"), r, None) for r in HOST_RATIOS
    ]
    if d.hicache.size_gb:
        sizes.append(
            (
                f"size {d.hicache.size_gb:g} GB",
                (spelled(p, "hicache.size_gb"), f"{d.hicache.size_gb:g}"),
                None,
                d.hicache.size_gb,
            )
        )
    current = 0  # the deployment's own host pool: a ratio holding no more is no way to more
    if d.hicache.enable:
        current = tier.tokens(
            base.kv_tokens, base.page_size, per_token, d.hicache.ratio, d.hicache.size_gb
        )
    options = []
    for label, flags, ratio, size in sizes:
        tokens = tier.tokens(base.kv_tokens, base.page_size, per_token, ratio, size)
        if size is None and tokens <= current:
            continue
        per_rank = tokens * per_token
        figures = [
            ("host_tokens", float(tokens)),
            ("host_gb_per_rank", per_rank / GB),
            ("host_gb_per_node", per_rank * d.gpus / GB),
        ]
        cost = (
            f"{tokens:,} host tokens: {per_rank / GB:.1f} GB pinned RAM per rank, "
            f"{per_rank * d.gpus / GB:.1f} GB per node"
        )
        if host.ram_available_gb is not None:
            check = tier.check_ram(per_rank, d.gpus, int(host.ram_available_gb * GB))
            cost += f"; {check.message}"
            figures += [
                ("engine_check_ok", float(check.engine_ok)),
                ("node_check_ok", float(check.node_ok)),
            ]
        if p.pcie_gbps:
            secs = load_seconds(host.load_tokens, per_token, p.pcie_gbps, d.gpus, host.node_gbps)
            share = "" if host.node_gbps is None else f", node {host.node_gbps:g} GB/s shared"
            cost += (
                f"; reloading {host.load_tokens:,} tokens takes {secs * 1000:.0f} ms per GPU "
                f"at {p.pcie_gbps:g} GB/s{share}"
            )
            figures.append(("load_seconds", secs))
        cost += "; holds cached prefixes, not more running requests"
        options.append(
            Option(
                f"HiCache {label}",
                OptionKind.HOST_TIER,
                (spelled(p, "hicache.enable"), *flags),
                base.kv_tokens,
                _conc(base),
                cost,
                tuple(figures),
            )
        )
    return options


def _vllm_offload_options(p: PlanInputs, base: Ledger) -> list[Option]:
    """vLLM CPU offloading: --kv-offloading-size is GiB summed over all TP x PP ranks; its
    blocks are the ledger's host pool (none where the release takes no such size), the native
    connector's, or SimpleCPUOffloadConnector's under VLLM_USE_SIMPLE_KV_OFFLOAD=1. A size whose
    pool holds no more than the deployment's own host pool is no way to more and is left out."""
    d = p.deployment
    ranks = d.tp * d.pp
    current = base.host_pool.tokens if base.host_pool is not None else 0
    options = []
    for ratio in HOST_RATIOS:
        per_rank_gib = base.kv_tokens * base.kv_bytes_per_token * ratio / GiB
        size = math.ceil(per_rank_gib * ranks)
        sized = variant(p, kv_offloading_backend="native", kv_offloading_size_gib=float(size))
        if sized is None or sized.host_pool is None or sized.host_pool.tokens <= current:
            continue
        options.append(
            Option(
                f"CPU offload x{ratio:g}",
                OptionKind.HOST_TIER,
                (OFFLOADING_BACKEND, "native", spelled(p, "kv_offloading_size_gib"), str(size)),
                base.kv_tokens,
                _conc(base),
                f"{size} GiB host RAM over {ranks} ranks; holds cached prefixes, not more running "
                "requests",
                (("host_tokens", float(sized.host_pool.tokens)),),
            )
        )
    return options


def knob_options(p: PlanInputs, base: Ledger) -> list[Option]:
    """Page size, max running requests, chunked prefill, CUDA-graph batch size."""
    d = p.deployment
    options = []
    page = 64 if base.page_size < 64 else base.page_size * 2
    led = variant(p, page_size=page)
    if led is not None:
        flag = spelled(p, "page_size")
        options.append(
            Option(
                f"page size {page}",
                OptionKind.PAGE_SIZE,
                (flag, str(page)),
                led.kv_tokens,
                _conc(led),
                "tokens change only by rounding; prefixes match in whole pages",
            )
        )
    if d.engine is Engine.SGLANG:
        table = base.item("request table (req_to_token)").gib
        n = SUGGESTED_MAX_RUNNING_REQUESTS
        led = variant(p, max_running_requests=n)
        if led is not None and led.item("request table (req_to_token)").gib < table:
            freed = table - led.item("request table (req_to_token)").gib
            options.append(
                Option(
                    f"max running requests {n}",
                    OptionKind.RUNNING_CAP,
                    (spelled(p, "max_running_requests"), str(n)),
                    led.kv_tokens,
                    _conc(led),
                    f"frees {freed:.2f} GiB of req_to_token table in the reserve (turn it "
                    "into KV with a higher fraction); caps the batch",
                    (("freed_gib", freed),),
                )
            )
    f = base.figures
    if isinstance(f, VllmFigures) and not f.chunked_prefill:
        options += _v0_chunked_prefill_option(p, base)
    if isinstance(f, SGLangFigures):
        in_force, chunking = f.chunked_prefill_size, True
    else:
        in_force, chunking = f.max_num_batched_tokens, f.chunked_prefill
    chunk = d.chunked_prefill_size or in_force
    if chunk and chunking:
        led = variant(p, chunked_prefill_size=chunk // 2)
        flag = spelled(p, "chunked_prefill_size")
        if led is not None:
            options.append(
                Option(
                    f"chunked prefill {chunk // 2}",
                    OptionKind.CHUNKED_PREFILL,
                    (flag, str(chunk // 2)),
                    led.kv_tokens,
                    _conc(led),
                    "smaller activation peak; long prompts prefill in more steps (higher TTFT)",
                )
            )
    max_bs = f.cuda_graph_max_bs if isinstance(f, SGLangFigures) else 0
    if max_bs > 1:
        led = variant(p, cuda_graph_max_bs=max_bs // 2)
        if led is not None:
            options.append(
                Option(
                    f"cuda graph max bs {max_bs // 2}",
                    OptionKind.CUDA_GRAPH,
                    (spelled(p, "cuda_graph_max_bs"), str(max_bs // 2)),
                    led.kv_tokens,
                    _conc(led),
                    f"frees ~{max_bs:.0f} MiB of graph memory (max_bs x 2 MiB); decode batches "
                    f"above {max_bs // 2} run without CUDA graphs (slower)",
                )
            )
    return options


def _v0_chunked_prefill_option(p: PlanInputs, base: Ledger) -> list[Option]:
    """vLLM V0 without chunked prefill profiles a whole max_model_len batch; with it, the
    version's chunk (engines/vllm/profile.py)."""
    led = variant(p, enable_chunked_prefill=True)
    if led is None:
        return []
    assert isinstance(led.figures, VllmFigures) and isinstance(base.figures, VllmFigures)
    batch = led.figures.max_num_batched_tokens
    was = base.figures.max_num_batched_tokens
    if batch >= was:  # --max-num-batched-tokens set, or max_model_len below the chunk
        return []
    return [
        Option(
            f"chunked prefill ({batch} tokens a step)",
            OptionKind.CHUNKED_PREFILL,
            (spelled(p, "enable_chunked_prefill"),),
            led.kv_tokens,
            _conc(led),
            f"the profile run batches {batch} tokens instead of {was}: a smaller activation "
            "peak; long prompts prefill in more steps (higher TTFT)",
        )
    ]


def all_options(p: PlanInputs, base: Ledger, margin_gib: float, host: HostSetup) -> list[Option]:
    return [
        *fraction_options(p, base, margin_gib),
        *fp8_options(p, base),
        *host_options(p, base, host),
        *knob_options(p, base),
    ]
