"""How long the engine takes: a roofline model of prefill, decode and host->device loads.

Every constant here is named, sourced, and overridable from `kvtier simulate`'s flags.

  prefill  compute-bound: (2 x active params x new tokens + attention FLOPs over the prefix)
           / (TP ranks x bf16 dense peak x COMPUTE_EFFICIENCY)
  decode   one iteration of a batch of B requests holding K KV tokens, each verifying D
           tokens (D = 1 without speculative decoding, `kvtier.sim.speculative`): forward
           cost + TP all-reduces + max(memory, compute) of the target, plus the draft's
           passes, each paying the forward cost too; memory = (weight bytes read per rank
           + K x KV bytes per token per rank) / (HBM bandwidth x HBM_EFFICIENCY), where an
           MoE step reads the dense weights and only the routed experts its B x D tokens
           touch: E x (1 - (1 - k/E)^(B x D)) of E experts when each token picks k at
           random; compute = (2 x active params x B x D + 2 x layers x attention width x D
           x K) / (TP x bf16 peak x COMPUTE_EFFICIENCY). The iteration commits the accept
           length (1 without a draft) of tokens per request.
  forward  a fixed cost of every forward pass, target or draft, decode, verify or prefill
           batch (CUDA-graph replay or kernel launches, sampling, the scheduler), not
           proportional to bytes: FORWARD_OVERHEAD_MS
  all-reduce  two per layer (attention and MLP outputs) of B x D x hidden x 2 bytes (bf16
           activations), ring over the TP ranks: latency + 2 (n - 1) / n x bytes / bus
           bandwidth (nccl-tests' busbw); none at TP 1
  load     host->device over PCIe: each TP rank copies its share of the KV of the host hits over
           its own link; the ranks of a node load at once and share the host side, so one rank
           gets min(link, host / GPUs loading)
  store    L3 hits are read into host memory first (every rank's copy through the node's one
           store at STORE_GBPS), then loaded like host hits; the read is not overlapped
  overlap  loads run layer by layer ahead of compute (SGLang HiCache's `LayerDoneCounter`: the
           attention of layer i waits for layer i's load), a two-stage pipeline over L layers:
           time = L x max(load/L, compute/L) + min(load/L, compute/L)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from kvtier.sim.dp_attention import DPAttention
    from kvtier.sim.speculative import SpecDecode

# Fraction of dense bf16 peak a prefill reaches on an H100 (and every GPU whose catalog entry sets
# none): sglang#26305's 131,072-token recompute, llm-d's HBM-only TTFT and GPUStack's Qwen3-14B
# H100 study (vLLM v0.11.0, 2,000-32,000-token prompts: 1.00-1.11x its throughputs) agree on it.
# A GPU with a lower peak reaches more of it (an A100: 0.75, the catalog's prefill_efficiency).
COMPUTE_EFFICIENCY = 0.4
# Fraction of peak HBM bandwidth memory-bound decode kernels sustain.
HBM_EFFICIENCY = 0.8
# Fixed cost of one forward pass (ms). At HBM_EFFICIENCY, bs=1 decode of Qwen3-8B on one GPU reads
# 1.61 (H100, vLLM v0.11.0 bf16: 7.28 ms TPOT against 5.67 ms of bytes), 1.06 (H100, SGLang
# v0.5.3.post3 FP8 EAGLE-3: 8.74 ms an iteration of 5 passes against 3.43 ms of bytes) and 1.38
# (H200, SGLang bf16: 5.35 ms against 3.96 ms): their mean, +-0.3 ms. The bytes are a step's reads:
# the LM head whole, the input embedding by the rows it looks up (`ModelCost.embedding_row_bytes`).
# Solved for both unknowns, the two H100 rows give 0.99 ms and an efficiency of 0.72
# (docs/validation.md).
FORWARD_OVERHEAD_MS = 1.35
# GPUs whose published rows set it; on the others it is uncalibrated
FORWARD_OVERHEAD_GPUS = ("H100 SXM", "H200")
# Read bandwidth of the node's L3 store: one NVMe SSD on PCIe 4.0 x4 (~7 GB/s peak sequential),
# derated for page-sized reads.
STORE_GBPS = 5.0
# GPUs behind one PCIe switch uplink in common 8-GPU servers: the node's host side carries
# gpus_per_node / 2 links' worth when every GPU loads at once.
GPUS_PER_HOST_LINK = 2


@dataclass(frozen=True, slots=True)
class ModelCost:
    """What one token costs the model, per tensor-parallel rank where it says so."""

    active_params: int  # parameters one token touches (routed experts: only the active ones)
    weight_bytes_per_rank: float  # bytes every decode step streams from HBM on one rank
    kv_bytes_per_token: int  # KV bytes of one token on one rank (the engine's cell size)
    num_layers: int
    attention_dim: int  # multiply-adds per (query, key) pair per layer, all heads
    expert_bytes_per_rank: float = 0.0  # routed-expert weights on one rank, read when touched
    num_experts: int = 0
    experts_per_token: int = 0
    hidden_size: int = 0  # width of the activations all-reduced after attention and MLP
    # one looked-up row of an input embedding that is not also the LM head, on a rank: read
    # once a token, where the table itself is not read whole (`setup_timing.model_cost`)
    embedding_row_bytes: float = 0.0

    def weight_bytes_read(self, tokens: float) -> float:
        """Weight bytes one forward pass over `tokens` tokens reads on one rank."""
        rows = self.embedding_row_bytes * float(tokens)
        if not self.num_experts:
            return self.weight_bytes_per_rank + self.expert_bytes_per_rank + rows
        touched = 1.0 - (1.0 - self.experts_per_token / self.num_experts) ** float(tokens)
        return self.weight_bytes_per_rank + self.expert_bytes_per_rank * float(touched) + rows


Line = tuple[float, float]  # a + b x i over the iteration index i


def _sum_line(line: Line, n: float) -> float:
    a, b = line
    return n * a + b * n * (n - 1) / 2


def sum_max(first: Line, second: Line, n: float) -> float:
    """Sum over i in [0, n) of max(first(i), second(i)): the lines cross at most once."""
    if n <= 0:
        return 0.0
    (a1, b1), (a2, b2) = first, second
    if b1 == b2:
        return _sum_line(first if a1 >= a2 else second, n)
    cross = (a2 - a1) / (b1 - b2)  # first(i) >= second(i) from here on when b1 > b2
    k = min(n, max(0, math.ceil(cross)))
    before, after = (second, first) if b1 > b2 else (first, second)
    shifted = (after[0] + after[1] * k, after[1])
    return _sum_line(before, k) + _sum_line(shifted, n - k)


class StepLines(NamedTuple):
    """A decode iteration's time, i iterations into a run of a fixed batch:
    const + max(mem(i), comp(i)) + draft passes x max(draft mem(i), draft comp).

    A named tuple, not a frozen dataclass: the simulators build one a step, and a frozen
    dataclass's __init__ took 1.4 us of the 1.7 us that building it costs."""

    const: float
    mem: Line
    comp: Line
    draft: tuple[float, Line, Line] | None = None  # (passes, memory, compute) of the draft

    def total(self, n: float) -> float:
        """Seconds of the first `n` iterations (a fraction: iterations amortised over tokens)."""
        if n == 1:  # sum_max over one iteration: the larger line at i = 0, the same float
            t = self.const + max(self.mem[0], self.comp[0])
            if self.draft is not None:
                passes, mem, comp = self.draft
                t += passes * max(mem[0], comp[0])
            return t
        t = n * self.const + sum_max(self.mem, self.comp, n)
        if self.draft is not None:
            passes, mem, comp = self.draft
            t += passes * sum_max(mem, comp, n)
        return t

    def ends(self, n: int) -> np.ndarray:
        """Seconds from the run's start to the end of each of its first `n` iterations."""
        i = np.arange(n, dtype=np.float64)
        per = self.const + np.maximum(
            self.mem[0] + self.mem[1] * i, self.comp[0] + self.comp[1] * i
        )
        if self.draft is not None:
            passes, mem, comp = self.draft
            per = per + passes * np.maximum(mem[0] + mem[1] * i, comp[0] + comp[1] * i)
        return np.cumsum(per)


