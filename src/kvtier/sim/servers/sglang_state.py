"""An SGLang server's state as the simulator keeps it, and its KV memory as SGLang counts it.

`Live` is a request between arrival and finish. `SGLangState` holds the waiting queue, the
requests being prefilled, the decode batch and its sums, and what every step reads of the pool:
SGLang's free and evictable tokens (`_room`), the generated tokens' pages held outside the tree
(`alloc_for_decode`: `_hold_decoded`) and the chunks done that are not yet in the tree
(`_save_chunks`). Prefill batches (`kvtier.sim.servers.sglang_prefill`), decode runs and
retraction (`kvtier.sim.servers.sglang_decode`) and the reports' gauges
(`kvtier.sim.servers.sglang_stats`) each add their steps to it; `kvtier.sim.servers.sglang`
runs them.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from kvtier.sim.decode_log import DecodeLog
from kvtier.sim.metrics import RequestRecord
from kvtier.sim.servers.cache_port import CachePort
from kvtier.sim.servers.prefetch import PrefetchQueue
from kvtier.sim.servers.sglang_reports import Reports
from kvtier.sim.timing import TimingModel
from kvtier.sim.trace import TraceRequest


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


class SGLangState:
    """The simulated SGLang server's queues, batches and KV accounting; times in seconds."""

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

    def next_wake(self) -> float:
        """The next time a waiting request's prefetch may stop (inf: none in flight)."""
        q = self.prefetch
        return q.next_ready(list(q.ops)) if q is not None else math.inf

    def _save_chunks(self) -> None:
        """Insert the chunks done of the prompts being chunked, before a match that may hit
        them (the tree reads the same as had each gone in when its step ended)."""
        for rid, blocks in self._unsaved.items():
            self.cache.commit(rid, blocks)
        self._unsaved.clear()

    def _room(self, locked: bool) -> float:
        """SGLang's free and evictable tokens (`available_size() + evictable_size()`), from
        the device pages and the generated tokens they hold; `locked`: the last match pinned."""
        cache = self.cache
        held = self._decoded + self._refilled
        return (cache.room(locked) + cache.loose_pages) * self.config.block_size - held

    def _hold_decoded(self, grown: float) -> None:
        """`alloc_for_decode`: the generated tokens' KV grows by `grown` tokens (evicting as
        needed; a step takes the same leaves one at a time) or shrinks as requests finish."""
        self._decoded += grown
        # the cached outputs' unused tails hold generated tokens too, as SGLang's tokens do
        held = self._decoded + self._refilled - self.cache.spare_tokens
        pages = max(0, math.ceil(held / self.config.block_size))
        if pages != self.cache.loose_pages:
            self.cache.hold_loose(pages)
