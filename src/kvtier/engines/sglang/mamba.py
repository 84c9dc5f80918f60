"""How SGLang splits the pool budget of a hybrid model: Gated DeltaNet (Qwen3-Next, Qwen3.5/3.6),
Mamba2 (Granite-4.0-H) and short conv (LFM2), all through the same MambaPool.

Each recurrent layer keeps, per request slot, a causal-conv state and a recurrent (SSM) state
(short conv: none, `state_size=0` in Lfm2Config.mamba2_cache_params) instead of KV; the budget
`rest` left after the weights is shared between those slots and the KV of the full-attention
layers:

  state bytes   configs/mamba_utils.py Mamba2StateShape.create + mamba_cache_per_req
                (v0.5.4 - v0.5.23; v0.5.2 - v0.5.3 Qwen3NextConfig.mamba_cache_per_req, the same
                shapes): per layer per rank conv (conv_dim / tp) x (kernel - 1) in bfloat16 plus
                SSM (value heads / tp) x value dim x key dim in the SSM dtype, times the linear
                layers; from v0.5.4 key heads not divisible by tp are widened to tp
                (extra_groups_for_head_shards)
  SSM dtype     --mamba-ssm-dtype (float32 by default to v0.5.8); from v0.5.9 the flag, else the
                config's `mamba_ssm_dtype`, else float32 (mamba2_state_dtype)
  slots         FIXED  v0.5.2 - v0.5.3   model_runner.py: --max-mamba-cache-size, else
                                         --max-running-requests, else 512 (radix cache off)
                EARLY  v0.5.4 - v0.5.6   ModelRunner.handle_max_mamba_cache: radix cache on,
                                         slots = int(rest x r / (1 + r) x 2^30 // state bytes),
                                         r = --mamba-full-memory-ratio (0.9); off, the FIXED
                                         sizes; then // DP size; rest -= slots x state
                SIZED  v0.5.7 - v0.5.8   ModelRunnerKVCacheMixin.handle_max_mamba_cache: with
                                         --max-mamba-cache-size or the radix cache off, the
                                         FIXED sizes // DP size; else the ratio split
                RATIO  v0.5.9 - v0.5.16  the same (v0.5.16 KVCacheConfigurator): the explicit
                                         size // DP, else --max-running-requests // DP with the
                                         radix cache off, else the ratio split
                PADDED v0.5.17 - v0.5.23 KVCacheConfigurator._handle_max_mamba_cache: the pool's
                                         padding slot counted, slots = int((budget - state) //
                                         state); rest -= (slots + 1) x state
  KV tokens     profile_max_num_token: int(rest x 2^30) // cell bytes of the full-attention layers
  request cap   init_memory_pool / resolve_max_num_reqs: min(max_num_reqs, slots // 3), // 1 with
                --disable-radix-cache (v0.5.2 - v0.5.3: min(max_num_reqs, slots))
Speculative decoding reserves intermediate states as well; kvtier refuses it for these models.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from kvtier.engines.sglang.versions import (
    V0_5_2,
    V0_5_4,
    V0_5_7,
    V0_5_9,
    V0_5_13,
    V0_5_14,
    V0_5_17,
    V0_5_19,
)
from kvtier.engines.state_shape import rank_elements
from kvtier.engines.version import Version
from kvtier.errors import KvtierError
from kvtier.model.description import LinearAttention
from kvtier.model.dtypes import DTYPE_BYTES
from kvtier.units import GiB

CONV_DTYPE = "bfloat16"  # SGLANG_MAMBA_CONV_DTYPE unset
DEFAULT_SSM_DTYPE = "float32"
DEFAULT_FULL_MEMORY_RATIO = 0.9  # ServerArgs.mamba_full_memory_ratio, v0.5.4 - v0.5.23
FIXED_SLOTS = 512  # v0.5.2 - v0.5.3 without --max-mamba-cache-size / --max-running-requests
SLOTS_PER_REQUEST = 3  # MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO (radix cache on, no_buffer)
EXTRA_BUFFER_SLOTS = 2  # MAMBA_CACHE_V2_ADDITIONAL_RATIO_OVERLAP (extra_buffer, overlap schedule)
QWEN3_5_ARCHITECTURES = ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration")


class SlotRule(IntEnum):
    """How the number of state slots is chosen, in the order the code changed."""

    FIXED = 1
    EARLY = 2
    SIZED = 3
    RATIO = 4
    PADDED = 5


# first release that runs each architecture (configs/qwen3_next.py, configs/qwen3_5.py,
# configs/granitemoehybrid.py and configs/lfm2.py: absent from the v0.5.8 wheel, in v0.5.9)
FIRST_RELEASE = {
    "Qwen3NextForCausalLM": V0_5_2,
    "Qwen3_5ForConditionalGeneration": V0_5_9,
    "Qwen3_5MoeForConditionalGeneration": V0_5_9,
    "GraniteMoeHybridForCausalLM": V0_5_9,
    "Lfm2ForCausalLM": V0_5_9,
}


def check_runs(version: Version, architecture: str) -> None:
    """Refuse a version that predates the architecture (it would not load the model)."""
    first = FIRST_RELEASE.get(architecture)
    if first is not None and version < first:
        raise KvtierError(f"SGLang {version} does not run {architecture} (first in v{first})")


def slot_rule(version: Version) -> SlotRule:
    """The rule a version uses; main the newest."""
    if version >= V0_5_17:
        return SlotRule.PADDED
    if version < V0_5_2:
        raise KvtierError(f"SGLang {version} predates hybrid linear-attention models (v0.5.2)")
    if version < V0_5_4:
        return SlotRule.FIXED
    if version < V0_5_7:
        return SlotRule.EARLY
    return SlotRule.SIZED if version < V0_5_9 else SlotRule.RATIO


def checks_slots(version: Version) -> bool:
    """Whether the release refuses a budget that holds no state slot (v0.5.13+)."""
    return version >= V0_5_13


def charged_state_gib(printed_gib: float, slots: int, version: Version) -> float:
    """The share of a printed 'Mamba Cache is allocated' pool that was taken out of the KV
    budget. MambaPool allocates `size + 1` slots in every release (slot 0 pads), and the
    conv + SSM sizes it prints count them all; the budget is charged `slots` of them up to
    v0.5.16 (model_runner.py v0.5.2 - v0.5.3, handle_max_mamba_cache v0.5.4 - v0.5.16) and the
    padding slot too from v0.5.17 (PADDED)."""
    if slots <= 0:
        return printed_gib
    charged = slots + (1 if slot_rule(version) is SlotRule.PADDED else 0)
    return printed_gib * charged / (slots + 1)


def ssm_dtype(version: Version, flag: str | None, state: LinearAttention) -> str:
    """mamba2_state_dtype: the flag, else (v0.5.9+) the config's, else float32."""
    if flag is not None:
        if flag not in ("float32", "bfloat16", "float16"):
            raise KvtierError(
                f"--mamba-ssm-dtype {flag!r}: SGLang takes float32, bfloat16 or float16"
            )
        return flag
    if version >= V0_5_9 and state.ssm_dtype is not None:
        return state.ssm_dtype
    return DEFAULT_SSM_DTYPE


