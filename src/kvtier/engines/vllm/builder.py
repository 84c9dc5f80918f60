"""Assemble the per-GPU ledger of a vLLM deployment from the rules in `vllm`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from kvtier.engines import estimate
from kvtier.engines.deployment import Deployment
from kvtier.engines.estimate import Term
from kvtier.engines.figures import VllmFigures
from kvtier.engines.inputs import PlanInputs
from kvtier.engines.kvdtype import KVDtype, resolve_kv_dtype
from kvtier.engines.ledger import (
    Concurrency,
    Ledger,
    context_lengths,
)
from kvtier.engines.log_geometry import STAND_IN_ARCHITECTURE
from kvtier.engines.version import Version
from kvtier.engines.vllm import (
    alloc_conf,
    gemma4,
    hma,
    kv_transfer,
    ledger_items,
    mamba,
    profile,
    sliding,
    stages,
)
from kvtier.engines.vllm import pool as vllm
from kvtier.engines.vllm.versions import V0_19
from kvtier.errors import KvtierError
from kvtier.model.description import LayerKind
from kvtier.model.gpu import resolve_gpu
from kvtier.units import GiB, MiB

# config.json model_type of the architectures vLLM refuses in float16 (vllm.NO_FLOAT16_MODEL_TYPES)
_MODEL_TYPES = {
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "Gemma3ForConditionalGeneration": "gemma3",
    "Glm4ForCausalLM": "glm4",
    "Plamo2ForCausalLM": "plamo2",
}


class _Device(NamedTuple):
    gib: float | None  # total memory as torch reports it (the card's figure when not measured)
    name: str
    capability: tuple[int, int] | None


def _device(p: PlanInputs) -> _Device:
    d = p.deployment
    gib = d.measured.gpu_mem_gib
    if gib is None and p.gpu_mem_mib is not None:
        gib = p.gpu_mem_mib * MiB / GiB
    capability = None
    if d.gpu:
        try:
            capability = resolve_gpu(d.gpu).compute_capability
        except KvtierError:
            capability = None
    return _Device(gib, " ".join(filter(None, (p.gpu_name, d.gpu))), capability)


# vllm/utils/torch_utils.py MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP (v0.19.0 - v0.21.0)
MODELOPT_KV = {"fp8": "fp8_e4m3"}


def _run_dtype(p: PlanInputs, era: vllm.Era, device: _Device) -> str:
    """The dtype vLLM runs the model in, by its era's --dtype rule."""
    rule = vllm.model_dtype_v0 if era.worker is vllm.Worker.V0 else vllm.model_dtype
    return rule(
        p.deployment.dtype,
        p.model.config_dtype,  # a float32 config: vLLM resolves it itself, by GPU
        _MODEL_TYPES.get(p.model.architecture),
        device.capability,
    )


def _kv_cache_dtype(p: PlanInputs, version: Version) -> str:
    """--kv-cache-dtype, with `auto` resolved from a ModelOpt checkpoint's KV format from v0.19
    (EngineArgs.create_engine_config -> resolve_kv_cache_dtype_string)."""
    d = p.deployment
    algo = p.model.kv_cache_quant_algo
    if d.kv_cache_dtype != "auto" or algo is None or version < V0_19:
        return d.kv_cache_dtype
    if algo == "nvfp4":
        raise KvtierError(
            f"{p.model.model_id}: the checkpoint's kv_cache_quant_algo nvfp4 (an NVFP4 KV cache) "
            "is not modelled; pass --kv-cache-dtype"
        )
    return MODELOPT_KV.get(algo, d.kv_cache_dtype)  # an unknown one: vLLM warns, keeps `auto`


