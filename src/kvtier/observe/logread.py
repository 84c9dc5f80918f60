"""Serving logs read as a stream: chunks in, readings out, one line held at a time.

A chunk is searched for every engine's titles at once; only the lines that hold one are cut out
and read. ANSI colours, CR characters and prefixes (docker, journalctl, rank tags) are handled as
in startup logs. A message's time is the last timestamp printed before it (vLLM's own, behind a
docker timestamp), and identical messages printed by several ranks at one time count once.
"""

from __future__ import annotations

import datetime
import re
import time as clock
from collections.abc import Callable
from typing import BinaryIO

from kvtier.engines.sglang import serving as sglang
from kvtier.engines.vllm import serving as vllm
from kvtier.logs.lines import rank_of
from kvtier.observe.observer import Observer

CHUNK = 1 << 20
_ANSI = re.compile(r"\x1b\[[0-?]{0,32}[ -/]{0,8}[@-~]|\x1b[@-_]")
_ANY = re.compile("|".join(re.escape(m) for m in sglang.MARKERS + vllm.MARKERS))
_TIME = re.compile(
    r"(?:(\d{4})-(\d\d)-(\d\d)[ T]|(?<!\d)(\d\d)-(\d\d) )?"
    r"(?<![\d:])(\d\d):(\d\d):(\d\d)(?:[.,]\d{1,9})?"
)
_GRAMMARS = (("sglang", sglang), ("vllm", vllm))


def _when(prefix: str) -> tuple[str | None, float | None]:
    """The last timestamp in a line's prefix: its text and seconds (days counted where printed)."""
    found = None
    for found in _TIME.finditer(prefix):  # noqa: B007 (the last one is wanted)
        pass
    if found is None:
        return None, None
    year, month, day, month2, day2, h, m, s = found.groups()
    seconds = int(h) * 3600 + int(m) * 60 + int(s)
    try:
        if year:
            seconds += datetime.date(int(year), int(month), int(day)).toordinal() * 86400
        elif month2:
            # vLLM prints no year: a leap year accepts every date it prints
            seconds += datetime.date(2000, int(month2), int(day2)).toordinal() * 86400
    except ValueError:
        return found.group(0).strip(), None
    return found.group(0).strip(), float(seconds)


def read_line(observer: Observer, number: int, text: str) -> None:
    """Every serving message of one line, into `observer`."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    text = text.replace("\r", " ").rstrip()
    for engine, grammar in _GRAMMARS:
        starts = list(grammar.messages(text))
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else len(text)
            message = text[start:end]
            reading = grammar.read(message)
            if reading is None:
                observer.skip(number, text)
                continue
            kind, fields = reading
            head = text[:start] if i == 0 else text[starts[i - 1] : start]
            when, seconds = _when(head[-120:])
            if observer.duplicate(when, message, rank_of(text, start)):
                continue
            observer.add(engine, kind, fields, line=number, text=text, time=when, seconds=seconds)


class LogReader:
    """Feeds a byte stream to an observer, line by line, keeping only the unfinished line."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer
        self.lines = 0
        self._rest = ""

    def feed(self, data: bytes) -> None:
        chunk = self._rest + data.decode("utf-8", errors="replace")
        cut = chunk.rfind("\n")
        if cut < 0:
            self._rest = chunk
            return
        self._rest = chunk[cut + 1 :]
        self._read(chunk, cut)

    def _read(self, chunk: str, end: int) -> None:
        counted = 0  # position up to which newlines are counted into self.lines
        done = -1  # start of the last line read
        for match in _ANY.finditer(chunk, 0, end):
            start = chunk.rfind("\n", 0, match.start()) + 1
            if start == done:
                continue
            done = start
            stop = chunk.find("\n", match.start(), end + 1)
            self.lines += chunk.count("\n", counted, start)
            counted = start
            read_line(self.observer, self.lines + 1, chunk[start:stop].replace("\x00", ""))
        self.lines += chunk.count("\n", counted, end + 1)

    def close(self) -> None:
        if self._rest:
            rest, self._rest = self._rest + "\n", ""
            self._read(rest, len(rest) - 1)


def read_stream(
    stream: BinaryIO,
    observer: Observer,
    *,
    follow: bool = False,
    idle_exit: float | None = None,
    poll: float = 0.5,
    stop: Callable[[], bool] = lambda: False,
) -> LogReader:
    """Read `stream` to its end; with `follow`, keep reading what is appended until `idle_exit`
    seconds pass with nothing new (or forever, until interrupted)."""
    reader = LogReader(observer)
    idle_since = clock.monotonic()
    while not stop():
        data = stream.read(CHUNK)
        if data:
            reader.feed(data)
            idle_since = clock.monotonic()
            continue
        if not follow or (idle_exit is not None and clock.monotonic() - idle_since >= idle_exit):
            break
        clock.sleep(poll)
    reader.close()
    return reader
