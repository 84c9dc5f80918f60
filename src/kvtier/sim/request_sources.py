"""Where logged requests come from: a vLLM or SGLang server log, or an OpenAI request dump.

A file is read line by line (a line may be long: a prompt's token ids), never whole. With
`auto`, a file whose first line is a JSON request body is a dump; any other file is a log, read
by both engines' request grammars at once (each line claimed by at most one). Lines no grammar
claims are counted as skipped; a line a grammar claims but cannot read stops the run, naming it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from kvtier.engines.sglang.requests import SglangRequests
from kvtier.engines.vllm.requests import VllmRequests
from kvtier.errors import KvtierError
from kvtier.logs.lines import clean_line
from kvtier.logs.requests import LoggedRequest, RequestGrammar
from kvtier.sim.block_hash import PromptHasher
from kvtier.sim.openai_dump import read_dump
from kvtier.sim.tokenizer import LocalTokenizer

FORMATS = ("auto", "vllm", "sglang", "openai")
MAX_LINE_BYTES = 256 << 20  # one line: a 10M-token prompt's ids, printed
_DUMP_KEYS = ("prompt", "messages", "body")
_PROGRESS_EVERY = 1 << 12


@dataclass(frozen=True, slots=True)
class RequestSource:
    """What reading the input found: its format, lines read, lines skipped (no request line),
    and requests read but left out (never finished, or nothing to hash)."""

    format: str
    lines: int
    skipped: int
    left_out: int


def read_requests(
    stream: BinaryIO,
    fmt: str,
    hasher: PromptHasher,
    tokenizer: LocalTokenizer | None = None,
    rate: float | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[LoggedRequest], RequestSource]:
    """Every complete request of `stream` (format `fmt`, one of FORMATS), its prompt hashed by
    `hasher`, and what was read."""
    if fmt not in FORMATS:
        raise KvtierError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    lines = _lines(stream, progress)
    head: list[tuple[int, str]] = []
    for item in lines:
        head.append(item)
        if item[1]:
            break
    if not head or not head[-1][1]:
        raise KvtierError("the input holds no lines")
    if fmt == "auto":
        fmt = "openai" if _is_dump(head[-1][1]) else "log"
    lines = _chain(head, lines)
    if fmt == "openai":
        counted = _Counted(lines)
        requests = list(read_dump(counted, hasher, tokenizer, rate))
        return requests, RequestSource("openai", counted.n, counted.blank, 0)
    grammars: list[RequestGrammar] = []
    if fmt in ("log", "vllm"):
        grammars.append(VllmRequests(hasher))
    if fmt in ("log", "sglang"):
        grammars.append(SglangRequests(hasher))
    n = skipped = 0
    for number, text in lines:
        n = number
        if text and not any(g.feed(number, text) for g in grammars):
            skipped += 1
    found = [(g, list(g.requests())) for g in grammars]
    found = [(g, r) for g, r in found if r or g.left_out()]
    if not found:
        raise KvtierError(
            "no request lines in the log: start vLLM with --enable-log-requests (and "
            "VLLM_LOGGING_LEVEL=DEBUG from 0.12 on), SGLang with --log-requests "
            "--log-requests-level 3"
        )
    if len(found) > 1:
        raise KvtierError("the log holds both vLLM and SGLang request lines: give --format")
    grammar, requests = found[0]
    return requests, RequestSource(grammar.engine, n, skipped, grammar.left_out())


def _is_dump(text: str) -> bool:
    if not text.lstrip().startswith("{"):
        return False
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and any(k in value for k in _DUMP_KEYS)


def _lines(stream: BinaryIO, progress: Callable[[int], None] | None) -> Iterator[tuple[int, str]]:
    """`(number, text)` of every line, cleaned; blank lines as ''."""
    read = 0
    number = 0
    while raw := stream.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(raw) > MAX_LINE_BYTES:
            raise KvtierError(f"line {number}: over {MAX_LINE_BYTES:,} bytes")
        read += len(raw)
        if progress is not None and not number % _PROGRESS_EVERY:
            progress(read)
        if number == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark, as editors save
        yield number, clean_line(raw.decode("utf-8", errors="replace"))
    if progress is not None:
        progress(read)


def _chain(
    head: list[tuple[int, str]], rest: Iterator[tuple[int, str]]
) -> Iterator[tuple[int, str]]:
    yield from head
    yield from rest


class _Counted:
    """Lines passed through, counting them and the blank ones."""

    def __init__(self, lines: Iterator[tuple[int, str]]) -> None:
        self._lines = lines
        self.n = 0
        self.blank = 0

    def __iter__(self) -> Iterator[tuple[int, str]]:
        for number, text in self._lines:
            self.n = number
            if not text:
                self.blank += 1
            yield number, text
