"""Logged requests to a Mooncake trace: chained block hashes, arrival order, lengths kept.

Each request's prompt (its token ids, or its text counted by a local tokenizer) is hashed block
by block as it is read, and its ids dropped; the requests are then put in arrival order, the
first at timestamp 0, and their digests numbered. The result replays through `kvtier simulate`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kvtier.errors import KvtierError
from kvtier.logs.requests import LoggedRequest
from kvtier.sim.block_hash import BlockIds, chain_digests
from kvtier.sim.trace import MAX_LENGTH, TraceRequest

MAX_BLOCK_TOKENS = 1 << 20
_MAX_TOKEN_ID = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class TraceBuild:
    """A trace made from logged requests, with what was read and what the prompts share.

    `reuse` is the trace's ceiling as `kvtier simulate --unbounded` computes it: for each request
    the longest prefix of blocks an earlier request already had, each block at its real size,
    over all prompt tokens.
    """

    requests: tuple[TraceRequest, ...]
    block_tokens: int
    input_tokens: int
    output_tokens: int
    unique_blocks: int
    reused_tokens: int
    arrival_from: dict[str, int]
    output_from: dict[str, int]

    @property
    def reuse(self) -> float:
        return self.reused_tokens / self.input_tokens if self.input_tokens else 0.0

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
    block_tokens: int,
    encode: Callable[[str], Sequence[int]] | None = None,
) -> TraceBuild:
    """Hash and order `requests`; `encode` tokenizes a prompt that was logged as text only."""
    if not 1 <= block_tokens <= MAX_BLOCK_TOKENS:
        raise KvtierError(
            f"--block-tokens must be in [1, {MAX_BLOCK_TOKENS:,}], got {block_tokens}"
        )
    hashed: list[_Hashed] = []
    arrival_from: Counter[str] = Counter()
    output_from: Counter[str] = Counter()
    for r in requests:
        ids = _prompt_ids(r, encode)
        hashed.append(
            _Hashed(
                r.line,
                r.arrival_s,
                r.epoch,
                len(ids),
                r.output_len,
                chain_digests(ids, block_tokens),
            )
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
            "(the Unix time SGLang recorded vs the log's printed time)"
        )
    hashed.sort(key=lambda h: (h.arrival_s, h.line))
    start = hashed[0].arrival_s
    numbering = BlockIds()
    out: list[TraceRequest] = []
    reused = 0
    for rid, h in enumerate(hashed):
        ids, seen = numbering.number(h.digests)
        reused += min(seen * block_tokens, h.input_len)
        out.append(TraceRequest(rid, h.arrival_s - start, h.input_len, h.output_len, ids))
    return TraceBuild(
        tuple(out),
        block_tokens,
        sum(h.input_len for h in hashed),
        sum(h.output_len for h in hashed),
        len(numbering),
        reused,
        dict(arrival_from),
        dict(output_from),
    )


def _prompt_ids(r: LoggedRequest, encode: Callable[[str], Sequence[int]] | None) -> Sequence[int]:
    where = f"line {r.line}"
    if r.token_ids is not None:
        ids: Sequence[int] = r.token_ids
    elif r.text is None:
        raise KvtierError(f"{where}: request {r.rid} has no prompt")
    elif encode is None:
        raise KvtierError(
            f"{where}: request {r.rid}'s prompt was logged as text; give --tokenizer (the "
            "served model's, a local folder or a model in the local Hugging Face cache) to count it"
        )
    else:
        ids = encode(r.text)
        if r.prompt_tokens is not None and len(ids) != r.prompt_tokens:
            raise KvtierError(
                f"{where}: the tokenizer gives {len(ids)} tokens where the engine counted "
                f"{r.prompt_tokens}: is --tokenizer the served model's?"
            )
    if r.prompt_tokens is not None and r.token_ids is not None and len(ids) != r.prompt_tokens:
        raise KvtierError(
            f"{where}: {len(ids)} prompt token ids where the engine counted {r.prompt_tokens}"
        )
    if not 1 <= len(ids) <= MAX_LENGTH or not 1 <= r.output_len <= MAX_LENGTH:
        raise KvtierError(
            f"{where}: request {r.rid}: {len(ids)} prompt and {r.output_len} output tokens; a "
            f"trace needs 1 to {MAX_LENGTH:,} of each"
        )
    if min(ids) < 0 or max(ids) > _MAX_TOKEN_ID:
        raise KvtierError(f"{where}: a prompt token id outside 0 .. 2^63 - 1")
    return ids
