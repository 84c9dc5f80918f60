"""What a server logged about one request, in terms every engine's request grammar shares.

The engines' request grammars (`kvtier.engines.vllm.requests`, `kvtier.engines.sglang.requests`)
read their own lines into `LoggedRequest`s; `kvtier.sim.from_requests` turns them into a trace.
A prompt's token ids are hashed as soon as its line is read (by the `HashPrompt` the grammar is
given) and dropped: what is kept is its length and one digest per block, never the ids.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from kvtier.errors import KvtierError

MAX_TOKEN_ID = (1 << 63) - 1  # ids are hashed as signed 64-bit integers


@dataclass(frozen=True, slots=True)
class HashedPrompt:
    """A prompt as a trace keeps it: its token count and its blocks' chained digests."""

    tokens: int
    digests: tuple[bytes, ...]


HashPrompt = Callable[[Sequence[int]], HashedPrompt]


def token_ids(value: object, where: str, what: str) -> list[int] | None:
    """`value` as printed token ids (None stays None), or a `KvtierError` naming `what`."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise KvtierError(f"{where}: {what} is not a list of token ids")
    if value and (min(value) < 0 or max(value) > MAX_TOKEN_ID):
        raise KvtierError(f"{where}: {what} holds an id outside 0 .. 2^63 - 1")
    return value


@dataclass(frozen=True, slots=True)
class LoggedRequest:
    """One request as a log printed it.

    `arrival_s` is in seconds, on the Unix clock when `epoch` (a time the engine recorded as
    `time.time()`) or else on the log's printed clock (only differences matter); `arrival_from`
    says which printed figure gave it. `prompt` is the prompt as the engine tokenized it, hashed,
    or None when only its `text` was printed (then a local tokenizer counts it). `prompt_tokens`
    is the engine's own count where it printed one, to check the ids against. `output_len` is
    what was generated (`output_from` "generated") or the request's cap ("max_tokens").
    """

    line: int
    rid: str
    arrival_s: float
    arrival_from: str
    epoch: bool
    prompt: HashedPrompt | None
    text: str | None
    prompt_tokens: int | None
    output_len: int
    output_from: str


class RequestGrammar(Protocol):
    """An engine's request lines, read one line at a time; `requests()` after the last line."""

    engine: str

    def feed(self, number: int, text: str) -> bool:
        """Read one line; True when it was one of this engine's request lines."""

    def requests(self) -> Iterator[LoggedRequest]:
        """The requests read, complete ones only, in the order the log finished them."""

    def left_out(self) -> int:
        """Requests read but not kept: never finished, or nothing to hash (embeddings)."""


class Clock:
    """Log times without a year (vLLM's `MM-DD HH:MM:SS`) in seconds, a year added each time
    the month goes back (a log across New Year)."""

    def __init__(self) -> None:
        self._year = 2000  # a leap year: 02-29 is a valid date in some year
        self._last_month = 0

    def month_day(self, month: int, day: int, hms: tuple[int, int, int], where: str) -> float:
        if not (1 <= month <= 12 and 1 <= day <= 31):
            raise KvtierError(f"{where}: no date {month:02d}-{day:02d}")
        if month < self._last_month:
            self._year += 1
        self._last_month = month
        return stamp(self._year, month, day, hms, where)


def stamp(year: int, month: int, day: int, hms: tuple[int, int, int], where: str) -> float:
    """Seconds since 1970 of a printed UTC-less date and time (the log's own clock)."""
    hour, minute, second = hms
    if day > calendar.monthrange(year, month)[1] or hour > 23 or minute > 59 or second > 60:
        raise KvtierError(f"{where}: no time {year}-{month:02d}-{day:02d} {hour}:{minute}:{second}")
    return float(calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)))


ISO_TIME = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(\.\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
)


def iso_seconds(match: re.Match[str], where: str) -> float:
    """Seconds of an `ISO_TIME` match (`2026-02-28 12:26:11`, `...T12:26:11.123456`)."""
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    if not 1 <= month <= 12:
        raise KvtierError(f"{where}: no month {month}")
    fraction = float(match.group(7)) if match.group(7) else 0.0
    return stamp(year, month, day, (hour, minute, second), where) + fraction
