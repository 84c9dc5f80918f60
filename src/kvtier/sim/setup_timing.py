"""The timing model of a deployment: the GPU's figures, its interconnect, the model's costs and
the speculative draft, each with its source (`kvtier.sim.setup.build_config` calls this)."""

from __future__ import annotations

from kvtier.engines.deployment import Deployment
from kvtier.engines.figures import SGLangFigures
from kvtier.engines.inputs import PlanInputs
from kvtier.engines.ledger import Ledger
from kvtier.engines.sglang import versions as sglang_versions
from kvtier.errors import KvtierError, UnsupportedModel
from kvtier.model.description import AttentionKind, ModelSpec
from kvtier.model.gpu import GpuSpec
from kvtier.model.params import EMBEDDING, LM_HEAD
from kvtier.model.weights import OVER_TP, Splits, WeightBytes, weight_bytes
from kvtier.sim import speculative
from kvtier.sim.dp_attention import DPAttention, dp_attention
from kvtier.sim.speculative import SpecDecode
from kvtier.sim.timing import (
    COMPUTE_EFFICIENCY,
    FORWARD_OVERHEAD_GPUS,
    FORWARD_OVERHEAD_MS,
    Hardware,
    ModelCost,
    TimingFlags,
    TimingModel,
    default_host_gbps,
)
from kvtier.units import GiB

Sources = list[tuple[str, str]]


def hardware(gpu: GpuSpec, d: Deployment, flags: TimingFlags, sources: Sources) -> Hardware:
    """The GPU and node figures: the flags', else the catalog's."""
    pcie = flags.pcie_gbps or gpu.pcie_gbps
    tflops = flags.bf16_tflops or gpu.bf16_dense_tflops
    hbm = flags.hbm_gbps or gpu.hbm_gbps
    missing = [
        n
        for n, v in (("--pcie-gbps", pcie), ("--bf16-tflops", tflops), ("--hbm-gbps", hbm))
        if not v
    ]
    if missing:
        raise KvtierError(
            f"the GPU catalog has no figure for {gpu.name}: pass {', '.join(missing)}"
        )
    assert pcie and tflops and hbm
    allreduce = flags.allreduce_gbps or gpu.allreduce_gbps or 0.0
    latency_us = (
        flags.allreduce_latency_us
        if flags.allreduce_latency_us is not None
        else gpu.allreduce_latency_us or 0.0
    )
    if d.tp > 1:
        if not allreduce:
            raise KvtierError(
                f"the GPU catalog has no all-reduce bandwidth for {gpu.name}: pass "
                "--allreduce-gbps (nccl-tests all_reduce busbw across the TP ranks)"
            )
        given = flags.allreduce_gbps is not None or flags.allreduce_latency_us is not None
        sources.append(
            (
                "all-reduce",
                f"{allreduce:g} GB/s bus bandwidth, {latency_us:g} us each, 2 a layer "
                + ("(--allreduce-gbps / --allreduce-latency-us)" if given else gpu.interconnect),
            )
        )
    gpus_per_node = flags.gpus_per_node or d.gpus
    return Hardware(
        tflops,
        hbm,
        pcie,
        flags.host_gbps or default_host_gbps(pcie, gpus_per_node),
        gpus_per_node,
        flags.store_gbps,
        allreduce,
        latency_us * 1e-6,
        forward_overhead_ms(flags) * 1e-3,
    )


def forward_overhead_ms(flags: TimingFlags) -> float:
    """The fixed cost of a forward pass: the flag's, else the calibrated default."""
    given = flags.step_overhead_ms
    return FORWARD_OVERHEAD_MS if given is None else given


def prefill_efficiency(gpu: GpuSpec, flags: TimingFlags) -> tuple[float, str]:
    """The fraction of bf16 peak a prefill reaches and where it comes from: the flag's, else the
    GPU's published rows, else the H100's."""
    if flags.compute_efficiency is not None:
        return flags.compute_efficiency, "--compute-efficiency"
    if gpu.prefill_efficiency is not None:
        return gpu.prefill_efficiency, f"calibrated on {gpu.name}: {gpu.prefill_source}"
    return COMPUTE_EFFICIENCY, (
        "calibrated on H100 prefill"
        if gpu.name in FORWARD_OVERHEAD_GPUS
        else f"uncalibrated on {gpu.name}: the H100's; --compute-efficiency"
    )


def _overhead_words(gpu: GpuSpec, flags: TimingFlags) -> str:
    """How the fixed cost of a forward pass was chosen, for the timing source line."""
    ms = forward_overhead_ms(flags)
    if flags.step_overhead_ms is not None:
        return f"{ms:g} ms a forward pass (--step-overhead-ms)"
    if gpu.name in FORWARD_OVERHEAD_GPUS:
        return f"{ms:g} ms a forward pass (calibrated on H100 / H200 bs=1 decode, +-0.3 ms)"
    return (
        f"{ms:g} ms a forward pass (uncalibrated on {gpu.name}: set on H100 / H200; published "
        "bs=1 rows on other GPUs read 0.4-3.2 ms; --step-overhead-ms)"
    )