def _activation(p: PlanInputs, setup: Setup) -> Term:
    """The profiled torch peak from the batch and the model's shape (profile.py), with the stated
    range of what that model leaves out; a model without its MLP widths falls back to the
    per-8,192-token constant. Pipeline stage 0 runs no sampler."""
    era, batch = setup.era, setup.batch
    shape = profile.ProfileShape.of(p.model, p.deployment.tp, setup.run_dtype)
    if shape is None:
        return estimate.from_constant(
            estimate.VLLM_ACTIVATION_GIB_PER_8K_TOKENS,
            f"estimated: profile_run peak for {batch.tokens} batched tokens (model shape unknown)",
        ).scaled(batch.tokens / 8192)
    modelled = profile.activation_peak(era, batch, shape, samples=not setup.stages)
    peak = modelled.bytes / GiB
    rest = (
        estimate.VLLM_V0_PROFILE_UNMODELLED_GIB
        if era.worker is vllm.Worker.V0
        else estimate.VLLM_PROFILE_UNMODELLED_GIB
    )
    return Term.estimated(
        peak + rest[0],
        peak + rest[1],
        peak + rest[2],
        f"estimated: {modelled.formula()}, + {rest[0]} GiB not modelled",
    )


def _terms(p: PlanInputs, setup: Setup) -> dict[str, Term]:
    """total, weights, activation, non-torch and graph terms: measured, else estimated."""
    d, m, era = p.deployment, p.deployment.measured, setup.era
    terms: dict[str, Term] = {}
    if m.gpu_mem_gib is not None:
        terms["total"] = Term.known(m.gpu_mem_gib, "device total as the engine sees it")
    elif p.gpu_mem_mib is not None:
        card = p.gpu_mem_mib * MiB / GiB
        r = estimate.DRIVER_RESERVED_GIB
        terms["total"] = Term.estimated(
            card - r[0], card - r[2], card - r[1], "estimated: card (nvidia-smi) - driver reserve"
        )
    else:
        raise KvtierError("need the GPU (--gpu or --gpu-mem-gib)")
    terms["weights"] = estimate.weights_per_gpu(
        m.weights_gib, "measured: 'Model loading took'", p.weights_bytes, p.weights_source
    )
    if m.profile.activation_gib is not None:
        terms["activation"] = Term.known(m.profile.activation_gib, "measured: torch peak increase")
    else:
        terms["activation"] = _activation(p, setup)
    if m.profile.non_torch_gib is not None:
        terms["non_torch"] = Term.known(m.profile.non_torch_gib, "measured: non-torch increase")
    else:
        const = (
            estimate.VLLM_NON_TORCH_GIB_TP if d.tp * d.pp > 1 else estimate.VLLM_NON_TORCH_GIB_TP1
        )
        terms["non_torch"] = estimate.from_constant(const, "estimated: NCCL / backend buffers")
    if era.budgets_cuda_graphs:
        if m.cuda_graph_gib is not None:
            terms["graphs"] = Term.known(
                m.cuda_graph_gib, "measured: 'Estimated CUDA graph memory'"
            )
        else:
            terms["graphs"] = estimate.from_constant(
                estimate.VLLM_CUDA_GRAPH_GIB, "estimated: profile_cudagraph_memory"
            )
    return terms


def _in_flight(p: PlanInputs, setup: Setup) -> int:
    """Tokens past its window a sliding-window group holds for a request (sliding.py)."""
    d = p.deployment
    on = sliding.async_scheduling(d.async_scheduling, d.speculative_algorithm)
    return sliding.in_flight_tokens(setup.era.version, setup.batch.tokens, d.pp, on)


