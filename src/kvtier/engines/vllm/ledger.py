"""Assemble the per-GPU ledger of a vLLM deployment from the rules in `vllm`."""

from __future__ import annotations

from typing import NamedTuple

from kvtier.engines import estimate
from kvtier.engines.deployment import Deployment
from kvtier.engines.estimate import Term
from kvtier.engines.figures import VllmFigures
from kvtier.engines.inputs import PlanInputs, stage_layers
from kvtier.engines.kvdtype import resolve_kv_dtype
from kvtier.engines.ledger import (
    Concurrency,
    HostPool,
    Input,
    Ledger,
    LedgerItem,
    context_lengths,
)
from kvtier.engines.version import Version
from kvtier.engines.vllm import mamba, profile
from kvtier.engines.vllm import pool as vllm
from kvtier.errors import KvtierError
from kvtier.spec.gpu import resolve_gpu
from kvtier.spec.model import LayerKind
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
_MODELOPT_KV = {"fp8": "fp8_e4m3"}
V0_19 = Version.release_of(0, 19)


def _run_dtype(p: PlanInputs, era: vllm.Era, device: _Device) -> str:
    """The dtype vLLM runs the model in, by its era's --dtype rule."""
    rule = vllm.model_dtype_v0 if era.worker is vllm.Worker.V0 else vllm.model_dtype
    return rule(
        p.deployment.dtype,
        p.model.config_dtype,  # a float32 config: vLLM resolves it itself, by GPU
        _MODEL_TYPES.get(p.model.architecture),
        device.capability,
    )


def _kv_cache_dtype(p: PlanInputs, version: Version | None) -> tuple[str, str | None]:
    """--kv-cache-dtype, with `auto` resolved from a ModelOpt checkpoint's KV format from v0.19
    (EngineArgs.create_engine_config -> resolve_kv_cache_dtype_string); and why, when it was."""
    d = p.deployment
    algo = p.model.kv_cache_quant_algo
    if d.kv_cache_dtype != "auto" or algo is None or (version is not None and version < V0_19):
        return d.kv_cache_dtype, None
    if algo == "nvfp4":
        raise KvtierError(
            f"{p.model.model_id}: the checkpoint's kv_cache_quant_algo nvfp4 (an NVFP4 KV cache) "
            "is not modelled; pass --kv-cache-dtype"
        )
    if algo not in _MODELOPT_KV:  # vLLM warns and keeps `auto`
        return d.kv_cache_dtype, None
    return _MODELOPT_KV[algo], (
        f"auto -> {_MODELOPT_KV[algo]}: the checkpoint's kv_cache_quant_algo {algo} "
        "(resolve_kv_cache_dtype_string, vLLM v0.19+)"
    )


def _activation(p: PlanInputs, era: vllm.Era, batch: profile.ProfileBatch, run_dtype: str) -> Term:
    """The profiled torch peak from the batch and the model's shape (profile.py), with the stated
    range of what that model leaves out; a model without its MLP widths falls back to the
    per-8,192-token constant."""
    shape = profile.ProfileShape.of(p.model, p.deployment.tp, run_dtype)
    if shape is None:
        return estimate.from_constant(
            estimate.VLLM_ACTIVATION_GIB_PER_8K_TOKENS,
            f"estimated: profile_run peak for {batch.tokens} batched tokens (model shape unknown)",
        ).scaled(batch.tokens / 8192)
    modelled = profile.activation_peak(era, batch, shape)
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


def _terms(
    p: PlanInputs, era: vllm.Era, batch: profile.ProfileBatch, run_dtype: str
) -> dict[str, Term]:
    """total, weights, activation, non-torch and graph terms: measured, else estimated."""
    d, m = p.deployment, p.deployment.measured
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
    if m.activation_gib is not None:
        terms["activation"] = Term.known(m.activation_gib, "measured: torch peak increase")
    else:
        terms["activation"] = _activation(p, era, batch, run_dtype)
    if m.non_torch_gib is not None:
        terms["non_torch"] = Term.known(m.non_torch_gib, "measured: non-torch increase")
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