def draft_weights(ledger: Ledger, cost: ModelCost) -> tuple[float, str]:
    """The draft's weight bytes per rank: the ledger's (measured or from the draft's config),
    else one decoder layer of the target (an EAGLE head and an MTP module are one layer)."""
    try:
        item = ledger.item("draft weights")
    except KeyError:
        layer = (cost.weight_bytes_per_rank + cost.expert_bytes_per_rank) / cost.num_layers
        return layer, (
            f"draft weights assumed one target layer, {layer / GiB:.3f} GiB a rank "
            "(give --draft-weights-gib)"
        )
    return item.gib * GiB, f"draft weights {item.gib:.3f} GiB a rank ({item.source})"


def _draft_kv_bytes(ledger: Ledger, cost: ModelCost) -> float:
    """The draft's KV bytes per token on one rank: SGLang's draft pool cell; vLLM pools the
    draft's layer with the target's, one layer of the target's cell."""
    if isinstance(ledger.figures, SGLangFigures):
        return float(ledger.figures.draft_cell_bytes)
    return cost.kv_bytes_per_token / cost.num_layers


def spec_decode(
    d: Deployment, ledger: Ledger, cost: ModelCost, flags: TimingFlags, sources: Sources
) -> SpecDecode | None:
    """The deployment's speculative decoding with its draft's per-rank costs, or None."""
    speculative.check_flags(d)
    method = speculative.method_of(d)
    if method is None:
        if flags.accept_length is not None:
            raise KvtierError(
                "--accept-length applies to speculative decoding: give --speculative-algorithm "
                "(a pasted launch command's, or kvtier's)"
            )
        return None
    engine = d.engine.value
    passes, topk, draft = speculative.shape(d, engine)
    accept, how = speculative.accept_length(
        method, passes, flags.accept_length, flags.accept_origin
    )
    weights, kv, weights_how = 0.0, 0.0, "no draft model"
    if method != "NGRAM":
        weights, weights_how = draft_weights(ledger, cost)
        kv = _draft_kv_bytes(ledger, cost)
    spec = SpecDecode(method, passes, topk, draft, accept, how, weights, kv)
    sources.append(("speculative decoding", f"{spec.describe()}; {weights_how}"))
    return spec


YEAR_S = 3.2e7  # longer than this for one step is a typo in a rate, not a deployment


def _check_finite(tm: TimingModel, flags: TimingFlags) -> None:
    """Refuse rates so small that one step would take longer than a year, naming them."""
    m, hw = tm.model, tm.hw
    terms = (
        (
            "--hbm-gbps x --hbm-efficiency",
            m.weight_bytes_read(1) / (hw.hbm_gbps * 1e9 * tm.hbm_efficiency),
        ),
        ("--bf16-tflops x --compute-efficiency", tm.prefill_s(1, 0) - tm.allreduce_s(1)),
        ("--allreduce-gbps", tm.allreduce_s(1)),
        ("--pcie-gbps / --host-gbps", tm.load_s(1)),
        ("--store-gbps", tm.store_read_s(1)),
    )
    for names, seconds in terms:
        if not seconds < YEAR_S:
            raise KvtierError(
                f"{names} too small: one token's step would take {seconds:.3g} s; give rates "
                "in GB/s and TFLOP/s"
            )


def attention_dim(model: ModelSpec) -> int:
    """Multiply-adds per (query, key) pair per layer, over all heads: QK^T plus PV widths.

    MLA as SGLang runs it with the weights absorbed: QK^T over the latent plus its rope part,
    PV over the latent.
    """
    kv = model.kv
    heads = model.num_attention_heads
    if not kv.is_uniform:
        raise UnsupportedModel(
            f"{model.model_id}: simulating layers of two head widths (Gemma 4) is not modelled"
        )
    if kv.kind is AttentionKind.MLA:
        return heads * (2 * kv.kv_lora_rank + kv.qk_rope_head_dim)
    return heads * (kv.head_dim + kv.v_head_dim)


