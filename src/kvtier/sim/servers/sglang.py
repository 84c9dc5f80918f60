"""One SGLang server as the simulator sees it: waiting queue, chunked prefill, decode batch.

Each engine step is either a prefill batch or a decode step, prefill first, as SGLang's
scheduler does (`get_next_batch_to_run`: a new extend batch when one can be formed, else
decode). A prefill batch continues the request being chunked, then admits waiting requests in
arrival order (`--schedule-policy fcfs`) while the chunk budget, the running-request cap and
SGLang's token budget last (`kvtier.sim.servers.sglang_budget`: the uncached prompt, the output
and a page against the free and evictable tokens less the running requests' remaining outputs);
the head of the queue blocks the rest, and after a refusal prefill waits for a request to finish
(`batch_is_full`). The batch's prompt pages are allocated once it is formed (`alloc_for_extend`),
the generated tokens' at each decode step (`alloc_for_decode`), in whole blocks for all running
requests together. A trace's outputs are fixed lengths, which SGLang reserves whole up to
`CLIP_MAX_NEW_TOKENS`; when a longer one runs the pool out, a decode step retracts requests first
(`ScheduleBatch.retract_decode`: `_retract`), which prefill prompt and output again. A chunked
prompt's finished chunks enter the tree at the end of each step
(`Scheduler.stash_chunked_request`), a match stops a token short of the prompt
(`Req._compute_max_prefix_len`) and a finished request's path counts as used when it finishes
(`release_kv_cache`).

A decode step produces one token for every running request (with speculative decoding, the
accept length: `kvtier.sim.speculative`). Consecutive decode steps of an
unchanged batch are advanced together, up to the next finish or the next arrival (or the next
time a waiting request's store prefetch may stop).

With an L3 store, a request whose prompt continues in the store starts a prefetch when it arrives
(`kvtier.sim.servers.prefetch`); the scheduler skips it until the prefetch policy lets the
prefetch stop, and what arrived by then is loaded back with the host hit. A host (or prefetched)
hit shorter than `LOAD_BACK_THRESHOLD` tokens is recomputed instead (`HiRadixCache.load_back`).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtier.cache.storage import Tier
from kvtier.engines.sglang.prefetch import ERA_0_5_3
from kvtier.sim.decode_log import DecodeLog
from kvtier.sim.dp_attention import RankWork
from kvtier.sim.metrics import RequestRecord
from kvtier.sim.servers.base import ServerCounters
from kvtier.sim.servers.cache_port import CachePort
from kvtier.sim.servers.hicache import TieredCachePort
from kvtier.sim.servers.prefetch import Prefetch, PrefetchQueue
from kvtier.sim.servers.sglang_budget import (
    CLIP_MAX_NEW_TOKENS,
    RETRACT_DECODE_STEPS,
    PrefillBudget,
)
from kvtier.sim.servers.sglang_reports import Reports, report_due
from kvtier.sim.timing import TimingModel
from kvtier.sim.trace import TraceRequest

if TYPE_CHECKING:
    from kvtier.sim.setup import SimConfig

# HiRadixCache.load_back (sglang v0.5.3-v0.5.18): a host hit of fewer tokens is recomputed instead
LOAD_BACK_THRESHOLD = 10


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """The server's limits, as SGLang's flags set them."""

    block_size: int  # trace tokens per page key
    max_running_requests: int
    chunked_prefill_size: int  # prefill tokens per step
    context_length: int | None = None
    page_size: int = 1  # the engine's tokens per KV page


@dataclass(slots=True)
class Live:
    """A request between arrival and finish, with its progress."""

    req: TraceRequest
    rec: RequestRecord
    prefilled: int = 0  # prompt tokens whose KV exists (hits included)
    load_tokens: int = 0  # hit tokens still to copy to the device in the next step
    fetched: tuple[int, int] = (0, 0)  # (first block, blocks) its store prefetch brought in
    pages: int = 0  # device pages it holds, its cached prefix's included
    first_step: int = 0  # the decode iteration it joined the batch at
    generated: int = 0  # output tokens made before its last retraction (prefilled again)
    refilled: int = 0  # of those, tokens whose KV the prefill holds again so far

    @property
    def fill(self) -> int:
        """Tokens its prefill computes: the prompt, then the output a retraction freed
        (`Req.fill_ids`: origin_input_ids + output_ids)."""
        return self.req.input_len + self.generated

    def outputs(self, steps: int, per_step: float) -> float:
        """`len(Req.output_ids)` at decode iteration `steps`: its earlier output, the token its
        prefill made and one accept length an iteration since it joined the batch."""
        return self.generated + 1 + (steps - self.first_step) * per_step


class SGLangServer:
    """The simulated SGLang server (`kvtier.sim.servers.base.ServerModel`); times in seconds."""

    def __init__(
        self,
        cache: CachePort,
        timing: TimingModel,
        config: EngineConfig,
        prefetch: PrefetchQueue | None = None,
    ) -> None:
        self.cache = cache
        self.timing = timing
        self.config = config
        self.prefetch = prefetch
        self.waiting: deque[Live] = deque()
        self.prefilling: list[Live] = []
        self.decoding: dict[int, Live] = {}
        self._finish_heap: list[tuple[int, int]] = []  # (decode step it finishes at, rid)
        self._decode_kv = 0.0  # KV tokens of the decode batch
        self._steps = 0  # decode steps so far
        self.decode_log = DecodeLog()
        self._pending: list[Live] = []  # what the step in flight prefills (chunked batch)
        self._chunks: list[tuple[int, int]] = []  # its (new tokens, prefix tokens) a chunk
        self._pending_decode = 0  # decode steps the step in flight covers
        self._run_yields = False  # the decode run in flight stops for an arrival (nothing waited)
        self._budget = 0  # prefill tokens left in the batch being formed
        self._compute_s = 0.0
        self._load_s = 0.0
        self.busy = False
        self.pcie_busy_s = 0.0
        # ScheduleBatch.batch_is_full: no prefill is tried until a running request finishes
        self._full = False
        self._out_left = 0  # sum of (output - 1) over the decoding requests
        self._decoded = 0.0  # their generated tokens' KV, held outside the tree
        self._long = 0  # decoding requests with more than CLIP_MAX_NEW_TOKENS to generate
        # chunked prompts' blocks done and not yet in the tree: rid -> blocks
        self._unsaved: dict[int, int] = {}
        self._refilled = 0  # retracted output tokens prefilled again by requests still prefilling
        self.retractions: list[tuple[int, int]] = []  # (decode iteration, rid), in order
        self.reports = Reports()  # its published gauges and KV events
        self._span = 0.0  # the step in flight's duration

    @property
    def running(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    @property
    def queued(self) -> int:
        return len(self.waiting)

    def counters(self) -> ServerCounters:
        q = self.prefetch
        prefetches: dict[str, object] | None = None
        if q is not None:
            prefetches = {
                "policy": q.rules.policy.value,
                "issued": q.issued,
                "completed": q.completed,
                "stopped_early": q.partial,
            }
        return ServerCounters(
            self.cache.evictions(),
            self.pcie_busy_s,
            len(self.retractions),
            prefetches,
            self.decode_log,
        )

    def pages_for(self, req: TraceRequest) -> tuple[int, int]:
        """(prompt blocks, private pages for the output) a request holds at its peak."""
        total = math.ceil((req.input_len + req.output_len) / self.config.block_size)
        return len(req.blocks), total - len(req.blocks)

    def never_fits(self, req: TraceRequest) -> str:
        """Why `req` can never run on this server, or '' when it can."""
        limit = self.config.context_length
        if limit is not None and req.input_len + req.output_len > limit:
            # SGLang refuses a prompt past the context length and clips the output to fit it;
            # a trace's output length is a fact of the workload, so it is not cut here
            total = req.input_len + req.output_len
            return f"prompt and output take {total} tokens; the context length is {limit}"
        prompt, extra = self.pages_for(req)
        if prompt + extra > self.cache.device_pages:
            return (
                f"needs {prompt + extra} device blocks for prompt and output; "
                f"the device holds {self.cache.device_pages}"
            )
        # PrefillAdder.add_one_req on an empty pool: prompt, output and a page below it
        need = prompt * self.config.block_size + min(req.output_len, CLIP_MAX_NEW_TOKENS) + 1
        pool = self.cache.device_pages * self.config.block_size
        if need >= pool:
            return f"needs {need} tokens for prompt, output and a page; the device holds {pool}"
        return ""

    def arrive(self, req: TraceRequest, rec: RequestRecord, now: float) -> None:
        self.waiting.append(Live(req, rec))
        if self.busy:
            self.reports.late.append(now)
        if self.prefetch is None:
            return
        if self._unsaved:
            self._save_chunks()
        hit = self.cache.match(req.blocks)
        # the match must end at a node with a host copy (which node: the era's rule)
        backed_up = hit.backed_up or (self.prefetch.rules.start_after_host_hit and hit.host > 0)
        if not hit.store or not backed_up:
            return
        bs = self.config.block_size
        cached = req.prefix_tokens(hit.device + hit.host, bs)
        stored = req.prefix_tokens(hit.blocks, bs) - cached
        op = Prefetch(hit.device + hit.host, hit.store, bs, stored, req.input_len - cached, now)
        self.prefetch.issue(req.rid, op)

    def next_wake(self) -> float:
        """The next time a waiting request's prefetch may stop (inf: none in flight)."""
        q = self.prefetch
        return q.next_ready(list(q.ops)) if q is not None else math.inf

    def start_step(self, now: float, horizon: float) -> float | None:
        """Begin the next step at `now`; return its duration, or None when idle.

        `horizon` is the next arrival time: a decode run stops there so a new request can be
        prefilled, as the real scheduler would on its next iteration.
        """
        self.reports.begin(now)
        duration = self._start_prefill(now)
        if duration is None:
            duration = self._start_decode(now, horizon)
        self.busy = duration is not None
        if duration is None:  # Scheduler.on_idle
            self._report(now)
        self._span = duration or 0.0
        return duration

    def start_lockstep(self, now: float) -> RankWork | None:
        """Begin a step as one DP-attention rank (`kvtier.sim.dp_attention`): its prefill
        batch, else one decode iteration; None when it has nothing to run. The step's time is
        every rank's together, so a decode run is not advanced past one iteration."""
        self.reports.begin(now)
        if self._start_prefill(now) is not None:
            self.busy = True
            return RankWork(tuple(self._chunks))
        self.busy = bool(self.decoding)
        if not self.busy:
            return None
        self._pending_decode = 1
        self._run_yields = False
        return RankWork(batch=len(self.decoding), kv_tokens=self._decode_kv)

    def _next_ready(self, now: float, start: int) -> int | None:
        """Index of the first waiting request from `start` on that may be scheduled now: one
        without a prefetch in flight, or whose prefetch the policy lets stop (it stops here)."""
        q = self.prefetch
        for i in range(start, len(self.waiting)):
            live = self.waiting[i]
            rid = live.req.rid
            if q is not None and rid in q.ops:
                if q.ready_at(rid) > now:
                    continue
                live.fetched = q.stop(rid, now)
            return i
        return None

    def _save_chunks(self) -> None:
        """Insert the chunks done of the prompts being chunked, before a match that may hit
        them (the tree reads the same as had each gone in when its step ended)."""
        for rid, blocks in self._unsaved.items():
            self.cache.commit(rid, blocks)
        self._unsaved.clear()

    def _admit(self, now: float, index: int, budget: PrefillBudget) -> Live | None:
        """`PrefillAdder.add_one_req` for the waiting request at `index`: admitted when its
        uncached prompt, output and a page fit the batch's token budget; None when not."""
        if self._unsaved:
            self._save_chunks()
        live = self.waiting[index]
        req = live.req
        bs = self.config.block_size
        m = self.cache.match(req.blocks)
        # Req._compute_max_prefix_len (v0.4-v0.5.23): a match stops a token short of the
        # prompt, whose last token is recomputed for the first output
        page = self.config.page_size
        cap = (live.fill - 1) // page * page
        # the pool holds whole trace blocks: a partial one counts whole; a retracted request's
        # output is computed again (never in the tree)
        extend = max(req.input_len - min(req.prefix_tokens(m.device, bs), cap),
                     (len(req.blocks) - m.device) * bs) + live.generated  # fmt: skip
        if not budget.fits(self._room(locked=True), extend, req.output_len - live.generated):
            return None
        start, got = live.fetched
        cached = m.device + m.host
        store = max(0, min(m.store, start + got - cached)) if cached >= start else 0
        loaded = req.prefix_tokens(cached + store, bs) - req.prefix_tokens(m.device, bs)
        hit = self.cache.admit(req.rid, req.blocks, store, load_back=loaded >= LOAD_BACK_THRESHOLD)
        del self.waiting[index]
        on_device = min(req.prefix_tokens(hit.device, bs), cap)
        on_host = min(req.prefix_tokens(hit.device + hit.host, bs), cap)
        in_store = min(req.prefix_tokens(hit.blocks, bs), cap)
        if not live.generated:  # a retracted request's record keeps its first admission
            live.rec.hit_tokens = {
                Tier.DEVICE: on_device,
                Tier.HOST: on_host - on_device,
                Tier.STORE: in_store - on_host,
            }
            live.rec.admit_s = now
        live.prefilled = in_store
        live.load_tokens = in_store - on_device
        live.pages = hit.blocks
        return live

    def _start_prefill(self, now: float) -> float | None:
        """`Scheduler._get_new_batch_prefill_raw` with FCFS: the chunked request's next chunk,
        then waiting requests in order while the chunk budget, the running cap and the token
        budget last; the batch's prompt pages are allocated once it is formed."""
        cfg = self.config
        self._pending = []
        self._chunks = []
        self._budget = cfg.chunked_prefill_size
        self._compute_s = self._load_s = 0.0
        if not self.running:
            self._full = False
        if (self._full or not self.waiting) and not self.prefilling:
            return None
        budget = PrefillBudget(self._running_offset())
        for live in self.prefilling:  # the request being chunked goes first
            self._take_chunk(live, budget, budget.chunk_room(self._room(False), self._budget))
        index = 0
        while self._budget > 0:
            if self.running >= cfg.max_running_requests:
                self._full = bool(self.waiting)
                break
            ready = self._next_ready(now, index)
            if ready is None:
                break
            index = ready
            admitted = self._admit(now, index, budget)
            if admitted is None:
                self._full = bool(self._pending or self.decoding)
                break
            self.prefilling.append(admitted)
            self._take_chunk(admitted, budget, self._budget)
            if not budget.has_capacity(self._room(False)):
                self._full = True
                break
        if not self._pending:
            return None
        self._allocate()
        self.pcie_busy_s += self._load_s
        return self.timing.overlapped_s(self.timing.prefill_batch_s(self._compute_s), self._load_s)

    def _room(self, locked: bool) -> float:
        """SGLang's free and evictable tokens (`available_size() + evictable_size()`), from
        the device pages and the generated tokens they hold; `locked`: the last match pinned."""
        cache = self.cache
        held = self._decoded + self._refilled
        return (cache.room(locked) + cache.loose_pages) * self.config.block_size - held

    def _running_offset(self) -> float:
        """The decoding requests' remaining outputs, each at most CLIP_MAX_NEW_TOKENS
        (`PrefillAdder._get_running_request_total_token_offset`, whole for fixed lengths)."""
        if not self._long:
            return self._out_left - self._decoded
        per_step, steps = self.timing.tokens_per_step, self._steps
        return sum(
            min(live.req.output_len - live.outputs(steps, per_step), CLIP_MAX_NEW_TOKENS)
            for live in self.decoding.values()
        )

    def _allocate(self) -> None:
        """`alloc_for_extend`: pages for the batch's prompt tokens, evicting as needed, and a
        retracted request's output prefilled again, held with the generated tokens."""
        bs = self.config.block_size
        cache = self.cache
        refill = 0
        for live in self._pending:
            req = live.req
            want = -(-live.prefilled // bs)
            more = (want if want < len(req.blocks) else len(req.blocks)) - live.pages
            if more > 0 and cache.grow(req.rid, more):
                live.pages += more
            if live.prefilled > req.input_len:
                refill += live.prefilled - req.input_len - live.refilled
                live.refilled = live.prefilled - req.input_len
        if refill:
            self._refilled += refill
            self._hold_decoded(0.0)

    def _take_chunk(self, live: Live, budget: PrefillBudget, limit: int) -> None:
        prefix = live.prefilled
        left = live.fill - prefix
        chunk = left if left < limit else limit
        budget.reserve(chunk, live.req.output_len if chunk == left else 0)
        self._budget -= chunk
        self._compute_s += self.timing.prefill_s(chunk, prefix)
        self._chunks.append((chunk, prefix))
        self._load_s += self.timing.load_s(live.load_tokens)
        live.load_tokens = 0
        live.prefilled = prefix + chunk
        self._pending.append(live)

    def _start_decode(self, now: float, horizon: float) -> float | None:
        if not self.decoding:
            return None
        fit = self._steps_that_fit()
        if fit < 1:
            # one step, then prefill is tried again: the batch is no longer full
            self._retract()
            fit = 1
        batch = len(self.decoding)
        steps = min(self._finish_heap[0][0] - self._steps, fit)
        # stop for the next arrival when nothing waits, and for a prefetch that may stop
        limit = min(math.inf if self.waiting else horizon, self.next_wake())
        if now < limit < math.inf:
            until = self.timing.decode_steps_before(limit - now, self._decode_kv, batch)
            steps = min(steps, until)
        self._pending_decode = steps
        self._run_yields = not self.waiting
        lines = self.timing.decode_lines(self._decode_kv, batch)
        self.decode_log.record(now, self._steps, steps, lines)
        return lines.total(steps)

    def cut(self, start: float, now: float) -> float | None:
        """Stop the decode run begun at `start` at its first step boundary at or after `now`,
        as `start_step` would have with `now` as its horizon (a request arrived); the run's new
        duration, or None when it already ends there, ignored the horizon (requests were
        waiting) or is no decode run. A fleet cuts a replica's run only when a request reaches
        that replica, where one server stops at every arrival."""
        if not (self.busy and self._pending_decode and self._run_yields) or now <= start:
            return None
        batch = len(self.decoding)
        until = self.timing.decode_steps_before(now - start, self._decode_kv, batch)
        if until >= self._pending_decode:
            return None
        self._pending_decode = until
        self.decode_log.shorten(until)
        self._span = self.timing.decode_steps_s(until, self._decode_kv, batch)
        return self._span

    def _steps_that_fit(self) -> int:
        """Decode iterations the free and evictable tokens give the batch as it is
        (`ScheduleBatch.check_decode_mem`, page size 1: a token per running request)."""
        need = len(self.decoding) * self.timing.tokens_per_step
        return int(self._room(False) // need)

    def _retract(self) -> None:
        """`ScheduleBatch.retract_decode` (v0.5.23): keep the requests with the most output,
        then the shortest prompt, first (`_get_decode_retraction_order`; equal keys keep batch
        order, so the later goes first); retract the last one, then more while the next decode
        step does not fit, keeping at least one. Each goes to the back of the queue
        (`_add_request_to_queue`) with its output to prefill again."""
        per_step, steps = self.timing.tokens_per_step, self._steps
        keep = sorted(self.decoding.values(),
                      key=lambda live: (live.outputs(steps, per_step), -live.req.input_len),
                      reverse=True)  # fmt: skip
        while len(keep) > 1:
            self._retract_one(keep.pop(), len(keep))
            if self._steps_that_fit() >= 1:
                break
        self._finish_heap = [(end, rid) for end, rid in self._finish_heap if rid in self.decoding]
        heapq.heapify(self._finish_heap)
        self._full = False  # batch_is_full clears as the batch shrinks

    def _retract_one(self, live: Live, left: int) -> None:
        """`release_req`: free its output's KV and unlock its prompt, which stays in the tree
        unstamped (`release_kv_cache(checkpoint=False)`), then evict until the pool has
        `SGLANG_RETRACT_DECODE_STEPS` free tokens for each of the `left` requests still running
        (`evict_from_tree_cache`)."""
        rid = live.req.rid
        del self.decoding[rid]
        self._leave_decode(live)
        live.generated = math.floor(live.outputs(self._steps, self.timing.tokens_per_step))
        live.prefilled = live.pages = live.refilled = live.load_tokens = 0
        live.fetched = (0, 0)
        self.cache.release(rid, used=False)
        self._hold_decoded(0.0)
        bs = self.config.block_size
        slack = self.cache.loose_pages * bs - self._decoded - self._refilled
        slack += self.cache.spare_tokens
        self.cache.free_up(math.ceil((left * RETRACT_DECODE_STEPS - slack) / bs))
        self.retractions.append((self._steps, rid))
        self.waiting.append(live)

    def _leave_decode(self, live: Live) -> None:
        """Take a request that finished or was retracted out of the decode batch's sums."""
        ran = (self._steps - live.first_step) * self.timing.tokens_per_step
        self._decode_kv -= live.fill + 1 + ran
        self._decoded -= live.generated + ran
        self._out_left -= live.req.output_len - 1
        self._long -= live.req.output_len - 1 - live.generated > CLIP_MAX_NEW_TOKENS

    def finish_step(self, now: float) -> list[RequestRecord]:
        """Apply the step that ends at `now`; return the requests that finished."""
        self.busy = False
        done: list[RequestRecord] = []
        if self._pending_decode:
            first, count = self._steps, self._pending_decode
            due = report_due(first, first + count)
            per_step = self.timing.tokens_per_step
            grown = count * len(self.decoding) * per_step
            if due and due < first + count:  # a report inside the run: the state then
                if self.reports.tree is not None:  # the tree as the report's batch left it
                    early = (due - first) * len(self.decoding) * per_step
                    self._hold_decoded(early)
                    self._report(now, self._iteration_began(due, first, count))
                    grown -= early
                else:
                    self.reports.report(*self._decode_report(due))
            self._steps += count
            self._decode_kv += count * len(self.decoding) * per_step
            self._hold_decoded(grown)
            self._pending_decode = 0
            finished = []
            while self._finish_heap and self._finish_heap[0][0] <= self._steps:
                _, rid = heapq.heappop(self._finish_heap)
                live = self.decoding.pop(rid)
                self._leave_decode(live)
                live.rec.decode_steps = (live.first_step, self._steps)
                finished.append(live)
            if not self.decoding:
                self._decode_kv = self._decoded = 0.0  # what float sums leave behind
            if finished:
                self._full = False
                # the finished outputs' pages pass from the running requests to the tree
                self._hold_decoded(0.0)
                done = [self._finish(live, now) for live in finished]
                self._hold_decoded(0.0)  # their last pages' unused tails take generated tokens
            if due == self._steps:
                self._report(now, self._iteration_began(due, first, count))
            return done
        chunked = []
        for live in self._pending:
            if live.prefilled < live.fill:
                chunked.append(live)
                continue
            self.prefilling.remove(live)
            self._unsaved.pop(live.req.rid, None)
            self.cache.commit(live.req.rid)
            if not live.generated:
                live.rec.first_token_s = now
            if live.req.output_len - live.generated == 1:
                done.append(self._finish(live, now))
                self._full = False
                continue
            self._join_decode(live)
        for live in chunked:
            # Scheduler.stash_chunked_request (checkpoint_kv_cache, v0.5.23; cache_unfinished_req
            # before): the chunks done enter the tree before the next batch is formed, whole
            # trace blocks of them; inserted when a match may see them (_save_chunks)
            self._unsaved[live.req.rid] = live.prefilled // self.config.block_size
        self._pending = []
        self._report(now)
        return done

    def _join_decode(self, live: Live) -> None:
        """A prompt (and a retracted request's output) prefilled: the token its prefill made
        came first; the rest take decode iterations of the accept length each."""
        tail = live.req.output_len - 1 - live.generated
        self._out_left += live.req.output_len - 1  # less _decoded: the outputs still to make
        self._long += tail > CLIP_MAX_NEW_TOKENS
        self._refilled -= live.refilled
        self._decoded += live.refilled  # the output prefilled again: generated tokens' KV
        live.refilled = 0
        self.decoding[live.req.rid] = live
        live.first_step = self._steps
        self._decode_kv += live.fill + 1
        steps = self.timing.decode_iterations(tail)
        heapq.heappush(self._finish_heap, (self._steps + steps, live.req.rid))

    def _hold_decoded(self, grown: float) -> None:
        """`alloc_for_decode`: the generated tokens' KV grows by `grown` tokens (evicting as
        needed; a step takes the same leaves one at a time) or shrinks as requests finish."""
        self._decoded += grown
        # the cached outputs' unused tails hold generated tokens too, as SGLang's tokens do
        held = self._decoded + self._refilled - self.cache.spare_tokens
        pages = max(0, math.ceil(held / self.config.block_size))
        if pages != self.cache.loose_pages:
            self.cache.hold_loose(pages)

    def kv_usage(self) -> float:
        """SGLang's token usage: the device's pages neither free nor evictable over its pages
        (`PoolStats`: num_used / max_total_num_tokens, num_used less the evictable)."""
        total = self.cache.device_pages
        return (total - self.cache.room()) / total if total else 0.0

    def _report(self, now: float, edge: float | None = None) -> None:
        """A report (`metrics_reporter.py`): the gauges as the scheduler stands, the waiting
        queue less the arrivals after `edge` (the batch's start), and the queued KV events."""
        r = self.reports
        r.report(r.waiting(len(self.waiting), r.began if edge is None else edge), self.kv_usage())
        r.publish(now)

    def _iteration_began(self, k: int, first: int, count: int) -> float:
        """When decode batch `k` of the run in flight (batches `first` + 1 to `first` +
        `count`) began."""
        return self.reports.began + (k - first - 1) * self._span / count

    def _decode_report(self, k: int) -> tuple[int, float]:
        """The gauges after decode batch `k` of the run in flight, from the state at its start
        (the batch is unchanged until its end): the waiting queue less the arrivals after batch
        `k` began; the pages used, the generated tokens' grown by the batches up to `k`."""
        first, count = self._steps, self._pending_decode
        grown = (k - first) * len(self.decoding) * self.timing.tokens_per_step
        bs, cache = self.config.block_size, self.cache
        more = math.ceil((self._decoded + self._refilled + grown) / bs) - cache.loose_pages
        total = cache.device_pages
        used = min(total - cache.room() + max(more, 0), total)
        edge = self._iteration_began(k, first, count)
        return self.reports.waiting(len(self.waiting), edge), used / total if total else 0.0

    @property
    def stats_settled(self) -> bool:
        """`stats` holds until this server's next event: no report falls inside the decode run
        in flight."""
        first = self._steps
        return not (self.busy and report_due(first, first + self._pending_decode))

    def stats(self, now: float) -> tuple[int, float]:
        """What the server's /metrics reports at `now` (`sglang:num_queue_reqs`,
        `sglang:token_usage`): its last report's."""
        first, count = self._steps, self._pending_decode
        if self.busy and count > 1 and self._span > 0:
            done = min(int((now - self.reports.began) * count / self._span), count - 1)
            due = report_due(first, first + done)  # the last report of the run by `now`
            if due:
                waiting, usage = self._decode_report(due)
                return waiting, round(usage, 2)
        return self.reports.stats

    def enable_kv_events(self) -> set[int] | None:
        """--kv-events-config: from here on the tree's device changes are published at each
        report (None: a cache without a tree); the keys announced so far."""
        if not isinstance(self.cache, TieredCachePort):
            return None
        return self.reports.enable_kv_events(self.cache.cache.tree)

    def _finish(self, live: Live, now: float) -> RequestRecord:
        """`release_kv_cache(checkpoint=True)` (v0.5.23; `cache_finished_req` before): the tree
        takes the prompt and the output but its last token, whose KV was never computed
        (`Req.owned_kv_len`: `kv_committed_len`), cut to whole pages (`RadixKey.page_aligned`);
        the pages it already held and the cut tail are freed, the path unlocked. Generated
        tokens have keys of their own, so no other request's prompt matches them."""
        req, bs = live.req, self.config.block_size
        page = self.config.page_size
        kept = (req.input_len + req.output_len - 1) // page * page - len(req.blocks) * bs
        pages = -(-kept // bs) if kept > 0 else 0
        self.cache.release(req.rid, output_pages=pages, spare=pages * bs - kept)
        live.rec.finish_s = now
        return live.rec


def build(config: SimConfig) -> SGLangServer:
    """The SGLang server `config` describes: HiCache's tiers in trace blocks, and the store's
    prefetch queue when there is a store."""
    port = TieredCachePort(
        config.device_blocks, config.host_blocks, config.write_policy, config.store_blocks
    )
    prefetch = None
    if config.store_blocks:
        # HiCacheController: prefetch_threshold = max(prefetch_threshold, page_size)
        rules = config.prefetch
        rules = dataclasses.replace(
            rules, threshold_tokens=max(rules.threshold_tokens, config.page_size)
        )
        capacity = config.prefetch_capacity
        if capacity is None:
            capacity = ERA_0_5_3.capacity_tokens(config.host_tokens, config.device_tokens)
        prefetch = PrefetchQueue(rules, config.timing.store_read_s(1), capacity)
    limits = EngineConfig(
        config.block_size,
        config.max_running_requests,
        config.chunked_prefill_size,
        config.context_length,
        config.page_size,
    )
    return SGLangServer(port, config.timing, limits, prefetch)
