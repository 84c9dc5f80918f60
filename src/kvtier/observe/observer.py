"""Running totals over a stream of serving readings: the result of `kvtier observe`.

Memory is bounded: the timeline keeps at most twice its limit of points, and each evidence list
keeps its first few lines, however long the log.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kvtier.engines.vllm.serving import ASYNC
from kvtier.observe.diagnosis import KV_FULL, Counts, Diagnosis, Evidence, diagnose
from kvtier.observe.timeline import Point, Timeline
from kvtier.payload import copied

EVIDENCE_KEPT = 5
_TEXT_KEPT = 400
_SEEN_KEPT = 4096
SAMPLE_KINDS = frozenset({"decode", "prefill", "fill", "stats", "metrics"})
Fields = dict[str, float]  # a reading: field name -> value
_EVENTS = frozenset({"retracted", "preemptions", "preempted_total"})
_TITLE = re.compile(r"[A-Za-z#][A-Za-z_# -]{0,40}")  # a message's words before its figures
_SHARE = (0.0, 1.0, False)
_COUNT = (0.0, 1e9, True)  # requests or events: more than a server can hold or see in a day
_TOKENS = (0.0, 1e11, True)  # tokens in one batch line, a pool, or since start
_RATE = (0.0, 1e9, False)  # tokens/s: far above any node's throughput
# field -> (lowest, highest, whole): the values an engine can print for each field (the grammars'
# field names; SGLang's and vLLM's serving modules). A reading outside them is not data: its line
# is skipped and counted, never read.
FIELD_RANGES: dict[str, tuple[float, float, bool]] = {
    "kv_usage": _SHARE,
    "hit_rate": _SHARE,
    "external_hit_rate": _SHARE,
    "running": _COUNT,
    "queued": _COUNT,
    "swapped": _COUNT,
    "new_seqs": _COUNT,
    "retracted": _COUNT,
    "preemptions": _COUNT,
    "preempted_total": (0.0, 1e11, True),
    "new_tokens": _TOKENS,
    "cached_tokens": _TOKENS,
    "pool_tokens": _TOKENS,
    "gen_tps": _RATE,
    "prompt_tps": _RATE,
    "accept_len": (1.0, 64.0, False),  # the bonus token included; no engine drafts 64 deep
}


def out_of_range(fields: dict[str, float]) -> str | None:
    """The first field whose value no engine prints (not finite, negative, fractional where the
    engine prints a whole number, or past its range), as `name=value`; None when all are valid."""
    for name, value in fields.items():
        low, high, whole = FIELD_RANGES.get(name, (0.0, math.inf, False))
        if not (math.isfinite(value) and low <= value <= high) or (whole and value != int(value)):
            return f"{name}={value:g}"
    return None


@dataclass(frozen=True, slots=True)
class Peak:
    """The sample with the fullest KV pool, and the queue at that moment."""

    kv_usage: float
    queued: int | None
    running: int | None
    time: str | None
    line: int | None
    text: str


@dataclass(frozen=True, slots=True)
class Observation:
    source: str
    engine: str | None
    samples: int
    kv_usage_max: float | None
    queue_max: int | None
    peak: Peak | None
    hit_rate: float | None
    hit_rate_source: str | None  # "tokens", "counters" or "printed"
    external_hit_rate: float | None
    preemptions: int
    pool_tokens: int | None
    diagnosis: Diagnosis
    evidence: tuple[Evidence, ...]
    timeline: tuple[Point, ...]
    skipped: int
    skipped_lines: tuple[Evidence, ...]


class Observer:
    def __init__(self, source: str, points: int = 120) -> None:
        self.source = source
        self.engine: str | None = None
        self.timeline = Timeline(points)
        self.samples = 0
        self.kv_max: float | None = None
        self.queue_max: int | None = None
        self.peak: Peak | None = None
        self.cached = 0
        self.computed = 0
        self.counter_hit: float | None = None
        self.printed_hit: float | None = None
        self.external_hit: float | None = None
        self.preempt_events = 0
        self.preempt_cumulative = 0
        self.pool_tokens: int | None = None
        self.last_kv: float | None = None
        self.waiting_full = self.waiting_room = self.waiting_unknown = self.swapped = 0
        self.queue_seen = 0
        self.full_lines: list[Evidence] = []
        self.room_lines: list[Evidence] = []
        self.preempt_lines: list[Evidence] = []
        self.skipped = 0
        self.skipped_lines: list[Evidence] = []
        self._seen: dict[tuple[str | None, str], str | None] = {}
        # (DP group, kind of message) -> the rank whose lines are read
        self._speakers: dict[tuple[str | None, str], str] = {}

    @staticmethod
    def _keep(lines: list[Evidence], line: int | None, text: str) -> None:
        if len(lines) < EVIDENCE_KEPT:
            lines.append(Evidence(line, text[:_TEXT_KEPT]))

    def skip(self, line: int | None, text: str) -> None:
        """A line of a known format whose fields could not be read."""
        self.skipped += 1
        self._keep(self.skipped_lines, line, text)

    def duplicate(self, time: str | None, message: str, rank: str | None) -> bool:
        """Whether this message is a copy another rank printed: every TP, CP, PP or EP rank of
        one scheduler prints the same batch line, not always within the same second. The first
        rank of each data-parallel group ("DP1 ...", or the untagged group) to print a kind of
        serving line is the one read for it; the others' lines of that kind are copies. One
        message at one time printed again by another rank is a copy too."""
        if rank is not None:
            group = rank.split(" ", 1)[0] if rank.startswith("DP") else None
            # per kind of message: the rank printing the batch lines need not print the others
            title = _TITLE.match(message)
            key = (group, title.group(0) if title else "")
            speaker = self._speakers.setdefault(key, rank)
            if speaker != rank:
                return True
        key = (time, message)
        if key in self._seen:
            return self._seen[key] != rank
        if len(self._seen) >= _SEEN_KEPT:
            self._seen.clear()
        self._seen[key] = rank
        return False

    def add(
        self,
        engine: str,
        kind: str,
        fields: Fields,
        *,
        line: int | None,
        text: str,
        time: str | None = None,
    ) -> None:
        """One reading of a grammar (see the engines' serving modules for kinds and fields).

        A reading with a value outside FIELD_RANGES is skipped and counted, not read."""
        self._read(engine, kind, fields, line, text, time)
        self.heard(kind, fields, line, time)

    def heard(self, kind: str, fields: Fields, line: int | None, time: str | None) -> None:
        """What a subclass does with every reading besides (SampleRecorder keeps the timed ones)."""

    def _read(
        self, engine: str, kind: str, fields: Fields, line: int | None, text: str, time: str | None
    ) -> None:
        if out_of_range(fields) is not None:
            self.skip(line, text)
            return
        if kind == ASYNC:  # a startup setting (observe/samples.py keeps it), no serving figure
            return
        if self.engine is None:
            self.engine = engine
        if kind in SAMPLE_KINDS and fields.keys().isdisjoint(_EVENTS):
            self._sample(fields, line, text, time)
            return
        if kind == "pool":
            if "pool_tokens" in fields:
                self.pool_tokens = int(fields["pool_tokens"])
            return
        if kind == "hit":
            if "hit_rate" in fields:
                self.printed_hit = fields["hit_rate"]
                self.timeline.note_hit(fields["hit_rate"])
            return
        events = int(fields.get("retracted", 0) + fields.get("preemptions", 0))
        if "preempted_total" in fields:
            self.preempt_cumulative = max(self.preempt_cumulative, int(fields["preempted_total"]))
        elif events:
            self.preempt_events += events
        if events or "preempted_total" in fields:
            self._keep(self.preempt_lines, line, text)
        if kind in SAMPLE_KINDS:
            self._sample(fields, line, text, time)

    def add_counter_hit_rate(self, rate: float) -> None:
        if math.isfinite(rate) and 0 <= rate <= 1:
            self.counter_hit = rate

    def _sample(
        self, fields: dict[str, float], line: int | None, text: str, time: str | None
    ) -> None:
        get = fields.get
        self.samples += 1
        self.timeline.add(fields, time, line)
        kv = get("kv_usage")
        queued = get("queued")
        if kv is not None:
            self.last_kv = kv
            if self.kv_max is None or kv > self.kv_max:
                self.kv_max = kv
                running = get("running")
                self.peak = Peak(
                    kv,
                    None if queued is None else int(queued),
                    None if running is None else int(running),
                    time,
                    line,
                    text[:_TEXT_KEPT],
                )
        if queued is not None:
            self.queue_seen += 1
            if self.queue_max is None or queued > self.queue_max:
                self.queue_max = int(queued)
            if queued > 0:
                if self.last_kv is None:
                    self.waiting_unknown += 1
                elif self.last_kv >= KV_FULL:
                    self.waiting_full += 1
                    self._keep(self.full_lines, line, text)
                else:
                    self.waiting_room += 1
                    self._keep(self.room_lines, line, text)
        if get("swapped"):
            self.swapped += 1
            self._keep(self.preempt_lines, line, text)
        if (computed := get("new_tokens")) is not None:
            self.computed += int(computed)
            self.cached += int(get("cached_tokens", 0))
        if (hit := get("hit_rate")) is not None:
            self.printed_hit = hit
        if (external := get("external_hit_rate")) is not None:
            self.external_hit = external

    @property
    def preemptions(self) -> int:
        return max(self.preempt_cumulative, self.preempt_events)

    def hit_rate(self) -> tuple[float | None, str | None]:
        if self.cached + self.computed:
            return self.cached / (self.cached + self.computed), "tokens"
        if self.counter_hit is not None:
            return self.counter_hit, "counters"
        if self.printed_hit is not None:
            return self.printed_hit, "printed"
        return None, None

    def result(self) -> Observation:
        waiting_room, waiting_unknown = self.waiting_room, self.waiting_unknown
        if self.kv_max is not None and self.kv_max < KV_FULL:
            # the pool was never near full, so requests that waited before its use was printed
            # did not wait for KV space either
            waiting_room, waiting_unknown = waiting_room + waiting_unknown, 0
        counts = copied(Counts, self, waiting_room=waiting_room, waiting_unknown=waiting_unknown)
        diagnosis = diagnose(counts)
        if diagnosis.verdict == "kv-bound":
            evidence = self.preempt_lines + self.full_lines
        elif diagnosis.verdict == "compute-bound":
            evidence = self.room_lines
        else:
            evidence = [Evidence(self.peak.line, self.peak.text)] if self.peak else []
        hit, hit_source = self.hit_rate()
        return copied(
            Observation,
            self,
            kv_usage_max=self.kv_max,
            hit_rate=hit,
            hit_rate_source=hit_source,
            external_hit_rate=self.external_hit,
            diagnosis=diagnosis,
            evidence=tuple(evidence[: 2 * EVIDENCE_KEPT]),
            timeline=tuple(self.timeline.points()),
            skipped_lines=tuple(self.skipped_lines),
        )
