"""HiCache's L3 prefetch: reading a request's store hit into host memory while it waits.

Mirrors SGLang (the rules of each version in `kvtier.engines.sglang.prefetch`):
  * issue (`Scheduler._prefetch_kvcache` -> `HiRadixCache.prefetch_from_storage`, when the request
    enters the waiting queue): a prefetch of the store's continuation of the cached prefix, only
    if it holds at least the threshold's tokens (the controller's max(threshold, page size)) and
    the tokens already being prefetched stay under `prefetch_capacity_limit`;
  * I/O (`HiCacheController.prefetch_io_aux_func`): one thread reads the prefetches in issue
    order, one after the other, at the store's bandwidth; a terminated one stops where it is;
  * stop policy (`HiRadixCache.can_terminate_prefetch`, checked by `check_prefetch_progress` each
    time the scheduler considers the waiting request; a request that cannot stop yet is skipped,
    the others scheduled): `best_effort` stops at once with what has arrived, `wait_complete`
    waits for all of it, `timeout` waits for all of it or until base + per_ki_token x tokens /
    1024 seconds (at most the cap) after the issue (`_prefetch_timeout_check_linear_func`). What
    arrived counts in whole pages (here blocks).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass

from kvtier.engines.sglang.prefetch import ERA_0_5_3, PrefetchEra


class PrefetchPolicy(enum.Enum):
    BEST_EFFORT = "best_effort"
    WAIT_COMPLETE = "wait_complete"
    TIMEOUT = "timeout"


_DEFAULT_POLICY = PrefetchPolicy(ERA_0_5_3.policy)


@dataclass(frozen=True, slots=True)
class PrefetchRules:
    """The policy and its settings; the defaults are SGLang v0.5.3-v0.5.9's."""

    policy: PrefetchPolicy = _DEFAULT_POLICY
    threshold_tokens: int = ERA_0_5_3.threshold_tokens
    timeout_base_s: float = ERA_0_5_3.timeout_base_s
    timeout_per_ki_token_s: float = ERA_0_5_3.timeout_per_ki_token_s
    timeout_max_s: float = ERA_0_5_3.timeout_max_s
    start_after_host_hit: bool = ERA_0_5_3.start_after_host_hit

    def timeout_s(self, tokens: int) -> float:
        linear = self.timeout_base_s + self.timeout_per_ki_token_s * tokens / 1024
        return min(self.timeout_max_s, linear)


@dataclass(frozen=True, slots=True)
class PrefetchFlags:
    """Settings given on the command line; None takes the SGLang version's."""

    policy: str | None = None
    threshold_tokens: int | None = None
    timeout_base_s: float | None = None
    timeout_per_ki_token_s: float | None = None
    timeout_max_s: float | None = None

    def rules(self, era: PrefetchEra) -> PrefetchRules:
        given = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        base = {
            "threshold_tokens": era.threshold_tokens,
            "timeout_base_s": era.timeout_base_s,
            "timeout_per_ki_token_s": era.timeout_per_ki_token_s,
            "timeout_max_s": era.timeout_max_s,
        }
        policy = PrefetchPolicy(given.pop("policy", era.policy))
        return PrefetchRules(
            policy, **{**base, **given}, start_after_host_hit=era.start_after_host_hit
        )


@dataclass(slots=True)
class Prefetch:
    """One request's prefetch: `blocks` blocks of `block_tokens` (`tokens` in all, the last block
    maybe partial) after block `start`; `reserved` tokens count against the capacity (SGLang
    reserves host memory for the whole uncached rest of the prompt)."""

    start: int
    blocks: int
    block_tokens: int
    tokens: int
    reserved: int
    issued_s: float
    done_tokens: float = 0.0


class PrefetchQueue:
    """The prefetches in flight, read one after another at `s_per_token` seconds a token."""

    def __init__(self, rules: PrefetchRules, s_per_token: float, capacity: int) -> None:
        self.rules = rules
        self.s_per_token = s_per_token
        self.capacity = capacity
        self.ops: dict[int, Prefetch] = {}  # rid -> prefetch, in issue order
        self._clock = 0.0  # the reader's progress is settled up to this time
        self.issued = self.completed = self.partial = 0

    def issue(self, rid: int, op: Prefetch) -> bool:
        """Start `op` for request `rid` when SGLang would; False when it would not (too few
        tokens in the store, or the tokens in prefetch already reach the capacity)."""
        occupied = sum(o.reserved for o in self.ops.values())
        if op.tokens < self.rules.threshold_tokens or occupied >= self.capacity:
            return False
        self._advance(op.issued_s)
        self.ops[rid] = op
        self.issued += 1
        return True

    def _advance(self, now: float) -> None:
        t = self._clock
        for op in self.ops.values():
            left = op.tokens - op.done_tokens
            if left <= 0:
                continue
            t = max(t, op.issued_s)
            if t >= now:
                break
            if t + left * self.s_per_token <= now:
                op.done_tokens = op.tokens
                t += left * self.s_per_token
            else:
                op.done_tokens += (now - t) / self.s_per_token
                t = now
                break
        self._clock = t

    def complete_at(self, rid: int) -> float:
        """When `rid`'s prefetch will have arrived whole, if nothing ahead of it stops early."""
        t = self._clock
        for key, op in self.ops.items():
            left = op.tokens - op.done_tokens
            if left > 0:
                t = max(t, op.issued_s) + left * self.s_per_token
            if key == rid:
                return t
        raise KeyError(rid)

    def ready_at(self, rid: int) -> float:
        """The earliest time the policy lets `rid`'s prefetch stop."""
        op = self.ops[rid]
        policy = self.rules.policy
        if policy is PrefetchPolicy.BEST_EFFORT:
            return op.issued_s
        done = self.complete_at(rid)
        if policy is PrefetchPolicy.TIMEOUT:
            return min(done, op.issued_s + self.rules.timeout_s(op.tokens))
        return done

    def stop(self, rid: int, now: float) -> tuple[int, int]:
        """Stop `rid`'s prefetch at `now` (not before `ready_at`); returns (its first block,
        the whole blocks that arrived)."""
        self._advance(now)
        op = self.ops.pop(rid)
        if op.done_tokens >= op.tokens:
            self.completed += 1
            return op.start, op.blocks
        self.partial += 1
        return op.start, min(op.blocks - 1, math.floor(op.done_tokens / op.block_tokens))

    def next_ready(self, rids: list[int]) -> float:
        """The earliest time one of `rids` (requests with a prefetch in flight) may stop."""
        return min((self.ready_at(r) for r in rids), default=math.inf)