def model_cost(
    model: ModelSpec, d: Deployment, kv_bytes_per_token: int, splits: Splits = OVER_TP
) -> ModelCost:
    """Per-rank costs of `model` at the deployment's TP (its attention, embedding and LM head
    split as the ledger splits them, `splits`); routed experts kept apart (their `active`
    count is below their `count`) so decode reads only the experts a batch touches, and an
    input embedding apart from its LM head read only as the rows a step looks up
    (`_input_lookup`)."""
    weights = weight_bytes(model, d.tp, _dtype(d), splits)
    routed = {g.name for g in model.params if g.active < g.count}
    experts = sum(g.bytes_per_rank for g in weights.groups if g.name in routed)
    table, row = _input_lookup(model, weights)
    return ModelCost(
        active_params=model.active_params,
        weight_bytes_per_rank=float(weights.total_bytes - experts - table),
        kv_bytes_per_token=kv_bytes_per_token,
        num_layers=model.kv.num_layers,
        attention_dim=attention_dim(model),
        expert_bytes_per_rank=float(experts),
        num_experts=model.num_experts if experts else 0,
        experts_per_token=model.experts_per_token if experts else 0,
        hidden_size=model.hidden_size,
        embedding_row_bytes=row,
    )


def _input_lookup(model: ModelSpec, weights: WeightBytes) -> tuple[int, float]:
    """The input embedding's bytes on a rank that a step does not read whole, and the bytes of
    the row it reads a token; (0, 0.0) when the model ties its word embeddings, the one table
    then being the LM head, read whole every step.

    A forward pass indexes the input embedding: vLLM v0.32.0 and SGLang v0.5.23
    `VocabParallelEmbedding.forward` (layers/vocab_parallel_embedding.py) gather each token's
    row of the rank's shard (`quant_method.embedding` is `F.embedding`; a token outside the
    shard reads row 0, masked), so a rank reads tokens x hidden x width of it; the LM head is
    a matmul over its whole shard (`LogitsProcessor._get_logits`, `quant_method.apply`)."""
    if not any(g.name == LM_HEAD for g in model.params):
        return 0, 0.0
    table = next((g for g in weights.groups if g.name == EMBEDDING), None)
    if table is None or not table.params_per_rank:
        return 0, 0.0
    width = table.bytes_per_rank / table.params_per_rank
    return table.bytes_per_rank, model.hidden_size * width


def _dtype(d: Deployment) -> str | None:
    return None if d.dtype == "auto" else d.dtype


def _dp_attention(
    d: Deployment, model: ModelSpec, splits: Splits, sources: Sources
) -> DPAttention | None:
    """Under --enable-dp-attention --dp D > 1: the step's split."""
    if not (d.enable_dp_attention and d.dp > 1):
        return None
    version = sglang_versions.DEFAULT.resolve(d.engine_version)
    if version < sglang_versions.V0_5_3:
        raise KvtierError(
            f"simulate with DP attention follows SGLang v0.5.3 - v0.5.23, not {version}"
        )
    attn_tp = d.tp // d.dp
    weights = weight_bytes(model, d.tp, _dtype(d), splits)
    split = dp_attention(model, d.tp, d.dp, weights, version >= sglang_versions.V0_5_10)
    sources.append(
        (
            "DP attention",
            f"{d.dp} DP ranks of attention TP{attn_tp}, each its own scheduler and pool, "
            f"requests in turn (round_robin); attention per rank over its own tokens, the "
            f"MLP / MoE at TP{d.tp} over every rank's tokens gathered (SUM_LEN with a prefill "
            "in the step, else MAX_LEN: the largest rank's tokens x DP when no smaller), three "
            f"collectives a layer; steps of all ranks together (SGLang {version} rules: "
            "dp_attention.py get_dp_padding_mode, prepare_mlp_sync_batch)",
        )
    )
    return split


def timing_model(
    d: Deployment,
    inputs: PlanInputs,
    ledger: Ledger,
    gpu: GpuSpec,
    flags: TimingFlags,
    sources: Sources,
) -> TimingModel:
    hw = hardware(gpu, d, flags, sources)
    split = _dp_attention(d, inputs.model, inputs.splits, sources)
    cost: ModelCost = model_cost(inputs.model, d, ledger.kv_bytes_per_token, inputs.splits)
    sources.append(("gpu", f"{gpu.name}: {gpu.source}"))
    efficiency, efficiency_how = prefill_efficiency(gpu, flags)
    tm = TimingModel(
        cost,
        hw,
        d.tp,
        efficiency,
        flags.hbm_efficiency,
        spec_decode(d, ledger, cost, flags, sources),
        split,
    )
    _check_finite(tm, flags)
    overhead = f"; {_overhead_words(gpu, flags)}"
    sources.append(
        (
            "timing",
            f"prefill at {efficiency} x {hw.bf16_dense_tflops:g} TFLOPS x {d.tp} GPUs "
            f"({efficiency_how}); decode at {flags.hbm_efficiency} x {hw.hbm_gbps:g} GB/s, or "
            f"the prefill efficiency of compute where that is longer{overhead}; loads at "
            f"{tm.load_gbps:g} GB/s per GPU (link {hw.pcie_gbps:g}, host side "
            f"{hw.host_gbps:g} over {min(d.tp, hw.gpus_per_node)} GPUs)",
        )
    )
    return tm
