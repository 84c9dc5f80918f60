"""One vLLM V1 server as the simulator sees it: `Scheduler.schedule()` over the block pool.

Mirrors vllm/v1/core/sched/scheduler.py (read in v0.32.0; the same loop since v0.11):
  * every step has a budget of `max_num_batched_tokens` tokens shared by decode and chunked
    prefill (V1 always chunks); with `--long-prefill-token-threshold` T, no request takes more
    than T tokens a step while another request runs or waits (v0.32's rule). The running
    requests go first, in order, each taking what it still has to compute (one token when
    decoding), cut to the budget left;
  * a running request that cannot get its blocks preempts the last running request (FCFS; under
    `priority` the latest arrival, the trace giving every request one priority), freeing its
    blocks, resetting its progress and putting it back at the front of waiting (by arrival under
    `priority`), counted as `num_preemptions`; when it must preempt itself the running pass stops;
  * then, only if nobody was preempted this step, waiting requests in order while the budget
    lasts and fewer than `max_num_seqs` run: a prefix-cache lookup (first admission and every
    readmission; only the first counts in vllm:prefix_cache_queries / _hits), the connector's
    host hit after it, then `allocate_slots` for the hit and the chunk; a request that does not
    fit stops the pass (head of line);
  * a step's time is its prefill chunks' compute plus one decode step of its decoding requests,
    plus the host->device load of the host hits admitted in it. Consecutive decode-only steps
    with no admission possible are advanced together, up to the next finish, the next arrival,
    or the last step whose new blocks the free queue still holds.

The connector's tiers (`kvtier.sim.vllm_tiers`: the CPU offloading connector, LMCache's local
CPU, disk or remote store): a unit is stored to each tier (an LRU) when the step computing it is
scheduled; a lookup continues past the device hit into the host, then the store, its end on a
whole LMCache chunk; the hit is loaded with the step that admits the request (a store hit read
first), and stops one token short of the prompt as on the device.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvtier.cache.storage import Tier
from kvtier.sim.metrics import RequestRecord
from kvtier.sim.servers.base import ServerCounters
from kvtier.sim.servers.vllm_blocks import BlockPool, Chain, HostLRU, Key, own_key, prompt_chain
from kvtier.sim.servers.vllm_queue import FcfsQueue, PriorityQueue
from kvtier.sim.timing import DecodeBatch, TimingModel
from kvtier.sim.trace import TraceRequest

if TYPE_CHECKING:
    from kvtier.sim.setup import SimConfig

FCFS, PRIORITY = "fcfs", "priority"


@dataclass(frozen=True, slots=True)
class VllmLimits:
    """The scheduler's settings, as vLLM's flags set them."""

    block_size: int  # vLLM --block-size: tokens per engine block
    trace_block: int  # trace tokens per hash id
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int | None = None
    policy: str = FCFS
    long_prefill: int = 0  # long_prefill_token_threshold (0: none)


@dataclass(slots=True, eq=False)
class VReq:
    """A request between arrival and finish."""

    req: TraceRequest
    rec: RequestRecord
    chain: Chain  # the prompt's units (shared keys)
    units: int  # how many
    computed: int = 0  # num_computed_tokens
    num_tokens: int = 0  # prompt and output so far (set at arrival)
    generated: int = 0  # output tokens produced
    held: list[Key] = field(default_factory=list)  # cached units it holds, in order
    blocks: int = 0  # engine blocks it holds, held units included
    next_unit: int = 0  # its first prompt unit not yet cached by it (or found cached)
    unit_blocks: int = 0  # engine blocks of the prompt units up to next_unit
    own: Key | None = None  # its own full blocks past the prompt's units, one growing unit
    own_was: tuple[Key, int] | None = None  # that unit's key and blocks when last freed
    preempted: int = 0
    load_tokens: int = 0  # host hit to load in the step that admits it
    step: int = 0  # tokens it computes in the step in flight (when in its plan)
    output_len: int = 0  # its output's length (set at arrival)


def _arrival(r: VReq) -> int:
    """A request's place under `priority`: one priority for all, so its arrival (its rid)."""
    return r.req.rid


