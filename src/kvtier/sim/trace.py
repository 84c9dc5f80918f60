"""Workload traces in the Mooncake JSONL format, read and written with validation.

One request per line: `timestamp` (ms since the start of the trace), `input_length`,
`output_length` and `hash_ids`, the prompt's prefix-block hashes over blocks of 512 tokens
(Mooncake FAST'25 release, `FAST25-release/README.md`). Equal ids mark reusable prefix KV blocks;
`len(hash_ids) == ceil(input_length / 512)`, so the last block holds the remainder. A trace may
hash smaller blocks (kvtier's multi-turn generator, `kvtier trace --block-tokens`). kvtier adds
two optional fields that Mooncake's readers ignore: `round` (the turn of a multi-turn
conversation, 0 for the first), on every line or on none, and `block_tokens`, the block size,
which kvtier writes on every line of a trace whose blocks are not 512 tokens. A reader takes the
block size from `--block-tokens`, else from the lines' `block_tokens`, else the one size that fits
every line's `len(hash_ids) == ceil(input_length / size)` (512 when it fits).

A malformed line is refused with its line number; nothing is dropped or repaired silently.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

from kvtier.errors import KvtierError

MOONCAKE_BLOCK_TOKENS = 512  # Mooncake FAST'25 README: "The block size is 512 tokens"
MAX_ROUND = 1 << 20  # turns of one conversation
_INT = {int}


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace; `rid` is its 0-based position in the trace."""

    rid: int
    arrival_s: float
    input_len: int
    output_len: int
    blocks: tuple[int, ...]
    round: int | None = None  # turn of a multi-turn conversation, 0 first; None: not recorded

    def block_tokens(self, index: int, block_size: int = MOONCAKE_BLOCK_TOKENS) -> int:
        """Tokens block `index` holds: `block_size`, except the last, which holds the rest."""
        if index < len(self.blocks) - 1:
            return block_size
        return self.input_len - block_size * (len(self.blocks) - 1)

    def prefix_tokens(self, num_blocks: int, block_size: int = MOONCAKE_BLOCK_TOKENS) -> int:
        """Tokens in the first `num_blocks` blocks, each at its real size."""
        if num_blocks >= len(self.blocks):
            return self.input_len
        return num_blocks * block_size


@dataclass(frozen=True, slots=True)
class Trace:
    """A validated workload: requests in arrival order over `block_size`-token blocks."""

    requests: tuple[TraceRequest, ...]
    block_size: int = MOONCAKE_BLOCK_TOKENS
    source: str = ""
    # load stages after the first: (index of the stage's first request, when its timer starts
    # if the stage before it finished at its last send). A stage is sent only once every earlier
    # request has finished (`kvtier.sim.shared_prefix.next_stage_start`); () : one open stream
    stages: tuple[tuple[int, float], ...] = ()

    @property
    def input_tokens(self) -> int:
        return sum(r.input_len for r in self.requests)


def scale_time(trace: Trace, factor: float) -> Trace:
    """The same requests with every arrival time multiplied by `factor` (2: half the load)."""
    if not factor > 0:
        raise KvtierError(f"--time-scale must be positive, got {factor}")
    requests = tuple(dataclasses.replace(r, arrival_s=r.arrival_s * factor) for r in trace.requests)
    return dataclasses.replace(trace, requests=requests)


MAX_TIMESTAMP_MS = 1e13  # about 317 years
MAX_LENGTH = 1 << 27  # tokens of one prompt or answer
MAX_HASH_IDS = 1 << 24  # hash ids a generated trace holds: about 1 GB of Python tuples at most
MAX_LINE = 8 << 20  # characters of one line: 262,144 hash ids of 20 digits, and room to spare
_ID_RANGE = (-(1 << 63), 1 << 64)  # signed or unsigned 64-bit hashes


