"""Startup logs as users paste them, cut into numbered lines with the emitting rank.

Pasted logs arrive raw, behind `docker logs` / `docker compose` / journalctl prefixes, with ANSI
colours and CRLF line ends, and with tensor-parallel ranks interleaved. Patterns are searched
anywhere in a line, so prefixes need no stripping; only the rank tag is read from the prefix.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

_ANSI = re.compile(r"\x1b\[[0-?]{0,32}[ -/]{0,8}[@-~]|\x1b[@-_]")
# SGLang: "[2026-02-28 12:26:11 TP0]", "[... PP1 TP3]", "[... DP0 TP3 EP3]"; vLLM:
# "(Worker_TP1 pid=445)", "(Worker_PP0_TP1 pid=7)", "(VllmWorker rank=2 pid=9)".
_PARALLEL_TAG = re.compile(r"(?<![A-Za-z0-9])(PP|TP)(\d{1,4})(?![A-Za-z0-9])")
_WORKER_RANK = re.compile(r"\(\w{0,40}Worker\w{0,20} rank=(\d{1,4})\b")
# A rank tag must sit before the message; long lines are not scanned past this many characters.
_PREFIX_SPAN = 160


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of a log: its 1-based number in the file and its text without colours."""

    number: int
    text: str


def rank_of(text: str, message_at: int) -> str | None:
    """The rank tag printed before position `message_at` of `text` ("TP3", "PP1 TP3"), if any."""
    head = text[: min(message_at, _PREFIX_SPAN)]
    tags = dict(_PARALLEL_TAG.findall(head))
    if tags:
        return " ".join(f"{kind}{tags[kind]}" for kind in ("PP", "TP") if kind in tags)
    worker = _WORKER_RANK.search(head)
    return f"rank {worker.group(1)}" if worker else None


def rank_order(rank: str | None) -> tuple[int, ...]:
    """Sort key of a rank tag: its numbers in order (untagged lines first)."""
    return tuple(int(n) for n in re.findall(r"\d+", rank or ""))


def read_lines(text: str) -> list[LogLine]:
    """Split a pasted log into non-blank lines with ANSI colours and CR characters removed.

    Lines are numbered as an editor shows them (on LF only), so a progress bar redrawn with bare
    CRs stays one line.
    """
    lines = []
    for number, raw in enumerate(text.split("\n"), start=1):
        clean = clean_line(raw)
        if clean:
            lines.append(LogLine(number, clean))
    return lines


def clean_line(raw: str) -> str:
    """One line without ANSI colours, CR and NUL characters or trailing blanks."""
    clean = _ANSI.sub("", raw) if "\x1b" in raw else raw
    return clean.replace("\r", " ").replace("\x00", "").rstrip()


def split_startups(
    lines: list[LogLine],
    starts_run: Callable[[str], bool],
    reports_memory: Callable[[str], bool],
    restarts_run: Callable[[str], bool] = lambda _: False,
    reports_count: Callable[[str], bool] = lambda _: False,
) -> list[list[LogLine]]:
    """Cut a log holding several server starts into one list of lines per start.

    A line for which `starts_run` holds begins a new start only once the current one has printed
    a memory line, so the banner, the argument dump and the engine init of one start stay together.
    A line for which `restarts_run` holds (a weights-loaded line) begins one only once the current
    start has printed its count or refusal (`reports_count`): excerpts pasted back to back
    without their argument lines, while every rank's own load line stays in its start.
    """
    runs: list[list[LogLine]] = [[]]
    has_memory = has_count = False
    for line in lines:
        if (has_memory and starts_run(line.text)) or (has_count and restarts_run(line.text)):
            runs.append([])
            has_memory = has_count = False
        runs[-1].append(line)
        has_memory = has_memory or reports_memory(line.text)
        has_count = has_count or reports_count(line.text)
    return runs