class Pool:
    """Uniform layers share one block count per layer; hybrid models group layers (V1)."""

    def __init__(self, p: PlanInputs, setup: Setup) -> None:
        d, kv, block, era = p.deployment, p.model.kv, setup.block, setup.era
        self.block = block
        self.era = era
        self.layers = setup.layers
        self.layout: vllm.HybridLayout | None = None
        self.linear_blocks = 0  # blocks one request holds per linear-attention group
        self.mtp_layers = 0  # MTP draft layers counted in the pool
        self.uncounted_draft: str | None = None  # a speculative method whose draft is not
        self.chunked_local = False  # local groups are chunked (window: attention_chunk_size)
        self.hma_off: str | None = None  # why the hybrid KV cache manager is off (hma.py)
        self.window = self.batched = 0  # batched: tokens past the window (sliding.py)
        self.batch_tokens = setup.batch.tokens  # max_num_batched_tokens
        self.sliding_block = block  # a Gemma 4 sliding group's block (`gemma4.pages`)
        if setup.gemma4 is not None:
            self._gemma4(p, setup, setup.gemma4)
            return
        method = (d.speculative_algorithm or "").upper()
        if method in vllm.MTP_METHODS and p.model.draft_layers and not kv.is_hybrid:
            # the MTP layers register attention layers of the target's shape in the same pool
            self.layers += p.model.draft_layers
            self.mtp_layers = p.model.draft_layers
        elif method and method != "NGRAM":
            self.uncounted_draft = method
        if kv.linear is not None:
            self._linear(p, setup)
            return
        if not kv.is_hybrid:
            return
        if era.worker is vllm.Worker.V0:
            raise KvtierError("vLLM V0 sliding-window pools are not modelled")
        self.chunked_local = LayerKind.CHUNKED in kv.layer_kinds
        if self.chunked_local:
            self.hma_off = hma.chunked_off_reason(d, setup.transfer, era.version)
        else:
            self.hma_off = hma.off_reason(d, setup.transfer, era.version)
        if self.hma_off:
            # unify_hybrid_kv_cache_specs makes every sliding-window or chunked-local layer a
            # FullAttentionSpec: one group of every layer, each holding the whole context
            return
        if d.pp > 1:
            raise KvtierError("vLLM hybrid models under PP are not modelled")
        # _get_kv_cache_groups_uniform_page_size groups ChunkedLocalAttentionSpec layers as it
        # does SlidingWindowSpec ones: one page size, group_size layers a group
        self.layout = vllm.hybrid_layout(kv.num_full_layers, kv.num_local_layers)
        self.layers = self.layout.group_size
        self.window = (kv.attention_chunk_size if self.chunked_local else kv.sliding_window) or 0
        self.batched = _in_flight(p, setup)

    def _gemma4(self, p: PlanInputs, setup: Setup, pages: gemma4.Gemma4Pages) -> None:
        """Full and sliding groups of the layers that hold KV, each type at its own block
        (engines/vllm/gemma4.py)."""
        self.layout = vllm.hybrid_layout(pages.full_layers, pages.sliding_layers)
        self.layers = self.layout.group_size
        self.block = pages.full_block
        self.sliding_block = pages.sliding_block
        self.window = p.model.kv.sliding_window or 0
        self.batched = _in_flight(p, setup)

    def _linear(self, p: PlanInputs, setup: Setup) -> None:
        """Full-attention and linear-attention groups of one page size (engines/vllm/mamba.py)."""
        d, kv, era = p.deployment, p.model.kv, setup.era
        assert kv.linear is not None
        if era.worker is vllm.Worker.V0 or d.pp > 1 or d.speculative_algorithm:
            raise KvtierError(
                "vLLM hybrid linear-attention pools are modelled for V1 without PP or "
                "speculative decoding"
            )
        mamba.check_runs(era.version, kv.linear)
        if off := hma.off_reason(d, setup.transfer, era.version):
            # unify_hybrid_kv_cache_specs cannot make state layers one spec: vLLM raises
            raise KvtierError(
                f"vLLM runs hybrid linear-attention models only with the hybrid KV cache "
                f"manager, which {off} turns off: 'Failed to promote local KV cache specs to one "
                "unified type' (v0.32.0's unify_hybrid_kv_cache_specs)"
            )
        self.layout = vllm.hybrid_layout(kv.num_full_layers, len(kv.linear.layer_ids))
        self.layers = self.layout.group_size
        self.linear_blocks = mamba.blocks_per_linear_group(
            era.version, d.hybrid.enable_prefix_caching, p.model.architecture
        )

    def blocks_per_request(self, context: int) -> int:
        if self.linear_blocks:
            assert self.layout is not None
            full = vllm.blocks_per_request(context, self.block)
            return self.layout.full_groups * full + self.layout.local_groups * self.linear_blocks
        if self.layout is None:
            return vllm.blocks_per_request(context, self.block)
        return vllm.hybrid_blocks_per_request(
            self.layout,
            context,
            self.block,
            self.window,
            self.batched,
            self.sliding_block,
            self.chunked_local,
        )

    def tokens(self, blocks: int, context: int) -> int:
        """Logged 'GPU KV cache size' (vllm.logged_tokens); V0 logs blocks x block size."""
        if self.era.worker is vllm.Worker.V0:
            return blocks * self.block
        groups, block = self._count_terms(context)
        return vllm.logged_tokens(
            self.era, blocks, groups, block, self.blocks_per_request(context), context
        )

    def logged_token_bytes(self, page: int, context: int) -> int:
        """Budget bytes one logged token stands for (vllm.logged_token_bytes)."""
        block_bytes = page * self.layers
        if self.era.worker is vllm.Worker.V0:
            return block_bytes // self.block
        groups, block = self._count_terms(context)
        return vllm.logged_token_bytes(
            self.era, block_bytes, groups, block, self.blocks_per_request(context), context
        )

    def _count_terms(self, context: int) -> tuple[int, int]:
        """The groups and block the v0.20 count multiplies by."""
        groups = 1 if self.layout is None else self.layout.full_groups + self.layout.local_groups
        # v0.20 multiplies by the smallest group block: a MambaSpec's is max_model_len in mode
        # none (MambaModelConfig: mamba_block_size), below an attention block grown past it
        return groups, min(self.block, context) if self.linear_blocks == 1 else self.block


