"""SGLang HiCache's L3 prefetch rules, by version: the stop policy's default, the timeout, the
prefetch capacity and where a prefetch may start.

Read in the sglang wheels 0.5.3, 0.5.5, 0.5.9, 0.5.10, 0.5.11, 0.5.12, 0.5.13, 0.5.14, 0.5.15.post1,
0.5.16, 0.5.17 and 0.5.18 (mem_cache/hiradix_cache.py, managers/cache_controller.py,
managers/scheduler.py, server_args.py):

  policy     `hicache_storage_prefetch_policy` default: best_effort up to v0.5.11, timeout from
             v0.5.12
  timeout    `HiRadixCache._prefetch_timeout_check_linear_func`: base + per_ki_token x tokens / 1024
             seconds; `hicache_storage_backend_extra_config` keys `prefetch_timeout_base` 1 and
             `prefetch_timeout_per_ki_token` 0.25 up to v0.5.11; `PrefetchTimeoutConfig` 2.0 and
             0.1, capped at `prefetch_timeout_max` 30 s, from v0.5.12
  threshold  extra-config `prefetch_threshold` 256 tokens; the controller uses max(threshold,
             page size) (every version read)
  capacity   `HiCacheController.prefetch_capacity_limit`, tokens in prefetch at once:
             int(0.8 x (host pool - device pool)) up to v0.5.14 (max(0, ...) from v0.5.9),
             int(0.5 x host pool) from v0.5.15
  start      `Scheduler._prefetch_kvcache`: up to v0.5.9 only when the matched device prefix's
             last node is backed up on the host (`req.last_node.backuped`); from v0.5.10 when the
             whole match's last node is, or is the root (`last_host_node.backuped or
             last_host_node is root_node`)

Later versions rework the cache (0.5.23: a unified radix cache, the capacity at 0.9 of the host
pool) and are refused rather than guessed; no version given means v0.5.3-v0.5.9, the era kvtier
assumes everywhere else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvtier.engines.sglang import versions
from kvtier.engines.sglang.versions import V0_5_3, V0_5_10, V0_5_12, V0_5_15, V0_5_18
from kvtier.errors import KvtierError


@dataclass(frozen=True, slots=True)
class PrefetchEra:
    """The prefetch rules of a range of SGLang versions."""

    label: str
    policy: str  # best_effort | wait_complete | timeout
    timeout_base_s: float
    timeout_per_ki_token_s: float
    timeout_max_s: float = math.inf
    threshold_tokens: int = 256
    capacity_share: float = 0.8
    capacity_of_host_only: bool = False  # share of the host pool, not of host - device
    start_after_host_hit: bool = False  # the whole match's end, not the device part's, decides

    def capacity_tokens(self, host_tokens: int, device_tokens: int) -> int:
        """Tokens that may be in prefetch at once (`prefetch_capacity_limit`)."""
        if self.capacity_of_host_only:
            return int(self.capacity_share * host_tokens)
        return max(0, int(self.capacity_share * (host_tokens - device_tokens)))


ERA_0_5_3 = PrefetchEra("SGLang v0.5.3-v0.5.9", "best_effort", 1.0, 0.25)
ERA_0_5_10 = PrefetchEra(
    "SGLang v0.5.10-v0.5.11", "best_effort", 1.0, 0.25, start_after_host_hit=True
)
ERA_0_5_12 = PrefetchEra(
    "SGLang v0.5.12-v0.5.14", "timeout", 2.0, 0.1, 30.0, start_after_host_hit=True
)
ERA_0_5_15 = PrefetchEra(
    "SGLang v0.5.15-v0.5.18",
    "timeout",
    2.0,
    0.1,
    30.0,
    capacity_share=0.5,
    capacity_of_host_only=True,
    start_after_host_hit=True,
)


def prefetch_era(version: str | None) -> PrefetchEra:
    """The prefetch rules of `version`; versions kvtier has not read are refused with one line."""
    v = versions.DEFAULT.resolve(version)
    if not V0_5_3 <= v <= V0_5_18:
        raise KvtierError(
            f"kvtier models HiCache's L3 prefetch of SGLang v0.5.3-v0.5.18, not {version}: "
            "give --sglang-version in that range, or simulate without --store-tokens"
        )
    if v >= V0_5_15:
        return ERA_0_5_15
    if v >= V0_5_12:
        return ERA_0_5_12
    if v >= V0_5_10:
        return ERA_0_5_10
    return ERA_0_5_3
