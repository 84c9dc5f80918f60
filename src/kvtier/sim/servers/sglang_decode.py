"""SGLang's decode batch as the simulator runs it, and its retraction when the pool runs out.

A decode step produces one token for every running request (with speculative decoding, the
accept length: `kvtier.sim.speculative`), its pages allocated for all of them together
(`alloc_for_decode`). Consecutive decode steps of an unchanged batch are advanced together, up
to the next finish or the next arrival (or the next time a waiting request's store prefetch may
stop). A trace's outputs are fixed lengths, which SGLang reserves whole up to
`CLIP_MAX_NEW_TOKENS`; when a longer one runs the pool out, a decode step retracts requests first
(`ScheduleBatch.retract_decode`: `_retract`), which prefill prompt and output again.
"""

from __future__ import annotations

import heapq
import math

from kvtier.sim.servers.sglang_budget import CLIP_MAX_NEW_TOKENS, RETRACT_DECODE_STEPS
from kvtier.sim.servers.sglang_state import Live, SGLangState


class SGLangDecode(SGLangState):
    """Running, cutting and retracting the decode batch; requests joining and leaving it."""

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
