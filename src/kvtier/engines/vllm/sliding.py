"""How many tokens past its window a vLLM sliding-window group holds for one request, per release.

  v0.8 - v0.25.x  SlidingWindowSpec.max_memory_usage_bytes (v1/kv_cache_interface.py):
                  cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block) + 1
  v0.26.0 on      SlidingWindowSpec.max_admission_blocks_per_request: the same with
                  VllmConfig.max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens,
                  max_concurrent_batches the pipeline's stages, or 2 under async scheduling at PP1
                  (V1 model runner; the V2 runner's PP + 1 is 2 there too). VllmConfig.__post_init__
                  turns async scheduling on unless --no-async-scheduling, or a speculative method
                  outside EagleModelTypes, NgramGPUTypes and dspark, turns it off.

Read in the v0.25.1, v0.26.0 and v0.32.0 wheels.
"""

from __future__ import annotations

from kvtier.engines.version import Version
from kvtier.engines.vllm.versions import V0_26

# speculative methods async scheduling runs with (EagleModelTypes: eagle, eagle3,
# extract_hidden_states, MTPModelTypes, dflash; NgramGPUTypes; dspark), as kvtier spells them
_ASYNC_METHODS = frozenset({"EAGLE", "EAGLE3", "EXTRACT_HIDDEN_STATES", "DFLASH", "NGRAM_GPU"})


def async_scheduling(given: bool | None, speculative_method: str | None) -> bool:
    """Whether async scheduling runs (v0.26.0 on): `given` (--[no-]async-scheduling), else on
    unless the speculative method turns it off."""
    if given is not None:
        return given
    method = (speculative_method or "").upper()
    return not method or method in _ASYNC_METHODS or method.endswith("MTP") or method == "DSPARK"


def in_flight_tokens(version: Version, batched: int, pp: int, async_on: bool) -> int:
    """Tokens past the window a sliding group holds: max_num_batched_tokens before v0.26.0,
    VllmConfig.max_in_flight_tokens from it."""
    if version < V0_26:
        return batched
    batches = 2 if async_on and pp <= 1 else pp
    return batches * batched


def in_flight_words(version: Version, in_flight: int, batched: int) -> str:
    """The bound a sliding group's blocks were sized by, as the release names it."""
    if version < V0_26:
        return f"max_num_batched_tokens {batched}"
    return f"max_in_flight_tokens {in_flight} ({in_flight // batched} x max_num_batched_tokens)"
