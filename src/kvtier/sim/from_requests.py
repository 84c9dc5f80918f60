"""Logged requests to a Mooncake trace: chained block hashes, arrival order, lengths kept.

Each request's prompt was hashed block by block when its line was read (a prompt logged as text
is tokenized and hashed here); the requests are then put in arrival order, the first at
timestamp 0, and their digests numbered. The result replays through `kvtier simulate`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kvtier.errors import KvtierError
from kvtier.logs.requests import HashedPrompt, LoggedRequest, token_ids
from kvtier.sim.block_hash import BlockIds, PromptHasher
from kvtier.sim.trace import MAX_LENGTH, MAX_TIMESTAMP_MS, TraceRequest


@dataclass(frozen=True, slots=True)
class TraceCounts:
    """What a trace's prompts and outputs hold: tokens, blocks (all and distinct), and the prompt
    tokens an earlier request's prompt already had.

    `reuse` is the trace's ceiling as `kvtier simulate --unbounded` computes it: for each request
    the longest prefix of blocks an earlier request already had, each block at its real size,
    over all prompt tokens.
    """

    block_tokens: int
    input_tokens: int
    output_tokens: int
    blocks: int
    unique_blocks: int
    reused_tokens: int

    @property
    def reuse(self) -> float:
        return self.reused_tokens / self.input_tokens if self.input_tokens else 0.0


@dataclass(frozen=True, slots=True)
class TraceBuild:
    """A trace made from logged requests, with what was read and what the prompts share."""

    requests: tuple[TraceRequest, ...]
    counts: TraceCounts
    arrival_from: dict[str, int]
    output_from: dict[str, int]

    @property
    def duration_s(self) -> float:
        return self.requests[-1].arrival_s if self.requests else 0.0


@dataclass(frozen=True, slots=True)
class _Hashed:
    line: int
    arrival_s: float
    epoch: bool
    input_len: int
    output_len: int
    digests: tuple[bytes, ...]


def build_trace(
    requests: Iterable[LoggedRequest],
    hasher: PromptHasher,
    encode: Callable[[str], Sequence[int]] | None = None,
) -> TraceBuild:
    """Order `requests` (hashed by `hasher`); `encode` tokenizes a prompt logged as text only."""
    block_tokens = hasher.block_tokens
    hashed: list[_Hashed] = []
    arrival_from: Counter[str] = Counter()
    output_from: Counter[str] = Counter()
    first_line: dict[str, int] = {}
    for r in requests:
        _check_arrival(r)
        if r.rid is not None:
            if r.rid in first_line:
                raise KvtierError(
                    f"line {r.line}: request id {r.rid!r} was logged before, at line "
                    f"{first_line[r.rid]} (a log joined with itself, or two servers' logs in "
                    "one); give one server's log, once"
                )
            first_line[r.rid] = r.line
        prompt = _prompt(r, hasher, encode)
        hashed.append(
            _Hashed(r.line, r.arrival_s, r.epoch, prompt.tokens, r.output_len, prompt.digests)
        )
        arrival_from[r.arrival_from] += 1
        output_from[r.output_from] += 1
    if not hashed:
        raise KvtierError("no complete request in the input: nothing to make a trace of")
    clocks = {h.epoch for h in hashed}
    if len(clocks) > 1:
        odd = next(h for h in hashed if h.epoch != hashed[0].epoch)
        raise KvtierError(
            f"line {odd.line}: its arrival is on another clock than line {hashed[0].line}'s "
            "(a UTC or Unix time for one, the log's printed local time for the other)"
        )
    hashed.sort(key=lambda h: (h.arrival_s, h.line))
    start = hashed[0].arrival_s
    span_ms = (hashed[-1].arrival_s - start) * 1000
    if span_ms > MAX_TIMESTAMP_MS:
        raise KvtierError(
            f"lines {hashed[0].line} and {hashed[-1].line} arrive {span_ms / 1000:.3g} s apart: "
            f"more than a trace holds ({MAX_TIMESTAMP_MS:g} ms)"
        )
    numbering = BlockIds()
    out: list[TraceRequest] = []
    reused = 0
    for rid, h in enumerate(hashed):
        ids, seen = numbering.number(h.digests)
        reused += min(seen * block_tokens, h.input_len)
        out.append(TraceRequest(rid, h.arrival_s - start, h.input_len, h.output_len, ids))
    counts = TraceCounts(
        block_tokens,
        sum(h.input_len for h in hashed),
        sum(h.output_len for h in hashed),
        sum(len(r.blocks) for r in out),
        len(numbering),
        reused,
    )
    return TraceBuild(tuple(out), counts, dict(arrival_from), dict(output_from))


# Unix seconds of 2000-01-01 and 2100-01-01: an engine's recorded arrival lies between them
EPOCH_SPAN = (946_684_800.0, 4_102_444_800.0)


def _check_arrival(r: LoggedRequest) -> None:
    low, high = EPOCH_SPAN if r.epoch else (0.0, 400 * 86_400 * 366.0)
    if not (math.isfinite(r.arrival_s) and low <= r.arrival_s <= high):
        what = "a Unix time" if r.epoch else "a time of the log"
        raise KvtierError(
            f"line {r.line}: request {r.rid}'s arrival {r.arrival_s:g} is no date ({what} "
            f"between {low:g} and {high:g} s)"
        )


def _prompt(
    r: LoggedRequest, hasher: PromptHasher, encode: Callable[[str], Sequence[int]] | None
) -> HashedPrompt:
    where = f"line {r.line}"
    if r.prompt is not None:
        prompt = r.prompt
    elif r.text is None:
        raise KvtierError(f"{where}: request {r.rid} has no prompt")
    elif encode is None:
        raise KvtierError(
            f"{where}: request {r.rid}'s prompt was logged as text; give --tokenizer (the "
            "served model's, a local folder or a model in the local Hugging Face cache) to count it"
        )
    else:
        ids = list(encode(r.text))
        if r.prompt_tokens is not None and len(ids) != r.prompt_tokens:
            raise KvtierError(
                f"{where}: the tokenizer gives {len(ids)} tokens where the engine counted "
                f"{r.prompt_tokens}: is --tokenizer the served model's?"
            )
        prompt = hasher(token_ids(ids, where, "the tokenizer's ids") or [])
    if r.prompt_tokens is not None and prompt.tokens != r.prompt_tokens:
        raise KvtierError(
            f"{where}: {prompt.tokens} prompt token ids where the engine counted {r.prompt_tokens}"
        )
    if not 1 <= prompt.tokens <= MAX_LENGTH or not 1 <= r.output_len <= MAX_LENGTH:
        raise KvtierError(
            f"{where}: request {r.rid}: {prompt.tokens} prompt and {r.output_len} output tokens; "
            f"a trace needs 1 to {MAX_LENGTH:,} of each"
        )
    return prompt