class _Pool:
    """Uniform layers share one block count per layer; hybrid models group layers (V1)."""

    def __init__(self, p: PlanInputs, block: int, era: vllm.Era, batched: int) -> None:
        d, kv = p.deployment, p.model.kv
        self.block = block
        self.era = era
        self.layers = stage_layers(kv.num_layers, d.pp)
        self.layout: vllm.HybridLayout | None = None
        self.linear_blocks = 0  # blocks one request holds per linear-attention group
        self.notes: tuple[str, ...] = ()
        method = (d.speculative_algorithm or "").upper()
        if method in vllm.MTP_METHODS and p.model.draft_layers and not kv.is_hybrid:
            # the MTP layers register attention layers of the target's shape in the same pool
            self.layers += p.model.draft_layers
            self.notes = (f"{p.model.draft_layers} MTP draft layer(s) share the KV pool",)
        elif method and method != "NGRAM":
            self.notes = (
                f"speculative {method}: the draft's KV layers are not counted; "
                "the token count is an upper bound",
            )
        if kv.linear is not None:
            self._linear(p, era)
            return
        if not kv.is_hybrid:
            return
        if era.worker is vllm.Worker.V0:
            raise KvtierError("vLLM V0 sliding-window pools are not modelled")
        if LayerKind.CHUNKED in kv.layer_kinds:
            # VllmConfig.__post_init__ turns the hybrid KV cache manager off when the model sets
            # attention_chunk_size; unify_hybrid_kv_cache_specs then makes every chunked-local
            # layer a FullAttentionSpec: one group of every layer (v0.20.0, v0.21.0)
            self.notes += (
                f"chunked local attention (attention_chunk_size {kv.attention_chunk_size}): the "
                "hybrid KV cache manager is off and every layer keeps full-attention KV",
            )
            return
        if d.pp > 1:
            raise KvtierError("vLLM hybrid models under PP are not modelled")
        self.layout = vllm.hybrid_layout(kv.num_full_layers, kv.num_local_layers)
        self.layers = self.layout.group_size
        self.window = kv.sliding_window or 0
        self.batched = batched
        self.notes += (
            f"hybrid KV groups: {self.layout.full_groups} full + {self.layout.local_groups} "
            f"sliding-window groups of {self.layout.group_size} layers "
            f"({self.layout.padding_layers} padding layers); sliding window {self.window}, "
            f"max_num_batched_tokens {self.batched}",
        )

    def _linear(self, p: PlanInputs, era: vllm.Era) -> None:
        """Full-attention and linear-attention groups of one page size (engines/vllm/mamba.py)."""
        d, kv = p.deployment, p.model.kv
        assert kv.linear is not None
        if era.worker is vllm.Worker.V0 or d.pp > 1 or d.speculative_algorithm:
            raise KvtierError(
                "vLLM hybrid linear-attention pools are modelled for V1 without PP or "
                "speculative decoding"
            )
        self.layout = vllm.hybrid_layout(kv.num_full_layers, len(kv.linear.layer_ids))
        self.layers = self.layout.group_size
        self.linear_blocks = mamba.blocks_per_linear_group(bool(d.enable_prefix_caching))
        self.notes = (
            f"hybrid linear attention: {self.layout.full_groups} full-attention + "
            f"{self.layout.local_groups} linear-attention groups of {self.layout.group_size} "
            f"layers; {self.linear_blocks} state block(s) per request per linear group "
            f"(mamba_cache_mode {'align' if d.enable_prefix_caching else 'none'})",
        )

    def blocks_per_request(self, context: int) -> int:
        if self.linear_blocks:
            assert self.layout is not None
            full = vllm.blocks_per_request(context, self.block)
            return self.layout.full_groups * full + self.layout.local_groups * self.linear_blocks
        if self.layout is None:
            return vllm.blocks_per_request(context, self.block)
        return vllm.hybrid_blocks_per_request(
            self.layout, context, self.block, self.window, self.batched
        )

    def tokens(self, blocks: int, context: int) -> int:
        """Logged 'GPU KV cache size' (vllm.logged_tokens); V0 logs blocks x block size."""
        if self.era.worker is vllm.Worker.V0:
            return blocks * self.block
        groups = 1 if self.layout is None else self.layout.full_groups + self.layout.local_groups
        return vllm.logged_tokens(
            self.era, blocks, groups, self.block, self.blocks_per_request(context), context
        )


def _total_known(p: PlanInputs) -> bool:
    return p.deployment.measured.gpu_mem_gib is not None or p.gpu_mem_mib is not None


def _measured_available(d: Deployment, util: float, terms: dict[str, Term]) -> Term:
    """The printed KV budget; at another utilization it moves by total x the difference, since
    the non-KV memory the profile run measured does not depend on it (requested_memory =
    total x gpu_memory_utilization, determine_available_memory)."""
    m = d.measured
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
    return ("kv_available_gib",) if d.kv_cache_memory_bytes is None else ()


