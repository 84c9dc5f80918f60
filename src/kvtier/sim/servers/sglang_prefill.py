"""An SGLang prefill batch as the simulator forms it (`Scheduler._get_new_batch_prefill_raw`).

A prefill batch continues the request being chunked, then admits waiting requests in arrival
order (`--schedule-policy fcfs`) while the chunk budget, the running-request cap and SGLang's
token budget last (`kvtier.sim.servers.sglang_budget`: the uncached prompt, the output and a page
against the free and evictable tokens less the running requests' remaining outputs); the head of
the queue blocks the rest, and after a refusal prefill waits for a request to finish
(`batch_is_full`). A match stops a token short of the prompt (`Req._compute_max_prefix_len`).
The batch's prompt pages are allocated once it is formed (`alloc_for_extend`), in whole blocks.

With an L3 store the scheduler skips a request until the prefetch policy lets its prefetch stop
(`kvtier.sim.servers.prefetch`), and what arrived by then is loaded back with the host hit. A
host (or prefetched) hit shorter than `LOAD_BACK_THRESHOLD` tokens is recomputed instead
(`HiRadixCache.load_back`).
"""

from __future__ import annotations

from kvtier.cache.storage import Tier
from kvtier.sim.servers.sglang_budget import CLIP_MAX_NEW_TOKENS, PrefillBudget
from kvtier.sim.servers.sglang_state import Live, SGLangState

# HiRadixCache.load_back (sglang v0.5.3-v0.5.18): a host hit of fewer tokens is recomputed instead
LOAD_BACK_THRESHOLD = 10


class SGLangPrefill(SGLangState):
    """Forming and allocating the next prefill batch."""

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