def _total_known(p: PlanInputs) -> bool:
    return p.deployment.measured.gpu_mem_gib is not None or p.gpu_mem_mib is not None


def _measured_available(d: Deployment, util: float, terms: dict[str, Term]) -> Term:
    """The printed KV budget; at another utilization it moves by total x the difference, since
    the non-KV memory the profile run measured does not depend on it (requested_memory =
    total x gpu_memory_utilization, determine_available_memory)."""
    m = d.measured.profile
    assert m.kv_available_gib is not None
    source = "measured: 'Available KV cache memory'"
    at = m.kv_available_utilization
    if at is None or at == util:
        return Term.known(m.kv_available_gib, source)
    if "total" not in terms:
        raise KvtierError(
            "another gpu_memory_utilization moves the KV budget by the device total: "
            "pass --gpu or --gpu-mem-gib"
        )
    total = terms["total"]
    shift = util - at
    return Term(
        m.kv_available_gib + total.value * shift,
        m.kv_available_gib + min(total.low * shift, total.high * shift),
        m.kv_available_gib + max(total.low * shift, total.high * shift),
        f"{source} at utilization {at} + total x ({util} - {at})",
        total.exact,
    )


def rounded_measures(d: Deployment) -> tuple[str, ...]:
    """The measured figure the pool depends on: the KV budget (printed with two decimals)."""
    return ("profile.kv_available_gib",) if d.kv_cache_memory_bytes is None else ()


@dataclass(frozen=True)
class Setup:
    """What vLLM resolves before it profiles: the era, dtypes, the profile batch, the block."""

    era: vllm.Era
    partition: tuple[int, ...]  # layers per pipeline stage (get_pp_indices); () for a stand-in
    run_dtype: str  # the dtype the model runs in
    kv_cache_dtype: str  # --kv-cache-dtype, `auto` resolved from a ModelOpt checkpoint
    dtype: KVDtype  # the pool's element type
    chunked: tuple[bool, str]  # V0 chunked prefill, and why
    batch: profile.ProfileBatch
    block: int  # tokens a block (padded to the state page on a linear-attention model)
    layers: int  # this pipeline stage's layers (stage 0's when `stages` are set)
    stages: tuple[stages.Stage, ...]  # V1 under PP: every stage, whose least pool the engine takes
    state: tuple[int, str, str] | None  # linear-attention state page: bytes, conv, SSM dtype
    page: int  # bytes of one layer's block
    util: float  # gpu_memory_utilization
    transfer: kv_transfer.TransferConfig  # --kv-transfer-config, read once (kv_transfer.py)
    gemma4: gemma4.Gemma4Pages | None = None  # Gemma 4: the unified page and each type's block


