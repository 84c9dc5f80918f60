"""SGLang with DP attention: one scheduler per DP rank, stepping together.

Each DP rank is an `SGLangServer` with its own waiting queue, radix cache and pool (the ledger's
tokens, a GPU's pool, are one rank's: every GPU of an attention group holds the same tokens at
its share of the heads) and its running cap (`max_running_requests // dp`, the ledger's rule).
Requests go to the ranks in turn, in arrival order (`DataParallelController.
round_robin_scheduler`, v0.5.23). A step starts when any rank has work: each rank forms its own
batch (a prefill batch first, else one decode iteration; an idle rank runs an idle batch), and the
step takes the time of all of them together (`kvtier.sim.dp_attention.DPAttention.step_s`).
Token times between iterations (ITL) are not recorded.
"""

from __future__ import annotations

import math
from collections import Counter
from operator import attrgetter
from typing import TYPE_CHECKING

from kvtier.sim.decode_log import DecodeLog
from kvtier.sim.metrics import RequestRecord
from kvtier.sim.servers.base import ServerCounters
from kvtier.sim.servers.sglang import SGLangServer, build
from kvtier.sim.trace import TraceRequest

if TYPE_CHECKING:
    from kvtier.sim.setup import SimConfig


class DPAttentionServer:
    """The DP ranks of one SGLang server (`kvtier.sim.servers.base.ServerModel`)."""

    def __init__(self, ranks: list[SGLangServer]) -> None:
        self.ranks = ranks
        timing = ranks[0].timing
        assert timing.dp_attention is not None
        self.timing, self.split = timing, timing.dp_attention
        self._turn = 0  # the rank the next request goes to
        self._stepping: list[SGLangServer] = []
        self.busy = False
        for rank in ranks:
            rank.decode_log = DecodeLog(kept=False)

    @property
    def running(self) -> int:
        """Requests admitted and not finished, on every rank."""
        return sum(map(attrgetter("running"), self.ranks))

    @property
    def queued(self) -> int:
        """Requests waiting on every rank."""
        return sum(map(attrgetter("queued"), self.ranks))

    def never_fits(self, req: TraceRequest) -> str:
        return self.ranks[0].never_fits(req)

    def arrive(self, req: TraceRequest, rec: RequestRecord, now: float) -> None:
        self.ranks[self._turn].arrive(req, rec, now)
        self._turn = (self._turn + 1) % len(self.ranks)

    def next_wake(self) -> float:
        return math.inf

    def start_step(self, now: float, horizon: float) -> float | None:
        works, self._stepping = [], []
        for rank in self.ranks:
            work = rank.start_lockstep(now)
            if work is not None:
                works.append(work)
                self._stepping.append(rank)
        self.busy = bool(works)
        return self.split.step_s(self.timing, works) if works else None

    def finish_step(self, now: float) -> list[RequestRecord]:
        self.busy = False
        done: list[RequestRecord] = []
        for rank in self._stepping:
            done.extend(rank.finish_step(now))
        self._stepping = []
        return done

    def counters(self) -> ServerCounters:
        evictions: Counter[str] = Counter()
        for rank in self.ranks:
            evictions.update(rank.counters().evictions)
        return ServerCounters(dict(evictions), 0.0)


def build_dp(config: SimConfig) -> DPAttentionServer | SGLangServer:
    """The SGLang server `config` describes: its DP ranks under DP attention, else one."""
    if config.timing.dp_attention is None:
        return build(config)
    return DPAttentionServer([build(config) for _ in range(config.timing.dp_attention.dp)])
