"""How long the engine takes: a roofline model of prefill, decode and host->device loads.

Every constant here is named, sourced, and overridable from `kvtier simulate`'s flags.

  prefill  compute-bound: (2 x active params x new tokens + attention FLOPs over the prefix)
           / (TP ranks x bf16 dense peak x COMPUTE_EFFICIENCY)
  decode   bandwidth-bound, one token for every running request:
           (weight bytes read per rank + KV bytes of the batch per rank) / (HBM bandwidth x
           HBM_EFFICIENCY); an MoE step reads the dense weights and only the routed experts its
           batch touches: E x (1 - (1 - k/E)^batch) of E experts when each token picks k at
           random
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

# Fraction of dense bf16 peak a prefill reaches; large-batch prefill MFU is typically 0.3-0.5.
COMPUTE_EFFICIENCY = 0.4
# Fraction of peak HBM bandwidth memory-bound decode kernels sustain.
HBM_EFFICIENCY = 0.8
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

    def weight_bytes_read(self, batch: int) -> float:
        """Weight bytes one decode step of `batch` requests reads on one rank."""
        if not self.num_experts:
            return self.weight_bytes_per_rank + self.expert_bytes_per_rank
        touched = 1.0 - (1.0 - self.experts_per_token / self.num_experts) ** batch
        return self.weight_bytes_per_rank + self.expert_bytes_per_rank * touched


@dataclass(frozen=True, slots=True)
class Hardware:
    """One GPU and the node around it; bandwidths in decimal GB/s, compute in TFLOP/s."""

    bf16_dense_tflops: float
    hbm_gbps: float
    pcie_gbps: float  # one GPU's host link, one direction
    host_gbps: float  # the node's host side, shared by the GPUs that load at once
    gpus_per_node: int
    store_gbps: float = STORE_GBPS  # the node's L3 store, read by every rank for its copy


@dataclass(frozen=True, slots=True)
class TimingModel:
    """Seconds for each engine action of one tensor-parallel group."""

    model: ModelCost
    hw: Hardware
    tp: int
    compute_efficiency: float = COMPUTE_EFFICIENCY
    hbm_efficiency: float = HBM_EFFICIENCY

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
        return self.prefill_flops(new_tokens, prefix_tokens) / peak

    def decode_steps_s(self, steps: int, batch_kv_tokens: int, batch: int) -> float:
        """`steps` consecutive decode steps of a fixed batch whose KV grows by `batch` a step."""
        m = self.model
        grown = steps * batch_kv_tokens + batch * steps * (steps - 1) / 2
        nbytes = steps * m.weight_bytes_read(batch) + grown * m.kv_bytes_per_token
        return nbytes / (self.hw.hbm_gbps * 1e9 * self.hbm_efficiency)

    def decode_steps_before(self, budget_s: float, batch_kv_tokens: int, batch: int) -> int:
        """Fewest decode steps (>= 1) of a fixed batch that take at least `budget_s`."""
        m = self.model
        rate = self.hw.hbm_gbps * 1e9 * self.hbm_efficiency
        a = (m.weight_bytes_read(batch) + batch_kv_tokens * m.kv_bytes_per_token) / rate
        b = batch * m.kv_bytes_per_token / rate  # growth of one step's time per step
        if budget_s <= a:
            return 1
        if b == 0:
            return math.ceil(budget_s / a)
        # steps*a + b*steps*(steps-1)/2 >= budget_s
        half_b = b / 2
        k = (-(a - half_b) + math.sqrt((a - half_b) ** 2 + 4 * half_b * budget_s)) / (2 * half_b)
        steps = max(1, math.ceil(k - 1e-9))
        while self.decode_steps_s(steps, batch_kv_tokens, batch) < budget_s:
            steps += 1
        return steps

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

    compute_efficiency: float = COMPUTE_EFFICIENCY
    hbm_efficiency: float = HBM_EFFICIENCY
    bf16_tflops: float | None = None
    hbm_gbps: float | None = None
    pcie_gbps: float | None = None
    host_gbps: float | None = None
    gpus_per_node: int | None = None
    store_gbps: float = STORE_GBPS