class DecodeBatch(NamedTuple):
    """The terms of a decode iteration's time that the batch's KV tokens do not change
    (`TimingModel.decode_batch`): a server that times one batch size at many KV sizes keeps
    them. The target's lines (`StepLines`) at kv0 KV tokens:
    memory (weights + kv0 x KV bytes) / rate, growing grow x KV bytes / rate an iteration;
    compute (flops + attn x kv0) / peak, growing attn x grow / peak."""

    const: float  # the forward pass's fixed cost and all-reduces, seconds
    weights: float  # weight bytes one iteration reads on a rank
    kv_bytes: int  # KV bytes per token on a rank
    rate: float  # HBM bytes/s reached
    grow: float  # KV tokens the batch adds an iteration
    attn: float  # attention FLOPs per KV token
    flops: float  # FLOPs of the weights over the batch's tokens
    peak: float  # FLOP/s reached

    def mem(self, kv0: float) -> Line:
        return (
            self.weights + kv0 * self.kv_bytes
        ) / self.rate, self.grow * self.kv_bytes / self.rate

    def comp(self, kv0: float) -> Line:
        return (self.flops + self.attn * kv0) / self.peak, self.attn * self.grow / self.peak

    def lines(self, kv0: float, draft: tuple[float, Line, Line] | None = None) -> StepLines:
        return StepLines(self.const, self.mem(kv0), self.comp(kv0), draft)

    def first_s(self, kv0: float) -> float:
        """The first iteration at kv0 KV tokens without a draft (`StepLines.total(1)`)."""
        mem = (self.weights + kv0 * self.kv_bytes) / self.rate
        comp = (self.flops + self.attn * kv0) / self.peak
        return self.const + (mem if mem >= comp else comp)


