"""One forward step of SGLang's DP attention (`--enable-dp-attention --dp D`, v0.5.23), timed.

The TP group's `tp` GPUs form D attention groups of tp / D (`attn_tp`); each group is a DP rank
with its own scheduler, requests and KV pool, and the data-parallel controller hands requests to
the ranks in turn (`DataParallelController.round_robin_scheduler`: `--load-balance-method auto`
is round_robin outside PD disaggregation, `serving_hook.handle_load_balance_method`). Every step
the ranks agree on their token counts (`scheduler_components/dp_attn.py`
`prepare_mlp_sync_batch_raw`; a rank with nothing to run takes an idle batch), so one step ends
for all at once:

  attention  each rank's own tokens at attention TP: the attention projections (split over
             attn_tp), their FLOPs and the rank's KV, max(memory, compute); the slowest rank sets it
  MLP / MoE  every rank's tokens gathered (`layers/dp_attention.py` dp_gather), at full TP: the
             dense and touched expert weights, 2 x their active parameters x gathered tokens FLOPs
  gather     `DpPaddingMode.get_dp_padding_mode`: with an extend (prefill) in the batch the ranks'
             tokens are summed (SUM_LEN, an all-reduce over the TP group); in decode each is padded
             to the largest rank's (MAX_LEN, an all-gather of D x max tokens, half an all-reduce's
             traffic) when 2 x sum > D x max (v0.5.3 - v0.5.9), >= (v0.5.10 on), else SUM_LEN;
             the MLP then runs over what was gathered. v0.5.23 also takes SUM_LEN in a decode
             whose summed rows fit its custom all-reduce (CustomAllReduceV2, a runtime choice):
             not modelled
  all-reduces a layer: within the attention group over the largest rank's tokens (none at
             attn_tp 1), the gather over the TP group, and the MLP output over the TP group; each
             latency + 2 (n - 1) / n x tokens x hidden x 2 B / bus bandwidth
  forward    the fixed cost of a forward pass, once
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtier.model.description import ModelSpec
from kvtier.model.params import (
    ATTENTION,
    ATTENTION_KV,
    ATTENTION_KV_FULL,
    ATTENTION_LATENT,
    INDEXER,
    INDEXER_KEYS,
    MLA_ABSORBED,
)
from kvtier.model.weights import WeightBytes

if TYPE_CHECKING:
    from kvtier.sim.timing import TimingModel

# the parameter groups an attention layer holds: they run on a rank's own tokens
ATTENTION_SIDE = frozenset(
    {ATTENTION, ATTENTION_KV, ATTENTION_KV_FULL, ATTENTION_LATENT, MLA_ABSORBED}
    | {INDEXER, INDEXER_KEYS}
)


@dataclass(frozen=True, slots=True)
class RankWork:
    """What one DP rank runs in a step: prefill chunks, or one decode iteration."""

    chunks: tuple[tuple[int, int], ...] = ()  # (new tokens, tokens already in KV) a chunk
    batch: int = 0  # decoding requests, one token each
    kv_tokens: float = 0.0  # their KV

    @property
    def tokens(self) -> int:
        return sum(new for new, _ in self.chunks) + self.batch

    def pairs(self) -> float:
        """(query, key) pairs its attention computes."""
        prefill = sum(n * p + n * (n + 1) / 2 for n, p in self.chunks)
        return prefill + self.kv_tokens


@dataclass(frozen=True, slots=True)
class DPAttention:
    """The DP-attention split of one deployment, per GPU."""

    dp: int
    attn_tp: int
    attention_bytes: float  # the attention projections on one GPU, at attention TP
    attention_params: int  # their active parameters, all layers
    max_len_on_tie: bool = True  # 2 x sum == D x max pads to MAX_LEN (v0.5.10 on)

    def gathered(self, counts: Sequence[int], extend: bool) -> int:
        """Tokens the MLP runs over: the sum (SUM_LEN), or D x the largest rank's (MAX_LEN)."""
        total, most = sum(counts), max(counts)
        padded = most * self.dp
        if extend or 2 * total < padded or (2 * total == padded and not self.max_len_on_tie):
            return total
        return padded

    def step_s(self, timing: TimingModel, works: Sequence[RankWork]) -> float:
        """One step of every rank together (`works`: the ranks that run something)."""
        m, hw = timing.model, timing.hw
        rate = hw.hbm_gbps * 1e9 * timing.hbm_efficiency
        peak = hw.bf16_dense_tflops * 1e12 * timing.compute_efficiency
        attention = max(self._attention_s(timing, w, rate, peak) for w in works)
        counts = [w.tokens for w in works]
        total, most = sum(counts), max(counts)
        gathered = self.gathered(counts, any(w.chunks for w in works))
        mlp_params = m.active_params - self.attention_params
        mlp_mem = (m.weight_bytes_read(gathered) - self.attention_bytes) / rate
        mlp_comp = 2.0 * mlp_params * gathered / (timing.tp * peak)
        gather = total if gathered == total else gathered / 2  # all-gather: half the traffic
        layer = (
            self._ring_s(timing, self.attn_tp, most)
            + self._ring_s(timing, timing.tp, gather)
            + self._ring_s(timing, timing.tp, gathered)
        )
        return hw.step_overhead_s + attention + max(mlp_mem, mlp_comp) + m.num_layers * layer

    def _attention_s(self, timing: TimingModel, w: RankWork, rate: float, peak: float) -> float:
        m = timing.model
        flops = 2.0 * self.attention_params * w.tokens
        flops += 2.0 * m.num_layers * m.attention_dim * w.pairs()
        mem = (self.attention_bytes + w.kv_tokens * m.kv_bytes_per_token) / rate
        return max(mem, flops / (self.attn_tp * peak))

    @staticmethod
    def _ring_s(timing: TimingModel, ranks: int, tokens: float) -> float:
        hw = timing.hw
        if ranks == 1 or not hw.allreduce_gbps or not tokens:
            return 0.0
        nbytes = tokens * timing.model.hidden_size * 2 * 2 * (ranks - 1) / ranks
        return hw.allreduce_latency_s + nbytes / (hw.allreduce_gbps * 1e9)


def dp_attention(
    model: ModelSpec, tp: int, dp: int, weights: WeightBytes, max_len_on_tie: bool
) -> DPAttention:
    """The split of `model` over `tp` GPUs in `dp` attention groups; `weights` at attention TP."""
    attention_bytes = sum(g.bytes_per_rank for g in weights.groups if g.name in ATTENTION_SIDE)
    params = sum(g.active for g in model.params if g.name in ATTENTION_SIDE)
    return DPAttention(dp, tp // dp, float(attention_bytes), params, max_len_on_tie)
