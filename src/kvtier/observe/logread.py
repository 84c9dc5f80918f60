"""Serving logs read as a stream: chunks in, readings out, one unfinished line held at a time.

Each line of a chunk is searched for every engine's titles at once; only the lines that hold one
are read. ANSI colours, CR characters and prefixes (docker, journalctl, rank tags) are handled as
in startup logs. A message's time is the last timestamp printed before it (vLLM's own, behind a
docker timestamp); identical messages printed by several ranks at one time count once.
"""

from __future__ import annotations

import re
import time as clock
from collections.abc import Callable
from typing import BinaryIO

from kvtier.engines.sglang import serving as sglang
from kvtier.engines.vllm import serving as vllm
from kvtier.logs.lines import rank_of
from kvtier.observe.observer import Observer

CHUNK = 1 << 20
_DIRTY = re.compile("[\x1b\r\x00]")
_ANSI = re.compile(r"\x1b\[[0-?]{0,32}[ -/]{0,8}[@-~]|\x1b[@-_]")
_TITLES = [m for m in sglang.MARKERS + vllm.MARKERS if m != sglang.UNTITLED]
_TITLED = re.compile("|".join(re.escape(m) for m in _TITLES))
# a line worth reading holds a title or the untitled decode line's first field
_FILTER = re.compile(f"{_TITLED.pattern}|{re.escape(sglang.UNTITLED)}")
_TIME = re.compile(
    r"(?:\d{4}-\d\d-\d\d[ T]|(?<!\d)\d\d-\d\d )?(?<![\d:])\d\d:\d\d:\d\d(?:[.,]\d{1,9})?"
)


def _when(prefix: str) -> str | None:
    """The last timestamp in a line's prefix (vLLM's own, behind a docker timestamp)."""
    found = None
    for found in _TIME.finditer(prefix):  # noqa: B007 (the last one is wanted)
        pass
    return None if found is None else found.group(0).strip()


_ENGINE_OF = {m: ("sglang", sglang) for m in sglang.MARKERS} | {
    m: ("vllm", vllm) for m in vllm.MARKERS
}
_PREFIXES_KEPT = 4096


class _Prefixes:
    """Time and rank of a message's prefix, remembered: a prefix repeats (one a second and rank)."""

    def __init__(self) -> None:
        self.known: dict[str, tuple[str | None, str | None]] = {}

    def read(self, head: str) -> tuple[str | None, str | None]:
        found = self.known.get(head)
        if found is None:
            if len(self.known) >= _PREFIXES_KEPT:
                self.known.clear()
            found = self.known[head] = (_when(head[-120:]), rank_of(head, len(head)))
        return found


def _read_message(
    observer: Observer, number: int, text: str, start: int, end: int, title: str, when: str | None
) -> None:
    engine, grammar = _ENGINE_OF[title]
    reading = grammar.read(text[start:end])
    if reading is None:
        observer.skip(number, text)
        return
    kind, fields = reading
    observer.add(engine, kind, fields, line=number, text=text, time=when)


def read_line(
    observer: Observer,
    number: int,
    text: str,
    prefixes: _Prefixes | None = None,
    first: re.Match[str] | None = None,
) -> None:
    """Every serving message of one line, into `observer` (`first`: the line's first title).

    A line holds one message, or several when lines were joined; a message another rank printed
    at the same time (the rest of its line identical) counts once."""
    if _DIRTY.search(text) is not None:
        text = _ANSI.sub("", text).replace("\r", " ").replace("\x00", "")
        first = None
    text = text.rstrip()
    prefixes = prefixes or _Prefixes()
    if first is None or first.group(0) == sglang.UNTITLED:
        first = _TITLED.search(text)
    if first is None:
        # the 2024 decode line has no title; its first field is in every batch line too
        start = text.find(sglang.UNTITLED)
        if start < 0 or "token usage: " not in text:
            return
        title = sglang.UNTITLED
    else:
        start, title = first.start(), first.group(0)
    head = text[:start]
    when, rank = prefixes.known.get(head) or prefixes.read(head)
    if observer.duplicate(when, text[start:], rank):
        return
    if first is None or _TITLED.search(text, first.end()) is None:
        engine, grammar = _ENGINE_OF[title]
        reading = grammar.read(text[start:])
        if reading is None:
            observer.skip(number, text)
        else:
            observer.add(engine, reading[0], reading[1], line=number, text=text, time=when)
        return
    found = [(m.start(), m.group(0)) for m in _TITLED.finditer(text)]
    for i, (start, title) in enumerate(found):
        end = found[i + 1][0] if i + 1 < len(found) else len(text)
        if i:
            when, rank = prefixes.read(text[found[i - 1][0] : start])
            if observer.duplicate(when, text[start:end], rank):
                continue
        _read_message(observer, number, text, start, end, title, when)


class LogReader:
    """Feeds a byte stream to an observer, line by line, keeping only the unfinished line."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer
        self.lines = 0
        self._rest = ""
        self._prefixes = _Prefixes()

    def feed(self, data: bytes) -> None:
        lines = (self._rest + data.decode("utf-8", errors="replace")).split("\n")
        self._rest = lines.pop()
        self._read(lines)

    def _read(self, lines: list[str]) -> None:
        number = self.lines + 1
        search = _FILTER.search
        for i, line in enumerate(lines):
            found = search(line)
            if found is not None:
                read_line(self.observer, number + i, line, self._prefixes, found)
        self.lines += len(lines)

    def close(self) -> None:
        if self._rest:
            rest, self._rest = self._rest, ""
            self._read([rest])


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