@dataclass(frozen=True, slots=True)
class Hardware:
    """One GPU and the node around it; bandwidths in decimal GB/s, compute in TFLOP/s."""

    bf16_dense_tflops: float
    hbm_gbps: float
    pcie_gbps: float  # one GPU's host link, one direction
    host_gbps: float  # the node's host side, shared by the GPUs that load at once
    gpus_per_node: int
    store_gbps: float = STORE_GBPS  # the node's L3 store, read by every rank for its copy
    allreduce_gbps: float = 0.0  # all-reduce bus bandwidth between the TP ranks (0: free)
    allreduce_latency_s: float = 0.0  # one all-reduce's fixed cost
    step_overhead_s: float = 0.0  # per forward pass: CUDA-graph replay, sampling, scheduler


@dataclass(frozen=True, slots=True)
class TimingModel:
    """Seconds for each engine action of one tensor-parallel group."""

    model: ModelCost
    hw: Hardware
    tp: int
    compute_efficiency: float = COMPUTE_EFFICIENCY
    hbm_efficiency: float = HBM_EFFICIENCY
    spec: SpecDecode | None = None
    dp_attention: DPAttention | None = None  # SGLang's DP attention: a step of every DP rank

    @property
    def tokens_per_step(self) -> float:
        """Tokens one decode iteration commits per request (the accept length)."""
        return self.spec.accept_length if self.spec else 1.0

    def decode_iterations(self, tokens: int) -> int:
        """Decode iterations that commit `tokens` tokens of one request."""
        return math.ceil(tokens / self.tokens_per_step - 1e-9)

    def allreduce_s(self, tokens: float, layers: int | None = None) -> float:
        """Two all-reduces per layer of `tokens` tokens' activations across the TP ranks."""
        n = self.tp
        if n == 1 or not self.hw.allreduce_gbps:
            return 0.0
        layers = self.model.num_layers if layers is None else layers
        nbytes = tokens * self.model.hidden_size * 2 * 2 * (n - 1) / n
        return 2 * layers * (self.hw.allreduce_latency_s + nbytes / (self.hw.allreduce_gbps * 1e9))

    def decode_batch(self, batch: int) -> DecodeBatch:
        """The terms of a decode iteration of `batch` requests that its KV does not change, for
        a caller that keeps them per batch size; `decode_lines` computes them inline (building
        them took it from 0.8 us to 1.65 us a call), the same floats (tests/test_sim_timing.py)."""
        m = self.model
        verify = self.spec.draft_tokens if self.spec else 1
        tokens = batch * verify
        return DecodeBatch(
            const=self.hw.step_overhead_s + self.allreduce_s(tokens),
            weights=m.weight_bytes_read(tokens),
            kv_bytes=m.kv_bytes_per_token,
            rate=self.hw.hbm_gbps * 1e9 * self.hbm_efficiency,
            grow=batch * self.tokens_per_step,
            attn=2.0 * m.num_layers * m.attention_dim * verify,
            flops=2.0 * m.active_params * tokens,
            peak=self.tp * self.hw.bf16_dense_tflops * 1e12 * self.compute_efficiency,
        )

    def decode_lines(self, batch_kv_tokens: float, batch: int) -> StepLines:
        """One decode iteration's time as lines in the iteration index i (the KV grows by
        batch x accept length a step): constant + max(memory line, compute line) of the target,
        plus the draft's."""
        m = self.model  # the terms of `decode_batch` inline: this runs every decode step
        rate = self.hw.hbm_gbps * 1e9 * self.hbm_efficiency
        peak = self.tp * self.hw.bf16_dense_tflops * 1e12 * self.compute_efficiency
        verify = self.spec.draft_tokens if self.spec else 1
        tokens = batch * verify
        grow = batch * self.tokens_per_step
        kv0 = batch_kv_tokens
        mem = (
            (m.weight_bytes_read(tokens) + kv0 * m.kv_bytes_per_token) / rate,
            grow * m.kv_bytes_per_token / rate,
        )
        attn = 2.0 * m.num_layers * m.attention_dim * verify
        comp = ((2.0 * m.active_params * tokens + attn * kv0) / peak, attn * grow / peak)
        const = self.hw.step_overhead_s + self.allreduce_s(tokens)
        draft = self.spec.draft_lines(self, kv0, grow, batch) if self.spec else None
        return StepLines(const, mem, comp, draft)

    def decode_steps_s(self, steps: int, batch_kv_tokens: float, batch: int) -> float:
        """`steps` consecutive decode iterations of a fixed batch."""
        return self.decode_lines(batch_kv_tokens, batch).total(steps)

    def decode_tokens_s(self, tokens: int, batch_kv_tokens: float, batch: int) -> float:
        """Seconds for a fixed batch to commit `tokens` tokens a request, iterations amortised
        over the accept length (for a server model that counts tokens, not iterations)."""
        return self.decode_lines(batch_kv_tokens, batch).total(tokens / self.tokens_per_step)

    def decode_tokens_before(self, budget_s: float, batch_kv_tokens: float, batch: int) -> int:
        """Fewest tokens a request (>= 1) a fixed batch commits in at least `budget_s`."""
        steps = self.decode_steps_before(budget_s, batch_kv_tokens, batch)
        return max(1, math.ceil(steps * self.tokens_per_step - 1e-9))

    def decode_steps_before(self, budget_s: float, batch_kv_tokens: float, batch: int) -> int:
        """Fewest decode iterations (>= 1) of a fixed batch that take at least `budget_s`."""
        lines = self.decode_lines(batch_kv_tokens, batch)
        if lines.total(1) >= budget_s:
            return 1
        hi = 2
        while lines.total(hi) < budget_s:
            hi *= 2
        lo = hi // 2  # total(lo) < budget <= total(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if lines.total(mid) < budget_s else (lo, mid)
        return hi

    def prefill_batch_s(self, compute_s: float) -> float:
        """A prefill batch's compute, its chunks' `prefill_s` summed, as one forward pass."""
        return compute_s + self.hw.step_overhead_s

    def prefill_flops(self, new_tokens: int, prefix_tokens: int) -> float:
        """FLOPs of a prefill chunk of `new_tokens` after `prefix_tokens` already in KV.

        Linear layers: 2 FLOPs per active parameter per token. Attention: 2 FLOPs per
        multiply-add of QK^T and PV (`attention_dim`), token i attending to prefix + i + 1.
        """
        m = self.model
        linear = 2.0 * m.active_params * new_tokens
        pairs = new_tokens * prefix_tokens + new_tokens * (new_tokens + 1) / 2
        return linear + 2.0 * m.num_layers * m.attention_dim * pairs

    def prefill_s(self, new_tokens: int, prefix_tokens: int) -> float:
        peak = self.tp * self.hw.bf16_dense_tflops * 1e12 * self.compute_efficiency
        return self.prefill_flops(new_tokens, prefix_tokens) / peak + self.allreduce_s(new_tokens)

    @property
    def load_gbps(self) -> float:
        """Host->device bandwidth one rank gets while every rank of the group loads."""
        loading = min(self.tp, self.hw.gpus_per_node)
        return min(self.hw.pcie_gbps, self.hw.host_gbps / loading)

    def load_s(self, tokens: int) -> float:
        """Time to copy `tokens` tokens of KV from host to device on every rank."""
        return tokens * self.model.kv_bytes_per_token / (self.load_gbps * 1e9)

    def store_read_s(self, tokens: int) -> float:
        """Time to read `tokens` tokens of KV from the L3 store into host memory: every rank's
        copy comes through the node's one store, before the load to the device can start."""
        nbytes = tokens * self.model.kv_bytes_per_token * self.tp
        return nbytes / (self.hw.store_gbps * 1e9)

    def overlapped_s(self, compute_s: float, load_s: float) -> float:
        """Prefill time when its loads stream in layer by layer ahead of compute."""
        n = self.model.num_layers
        c, ld = compute_s / n, load_s / n
        return n * max(c, ld) + min(c, ld)


def default_host_gbps(pcie_gbps: float, gpus_per_node: int) -> float:
    """Host-side bandwidth of a node when none is given: one link per GPUS_PER_HOST_LINK GPUs."""
    return pcie_gbps * max(1, gpus_per_node // GPUS_PER_HOST_LINK)


@dataclass(frozen=True, slots=True)
class TimingFlags:
    """Timing constants given on the command line; None takes the catalog or default value."""

    compute_efficiency: float | None = None  # None: the GPU's, else COMPUTE_EFFICIENCY
    hbm_efficiency: float = HBM_EFFICIENCY
    bf16_tflops: float | None = None
    hbm_gbps: float | None = None
    pcie_gbps: float | None = None
    host_gbps: float | None = None
    gpus_per_node: int | None = None
    store_gbps: float = STORE_GBPS
    allreduce_gbps: float | None = None
    allreduce_latency_us: float | None = None
    step_overhead_ms: float | None = None  # None: FORWARD_OVERHEAD_MS
    accept_length: float | None = None  # speculative decoding's tokens per iteration
    accept_origin: str = "--accept-length"