def state_bytes(state: LinearAttention, tp: int, ssm: str, widen: bool = True) -> int:
    """mamba_cache_per_req: one slot's conv + SSM state over every linear layer, per rank;
    `widen`: key heads not divisible by tp are widened (Mamba2StateShape, v0.5.4+; v0.5.2 -
    v0.5.3 Qwen3NextConfig.hybrid_gdn_params divides the unwidened conv)."""
    groups = state.num_key_heads
    if widen and groups % tp:
        groups += tp - groups  # extra_groups_for_head_shards, as SGLang writes it
    refusal = " (SGLang's divide() refuses it)"
    conv, ssm_elems = rank_elements(state, tp, groups, "linear-attention", refusal)
    per_layer = conv * DTYPE_BYTES[CONV_DTYPE] + ssm_elems * DTYPE_BYTES[ssm]
    return per_layer * len(state.layer_ids)


_EARLY_RULES = (SlotRule.EARLY, SlotRule.SIZED)


@dataclass(frozen=True, slots=True)
class MambaSplit:
    """The budget after the state slots, and how they were chosen."""

    slots: int  # max_mamba_cache_size (per DP rank)
    state_bytes: int  # one slot, per rank
    rest_gib: float  # what the full-attention KV pool is sized from
    state_gib: float  # what the slots (and the padding slot) take
    formula: str


