"""A timeline whose size is bounded by the points kept, not by the length of the log.

Samples are gathered in groups of `stride`; when the kept points reach twice the limit, pairs are
merged and the stride doubles, so a day-long log and a minute-long one both end with between
`limit` and `2 * limit` points, each covering an equal number of samples.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvtier.payload import Amount, Count, Positive, Share


@dataclass(frozen=True, slots=True)
class Point:
    """Consecutive samples merged: peaks for usage and queues, means for throughput.

    `hit_rate` is token-weighted where the samples carry prefill token counts, else the last rate
    the engine printed. `line` is the first sample's log line.
    """

    time: str | None
    kv_usage: Share | None
    running: Count | None
    queued: Count | None
    prompt_tps: Amount | None
    gen_tps: Amount | None
    hit_rate: Share | None
    samples: Positive
    line: Count | None


def _peak(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def _peak_int(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


class _Group:
    __slots__ = (
        "cached",
        "computed",
        "gen",
        "gen_n",
        "kv",
        "line",
        "printed_hit",
        "prompt",
        "prompt_n",
        "queued",
        "running",
        "samples",
        "time",
    )

    def __init__(self, time: str | None, line: int | None) -> None:
        self.time = time
        self.line = line
        self.samples = 0
        self.kv: float | None = None
        self.running: float | None = None
        self.queued: float | None = None
        self.prompt = self.gen = 0.0
        self.prompt_n = self.gen_n = 0
        self.cached = self.computed = 0
        self.printed_hit: float | None = None

    def add(self, fields: dict[str, float]) -> None:
        get = fields.get
        self.samples += 1
        # peaks, written out: this runs once per sample
        if (kv := get("kv_usage")) is not None and (self.kv is None or kv > self.kv):
            self.kv = kv
        if (running := get("running")) is not None and (
            self.running is None or running > self.running
        ):
            self.running = running
        if (queued := get("queued")) is not None and (self.queued is None or queued > self.queued):
            self.queued = queued
        if (prompt := get("prompt_tps")) is not None:
            self.prompt += prompt
            self.prompt_n += 1
        if (gen := get("gen_tps")) is not None:
            self.gen += gen
            self.gen_n += 1
        if (computed := get("new_tokens")) is not None:
            self.computed += int(computed)
            self.cached += int(get("cached_tokens", 0))
        if (hit := get("hit_rate")) is not None:
            self.printed_hit = hit

    def point(self) -> Point:
        looked_up = self.cached + self.computed
        hit = self.cached / looked_up if looked_up else self.printed_hit
        return Point(
            time=self.time,
            kv_usage=self.kv,
            running=None if self.running is None else int(self.running),
            queued=None if self.queued is None else int(self.queued),
            prompt_tps=self.prompt / self.prompt_n if self.prompt_n else None,
            gen_tps=self.gen / self.gen_n if self.gen_n else None,
            hit_rate=hit,
            samples=self.samples,
            line=self.line,
        )


def merge(a: Point, b: Point) -> Point:
    """Two neighbouring points as one (throughputs weighted by their samples)."""

    def mean(x: float | None, y: float | None) -> float | None:
        if x is None or y is None:
            return x if y is None else y
        return (x * a.samples + y * b.samples) / (a.samples + b.samples)

    return Point(
        time=a.time,
        kv_usage=_peak(a.kv_usage, b.kv_usage),
        running=_peak_int(a.running, b.running),
        queued=_peak_int(a.queued, b.queued),
        prompt_tps=mean(a.prompt_tps, b.prompt_tps),
        gen_tps=mean(a.gen_tps, b.gen_tps),
        hit_rate=b.hit_rate if b.hit_rate is not None else a.hit_rate,
        samples=a.samples + b.samples,
        line=a.line,
    )


class Timeline:
    def __init__(self, limit: int = 120) -> None:
        self.limit = max(1, limit)
        self.stride = 1
        self._points: list[Point] = []
        self._group: _Group | None = None

    def add(self, fields: dict[str, float], time: str | None, line: int | None) -> None:
        """One sample's engine-neutral fields (see the engines' serving modules)."""
        group = self._group
        if group is None:
            group = self._group = _Group(time, line)
        group.add(fields)
        if group.samples >= self.stride:
            self._points.append(group.point())
            self._group = None
            if len(self._points) >= 2 * self.limit:
                pts = self._points
                self._points = [merge(pts[i], pts[i + 1]) for i in range(0, len(pts) - 1, 2)]
                self.stride *= 2

    def note_hit(self, rate: float) -> None:
        """A hit rate printed on a line of its own, for the latest sample."""
        if self._group is not None:
            self._group.printed_hit = rate
        elif self._points:
            self._points[-1] = replace(self._points[-1], hit_rate=rate)

    def points(self) -> list[Point]:
        return self._points + ([self._group.point()] if self._group else [])
