"""`kvtier trace` output: a short terminal summary, or `--json`."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvtier.payload import INLINE, copied
from kvtier.report.json_text import emit
from kvtier.sim.from_requests import TraceBuild, TraceCounts
from kvtier.sim.request_sources import RequestSource

_SOURCES = {"vllm": "vLLM request log", "sglang": "SGLang request log", "openai": "OpenAI dump"}


@dataclass(frozen=True, slots=True)
class TracePayload:
    """What `kvtier trace --json` prints: the source read, the trace written and its reuse."""

    input: str
    format: str
    output: str | None
    requests: int
    lines: int
    skipped_lines: int
    left_out: int
    counts: TraceCounts = field(metadata=INLINE)
    reuse: float
    duration_s: float
    arrival_from: dict[str, int]
    output_from: dict[str, int]


def trace_payload(
    build: TraceBuild, source: RequestSource, input_path: str, output: str | None
) -> TracePayload:
    """The build's own counts, with where they were read from and what was written."""
    return copied(
        TracePayload,
        build,
        input=input_path,
        format=source.format,
        output=output,
        requests=len(build.requests),
        lines=source.lines,
        skipped_lines=source.skipped,
        left_out=source.left_out,
        reuse=round(build.counts.reuse, 6),
        duration_s=round(build.duration_s, 3),
    )


def trace_lines(
    build: TraceBuild, source: RequestSource, input_path: str, output: str | None
) -> list[str]:
    kind = _SOURCES.get(source.format, source.format)
    counts = build.counts
    lines = [
        f"{kind} {input_path}: {len(build.requests):,} requests from {source.lines:,} lines "
        f"({source.skipped:,} skipped: no request line; {source.left_out:,} requests left out: "
        "unfinished or nothing to hash)",
        f"prompts: {counts.input_tokens:,} tokens in {counts.blocks:,} blocks of "
        f"{counts.block_tokens} ({counts.unique_blocks:,} distinct); outputs: "
        f"{counts.output_tokens:,} tokens "
        f"({_counts(build.output_from)})",
        f"arrivals over {build.duration_s:,.3f} s ({_counts(build.arrival_from)})",
        f"reuse the prompts imply: {counts.reuse:.2%} of prompt tokens "
        f"({counts.reused_tokens:,} of {counts.input_tokens:,}), as `kvtier simulate "
        "--unbounded` counts it",
    ]
    if output is None:
        lines.append("nothing written (give -o FILE to write the trace)")
    else:
        lines.append(f"wrote {len(build.requests):,} requests to {output}")
    return lines


def _counts(by_source: dict[str, int]) -> str:
    return ", ".join(f"{source}: {n:,}" for source, n in sorted(by_source.items()))


def print_trace(
    build: TraceBuild,
    source: RequestSource,
    input_path: str,
    output: str | None,
    as_json: bool,
) -> None:
    if as_json:
        emit(trace_payload(build, source, input_path, output))
    else:
        print("\n".join(trace_lines(build, source, input_path, output)))
