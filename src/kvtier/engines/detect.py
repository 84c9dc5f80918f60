"""Which engine wrote a log, and one server start in it (the last by default), parsed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kvtier.engines.sglang import log as sglang
from kvtier.engines.vllm import log as vllm
from kvtier.errors import KvtierError
from kvtier.logs.lines import LogLine, read_lines, split_startups

ENGINES = ("sglang", "vllm")
_NAMES = {"sglang": "SGLang", "vllm": "vLLM"}
_ARTICLES = {"sglang": "an", "vllm": "a"}
# Lines only one engine prints; each hit is one vote.
_SIGNS = {
    "sglang": (
        "server_args=ServerArgs",
        "Load weight end.",
        "Load weight begin.",
        "KV Cache is allocated.",
        "Memory pool end.",
        "max_total_num_tokens=",
        "Using KV cache dtype",
        "sglang.launch_server",
        "leave no GPU memory for the KV cache",
        "Please try to increase --mem-fraction-static",
    ),
    "vllm": (
        "non-default args:",
        "GPU KV cache size:",
        "Available KV cache memory",
        "Model loading took",
        "GPU blocks:",
        "CUDA blocks:",
        "Memory profiling results:",
        "KV cache is needed, which is larger than",
        "number of tokens that can be stored in KV cache",
        "on startup is less than desired GPU memory",
        "gpu_memory_utilization (",
        "reserved for KV Cache is",
        "Maximum concurrency for",
        "vllm serve",
        "worker init memory snapshot",
    ),
}

_SIGN_PATTERNS = {e: re.compile("|".join(map(re.escape, signs))) for e, signs in _SIGNS.items()}


@dataclass(frozen=True, slots=True)
class ParsedLog:
    """One server start read from a log, with notes on how it was chosen."""

    engine: str
    startup: sglang.SGLangStartup | vllm.VllmStartup
    first_line: int
    notes: tuple[str, ...]
    starts: tuple[LineSpan, ...] = ()  # every start's lines
    index: int = 0  # the start explained, 0-based


@dataclass(frozen=True, slots=True)
class DetectedLog:
    """A log cut into lines, the engine whose lines it holds (None when neither), and the first
    and the last line of each engine present (lines only one engine prints)."""

    lines: list[LogLine]
    engine: str | None
    first: dict[str, LogLine]
    last: dict[str, LogLine]


@dataclass(frozen=True, slots=True)
class LineSpan:
    """The first and last line (1-based) of one server start in a log."""

    first_line: int
    last_line: int


def detect_log(text: str) -> DetectedLog:
    """`text` cut into lines and its engine detected, once for every reader after.

    When both engines' lines are present, the engine of the last such line wrote the last start.
    """
    lines = read_lines(text)
    first: dict[str, LogLine] = {}
    last: dict[str, LogLine] = {}
    for line in lines:
        for engine, signs in _SIGN_PATTERNS.items():
            if signs.search(line.text):
                first.setdefault(engine, line)
                last[engine] = line
    detected = max(last, key=lambda e: last[e].number) if last else None
    return DetectedLog(lines, detected, first, last)


def _mixed_note(log: DetectedLog, detected: str) -> str:
    """Say that the log mixes both engines and which start is explained."""
    other = next(e for e in ENGINES if e != detected)
    first, own = log.first[other], log.last[detected]
    return (
        f"the log holds lines of both engines ({_NAMES[other]} line {first.number}: "
        f"{first.text.strip()[:80]!r}; {_NAMES[detected]} line {own.number}: "
        f"{own.text.strip()[:80]!r}); the last startup, {_NAMES[detected]}'s, is explained"
    )


def log_engine(log: DetectedLog, engine: str | None = None) -> str | None:
    """The engine whose start `parse_log` reads from `log`; None where it refuses the log
    (neither engine's lines, or none of `engine`'s)."""
    if engine is None:
        return log.engine
    return engine if engine in log.first else None


def parse_log(
    text: str | DetectedLog,
    engine: str | None = None,
    startup: int | None = None,
    version: str | None = None,
) -> ParsedLog:
    """Parse one server start in `text` (or in a log already detected): `startup` (1-based),
    else the last that printed memory lines; refuse a log of the other engine than `engine`,
    and one stating a release kvtier does not know unless `version` (the engine's version flag)
    is given to apply instead."""
    log = text if isinstance(text, DetectedLog) else detect_log(text)
    detected, first = log.engine, log.first
    if detected is None:
        raise KvtierError(
            "no SGLang or vLLM startup lines found in the log "
            "(expected lines such as 'Load weight end.' / 'KV Cache is allocated.' from SGLang, "
            "or 'Available KV cache memory' / 'GPU KV cache size' from vLLM)"
        )
    if engine is not None and engine != detected and engine in first:
        detected = engine  # a mixed log: the user named the engine to explain
    if engine is not None and engine != detected:
        line = first[detected]
        named = f"{_ARTICLES[detected]} {_NAMES[detected]}"
        raise KvtierError(
            f"this is {named} log, not {_NAMES.get(engine, engine)} "
            f"(line {line.number}: {line.text.strip()[:100]!r}); "
            f"drop --engine or pass --engine {detected}"
        )
    module = sglang if detected == "sglang" else vllm
    runs = split_startups(
        log.lines,
        starts_run=lambda t: any(m in t for m in module.START_MARKERS),
        reports_memory=lambda t: any(m in t for m in module.MEMORY_MARKERS),
        restarts_run=lambda t: any(m in t for m in module.RESTART_MARKERS),
        reports_count=lambda t: any(m in t for m in module.COUNT_MARKERS),
    )
    notes: list[str] = []
    if len(first) > 1:
        notes.append(_mixed_note(log, detected))
    starts, memory = _merge_pasted_arguments(runs, module, notes)
    index = _choose(starts, memory, startup, notes)
    chosen = starts[index]
    parsed: sglang.SGLangStartup | vllm.VllmStartup = (
        sglang.parse_sglang(chosen)
        if detected == "sglang"
        else vllm.known_release(vllm.parse_vllm(chosen), version)
    )
    spans = tuple(LineSpan(run[0].number, run[-1].number) for run in starts)
    return ParsedLog(detected, parsed, chosen[0].number, tuple(notes), spans, index)


def _has(run: list[LogLine], markers: tuple[str, ...]) -> bool:
    return any(any(m in x.text for m in markers) for x in run)


def _merge_pasted_arguments(
    runs: list[list[LogLine]], module: Any, notes: list[str]
) -> tuple[list[list[LogLine]], list[bool]]:
    """The starts, with a start's own arguments pasted after its memory lines read as that
    start; and whether each printed a memory line."""
    memory = [_has(r, module.MEMORY_MARKERS) for r in runs]
    if len(runs) == 2 and not memory[1] and not _has(runs[0], module.START_MARKERS):
        first, last = runs[1][0].number, runs[1][-1].number
        span = f"line {first}" if first == last else f"lines {first}-{last}"
        notes.append(
            f"{span} (the start's arguments) follow its memory lines as pasted; "
            "they are read as the same start"
        )
        return [runs[0] + runs[1]], [True]
    return runs, memory


def _choose(
    starts: list[list[LogLine]], memory: list[bool], startup: int | None, notes: list[str]
) -> int:
    """The start explained (0-based): `startup` (1-based) when given, else the last one that
    printed a memory line; a note lists every start's lines when there are several."""
    count = len(starts)
    if startup is not None and not 1 <= startup <= count:
        spans = _spans(starts, memory)
        raise KvtierError(
            f"--startup {startup}: the log holds {count} server start"
            f"{'s' if count > 1 else ''} ({spans}); pass 1 to {count}"
        )
    if startup is not None:
        index = startup - 1
    elif memory[-1] or count == 1:
        index = count - 1
    else:
        index = max((i for i in range(count) if memory[i]), default=count - 1)
    if count > 1:
        first, last = starts[index][0].number, starts[index][-1].number
        why = "" if startup is not None else _default_reason(memory, index)
        notes.append(
            f"the log holds {count} server starts ({_spans(starts, memory)}); start "
            f"{index + 1} (lines {first}-{last}) is explained{why}; --startup K picks another"
        )
    return index


def _default_reason(memory: list[bool], index: int) -> str:
    if index == len(memory) - 1:
        return ", the last"
    return f", the last that printed memory lines (start {len(memory)} printed none)"


def _spans(starts: list[list[LogLine]], memory: list[bool]) -> str:
    return "; ".join(
        f"{i + 1}: lines {run[0].number}-{run[-1].number}" + ("" if has else ", no memory lines")
        for i, (run, has) in enumerate(zip(starts, memory, strict=True))
    )
