"""One SGLang server as the simulator sees it: waiting queue, chunked prefill, decode batch.

Each engine step is either a prefill batch or a decode step, prefill first, as SGLang's
scheduler does (`get_next_batch_to_run`: a new extend batch when one can be formed, else
decode). `kvtier.sim.servers.sglang_prefill` forms the prefill batch,
`kvtier.sim.servers.sglang_decode` runs decode steps and retracts requests when the pool runs
out, over the state and KV accounting of `kvtier.sim.servers.sglang_state`;
`kvtier.sim.servers.sglang_stats` reads the reports' gauges. When a step ends, a chunked prompt's
finished chunks enter the tree (`Scheduler.stash_chunked_request`) and a finished request's path
counts as used (`release_kv_cache`).

With an L3 store, a request whose prompt continues in the store starts a prefetch when it arrives
(`kvtier.sim.servers.prefetch`).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from typing import TYPE_CHECKING

from kvtier.engines.sglang.prefetch import ERA_0_5_3
from kvtier.sim.dp_attention import RankWork
from kvtier.sim.metrics import RequestRecord
from kvtier.sim.servers.base import ServerCounters
from kvtier.sim.servers.hicache import TieredCachePort
from kvtier.sim.servers.prefetch import Prefetch, PrefetchQueue
from kvtier.sim.servers.sglang_budget import CLIP_MAX_NEW_TOKENS
from kvtier.sim.servers.sglang_decode import SGLangDecode
from kvtier.sim.servers.sglang_prefill import SGLangPrefill
from kvtier.sim.servers.sglang_reports import report_due
from kvtier.sim.servers.sglang_state import EngineConfig, Live
from kvtier.sim.servers.sglang_stats import SGLangStats
from kvtier.sim.trace import TraceRequest

if TYPE_CHECKING:
    from kvtier.sim.setup import SimConfig

__all__ = ["EngineConfig", "SGLangServer", "build"]


class SGLangServer(SGLangPrefill, SGLangDecode, SGLangStats):
    """The simulated SGLang server (`kvtier.sim.servers.base.ServerModel`); times in seconds.
    It runs the prefill, decode and report steps its bases add, over one `SGLangState`."""

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

    def finish_step(self, now: float) -> list[RequestRecord]:
        """Apply the step that ends at `now`; return the requests that finished."""
        self.busy = False
        done: list[RequestRecord] = []
        if self._pending_decode:
            first, count = self._steps, self._pending_decode
            due = report_due(first, first + count)
            per_step = self.timing.tokens_per_step
            grown = count * len(self.decoding) * per_step
            self._decode_kv += grown
            if due and due < first + count:  # a report inside the run: the state then
                if self.reports.tree is not None:  # the tree as the report's batch left it
                    early = (due - first) * len(self.decoding) * per_step
                    self._hold_decoded(early)
                    self._report(now, self._iteration_began(due, first, count))
                    grown -= early
                else:
                    self.reports.report(*self._decode_report(due))
            self._steps += count
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
