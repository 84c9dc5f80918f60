"""Mooncake traces: validation with line numbers, exact round trips, seeded generators."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from kvtier.errors import KvtierError
from kvtier.sim.trace import TraceRequest, load_trace, to_jsonl, write_trace
from kvtier.sim.workload import GENERATORS, generate

GOOD = {"timestamp": 27482, "input_length": 1100, "output_length": 52, "hash_ids": [46, 47, 48]}


def _write(tmp_path: Path, rows: list[object]) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_reads_mooncake_rows_and_block_sizes(tmp_path: Path) -> None:
    trace = load_trace(_write(tmp_path, [GOOD, {**GOOD, "timestamp": 27500}]))
    req = trace.requests[0]
    assert req == TraceRequest(0, 27.482, 1100, 52, (46, 47, 48))
    assert [req.block_tokens(i) for i in range(3)] == [512, 512, 76]
    assert [req.prefix_tokens(n) for n in range(4)] == [0, 512, 1024, 1100]
    assert trace.requests[1].rid == 1
    assert trace.input_tokens == 2200


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({**GOOD, "hash_ids": [1, 2]}, "expected ceil(1100/512) = 3"),
        ({**GOOD, "input_length": 0}, "`input_length` must be >= 1"),
        ({**GOOD, "output_length": "5"}, "`output_length` must be an integer"),
        ({**GOOD, "timestamp": -1}, "`timestamp` must be a non-negative"),
        ({**GOOD, "hash_ids": [1, True, 3]}, "`hash_ids` must be a list of integers"),
        ({k: v for k, v in GOOD.items() if k != "hash_ids"}, "`hash_ids` must be a list"),
        ("[1, 2]", "expected a JSON object"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_line_is_refused_with_its_line_number(
    tmp_path: Path, row: object, message: str
) -> None:
    path = _write(tmp_path, [GOOD, "", row])
    with pytest.raises(KvtierError, match=rf"t\.jsonl:3: .*{re.escape(message)}"):
        load_trace(path)


def test_timestamps_must_not_go_backwards(tmp_path: Path) -> None:
    with pytest.raises(KvtierError, match=r"t\.jsonl:2: timestamp goes backwards"):
        load_trace(_write(tmp_path, [GOOD, {**GOOD, "timestamp": 1}]))


def test_empty_and_missing_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(KvtierError, match="holds no requests"):
        load_trace(_write(tmp_path, []))
    with pytest.raises(KvtierError, match="cannot read trace"):
        load_trace(tmp_path / "absent.jsonl")


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_generated_traces_round_trip_exactly(tmp_path: Path, kind: str) -> None:
    requests = generate(kind, 300, seed=7)
    assert generate(kind, 300, seed=7) == requests
    assert generate(kind, 300, seed=8) != requests
    path = tmp_path / f"{kind}.jsonl"
    assert write_trace(requests, path) == 300
    assert load_trace(path).requests == requests
    for r in requests:
        assert len(r.blocks) == math.ceil(r.input_len / 512)


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_generated_ids_name_whole_prefixes(kind: str) -> None:
    """A block id is a prefix hash: wherever it appears, the ids before it are the same."""
    before: dict[int, tuple[int, ...]] = {}
    shared = 0
    for r in generate(kind, 400, seed=3):
        for i, block in enumerate(r.blocks):
            prefix = r.blocks[:i]
            if block in before:
                assert before[block] == prefix
                shared += 1
            before[block] = prefix
    assert shared > 0  # every kind reuses some prefix


def test_multi_turn_chat_reuses_the_previous_turns_full_blocks() -> None:
    requests = generate("chat", 200, seed=1)
    followups = 0
    for r in requests:
        earlier = [q for q in requests[: r.rid] if q.blocks and q.blocks[0] == r.blocks[0]]
        if earlier and len(r.blocks) > 1:
            prev = earlier[-1]
            full = prev.input_len // 512
            assert r.blocks[:full] == prev.blocks[:full]
            followups += 1
    assert followups > 50


def test_jsonl_lines_are_mooncake_rows() -> None:
    line = next(to_jsonl([TraceRequest(0, 1.5, 600, 9, (3, 4))]))
    assert json.loads(line) == {
        "timestamp": 1500,
        "input_length": 600,
        "output_length": 9,
        "hash_ids": [3, 4],
    }


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(KvtierError, match="unknown workload 'rag'"):
        generate("rag", 10, 0)