def _pool_formula(
    era: vllm.Era, pool: _Pool, blocks: int, per_req: int, ctx: int, gib: float, page: int
) -> str:
    if era.logs_concurrency_tokens:
        return (
            f"int({blocks} blocks / {per_req} blocks per request x {ctx}) "
            "(max_concurrency x max_model_len)"
        )
    block = pool.block
    if pool.layout is None:
        return (
            f"floor({gib:.2f} GiB x 2^30 / ({block} x {page * pool.layers // block} "
            f"B/token)) x {block}"
        )
    groups = pool.layout.full_groups + pool.layout.local_groups
    return f"{blocks} blocks // {groups} KV cache groups x {block} (num_blocks // groups x block)"


def build(p: PlanInputs) -> Ledger:
    """The ledger vLLM's determine_available_memory / get_num_blocks produce for `p`."""
    d = p.deployment
    era = vllm.era_for(d.engine_version)
    version = None if d.engine_version is None else Version.parse(d.engine_version, "vLLM")
    kv = p.model.kv
    device = _device(p)
    run_dtype = _run_dtype(p, era, device)
    kv_cache_dtype, kv_note = _kv_cache_dtype(p, version)
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
        version,
        p.context_length,
        tokens=d.chunked_prefill_size,
        seqs=d.max_running_requests,
        chunked_prefill=chunked,
        multimodal=p.model.multimodal,
        device_gib=device.gib,
        device_name=device.name,
    )
    batched = batch.tokens
    block = d.page_size or vllm.DEFAULT_BLOCK_SIZE
    layers = stage_layers(kv.num_layers, d.pp)
    state_note = None
    if kv.linear is not None:
        conv = run_dtype or p.model.dtype
        ssm = mamba.ssm_dtype(d.mamba_ssm_dtype, p.model.architecture, kv.linear, conv)
        state = mamba.state_page_bytes(kv.linear, d.tp, conv, ssm)
        block = mamba.attention_block_size(state, vllm.page_bytes(kv, d.tp, 1, dtype), block)
        state_note = (
            f"linear-attention state page {state:,} B (conv {conv}, SSM {ssm}) padded to the "
            f"attention page of {block} tokens (_align_hybrid_block_size)"
        )
    page = vllm.page_bytes(kv, d.tp, block, dtype)
    util = d.mem_fraction or vllm.DEFAULT_GPU_MEMORY_UTILIZATION
    # the pool's own element type, and why: a ModelOpt checkpoint's, or the dtype the model runs in
    kv_origin = kv_note or d.origin("kv_cache_dtype")
    inputs = [
        Input(i.name, dtype.name, kv_origin) if i.name == "kv cache dtype" else i
        for i in p.base_inputs()
    ]
    inputs.append(
        Input(
            "gpu_memory_utilization",
            f"{util}",
            d.origin("mem_fraction") if d.mem_fraction else "default 0.9",
        )
    )
    inputs.append(
        Input(
            "block size", str(block), d.origin("page_size") if d.page_size else "default 16 (CUDA)"
        )
    )
    inputs.append(Input("version era", era.label, d.origin("engine_version")))
    inputs.append(
        Input(
            "model dtype",
            run_dtype,
            f"--dtype {d.dtype}: {p.model.dtype_source}"
            if d.dtype == "auto"
            else d.origin("dtype"),
        )
    )
    inputs.append(
        Input(
            "max_num_batched_tokens",
            str(batch.tokens),
            d.origin("chunked_prefill_size") if d.chunked_prefill_size else batch.tokens_rule,
        )
    )
    inputs.append(
        Input(
            "max_num_seqs",
            str(batch.seqs),
            d.origin("max_running_requests") if d.max_running_requests else batch.seqs_rule,
        )
    )
    terms: dict[str, Term] = {}
    if d.kv_cache_memory_bytes is not None:
        available = Term.known(d.kv_cache_memory_bytes / GiB, "--kv-cache-memory-bytes")
    elif d.measured.kv_available_gib is not None:
        terms = _terms(p, era, batch, run_dtype) if _total_known(p) else {}
        available = _measured_available(d, util, terms)
    else:
        terms = _terms(p, era, batch, run_dtype)
        available = estimate.spread(
            terms,
            lambda v: vllm.available_gib(
                v["total"],
                util,
                v["weights"],
                v["activation"],
                v["non_torch"],
                v.get("graphs", 0.0),
            ),
        )

    pool = _Pool(p, block, era, batched)

    def blocks_for(gib: float) -> int:
        return vllm.blocks_in_gib(gib, page, pool.layers)

    blocks = blocks_for(available.value)
    if blocks <= 0:
        raise vllm.no_memory_error()
    ctx = p.context_length
    per_req = pool.blocks_per_request(ctx)
    tokens = pool.tokens(blocks, ctx)
    rng_blocks = (
        None if available.exact else (blocks_for(available.low), blocks_for(available.high))
    )
    rng = (
        None
        if rng_blocks is None
        else (pool.tokens(rng_blocks[0], ctx), pool.tokens(rng_blocks[1], ctx))
    )
    if blocks < per_req:
        if era.worker is vllm.Worker.V0:
            raise vllm.v0_too_short_error(ctx, tokens, rng)
        fits = max(c for c in range(block, ctx + 1, block) if pool.blocks_per_request(c) <= blocks)
        need = per_req * page * pool.layers / GiB
        raise vllm.too_short_error(ctx, need, available.value, fits, tokens, rng)
    block_bytes = page * pool.layers
    items: list[LedgerItem] = []
    nominal = {k: t.value for k, t in terms.items()}
    for key, name in (
        ("weights", "weights"),
        ("activation", "activation peak (profile_run)"),
        ("non_torch", "non-torch memory (NCCL, backend)"),
        ("graphs", "CUDA graphs (budgeted estimate)"),
    ):
        if key in terms:
            items.append(LedgerItem(name, terms[key].value, terms[key].source, terms[key].exact))
    kv_gib = blocks * block_bytes / GiB
    items.append(
        LedgerItem(
            "KV cache pool",
            kv_gib,
            f"{blocks:,} blocks x {block_bytes:,} B; blocks = available // (page x layers) "
            "(get_num_blocks)",
            available.exact,
        )
    )
    items.append(
        LedgerItem(
            "unused (block rounding)",
            available.value - kv_gib,
            "available - KV pool",
            available.exact,
        )
    )
    free_end = 0.0
    if "total" in terms:
        outside = nominal["total"] * (1 - util)
        graphs = (
            0.0
            if era.budgets_cuda_graphs
            else (
                d.measured.cuda_graph_gib
                if d.measured.cuda_graph_gib is not None
                else estimate.VLLM_CUDA_GRAPH_GIB[0]
            )
        )
        free_end = outside - graphs
        source = "total x (1 - gpu_memory_utilization)" + (
            "" if era.budgets_cuda_graphs else "; CUDA graphs are captured from it"
        )
        items.append(LedgerItem("outside the budget", outside, source, terms["total"].exact))
    conc = tuple(
        Concurrency(
            c,
            blocks / pool.blocks_per_request(c),
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
    notes = list(pool.notes) + ([state_note] if state_note else [])
    if era.worker is vllm.Worker.V0:
        notes.append(f"V0 logs '# GPU blocks: {blocks}'")
    else:
        notes.append(
            f"logs 'GPU KV cache size: {tokens:,} tokens' and 'Maximum concurrency for "
            f"{ctx:,} tokens per request: {blocks / per_req:.2f}x'"
        )
    host_pool = None
    if d.kv_offloading_size_gib:
        # CPUOffloadingSpec: blocks = cpu_bytes_to_use // (page x layers x world_size); the size
        # is GiB summed over all TP x PP ranks (vllm/config/vllm.py, native backend)
        world = d.tp * d.pp
        cpu_bytes = int(d.kv_offloading_size_gib * GiB)
        host_tokens = cpu_bytes // (page * layers * world) * block
        host_pool = HostPool(
            host_tokens,
            cpu_bytes // world,
            cpu_bytes * d.gpus // world,
            f"--kv-offloading-size {d.kv_offloading_size_gib:g} GiB over {world} ranks "
            "(CPUOffloadingSpec)",
        )
    return p.ledger(
        era=era.label,
        items=tuple(items),
        kv_tokens=tokens,
        kv_tokens_range=rng,
        kv_bytes_per_token=page * layers // block,
        page_size=block,
        context_length=ctx,
        mem_fraction=util,
        max_running_requests=d.max_running_requests,
        concurrency=conc,
        inputs=tuple(inputs),
        notes=tuple(notes),
        host_pool=host_pool,
        pool_formula=_pool_formula(era, pool, blocks, per_req, ctx, available.value, page),
        figures=VllmFigures(
            num_blocks=blocks,
            available_kv_gib=available.value,
            total_gib=nominal.get("total", 0.0),
            free_end_gib=free_end,
            max_num_batched_tokens=batch.tokens,
            chunked_prefill=era.worker is not vllm.Worker.V0 or chunked[0],
        ),
    )
