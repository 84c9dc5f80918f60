"""Serving logs read as a stream: chunks in, readings out, one unfinished line held at a time.

Each chunk of complete lines is searched, as bytes, for every engine's titles at once by one
pattern, so lines without a title are never split out or decoded. The commonest messages
(SGLang's decode and prefill lines, vLLM's V1 stats line) are read by that same search where
they end their line behind a plain prefix; every other line with a title is decoded and read by
`read_line`, the general reader, which gives the same readings. ANSI colours, CR characters and
prefixes (docker, journalctl, rank tags) are handled as in startup logs. A message's time is the
last timestamp printed before it (vLLM's own, behind a docker timestamp); identical messages
printed by several ranks at one time count once.
"""

from __future__ import annotations

import os
import re
import time as clock
from collections.abc import Callable
from typing import Any, BinaryIO

from kvtier.engines.sglang import serving as sglang
from kvtier.engines.vllm import serving as vllm
from kvtier.logs.lines import rank_of
from kvtier.observe.observer import Observer

CHUNK = 1 << 20
# The longest line read: an engine's serving line is a few hundred bytes; a longer one (a prompt
# logged whole, a binary file) is skipped and counted, never held.
MAX_LINE = 1 << 20
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


# A data-parallel rank's tag ("DP1" in SGLang's "[... DP1 TP4]", vLLM's "EngineCore_DP1"): each DP
# rank runs its own scheduler, so its lines are its own; TP, CP, PP and EP ranks print copies.
_DP_TAG = re.compile(r"(?<![A-Za-z0-9])DP(\d{1,4})(?![A-Za-z0-9])")


def _rank(head: str) -> str | None:
    """The rank a message's prefix names, its data-parallel rank first ("DP1 TP4")."""
    rank = rank_of(head, len(head))
    dp = _DP_TAG.search(head[:160])
    if dp is None:
        return rank
    return f"DP{dp.group(1)}" + (f" {rank}" if rank else "")


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
            found = self.known[head] = (_when(head[-120:]), _rank(head))
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


# What a fast shape's reading needs: engine, kind, fields builder, and its groups' slice.
_Shape = tuple[str, str, Callable[[tuple[Any, ...]], dict[str, float]], int, int]


def _scan_pattern() -> tuple[re.Pattern[bytes], dict[str, _Shape]]:
    """One bytes pattern for a chunk: the engines' fast shapes, each where its message ends the
    line (trailing blanks aside, as `str.rstrip` leaves it), then every title `_FILTER` knows.

    A shape's groups are unnamed here (shapes share names); an empty group closes each shape, so
    a match's `lastgroup` names the shape that matched."""
    branches: list[str] = []
    shapes: dict[str, _Shape] = {}
    group = 0
    for engine, grammar in (("sglang", sglang), ("vllm", vllm)):
        for kind, source, build in grammar.FAST:
            plain = re.sub(r"\(\?P<\w+>", "(", source)
            name = f"shape{len(shapes)}"
            branches.append(f"{plain}(?<! )(?=[ \t]*$)(?P<{name}>)")
            count = re.compile(plain).groups
            shapes[name] = (engine, kind, build, group, group + count)
            group += count + 1
    titles = [re.escape(m) for m in sglang.MARKERS + vllm.MARKERS]
    return re.compile("|".join(branches + titles).encode("ascii"), re.MULTILINE), shapes


_SCAN, _SHAPES = _scan_pattern()
_DIRTY_BYTES = re.compile(b"[\x1b\r\x00]")
_HEADS_KEPT = 4096
# SGLang's own prefix, "[2026-03-01 10:00:01 TP0] ": its time and rank are what `_when` and
# `rank_of` read from it (the one timestamp; the one rank tag, or none)
_SGLANG_HEAD = re.compile(rb"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?: (TP\d{1,4}))?\] ")


