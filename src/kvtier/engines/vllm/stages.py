"""vLLM V1 under pipeline parallelism: every stage sizes its own pool, the engine takes the least.

  layers   distributed/utils.py get_pp_indices (v0.6.0 - v0.33.0): VLLM_PP_LAYER_PARTITION
           (a `VAR=value` before the launch command), comma-separated layer counts, one a
           stage, summing to the model's layers (else vLLM raises ValueError, kvtier exits 2);
           without it L // pp layers a stage, the remainder one each to the stages before the
           last, from the second-to-last backwards (v0.8.0 on), or all of it on the last stage
           (v0.6.0 - v0.7.3)
  weights  the first stage holds the embedding, the last the LM head (the embedding again when
           tied: the model keeps embed_tokens on the last rank for tie_weights), every stage its
           layers' share of the rest
  peak     only the last stage runs _dummy_sampler_run in profile_run, so only its torch peak
           holds the sampler's logits (profile.py: MoE workspace + max(forward, sampler))
  count    v1/engine/core.py _initialize_kv_caches: one KVCacheConfig per worker from its own
           available memory, then the smallest num_blocks for all (v0.9.2: get_kv_cache_config
           per worker and unify_kv_cache_configs; v0.11.0 - v0.32.0: get_kv_cache_configs).
           v0.9.2 and v0.11.0 log 'GPU KV cache size' for each worker before that minimum; from
           v0.12.0 _report_kv_cache_config logs it once after it, and 'Available KV cache
           memory' is logger.info_once(scope="local"): stage 0's first rank prints it alone.

A log therefore states stage 0's budget and the engine's count, which stage 0's count bounds
from above; the other stages' budgets are stage 0's moved by the weights and the peak they
hold in its place, estimated from the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtier.engines.estimate import Term
from kvtier.engines.version import Version
from kvtier.engines.vllm.versions import V0_8
from kvtier.errors import KvtierError
from kvtier.model.description import ModelSpec
from kvtier.model.params import EMBEDDING, LM_HEAD
from kvtier.model.weights import weight_bytes
from kvtier.units import GiB

PARTITION_ENV = "VLLM_PP_LAYER_PARTITION"


def pp_partition(
    num_layers: int, pp: int, version: Version, given: str | None = None
) -> tuple[int, ...]:
    """Layers per stage, as get_pp_indices splits them: `given` (VLLM_PP_LAYER_PARTITION),
    else the release's default rule."""
    if given is not None:
        return _given_partition(given, num_layers, pp)
    partitions = [num_layers // pp] * pp
    if version < V0_8:
        partitions[-1] += num_layers % pp
    else:
        for i in range(2, num_layers % pp + 2):
            partitions[-i] += 1
    return tuple(partitions)


def _given_partition(raw: str, num_layers: int, pp: int) -> tuple[int, ...]:
    """get_pp_indices' checks of VLLM_PP_LAYER_PARTITION (int() of each comma-separated part,
    as many as stages, summing to the layers), and a layer at least on every stage (a stage
    without layers holds no KV cache: not modelled)."""
    shown = f"{PARTITION_ENV}={raw!r:.60}"
    try:
        partitions = tuple(int(part) for part in raw.split(","))
    except ValueError:
        raise KvtierError(f"{shown} is not comma-separated layer counts") from None
    if len(partitions) != pp:
        raise KvtierError(f"{shown} names {len(partitions)} stages; the pipeline has {pp}")
    if sum(partitions) != num_layers:
        raise KvtierError(f"{shown} sums to {sum(partitions):,} layers; the model has {num_layers}")
    if min(partitions) < 1:
        raise KvtierError(f"{shown} leaves a stage without layers; kvtier models 1 or more")
    return partitions


@dataclass(frozen=True, slots=True)
class Stage:
    index: int
    layers: int
    weights_bytes: int  # from the spec: its vocabulary matrix and its layers' share
    samples: bool  # the last stage runs the sampler in the profile run

    def holds(self, pp: int) -> str:
        parts = []
        if self.index == 0:
            parts.append("the embedding")
        if self.index == pp - 1:
            parts.append("the LM head")
        return " and ".join([*parts, f"{self.layers} layers"])


def stages(
    model: ModelSpec, tp: int, layers: tuple[int, ...], dtype: str | None
) -> tuple[Stage, ...]:
    """Every stage's weight bytes on one GPU, its `layers` as pp_partition splits them."""
    groups = {g.name: g.bytes_per_rank for g in weight_bytes(model, tp, dtype).groups}
    total = sum(groups.values())
    embedding = groups.get(EMBEDDING, 0)
    head = groups.get(LM_HEAD, embedding)  # tied: the last stage keeps the embedding for it
    body = total - embedding - groups.get(LM_HEAD, 0)
    pp = len(layers)
    out = []
    for index, count in enumerate(layers):
        vocab = (embedding if index == 0 else 0) + (head if index == pp - 1 else 0)
        share = body * count // model.kv.num_layers
        out.append(Stage(index, count, vocab + share, index == pp - 1))
    return tuple(out)


def stage_budget(first: Term, stage: Stage, base: Stage, sampler_gib: float, rest: float) -> Term:
    """`stage`'s KV budget from the first stage's (`first`, sized with `base`'s weights and a
    peak without the sampler): less the weights it holds beyond the first's and the sampler's
    excess over the forward pass on the last; `rest` GiB below for what the model leaves out."""
    moved = (stage.weights_bytes - base.weights_bytes) / GiB + (sampler_gib if stage.samples else 0)
    if stage.index == base.index:
        return first
    return Term.estimated(
        first.value - moved,
        first.low - moved - rest,
        first.high - moved,
        f"stage {stage.index}: stage 0's budget - {moved:.2f} GiB (weights and sampler peak)",
    )