def _partition(p: PlanInputs, era: vllm.Era) -> tuple[int, ...]:
    """Layers per pipeline stage; none for a geometry read from the log, one layer of the
    whole cell that no partition splits."""
    d, layers = p.deployment, p.model.kv.num_layers
    if p.model.architecture == STAND_IN_ARCHITECTURE:
        return ()
    return stages.pp_partition(layers, d.pp, era.version, d.pp_layer_partition)


def _setup(p: PlanInputs) -> Setup:
    d, kv = p.deployment, p.model.kv
    era = vllm.era_for(d.engine_version)
    device = _device(p)
    run_dtype = _run_dtype(p, era, device)
    kv_cache_dtype = _kv_cache_dtype(p, era.version)
    dtype = resolve_kv_dtype(d.engine, kv_cache_dtype, run_dtype)
    chunked = profile.v0_chunked_prefill(
        d.enable_chunked_prefill,
        p.context_length,
        multimodal=p.model.multimodal,
        sliding_window=kv.sliding_window is not None,
        speculative=d.speculative_algorithm is not None,
    )
    batch = profile.profile_batch(
        era,
        p.context_length,
        tokens=d.chunked_prefill_size,
        seqs=d.max_running_requests,
        chunked_prefill=chunked,
        multimodal=p.model.multimodal,
        device_gib=device.gib,
        device_name=device.name,
    )
    block = d.page_size or vllm.DEFAULT_BLOCK_SIZE
    state = None
    if kv.linear is not None:
        conv = run_dtype or p.model.dtype
        ssm = mamba.ssm_dtype(d.hybrid.mamba_ssm_dtype, p.model.architecture, kv.linear, conv)
        state_bytes = mamba.state_page_bytes(kv.linear, d.tp, conv, ssm)
        block = mamba.attention_block_size(state_bytes, vllm.page_bytes(kv, d.tp, 1, dtype), block)
        state = (state_bytes, conv, ssm)
    transfer = kv_transfer.read(d.kv_transfer_config, era.version)
    alloc_conf.check_kv_transfer_compat(d, transfer, era.version)
    partition = _partition(p, era)
    staged: tuple[stages.Stage, ...] = ()
    if d.pp > 1 and era.worker is not vllm.Worker.V0 and kv.num_layers >= d.pp:
        staged = stages.stages(p.model, d.tp, partition, None if d.dtype == "auto" else d.dtype)
    # V0 takes the least pool over workers too: the stage with the most layers
    layers = staged[0].layers if staged else max(partition, default=kv.num_layers)
    pages = None
    if kv.is_uniform:
        page = vllm.page_bytes(kv, d.tp, block, dtype)
    else:
        gemma4.check_runs(era.version, dtype)
        gemma4.check_deployment(d)
        pages = gemma4.pages(kv, d.tp, block, dtype)
        page = pages.page
    util = d.mem_fraction or vllm.DEFAULT_GPU_MEMORY_UTILIZATION
    return Setup(
        era,
        partition,
        run_dtype,
        kv_cache_dtype,
        dtype,
        chunked,
        batch,
        block,
        layers,
        staged,
        state,
        page,
        util,
        transfer,
        pages,
    )


@dataclass(frozen=True)
class Budget:
    """The KV budget (determine_available_memory) and the terms it was found from."""

    terms: Mapping[str, Term]
    available: Term


def _budget(p: PlanInputs, setup: Setup) -> Budget:
    d = p.deployment
    terms: dict[str, Term] = {}
    if d.kv_cache_memory_bytes is not None:
        available = Term.known(d.kv_cache_memory_bytes / GiB, "--kv-cache-memory-bytes")
    elif d.measured.profile.kv_available_gib is not None:
        terms = _terms(p, setup) if _total_known(p) else {}
        available = _measured_available(d, setup.util, terms)
    else:
        terms = _terms(p, setup)
        available = estimate.spread(
            terms,
            lambda v: vllm.available_gib(
                v["total"],
                setup.util,
                v["weights"],
                v["activation"],
                v["non_torch"],
                v.get("graphs", 0.0),
            ),
        )
    return Budget(terms, available)