class LogReader:
    """Feeds a byte stream to an observer, chunk by chunk, keeping only the unfinished line."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer
        self.lines = 0
        self._rest: list[bytes] = []
        self._held = 0  # bytes in _rest
        self._dropping = False  # inside a line over MAX_LINE, skipped to its end
        self.reopened = 0  # times a followed file was truncated or rotated
        self._prefixes = _Prefixes()
        # a fast message's prefix, as bytes: its text, time and rank, or () when it is not plain
        # ASCII or holds what `read_line` would clean
        self._heads: dict[bytes, tuple[str, str | None, str | None] | tuple[()]] = {}

    def feed(self, data: bytes) -> None:
        if self._dropping:
            end = data.find(b"\n")
            if end < 0:
                return
            self._dropping = False
            self.lines += 1
            data = data[end + 1 :]
        cut = data.rfind(b"\n") + 1
        if not cut:
            if data:
                self._hold(data)
            return
        if self._rest:
            self._rest.append(data[:cut])
            block = b"".join(self._rest)
            self._rest = []
        else:
            block = data[:cut] if cut < len(data) else data
        self._held = 0
        if cut < len(data):
            self._hold(data[cut:])
        self._read(block)
        self.lines += block.count(b"\n")

    def _hold(self, part: bytes) -> None:
        """Keep the unfinished line's bytes, or drop the line once it runs past MAX_LINE."""
        self._rest.append(part)
        self._held += len(part)
        if self._held > MAX_LINE:
            self._rest, self._held, self._dropping = [], 0, True
            self.observer.skip(self.lines + 1, f"a line over {MAX_LINE:,} bytes")

    def _head(self, head: bytes) -> tuple[str, str | None, str | None] | tuple[()]:
        if len(self._heads) >= _HEADS_KEPT:
            self._heads.clear()
        found: tuple[str, str | None, str | None] | tuple[()] = ()
        sglang_head = _SGLANG_HEAD.fullmatch(head)
        if sglang_head is not None:
            when, rank = sglang_head.groups()
            tag = None if rank is None else rank.decode("ascii")
            found = (head.decode("ascii"), when.decode("ascii"), tag)
        elif head.isascii() and _DIRTY_BYTES.search(head) is None:
            text = head.decode("ascii")
            found = (text, *self._prefixes.read(text))
        self._heads[head] = found
        return found

    def _read(self, block: bytes) -> None:
        """The messages of `block`, whole lines (the last one may lack its newline)."""
        observer, shapes = self.observer, _SHAPES
        duplicate, add, head_of = observer.duplicate, observer.add, self._heads.get
        rfind, count = block.rfind, block.count
        number = self.lines + 1  # the number of the line starting at `counted`
        counted = done = 0
        for match in _SCAN.finditer(block):
            at = match.start()
            if at < done:
                continue  # a line already read whole
            start = rfind(b"\n", 0, at) + 1
            shape = match.lastgroup
            if shape is not None:
                # a fast shape ends its line: the next match is on a later line
                head = block[start:at]
                known = head_of(head)
                if known is None:
                    known = self._head(head)
                if known:
                    text, when, rank = known
                    message = match.group().decode("ascii")
                    if duplicate(when, message, rank):
                        continue
                    number += count(b"\n", counted, start)
                    counted = start
                    engine, kind, build, first, last = shapes[shape]
                    fields = build(match.groups()[first:last])
                    add(engine, kind, fields, line=number, text=text + message, time=when)
                    continue
            done = block.find(b"\n", at)
            if done < 0:
                done = len(block)
            number += count(b"\n", counted, start)
            counted = start
            line = block[start:done].decode("utf-8", errors="replace")
            found = _FILTER.search(line)
            if found is not None:
                read_line(observer, number, line, self._prefixes, found)

    def close(self) -> None:
        if self._dropping:
            self._dropping = False
            self.lines += 1
        if self._rest:
            rest = b"".join(self._rest)
            self._rest = []
            self._read(rest)
            self.lines += 1


def read_stream(
    stream: BinaryIO,
    observer: Observer,
    *,
    follow: bool = False,
    idle_exit: float | None = None,
    poll: float = 0.5,
    stop: Callable[[], bool] = lambda: False,
    path: str | None = None,
) -> LogReader:
    """Read `stream` to its end; with `follow`, keep reading what is appended until `idle_exit`
    seconds pass with nothing new (or forever, until interrupted).

    Following the file at `path` survives what `tail -F` survives: a file truncated in place is
    read again from its start, and a file rotated away (a new file at `path`) is opened anew;
    each is counted in `reader.reopened`."""
    reader = LogReader(observer)
    idle_since = clock.monotonic()
    try:
        while not stop():
            data = stream.read(CHUNK)
            if data:
                reader.feed(data)
                idle_since = clock.monotonic()
                continue
            if not follow:
                break
            if idle_exit is not None and clock.monotonic() - idle_since >= idle_exit:
                break
            if path is not None:
                stream = _reopened(stream, path, reader)
            clock.sleep(poll)
    finally:
        reader.close()
    return reader


def _reopened(stream: BinaryIO, path: str, reader: LogReader) -> BinaryIO:
    """`stream`, or the file now at `path` when it was rotated; rewound when truncated."""
    try:
        now = os.stat(path)
        held = os.fstat(stream.fileno())
    except OSError:
        return stream  # rotated away and not yet created again: wait for it
    if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
        try:
            fresh = open(path, "rb")  # noqa: SIM115 (closed when rotated again or by the caller)
        except OSError:
            return stream
        reader.reopened += 1
        reader.close()
        stream.close()
        return fresh
    if held.st_size < stream.tell():
        stream.seek(0)
        reader.reopened += 1
        reader.close()
    return stream