class VllmServer:
    """The simulated vLLM V1 server (`kvtier.sim.servers.base.ServerModel`)."""

    def __init__(
        self,
        pool: BlockPool,
        timing: TimingModel,
        limits: VllmLimits,
        host: HostLRU | None = None,
        store: HostLRU | None = None,
        chunk: int = 0,
        events_at_schedule: bool = False,
    ) -> None:
        self.pool = pool
        self.timing = timing
        self.limits = limits
        self.host = host
        self.store = store  # LMCache's disk or remote, behind the host tier
        self.chunk = chunk  # a connector's hit ends on a multiple of this many tokens (0: any)
        self._tiers = [tier for tier in (host, store) if tier is not None]
        self._batches: dict[int, DecodeBatch] = {}  # the decode terms of each batch size
        self._store_load = 0  # store tokens the step in flight reads
        self.waiting: FcfsQueue[VReq] | PriorityQueue[VReq] = (
            PriorityQueue(_arrival) if limits.policy == PRIORITY else FcfsQueue()
        )
        self.run: list[VReq] = []
        self.busy = False
        self.pcie_busy_s = 0.0
        self.preemptions = 0
        self._plan: list[VReq] = []  # the step's requests, each with its tokens in `step`
        self._prefills: list[VReq] = []  # the plan's prefill chunks, in order
        self._decode = self._kv = 0  # the plan's decoding requests and their tokens
        self._steps = 1  # decode steps the step in flight covers (1 unless advanced together)
        self._cap = limits.max_num_batched_tokens  # tokens one request may take this step
        self._cost: tuple[float, int, int, float, float] = (0.0, 0, 0, 0.0, 0.0)
        self._run_yields = False  # the step in flight is a decode run the next arrival stops
        # the waiting head at its last failed try: the pool's version then, the tokens it could
        # take (the budget, or the long-prefill cap when lower)
        self._failed: tuple[VReq | None, int, int] = (None, -1, 0)
        self._began = self._span = 0.0  # the step in flight: its start (the input queue is
        # drained then) and its length
        self._late: list[float] = []  # arrivals since then, not yet in the scheduler's queue
        # the last step's end, for make_stats: when, waiting, free blocks, the step's start,
        # its decode steps and the arrivals during it (`_published` counts them when read)
        self._ended: tuple[float, int, int, float, int, list[float]] | None = None
        # the head's last failed lookup without tiers: its hit, the hit's blocks and those of
        # them idle, the unit that would extend it, the pool's lost units and holds then
        self._failed_hit: tuple[VReq, list[Key], int, int, Key | None, int, int] | None = None
        # KV events (`enable_kv_events`): the trace blocks they have announced, and who hears
        # each publication (its time, the blocks stored, the blocks removed)
        self.published: set[Key] | None = None
        self.kv_listener: Callable[[float, list[Key], list[Key]], None] | None = None
        self._events_at_schedule = events_at_schedule  # before v0.12.0: schedule() publishes

    @property
    def running(self) -> int:
        return len(self.run)

    @property
    def queued(self) -> int:
        return len(self.waiting)

    def counters(self) -> ServerCounters:
        evictions = {Tier.DEVICE.value: self.pool.evicted}
        if self.host is not None:
            evictions[Tier.HOST.value] = self.host.evicted
        if self.store is not None:
            evictions[Tier.STORE.value] = self.store.evicted
        return ServerCounters(evictions, self.pcie_busy_s, self.preemptions)

    def never_fits(self, req: TraceRequest) -> str:
        limit = self.limits.max_model_len
        total = req.input_len + req.output_len
        if limit is not None and total > limit:
            return f"prompt and output take {total} tokens; max_model_len is {limit}"
        need = math.ceil(total / self.limits.block_size)
        if need > self.pool.num_blocks:
            held = self.pool.num_blocks
            return f"needs {need} KV blocks for prompt and output; the pool holds {held}"
        return ""

    def arrive(self, req: TraceRequest, rec: RequestRecord, now: float) -> None:
        lim = self.limits
        chain = prompt_chain(
            req.blocks, input_len := req.input_len, lim.trace_block, lim.block_size
        )
        units = len(chain.keys)
        self._enqueue(VReq(req, rec, chain, units, num_tokens=input_len, output_len=req.output_len))
        if self.busy:
            self._late.append(now)

    def _enqueue(self, r: VReq, front: bool = False) -> None:
        if front:
            self.waiting.prepend(r)
        else:
            self.waiting.add(r)

    def next_wake(self) -> float:
        return math.inf

    def start_step(self, now: float, horizon: float) -> float | None:
        self._began, self._late = now, []
        self._plan, self._prefills = [], []
        self._steps = 1
        # v0.32: the threshold holds only while another request could use the budget
        cap = self.limits.long_prefill if len(self.run) + len(self.waiting) > 1 else 0
        self._cap = cap or self.limits.max_num_batched_tokens
        budget, preempted = self._schedule_running(self.limits.max_num_batched_tokens)
        load = 0 if preempted else self._schedule_waiting(budget, now)
        if self._events_at_schedule:
            self._publish(now)
        if not self._plan:
            self.busy = False
            return None
        self.busy = True
        compute = 0.0
        for r in self._prefills:
            compute += self.timing.prefill_s(r.step, r.computed)
        decode, kv = self._decode, self._kv
        self._run_yields = False
        if decode == len(self._plan) and not preempted:
            # nothing can be admitted before a finish: waiting is empty or its head failed
            self._run_yields = not self.waiting
            self._steps = self._decode_run(math.inf if self.waiting else horizon, now, kv)
        load_s = self.timing.load_s(load) if load else 0.0
        self.pcie_busy_s += load_s
        read_s = self.timing.store_read_s(self._store_load) if self._store_load else 0.0
        self._store_load = 0
        self._cost = (compute, kv, decode, load_s, read_s)
        self._span = self._duration(self._steps)
        return self._span

    def _duration(self, steps: int) -> float:
        compute, kv, decode, load_s, read_s = self._cost
        if decode:  # the step's prefill chunks ride in the decode iterations' forward pass
            timing = self.timing
            if timing.spec is None:  # decode_tokens_s from the batch's terms, kept
                if (terms := self._batches.get(decode)) is None:
                    terms = self._batches[decode] = timing.decode_batch(decode)
                if steps == 1:
                    compute += terms.first_s(kv)
                else:
                    compute += terms.lines(kv).total(steps / timing.tokens_per_step)
            else:
                compute += timing.decode_tokens_s(steps, kv, decode)
        else:
            compute = self.timing.prefill_batch_s(compute)
        return compute + load_s + read_s

    def cut(self, start: float, now: float) -> float | None:
        """Stop the decode run begun at `start` at its first step boundary at or after `now`,
        as `start_step` would have with `now` as its horizon (a request arrived); the run's new
        duration, or None when it already ends there, ignored the horizon (requests were
        waiting, or it preempted) or is a single step. A fleet cuts a replica's run only when a
        request reaches that replica, where one server stops at every arrival."""
        if not (self.busy and self._run_yields and self._steps > 1) or now <= start:
            return None
        _, kv, decode, _, _ = self._cost
        until = self.timing.decode_tokens_before(now - start, kv, decode)
        if until >= self._steps:
            return None
        self._steps = until
        self._span = self._duration(until)
        return self._span

    def _schedule_running(self, budget: int) -> tuple[int, bool]:
        size = self.limits.block_size
        preempted = False
        run, plan, prefills, cap = self.run, self._plan, self._prefills, self._cap
        decode = kv = 0
        for r in tuple(run):  # a copy: a preemption takes a request out of `run`
            if budget <= 0:
                break
            if preempted and r not in run:
                continue  # preempted earlier in this pass
            computed = r.computed
            left = r.num_tokens - computed
            n = left if left < cap else cap
            if n > budget:
                n = budget
            end = computed + n
            # most decode steps need no new block and complete none
            if end > r.blocks * size or r.next_unit < r.units:
                while not self._allocate(r, end):
                    victim = self._victim()
                    if back := self._unplan(victim):
                        budget += back
                        if victim.num_tokens - victim.computed == 1:
                            decode, kv = decode - 1, kv - victim.num_tokens
                    self._preempt(victim)
                    preempted = True
                    if victim is r:
                        self._decode, self._kv = decode, kv
                        return budget, preempted
            r.step = n
            plan.append(r)
            if left == 1:
                decode += 1
                kv += r.num_tokens
            else:
                prefills.append(r)
            budget -= n
        self._decode, self._kv = decode, kv
        return budget, preempted

    def _unplan(self, victim: VReq) -> int:
        """Take `victim` out of this step's plan; the tokens it had (priority preempts a
        request scheduled earlier in the step, and gets its budget back)."""
        if victim not in self._plan:
            return 0
        self._plan.remove(victim)
        if victim in self._prefills:
            self._prefills.remove(victim)
        return victim.step

    def _victim(self) -> VReq:
        if self.limits.policy == PRIORITY:
            return max(self.run, key=lambda r: r.req.rid)  # (priority, arrival): one priority
        return self.run[-1]

    def _preempt(self, r: VReq) -> None:
        self.run.remove(r)
        self._free(r)
        r.computed = 0
        r.preempted += 1
        self.preemptions += 1
        self._enqueue(r, front=True)

    def _free(self, r: VReq) -> None:
        self._cache_own(r)
        self.pool.release(r.held, r.blocks)
        r.held = []
        r.blocks = r.next_unit = r.unit_blocks = 0
        if r.own is not None:
            r.own_was, r.own = (r.own, self.pool.cached[r.own]), None

    def _cache_own(self, r: VReq) -> None:
        """Cache the request's full blocks past its prompt's units, as one unit. vLLM caches
        each as it fills; only the request itself can hit them, and only once it is freed, so
        caching them at the free is the same."""
        if r.next_unit < r.units:
            return
        full = min(r.computed, r.num_tokens) // self.limits.block_size - r.unit_blocks
        cached = self.pool.cached
        if r.own is not None:
            cached[r.own] = max(cached[r.own], full)  # held by `r` alone: not in the queue
        elif full > 0:
            key = own_key(r.req.rid, r.preempted)
            if self.pool.cache(key, full):
                r.own = key
                r.held.append(key)

    def _allocate(self, r: VReq, tokens: int) -> bool:
        """allocate_slots for `r` up to `tokens` computed tokens; False when the pool lacks
        blocks. Caches the units those tokens complete."""
        pool = self.pool
        need = -(-tokens // self.limits.block_size) - r.blocks
        if need > 0:
            if need <= pool.plain:
                pool.plain -= need  # the front of the queue holds them: nothing to evict
            elif need <= pool.plain + pool.queued_blocks:
                pool.take(need)
            else:
                return False
            r.blocks += need
        if r.next_unit < r.units:  # else every unit of its prompt is cached already
            self._cache_upto(r, tokens if tokens < r.num_tokens else r.num_tokens)
        return True

    def _cache_upto(self, r: VReq, tokens: int) -> None:
        full = tokens // self.limits.block_size
        start = r.next_unit
        if full <= r.unit_blocks or start == r.units:
            return
        chain = r.chain
        end = chain.within(full)
        if end > start:
            pool = self.pool
            if pool.caching:
                pool.cache_run(chain, start, end, r.held)
            pool.version += 1
            for tier in self._tiers:
                for key, n in chain.pairs(start, end):
                    tier.store(key, n)
        r.next_unit, r.unit_blocks = end, chain.blocks(end)

    def _lookup(self, r: VReq) -> tuple[list[Key], int, int, int, int]:
        """The device hit (units, their blocks, those of them idle), then the connector's host
        and store hits past it (engine blocks, the connector's chunks whole)."""
        if self._failed_hit is not None and (known := self._last_hit(r)) is not None:
            return known
        size = self.limits.block_size
        limit = (r.num_tokens - 1) // size
        own = r.own_was if r.preempted else None
        hit, local, idle = self.pool.match(r.chain, limit, own)
        host = store = 0
        if self.host is None and self.store is None:
            return hit, local, idle, host, store
        units = r.chain.pairs() + ([] if own is None else [own])
        if self.host is not None:
            host = self.host.match(units[len(hit) :], limit - local)
        if self.store is not None:
            past = self._host_units(units, len(hit), host) + len(hit)
            store = self.store.match(units[past:], limit - local - host)
        if self.chunk and host + store:
            end = (local + host + store) * size // self.chunk * self.chunk // size
            store = max(0, min(store, end - local - host))
            host = max(0, min(host, end - local))
        return hit, local, idle, host, store

    def _schedule_waiting(self, budget: int, now: float) -> int:
        """Admit waiting requests; returns the host tokens their admission loads."""
        size = self.limits.block_size
        load = 0
        while budget > 0 and self.waiting and len(self.run) < self.limits.max_num_seqs:
            r = self.waiting.peek()
            if self._unchanged(r, budget):
                break  # nothing that could make it fit has happened since it last failed
            hit, local, idle, host, store = self._lookup(r)
            cached = (local + host + store) * size
            n = min(r.num_tokens - cached, budget, self._cap)
            need = -(-(cached + n) // size) - local + idle
            if need > self.pool.free:
                self._failed = (r, self.pool.version, min(budget, self._cap))
                self._watch(r, hit, local, idle)
                break
            if self._failed_hit is not None:
                self._failed_hit, self.pool.watched = None, set()
            self.waiting.popleft()
            self.pool.touch(hit)
            if host and self.host is not None:
                units = r.chain.pairs(len(hit))
                self.host.touch(units[: self._host_units(units, 0, host)])
            r.held = hit  # a list of its own (BlockPool.match builds it)
            r.blocks = local
            r.next_unit, r.unit_blocks = len(hit), local
            if len(hit) > r.units:
                r.own = hit[-1]  # its own blocks, found again after a preemption
                r.next_unit, r.unit_blocks = r.units, local - self.pool.cached[r.own]
            r.computed = cached
            self._allocate(r, cached + n)
            if not r.preempted:
                r.rec.hit_tokens = {
                    Tier.DEVICE: local * size,
                    Tier.HOST: host * size,
                    Tier.STORE: store * size,
                }
                r.rec.admit_s = now
            load += (host + store) * size
            self._store_load += store * size
            self.run.append(r)
            r.step = n
            self._plan.append(r)
            if r.num_tokens - cached == 1:
                self._decode += 1
                self._kv += r.num_tokens
            else:
                self._prefills.append(r)
            budget -= n
        return load

    def _unchanged(self, r: VReq, budget: int) -> bool:
        """`r` failed its last try and retrying it now would fail the same way."""
        failed = self._failed
        return (
            failed[0] is r
            and failed[1] == self.pool.version
            and min(budget, self._cap) >= failed[2]
        )

    def _watch(self, r: VReq, hit: list[Key], local: int, idle: int) -> None:
        """Watch `r`'s failed device hit: its eviction can admit `r` (`BlockPool.take`); keep
        it for `_last_hit` (without connector tiers)."""
        last = self._failed_hit
        if last and last[1] is hit:
            return
        pool = self.pool
        pool.watched = set(hit)
        if self.host is not None or self.store is not None:
            return
        h = len(hit)
        own = r.own_was if r.preempted else None
        after = r.chain.keys[h] if h < r.units else own[0] if own and h == r.units else None
        self._failed_hit = (r, hit, local, idle, after, pool.lost, pool.holds)

    def _last_hit(self, r: VReq) -> tuple[list[Key], int, int, int, int] | None:
        """`r`'s device hit without walking its chain, when it is the head whose lookup failed
        last and no unit of that hit was evicted since, nor the unit after it cached: the walk
        (`BlockPool.match`, as vLLM's KVCacheManager.get_computed_blocks walks the block-hash
        chain, v0.32.0) would find the same units. Only who holds them can have changed (by a
        touch or a release), so the blocks of them idle are counted again then."""
        failed = self._failed_hit
        assert failed is not None
        who, hit, local, idle, after, lost, holds = failed
        pool = self.pool
        if who is not r or pool.lost != lost or (after is not None and after in pool.cached):
            return None
        if pool.holds != holds:
            idle = local - pool.held_blocks(hit)
            self._failed_hit = (r, hit, local, idle, after, lost, pool.holds)
        return hit, local, idle, 0, 0

    @staticmethod
    def _host_units(units: list[tuple[Key, int]], start: int, blocks: int) -> int:
        """How many of `units` from `start` on make up `blocks` engine blocks."""
        k = 0
        while blocks > 0:
            blocks -= units[start + k][1]
            k += 1
        return k

    def _decode_run(self, horizon: float, now: float, kv: int) -> int:
        """Decode steps the current all-decode batch, of `kv` tokens, may take at once (>= 1)."""
        batch = self._plan
        steps = min([r.output_len - r.generated for r in batch])
        if now < horizon < math.inf:
            steps = min(steps, self.timing.decode_tokens_before(horizon - now, kv, len(batch)))
        size = self.limits.block_size
        # each holds the blocks of its next token already, so k steps take at most
        # ceil((k - 1) / size) more blocks a request: when the free queue covers that, no sum
        most, pool = len(batch) * ((steps + size - 2) // size), self.pool
        # with a request waiting, the run stops before a step that would evict the failed
        # head's hit: a shorter hit can admit it, and vLLM tries it at every step
        free = pool.plain + pool.ahead(most - pool.plain) if self.waiting else pool.free
        if steps <= 1 or most <= free:
            return max(1, steps)

        def new_blocks(k: int) -> int:
            return sum(max(0, -(-(r.computed + k) // size) - r.blocks) for r in batch)

        if new_blocks(steps) <= free:
            return steps
        lo, hi = 1, steps  # the first step's blocks are allocated already
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if new_blocks(mid) <= free:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def finish_step(self, now: float) -> list[RequestRecord]:
        self.busy = False
        plan, steps, ended = self._plan, self._steps, []
        self._plan = []
        if steps == 1:
            for r in plan:
                computed = r.computed + r.step
                r.computed = computed
                if computed < r.num_tokens:
                    continue  # a prefill chunk short of the prompt's end
                r.num_tokens = computed + 1
                generated = r.generated = r.generated + 1
                if generated == 1:  # its first token
                    r.rec.first_token_s = now
                if generated >= r.output_len:
                    ended.append(r)
        else:  # decode steps advanced together: every block they took, then finishes
            size = self.limits.block_size
            for r in plan:
                r.computed += steps
                r.generated += steps
                r.num_tokens += steps
                if r.computed > r.blocks * size:
                    self._allocate(r, r.computed)
            first = self._began + self._duration(1)  # the run's first step ends
            for r in plan:
                if r.generated == steps:  # its first token, in the run's first step
                    r.rec.first_token_s = first
                if r.generated >= r.output_len:
                    ended.append(r)
        for r in ended:
            self.run.remove(r)
            self._free(r)
            r.rec.finish_s = now
        self._ended = (now, len(self.waiting), self.pool.free, self._began, steps, self._late)
        self._publish(now)
        return [r.rec for r in ended]

    def enable_kv_events(self) -> None:
        """--kv-events-config: from here on the pool's stores and evictions are published
        (`_publish`); what the pool holds now counts as announced."""
        self.published = {key for key in self.pool.cached if key >= 0}
        self.pool.touched = set()

    def _publish(self, now: float) -> None:
        """The scheduler's `kv_cache_manager.take_events()` and `kv_event_publisher.publish`:
        the blocks cached (BlockStored) or evicted (BlockRemoved) since the last publication,
        trace blocks only (a request's own blocks carry no prompt hash a router looks up).
        vLLM v0.12.0 on publishes in `update_from_output`, after the step's forward pass, so
        a prefill's blocks are announced once they hold data; v0.10.x - v0.11.x at the end of
        `schedule()`, when they are allocated (`allocate_slots` caches them then)."""
        touched, published = self.pool.touched, self.published
        if not touched or published is None:
            return
        cached = self.pool.cached
        stored = [key for key in touched if key >= 0 and key in cached]
        removed = [key for key in touched if key not in cached and key in published]
        touched.clear()
        published.difference_update(removed)
        published.update(stored)
        if self.kv_listener is not None:
            self.kv_listener(now, stored, removed)

    def kv_usage(self) -> float:
        """vLLM's `kv_cache_usage`: 1 - free blocks / blocks, cached free blocks free."""
        return self._usage(self.pool.free)

    def _usage(self, free: int) -> float:
        blocks = self.pool.num_blocks
        return 1 - free / blocks if blocks else 0.0

    def _published(self) -> tuple[int, float]:
        """The scheduler stats the iteration that ended the last step reports: the requests
        waiting less those that arrived after it began (still in the engine's input queue)."""
        if self._ended is None:
            return 0, 0.0
        now, waiting, free, began, steps, late = self._ended
        edge = now - (now - began) / steps  # when the last iteration began
        return waiting - sum(1 for t in late if t > edge), self._usage(free)

    @property
    def stats_settled(self) -> bool:
        """`stats` holds until this server's next event: no iteration boundary falls inside
        the step in flight (a run of decode steps advanced together has them)."""
        return not (self.busy and self._steps > 1)

    def stats(self, now: float) -> tuple[int, float]:
        """What the server's /metrics reports at `now` (`vllm:num_requests_waiting`,
        `vllm:kv_cache_usage_perc`): the scheduler's `make_stats` at the end of the last
        iteration it completed (`Scheduler.update_from_output`)."""
        if self.busy and self._steps > 1:
            iteration_s = self._span / self._steps
            done = int((now - self._began) / iteration_s)  # iterations of the run completed
            if done >= 1:
                edge = self._began + (done - 1) * iteration_s
                return len(self.waiting) - sum(1 for t in self._late if t > edge), self.kv_usage()
        return self._published()


def build(config: SimConfig) -> VllmServer:
    """The vLLM server `config` describes: its pool in engine blocks, less the null block."""
    size = config.page_size
    pool = BlockPool(config.device_tokens // size - 1, config.prefix_caching)
    host = HostLRU(config.host_tokens // size) if config.host_tokens else None
    store = HostLRU(config.store_tokens // size) if config.store_tokens else None
    limits = VllmLimits(
        size,
        config.block_size,
        config.max_running_requests,
        config.chunked_prefill_size,
        config.context_length,
        config.scheduling_policy,
        config.long_prefill_threshold,
    )
    return VllmServer(
        pool,
        config.timing,
        limits,
        host,
        store,
        config.connector_chunk,
        config.kv_events_at_schedule,
    )
