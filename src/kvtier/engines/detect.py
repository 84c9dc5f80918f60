"""Which engine wrote a log, and the last server start in it, parsed."""

from __future__ import annotations

import re
from dataclasses import dataclass

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


def detect_engine(lines: list[LogLine]) -> tuple[str | None, dict[str, LogLine]]:
    """The engine whose lines the log holds (None when neither), and a sample line of each.

    When both engines' lines are present, the engine of the last such line wrote the last start.
    """
    sample: dict[str, LogLine] = {}
    last: dict[str, int] = {}
    for index, line in enumerate(lines):
        for engine, signs in _SIGN_PATTERNS.items():
            if signs.search(line.text):
                sample.setdefault(engine, line)
                last[engine] = index
    if not last:
        return None, sample
    return max(last, key=lambda e: last[e]), sample


def _mixed_note(lines: list[LogLine], detected: str, sample: dict[str, LogLine]) -> str:
    """Say that the log mixes both engines and which start is explained."""
    other = next(e for e in ENGINES if e != detected)
    first = sample[other]
    own = [x for x in lines if _SIGN_PATTERNS[detected].search(x.text)]
    return (
        f"the log holds lines of both engines ({_NAMES[other]} line {first.number}: "
        f"{first.text.strip()[:80]!r}; {_NAMES[detected]} line {own[-1].number}: "
        f"{own[-1].text.strip()[:80]!r}); the last startup, {_NAMES[detected]}'s, is explained"
    )


def parse_log(text: str, engine: str | None = None) -> ParsedLog:
    """Parse the last server start in `text`; refuse a log of the other engine than `engine`."""
    lines = read_lines(text)
    detected, sample = detect_engine(lines)
    if detected is None:
        raise KvtierError(
            "no SGLang or vLLM startup lines found in the log "
            "(expected lines such as 'Load weight end.' / 'KV Cache is allocated.' from SGLang, "
            "or 'Available KV cache memory' / 'GPU KV cache size' from vLLM)"
        )
    if engine is not None and engine != detected and engine in sample:
        detected = engine  # a mixed log: the user named the engine to explain
    if engine is not None and engine != detected:
        line = sample[detected]
        named = f"{_ARTICLES[detected]} {_NAMES[detected]}"
        raise KvtierError(
            f"this is {named} log, not {_NAMES.get(engine, engine)} "
            f"(line {line.number}: {line.text.strip()[:100]!r}); "
            f"drop --engine or pass --engine {detected}"
        )
    module = sglang if detected == "sglang" else vllm
    runs = split_startups(
        lines,
        starts_run=lambda t: any(m in t for m in module.START_MARKERS),
        reports_memory=lambda t: any(m in t for m in module.MEMORY_MARKERS),
    )
    notes: list[str] = []
    if len(sample) > 1:
        notes.append(_mixed_note(lines, detected, sample))
    chosen = runs[-1]
    if len(runs) > 1:
        has_memory = [any(any(m in x.text for m in module.MEMORY_MARKERS) for x in r) for r in runs]
        opened = [any(any(m in x.text for m in module.START_MARKERS) for x in r) for r in runs]
        if not has_memory[-1] and len(runs) == 2 and not opened[0]:
            # the start's own arguments, pasted after its memory lines: one start, not two
            chosen = runs[0] + runs[1]
            first, last = runs[1][0].number, runs[1][-1].number
            span = f"line {first}" if first == last else f"lines {first}-{last}"
            notes.append(
                f"{span} (the start's arguments) follow its memory lines as pasted; "
                "they are read as the same start"
            )
        elif not has_memory[-1]:
            chosen = runs[-2]
            notes.append(
                f"the log holds {len(runs)} server starts; the last one (from line "
                f"{runs[-1][0].number}) printed no memory lines, so the one before it "
                f"(from line {chosen[0].number}) is explained"
            )
        else:
            notes.append(
                f"the log holds {len(runs)} server starts; the last one "
                f"(from line {chosen[0].number}) is explained"
            )
    startup = sglang.parse_sglang(chosen) if detected == "sglang" else vllm.parse_vllm(chosen)
    return ParsedLog(detected, startup, chosen[0].number, tuple(notes))