def _int_field(obj: dict[str, object], key: str, where: str, minimum: int) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise KvtierError(f"{where}: `{key}` must be an integer, got {_shown(value)}")
    if not minimum <= value <= MAX_LENGTH:
        raise KvtierError(
            f"{where}: `{key}` must be >= {minimum} and <= {MAX_LENGTH:,}, got {_shown(value)}"
        )
    return value


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_request(obj: object, rid: int, where: str, block_size: int | None) -> TraceRequest:
    """Validate one decoded trace line into a `TraceRequest`."""
    if not isinstance(obj, dict):
        raise KvtierError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    ts = obj.get("timestamp")
    if (
        isinstance(ts, bool)
        or not isinstance(ts, int | float)
        or not 0 <= ts <= MAX_TIMESTAMP_MS  # NaN fails this too
    ):
        raise KvtierError(
            f"{where}: `timestamp` must be a non-negative number of ms up to {MAX_TIMESTAMP_MS:g}, "
            f"got {_shown(ts)}"
        )
    input_len = _int_field(obj, "input_length", where, 1)
    output_len = _int_field(obj, "output_length", where, 1)
    ids = obj.get("hash_ids")
    # exact types: an int subclass, bool, is what JSON `true` would give
    if not isinstance(ids, list) or not set(map(type, ids)) <= _INT:
        raise KvtierError(f"{where}: `hash_ids` must be a list of integers")
    expected = len(ids) if block_size is None else -(-input_len // block_size)
    if len(ids) != expected:
        raise KvtierError(
            f"{where}: {len(ids)} hash_ids for input_length {input_len}; "
            f"expected ceil({input_len}/{block_size}) = {expected} "
            f"(blocks of {block_size} tokens; --block-tokens sets it)"
        )
    if ids and not (_ID_RANGE[0] <= min(ids) and max(ids) < _ID_RANGE[1]):
        raise KvtierError(f"{where}: `hash_ids` must be 64-bit integers")
    turn = None
    if "round" in obj:
        turn = obj["round"]
        if isinstance(turn, bool) or not isinstance(turn, int) or not 0 <= turn <= MAX_ROUND:
            raise KvtierError(
                f"{where}: `round` must be an integer from 0 to {MAX_ROUND:,}, got {_shown(turn)}"
            )
    return TraceRequest(rid, ts / 1000.0, input_len, output_len, tuple(ids), turn)


MAX_BLOCK_TOKENS = 1 << 20


class BlockSize:
    """The trace's block size: given (`--block-tokens`), stated by its lines, or the sizes that fit
    every line so far (`low` to `high` tokens, whole numbers)."""

    def __init__(self, given: int | None) -> None:
        self.given = given
        self.stated: int | None = None
        self.low, self.high = 1, MAX_BLOCK_TOKENS
        self.off_mooncake: str | None = None  # the first line 512-token blocks do not give

    def line(self, obj: dict[str, object], where: str) -> int | None:
        """The size this line is checked against now (None: checked at the end), after reading
        its `block_tokens`, if any."""
        if "block_tokens" in obj:
            value = obj["block_tokens"]
            if isinstance(value, bool) or not isinstance(value, int):
                raise KvtierError(
                    f"{where}: `block_tokens` must be an integer, got {_shown(value)}"
                )
            if not 1 <= value <= MAX_BLOCK_TOKENS or value != (self.stated or value):
                raise KvtierError(
                    f"{where}: `block_tokens` {value} (the trace's earlier lines: {self.stated}; "
                    f"1 to {MAX_BLOCK_TOKENS:,})"
                )
            if self.given is not None and value != self.given:
                raise KvtierError(
                    f"{where}: the trace states blocks of {value} tokens; --block-tokens says "
                    f"{self.given}"
                )
            self.stated = value
        return self.given or self.stated

    def fit(self, request: TraceRequest, where: str) -> None:
        """Narrow the sizes that give this request's count of blocks: ceil(L / size) = n."""
        length, blocks = request.input_len, len(request.blocks)
        expected = -(-length // MOONCAKE_BLOCK_TOKENS)
        if blocks != expected and self.off_mooncake is None:
            self.off_mooncake = (
                f"{where}: {blocks} hash_ids for input_length {length}; expected "
                f"ceil({length}/{MOONCAKE_BLOCK_TOKENS}) = {expected} (blocks of "
                f"{MOONCAKE_BLOCK_TOKENS} tokens; --block-tokens sets it)"
            )
        if not blocks:  # a prompt of at least one token in no block: no size gives that
            self.low = MAX_BLOCK_TOKENS + 1
            return
        self.low = max(self.low, -(-length // blocks))
        if blocks > 1:
            self.high = min(self.high, -(-length // (blocks - 1)) - 1)

    def decided(self, source: str) -> int:
        if self.given or self.stated:
            return self.given or self.stated  # type: ignore[return-value]
        if self.low <= MOONCAKE_BLOCK_TOKENS <= self.high:
            return MOONCAKE_BLOCK_TOKENS
        if self.low == self.high:
            return self.low
        if self.low > self.high:
            raise KvtierError(
                f"{self.off_mooncake}, and no block size gives every line's count of hash_ids"
            )
        raise KvtierError(
            f"{self.off_mooncake}; the lines do not state their block size and sizes from "
            f"{self.low} to {self.high} tokens all fit them: give --block-tokens"
        )


def iter_lines(
    lines: Iterable[str], block_size: int | BlockSize, name: str
) -> Iterator[TraceRequest]:
    """Parse JSONL lines; blank lines are allowed, timestamps must not go backwards. A line's
    count of hash_ids is checked against the block size now when it is known, else recorded in
    the `BlockSize` for its `decided`."""
    sizes = block_size if isinstance(block_size, BlockSize) else BlockSize(block_size)
    last_ts = 0.0
    rid = 0
    with_round = False
    for lineno, line in enumerate(lines, start=1):
        if lineno == 1:
            line = line.removeprefix("\ufeff")  # a UTF-8 byte-order mark, as editors save
        if not line.strip():
            continue
        where = f"{name}:{lineno}"
        if len(line) > MAX_LINE:
            raise KvtierError(f"{where}: a line over {MAX_LINE:,} characters")
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise KvtierError(f"{where}: not valid JSON ({exc.msg})") from None
        except (ValueError, RecursionError) as exc:  # a 5,000-digit number, deep nesting
            raise KvtierError(f"{where}: not a trace line ({str(exc)[:60]})") from None
        known = sizes.line(obj, where) if isinstance(obj, dict) else sizes.given
        req = parse_request(obj, rid, where, known)
        if known is None:
            sizes.fit(req, where)
        if req.arrival_s < last_ts:
            raise KvtierError(f"{where}: timestamp goes backwards; a trace is in arrival order")
        if rid == 0:
            with_round = req.round is not None
        elif (req.round is not None) != with_round:
            raise KvtierError(f"{where}: `round` must be on every line of a trace or on none")
        last_ts = req.arrival_s
        rid += 1
        yield req


def load_trace(
    path: str | Path,
    block_size: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Trace:
    """Read a Mooncake JSONL trace; raise `KvtierError` naming the first bad line. `progress`
    gets the characters read so far (the bytes, for the ASCII a trace is), every 4096 lines."""
    p = Path(path)
    try:
        with p.open("rb") as stream:
            return read_trace(stream, str(p), block_size, progress)
    except OSError as exc:
        raise KvtierError(f"cannot read trace {p}: {exc.strerror}") from None


def read_trace(
    stream: BinaryIO,
    source: str,
    block_size: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Trace:
    """`load_trace` of an open binary stream; `source` names it in errors and the result.
    `block_size` None: the size the lines state, else the one that fits them (`BlockSize`)."""
    name = Path(source).name
    sizes = BlockSize(block_size)
    try:
        lines: Iterable[str] = _bounded(io.TextIOWrapper(stream, encoding="utf-8"))
        if progress is not None:
            lines = _counted(lines, progress)
        requests = tuple(iter_lines(lines, sizes, name))
    except OSError as exc:
        raise KvtierError(f"cannot read trace {source}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise KvtierError(f"{source}: not a UTF-8 text file") from None
    if not requests:
        raise KvtierError(f"{source}: the trace holds no requests")
    return Trace(requests, sizes.decided(source), source)


def _bounded(text: TextIO) -> Iterator[str]:
    """Lines of `text`; one longer than MAX_LINE is cut there (and refused by `iter_lines`)."""
    while line := text.readline(MAX_LINE + 1):
        yield line


def _counted(lines: Iterable[str], progress: Callable[[int], None]) -> Iterator[str]:
    read = 0
    for n, line in enumerate(lines, start=1):
        read += len(line)
        if not n & 4095:
            progress(read)
        yield line
    progress(read)


def to_jsonl(
    requests: Iterable[TraceRequest], block_size: int = MOONCAKE_BLOCK_TOKENS
) -> Iterator[str]:
    """Mooncake JSONL lines (with newline) for `requests`; timestamps in whole ms; every line
    states `block_tokens` when the blocks are not Mooncake's 512 tokens."""
    for r in requests:
        row = {
            "timestamp": round(r.arrival_s * 1000),
            "input_length": r.input_len,
            "output_length": r.output_len,
            "hash_ids": list(r.blocks),
        }
        if r.round is not None:
            row["round"] = r.round
        if block_size != MOONCAKE_BLOCK_TOKENS:
            row["block_tokens"] = block_size
        yield json.dumps(row) + "\n"


def write_trace(
    requests: Iterable[TraceRequest], path: str | Path, block_size: int = MOONCAKE_BLOCK_TOKENS
) -> int:
    """Write `requests` as Mooncake JSONL over blocks of `block_size` tokens; return how many
    were written."""
    n = 0
    try:
        with Path(path).open("w", encoding="utf-8") as fh:
            for line in to_jsonl(requests, block_size):
                fh.write(line)
                n += 1
    except OSError as exc:
        raise KvtierError(f"cannot write {path}: {exc.strerror or exc}") from None
    return n