@dataclass(frozen=True)
class Split:
    """The budget in blocks, and the tokens vLLM logs for them."""

    pool: Pool
    blocks: int
    per_request: int  # blocks one request of the context length holds
    tokens: int
    range_blocks: tuple[int, int] | None
    token_range: tuple[int, int] | None
    stage_tokens: tuple[tuple[stages.Stage, int], ...] = ()  # under PP: each stage's own count


def _sampler_excess(p: PlanInputs, setup: Setup) -> float:
    """GiB the sampler lifts the last stage's profiled peak above a stage without it."""
    shape = profile.ProfileShape.of(p.model, p.deployment.tp, setup.run_dtype)
    if shape is None:
        return 0.0
    peak = profile.activation_peak(setup.era, setup.batch, shape)
    return max(0, peak.sampler - peak.forward) / GiB


def _stage_budgets(p: PlanInputs, setup: Setup, budget: Budget) -> list[tuple[int, Term]]:
    """(layers, KV budget) of every pipeline stage; one entry without PP."""
    if not setup.stages:
        return [(setup.layers, budget.available)]
    first, sampler = setup.stages[0], _sampler_excess(p, setup)
    rest = estimate.VLLM_PROFILE_UNMODELLED_GIB[2]
    return [
        (s.layers, stages.stage_budget(budget.available, s, first, sampler, rest))
        for s in setup.stages
    ]


def _split(p: PlanInputs, setup: Setup, budget: Budget) -> Split:
    era, block, page, available = setup.era, setup.block, setup.page, budget.available
    pool = Pool(p, setup)
    extra = pool.layers - setup.layers  # MTP draft layers in the pool
    staged = _stage_budgets(p, setup, budget)

    def stage_blocks(layers: int, gib: float) -> int:
        return vllm.blocks_in_gib(gib, page, layers + extra)

    blocks = min(stage_blocks(n, t.value) for n, t in staged)
    ctx = p.context_length
    per_req = pool.blocks_per_request(ctx)
    if blocks <= 0:
        need = per_req * page * pool.layers / GiB
        raise vllm.no_memory_error(_utilization_for(setup, budget, need))
    tokens = pool.tokens(blocks, ctx)
    # the engine takes the least stage's pool, so each end of the range is the least stage's at
    # that end of its budget: a lopsided partition's stage 0 does not set the top
    rng_blocks = (
        None
        if all(t.exact for _, t in staged)
        else (
            min(stage_blocks(n, t.low) for n, t in staged),
            min(stage_blocks(n, t.high) for n, t in staged),
        )
    )
    rng = (
        None
        if rng_blocks is None
        else (pool.tokens(rng_blocks[0], ctx), pool.tokens(rng_blocks[1], ctx))
    )
    if era.worker is vllm.Worker.V0:
        if blocks < per_req:
            raise vllm.v0_too_short_error(ctx, tokens, rng)
    elif (usable := vllm.checked_blocks(blocks, era.version)) < per_req:
        fits = max(
            (c for c in range(block, ctx + 1, block) if pool.blocks_per_request(c) <= usable),
            default=0,
        )
        block_gib = page * pool.layers / GiB
        have = available.value - (blocks - usable) * block_gib  # the null block's off, v0.29.0 on
        raise vllm.too_short_error(ctx, per_req * block_gib, have, fits, tokens, rng)
    per_stage = tuple(
        (s, pool.tokens(stage_blocks(n, t.value), ctx))
        for s, (n, t) in zip(setup.stages, staged, strict=False)
    )
    return Split(pool, blocks, per_req, tokens, rng_blocks, rng, per_stage)


def _utilization_for(setup: Setup, budget: Budget, need_gib: float) -> float | None:
    """The gpu_memory_utilization, up to 1.0 and rounded up to 0.01, whose budget holds
    `need_gib`: the budget moves by total x the utilization's change (requested_memory =
    total x gpu_memory_utilization; what the profile run measured does not move)."""
    total = budget.terms.get("total")
    if total is None or total.value <= 0:  # a pinned --kv-cache-memory-bytes: no utilization
        return None
    wanted = setup.util + (need_gib - budget.available.value) / total.value
    wanted = math.ceil(wanted * 100 - 1e-9) / 100
    return wanted if wanted <= 1.0 else None


