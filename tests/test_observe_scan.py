"""The chunk reader (one bytes search per chunk, the commonest shapes read by that search) gives
exactly what the general per-line reader gives: on every fixture, on the fuzz corpus, on the
benchmark's generated logs and on lines built to sit at the edge of the fast shapes."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

from kvtier.observe import logread
from kvtier.observe.logread import LogReader
from kvtier.observe.observer import Observation, Observer
from observe_support import FIXTURES
from test_observe_fuzz import ROUNDS, SEED, _round

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_observe.py"


def per_line(data: bytes, points: int = 120) -> tuple[Observation, int]:
    """The general reader: the whole text decoded, split on LF, each line with a title read."""
    observer = Observer("log", points)
    lines = data.decode("utf-8", errors="replace").split("\n")
    if not lines[-1]:
        lines.pop()
    prefixes = logread._Prefixes()
    for number, line in enumerate(lines, start=1):
        found = logread._FILTER.search(line)
        if found is not None:
            logread.read_line(observer, number, line, prefixes, found)
    return observer.result(), len(lines)


def chunked(data: bytes, rng: random.Random | None, points: int = 120) -> tuple[Observation, int]:
    observer = Observer("log", points)
    reader = LogReader(observer)
    at = 0
    while at < len(data):
        step = rng.randint(1, 1 << 12) if rng else logread.CHUNK
        reader.feed(data[at : at + step])
        at += step
    reader.close()
    return observer.result(), reader.lines


def _same(data: bytes, seed: int, points: int = 120) -> None:
    expected = per_line(data, points)
    assert chunked(data, None, points) == expected
    assert chunked(data, random.Random(seed), points) == expected


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.log")))
def test_every_fixture_reads_as_the_general_reader_reads_it(name: str) -> None:
    data = (FIXTURES / name).read_bytes()
    _same(data, 1)
    _same(data.rstrip(b"\n"), 2)  # the last line without its newline
    _same(data.replace(b"\n", b"\r\n"), 3)


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_the_fuzz_corpus_reads_as_the_general_reader_reads_it(round_: int) -> None:
    rng = random.Random(f"{SEED}-{round_}")
    data = _round(rng)
    _same(data, round_, points=rng.choice((1, 5, 120)))


def _bench() -> object:
    spec = importlib.util.spec_from_file_location("bench_observe", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_observe"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_the_benchmark_logs_read_as_the_general_reader_reads_them(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = _bench()
    path = tmp_path / "serving.log"
    bench.write_log(path, 4, engine)  # type: ignore[attr-defined]
    data = path.read_bytes()
    expected = per_line(data)
    general = 0
    read_line = logread.read_line

    def counted(*args: object) -> None:
        nonlocal general
        general += 1
        read_line(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(logread, "read_line", counted)
    assert chunked(data, None) == expected
    assert expected[0].samples > 1000
    # the common shapes never reach the general reader: only retractions and preemptions do
    assert general < expected[0].samples / 50


DECODE = (
    "Decode batch, #running-req: 8, #token: 100, token usage: 0.50, cuda graph: True, "
    "gen throughput (token/s): 90.00, #queue-req: {q}"
)
PREFILL = (
    "Prefill batch, #new-seq: 1, #new-token: 10, #cached-token: 5, token usage: 0.91, "
    "#running-req: 3, #queue-req: {q}"
)
V1 = (
    "Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, "
    "Running: 3 reqs, Waiting: {q} reqs, GPU KV cache usage: 95.0%, Prefix cache hit rate: 1.0%"
)
HEADS = (
    "",
    "[2026-03-01 10:00:01 TP0] ",
    "[2026-03-01 10:00:01 TP1] ",
    "[2026-03-01 10:00:01 DP1 TP1] ",
    "(APIServer pid=1) INFO 03-01 10:00:01 [loggers.py:271] ",
    "\x1b[32m[2026-03-01 10:00:01 TP0] \x1b[0m",
    "[2026-03-01 10:00:01 TP0]\r",
    "[2026-03-01 10:00:01 TP0]\x00 ",
    "[2026-03-01 10:00:01 TP0] é ",
    "[2026-03-01 10:00:01 TP0] #running-req: 1, token usage: 0.2, ",
    "[2026-03-01 10:00:01 TP0] Prefill batch. ",
    "[2026-03-01 10:00:01 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2 ",
    "web-1  | 2026-03-01T10:00:01.5Z [2026-03-01 10:00:02 TP0] ",
)
TAILS = (
    "",
    ",",
    ", ",
    " ",
    "  ",
    "\t",
    " \t ",
    "\r",
    "\x0b",
    "\x1c",
    "\xa0",
    "\u2003",
    "\x00",
    ", input throughput (token/s): 12.50, ",
    ", cuda graph: True, ",
    ", cuda graph: True,",
    ", largest-len: 0, ",
    ", later field: 1",
    "Decode batch, #running-req: 1, #token: 1, token usage: 0.99, #queue-req: 4",
    " (APIServer pid=1) Avg prompt throughput: 0.0 tokens/s, Running: 1 reqs, "
    "GPU KV cache usage: 99.0%",
    "%",
    "\x1b[0m",
)
QUEUES = ("0", "7", "\u0663", "12x", "", "-1")


def test_lines_at_the_edge_of_the_fast_shapes_read_as_the_general_reader_reads_them() -> None:
    rng = random.Random(11)
    lines = [
        head + body.format(q=q) + tail
        for head in HEADS
        for body in (DECODE, PREFILL, V1)
        for q in QUEUES
        for tail in TAILS
    ]
    # duplicates across ranks, and lines joined as when pasted
    lines += [rng.choice(lines) + rng.choice(lines) for _ in range(500)]
    rng.shuffle(lines)
    lines += lines[:200]
    data = "\n".join(lines).encode("utf-8")
    expected = per_line(data)
    assert expected[0].samples > 1000 and expected[0].skipped > 0
    for seed in range(5):
        assert chunked(data, random.Random(seed)) == expected
    assert chunked(data, None) == expected


def test_a_multibyte_character_split_across_chunks_is_read_once() -> None:
    line = ("[2026-03-01 10:00:01 TP0] é " + DECODE.format(q=3) + "\n").encode("utf-8")
    at = line.index("é".encode()) + 1
    observer = Observer("log")
    reader = LogReader(observer)
    reader.feed(line[:at])
    reader.feed(line[at:])
    reader.close()
    assert observer.result() == per_line(line)[0]
    assert observer.result().samples == 1 and observer.result().peak is not None
    assert "é" in observer.result().peak.text


@pytest.mark.parametrize(
    "head",
    [
        "[2026-03-01 10:00:01 TP0] ",
        "[2026-03-01 10:00:01 TP1234] ",
        "[2026-03-01 10:00:01] ",
        "[2024-13-45 99:99:99 TP3] ",
        "[2026-03-01 10:00:01 TP12345] ",
        "[2026-03-01 10:00:01 DP0 TP0] ",
        "[2026-03-01 10:00:01.123 TP0] ",
        "[26-03-01 10:00:01 TP0] ",
        "x [2026-03-01 10:00:01 TP0] ",
    ],
)
def test_a_prefix_read_from_bytes_has_the_time_and_rank_the_general_reader_gives(
    head: str,
) -> None:
    reader = LogReader(Observer("log"))
    assert reader._head(head.encode()) == (head, *logread._Prefixes().read(head))


def test_each_fast_builder_names_its_pattern_groups_in_order() -> None:
    import re

    from kvtier.engines.sglang import serving as sglang

    for _, source, build in sglang.FAST:
        names = tuple(re.compile(source).groupindex)
        assert tuple(build(("1",) * len(names))) == names