def split_budget(
    rule: SlotRule,
    rest_gib: float,
    per_slot: int,
    ratio: float,
    max_slots: int | None,
    max_running_requests: int | None,
    disable_radix_cache: bool,
    dp: int,
    checked: bool = True,
) -> MambaSplit:
    """handle_max_mamba_cache / _handle_max_mamba_cache for a deployment without speculation;
    `dp` divides the explicit sizes under DP attention (1 otherwise); `checked` refuses a budget
    that holds no slot, as v0.5.13+ do (earlier releases go on with none: `checks_slots`)."""
    padding = 1 if rule is SlotRule.PADDED else 0
    budget = rest_gib * ratio / (1 + ratio)
    sized = rule is SlotRule.SIZED and max_slots is not None
    if rule is SlotRule.FIXED or (rule in _EARLY_RULES and disable_radix_cache) or sized:
        slots = (max_slots or max_running_requests or FIXED_SLOTS) // dp
        how = (
            "--max-mamba-cache-size"
            if max_slots
            else ("--max-running-requests" if max_running_requests else f"default {FIXED_SLOTS}")
        )
        formula = f"{slots} slots ({how}) x {per_slot:,} B"
    elif rule in _EARLY_RULES:
        slots = int(budget * GiB // per_slot) // (dp if rule is SlotRule.EARLY else 1)
        formula = (
            f"int({rest_gib:.2f} GiB x {ratio} / (1 + {ratio}) // {per_slot:,} B) // {dp} = "
            f"{slots} slots"
        )
    elif max_slots is not None:
        slots = max_slots // dp
        formula = f"{slots} slots (--max-mamba-cache-size) x {per_slot:,} B"
    elif disable_radix_cache and max_running_requests is not None:
        slots = max(1, max_running_requests // dp) if padding else max_running_requests // dp
        formula = f"{slots} slots (--max-running-requests, radix cache off) x {per_slot:,} B"
    else:
        if padding:
            slots = int((budget * GiB - per_slot) // per_slot)
            formula = (
                f"int(({rest_gib:.2f} GiB x {ratio} / (1 + {ratio}) - {per_slot:,} B) // "
                f"{per_slot:,} B) = {slots} slots, + 1 padding slot"
            )
        else:
            slots = int(budget * GiB // per_slot)
            formula = (
                f"int({rest_gib:.2f} GiB x {ratio} / (1 + {ratio}) // {per_slot:,} B) = "
                f"{slots} slots"
            )
    if slots <= 0 and checked:
        raise KvtierError(
            f"Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
            f"Computed max_mamba_cache_size={slots}"
        )
    state_gib = (slots + padding) * per_slot / GiB
    return MambaSplit(slots, per_slot, rest_gib - state_gib, state_gib, formula)


def extra_buffer(version: Version, architecture: str, disable_radix_cache: bool) -> bool:
    """Whether `--mamba-radix-cache-strategy auto` resolves to extra_buffer: from v0.5.14, with the
    radix cache on, the overlap schedule on and the triton linear-attention backend (the
    defaults), for the architectures that support it (server_args._handle_mamba_radix_cache,
    v0.5.14; arg_groups/overrides.py _mamba_radix_cache_resolution, v0.5.15+). Earlier
    releases resolve auto to no_buffer."""
    if disable_radix_cache or version < V0_5_14:
        return False
    if architecture == "Qwen3NextForCausalLM":  # dropped from the list in v0.5.19
        return version < V0_5_19
    # Granite-4.0-H is on the list from v0.5.14 (_support_mamba_cache_extra_buffer; v0.5.15+
    # _MAMBA_EXTRA_BUFFER_ARCHS); LFM2 never (support_mamba_cache_extra_buffer=False to v0.5.13)
    return architecture in QWEN3_5_ARCHITECTURES or architecture == "GraniteMoeHybridForCausalLM"


def slot_request_cap(
    rule: SlotRule,
    slots: int,
    disable_radix_cache: bool,
    extra: bool = False,
    checked: bool = False,
) -> int:
    """The running requests the state slots allow (init_memory_pool, resolve_max_num_reqs):
    three slots a request with the radix cache (`_calculate_mamba_ratio`), two more for the
    extra_buffer strategy's ping-pong under the overlap schedule, one without the radix cache
    (v0.5.2 - v0.5.3: one a request). `checked` (v0.5.13+, `checks_slots`) refuses a limit of
    no request, as the engine does."""
    if rule is SlotRule.FIXED:
        return slots
    per_request = (
        1 if disable_radix_cache else SLOTS_PER_REQUEST + (EXTRA_BUFFER_SLOTS if extra else 0)
    )
    cap = slots // per_request
    if cap <= 0 and checked:
        raise KvtierError(
            "Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
            f"max_mamba_cache_size={slots}, mamba_ratio={per_request}"
        )
    return cap