def _concurrency(p: PlanInputs, split: Split) -> tuple[Concurrency, ...]:
    pool, rng_blocks = split.pool, split.range_blocks
    return tuple(
        Concurrency(
            c,
            split.blocks / pool.blocks_per_request(c),
            *(
                (
                    rng_blocks[0] / pool.blocks_per_request(c),
                    rng_blocks[1] / pool.blocks_per_request(c),
                )
                if rng_blocks
                else (None, None)
            ),
        )
        for c in context_lengths(p.contexts, p.context_length)
    )


def _first_stage(p: PlanInputs, staged: tuple[stages.Stage, ...]) -> PlanInputs:
    """The plan sized on pipeline stage 0: its weights, as the log's lines are stage 0's."""
    d, first = p.deployment, staged[0]
    source = (
        f"estimated: spec weights at TP{d.tp}, stage 0 of PP{d.pp} "
        f"({first.holds(d.pp)}, get_pp_indices)"
    )
    return dataclasses.replace(p, weights_bytes=first.weights_bytes, weights_source=source)


def _stage_note(p: PlanInputs, split: Split) -> tuple[str, ...]:
    """One sentence on what PP does to the count and its range."""
    if not split.stage_tokens:
        return ()
    pp = p.deployment.pp
    (first, top) = split.stage_tokens[0]
    least, bottom = min(reversed(split.stage_tokens), key=lambda pair: pair[1])
    if least.index == 0:
        named, source = "the least of the stages", "its budget"
    else:
        which = "the last" if least.index == pp - 1 else f"stage {least.index}"
        peak = ", the sampler's peak" if least.samples else ""
        named = f"{which} ({least.holds(pp)}{peak}) {bottom:,}"
        source = f"{which} stage's budget" if least.index == pp - 1 else f"{which}'s budget"
    return (
        f"PP{pp} on vLLM V1: every stage sizes its own pool and the engine takes the smallest "
        f"(get_kv_cache_configs); stage 0 ({first.holds(pp)}) holds {top:,} tokens, {named}, "
        f"so the range runs from {source} at its low end up to the least stage's count at the "
        "top of each stage's budget (only stage 0's figures are printed; the others are "
        "estimated from them)",
    )


def build(p: PlanInputs) -> Ledger:
    """The ledger vLLM's determine_available_memory / get_num_blocks produce for `p`:
    setup -> budget -> blocks and tokens -> items and notes."""
    setup = _setup(p)
    if setup.stages:
        p = _first_stage(p, setup.stages)
    budget = _budget(p, setup)
    split = _split(p, setup, budget)
    text = ledger_items.describe(p, setup, budget, split)
    stage_note = _stage_note(p, split)
    nominal_total = budget.terms["total"].value if "total" in budget.terms else 0.0
    return p.ledger(
        era=setup.era.label,
        items=text.items,
        kv_tokens=split.tokens,
        kv_tokens_range=split.token_range,
        kv_bytes_per_token=setup.page * setup.layers // setup.block
        if setup.gemma4 is None
        else gemma4.bytes_per_token(p.model.kv, p.deployment.tp, setup.dtype),
        page_size=setup.block,
        context_length=p.context_length,
        mem_fraction=setup.util,
        max_running_requests=p.deployment.max_running_requests,
        concurrency=_concurrency(p, split),
        inputs=text.inputs,
        notes=(*text.notes, *stage_note, *estimate.widest(budget.available)),
        range_why="".join(stage_note),
        logged_token_bytes=split.pool.logged_token_bytes(setup.page, p.context_length),
        host_pool=ledger_items.host_pool(p, setup, split.pool.layers),
        pool_formula=text.pool_formula,
        figures=VllmFigures(
            num_blocks=split.blocks,
            available_kv_gib=budget.available.value,
            total_gib=nominal_total,
            free_end_gib=text.free_end,
            max_num_batched_tokens=setup.batch.tokens,
            chunked_prefill=setup.era.worker is not vllm.Worker.V0 or setup.chunked[0],
        ),
    )
