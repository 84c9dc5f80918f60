"""The multi-turn benchmark's clients run against the simulated server (closed loop)."""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_support import error_line, run_json
from kvtier.sim.clients import ClientLoop
from kvtier.sim.metrics import RequestRecord
from kvtier.sim.multiturn import MultiturnSpec
from kvtier.sim.run import replay
from kvtier.sim.setup import SimConfig
from kvtier.sim.timing import Hardware, ModelCost, TimingModel
from multiturn_support import multiturn_specs

TM = TimingModel(
    ModelCost(8_000_000_000, 16e9, 131_072, 32, 8192), Hardware(989, 3350, 25, 100, 8), 1
)


def run(spec: MultiturnSpec, max_parallel: int, device_blocks: int = 400) -> list[RequestRecord]:
    config = SimConfig(device_blocks * 64, 0, 1, 64, "write_through", 64, 8192, TM, ())
    return replay(ClientLoop(spec, 7, max_parallel), config).records


def in_flight_max(records: list[RequestRecord]) -> int:
    """Most requests sent and not yet answered at once."""
    events = sorted(
        [(r.arrival_s, 1) for r in records] + [(r.finish_s, -1) for r in records],
        key=lambda e: (e[0], e[1]),  # an answer frees its place before a send at the same time
    )
    return max(itertools.accumulate(delta for _, delta in events))


@settings(max_examples=40, deadline=None)
@given(multiturn_specs(st.sampled_from([0.5, 4.0, 50.0]), st.just(64)), st.integers(1, 6))
def test_a_turn_waits_for_its_answer_and_the_sender_for_room(
    spec: MultiturnSpec, max_parallel: int
) -> None:
    records = run(spec, max_parallel)
    request, output = spec.request_tokens, spec.output_tokens
    assert len(records) == spec.clients * spec.rounds and all(r.finished for r in records)
    assert [r.rid for r in records] == list(range(len(records)))
    assert in_flight_max(records) <= max_parallel
    by_prompt: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in records:
        by_prompt[r.input_len].append(r)
    # every client's turn r has the same length, so round r + 1 of some client follows its round r
    for turn in range(1, spec.rounds):
        earlier = by_prompt[turn * request + (turn - 1) * output]
        later = by_prompt[(turn + 1) * request + turn * output]
        finishes = sorted(r.finish_s for r in earlier)
        for k, r in enumerate(sorted(later, key=lambda r: r.arrival_s)):
            assert r.arrival_s >= finishes[k]  # the k-th send of a round waits for k answers
        if spec.round_barrier:
            assert min(r.arrival_s for r in later) >= max(finishes)


def test_few_places_keep_the_queue_at_the_clients(capsys: pytest.CaptureFixture[str]) -> None:
    """80 clients of 10 rounds at 16 turns/s overload an H100 serving Llama-3.1-8B: the open
    loop queues turns at the server; four places in flight keep them at the clients."""
    argv = ["simulate", "--generate", "multiturn", "--clients", "80", "--rounds", "10"]
    argv += ["--request-tokens", "2048", "--output-tokens", "1", "--rate", "16"]
    argv += ["--round-barrier", "--block-tokens", "64", "--engine", "sglang"]
    argv += ["--model", "llama-3.1-8b", "--gpu", "h100", "--device-tokens", "300000", "--json"]
    open_loop = run_json(capsys, argv)
    closed = run_json(capsys, [*argv, "--max-parallel", "4"])
    assert open_loop["requests"] == closed["requests"] == 800
    assert closed["concurrency"]["max"] <= 4
    assert closed["ttft_s"]["p50"] < open_loop["ttft_s"]["p50"] / 10
    sweep = run_json(capsys, [*argv, "--max-parallel", "4", "--sweep", "hicache-ratio=0,4"])
    runs = sweep["sweep"]["runs"]
    assert [r["requests"] for r in runs] == [800, 800]  # every run starts its own clients


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-o", "x.jsonl"], "-o writes the open-loop trace: drop --max-parallel"),
        (["--unbounded"], "--max-parallel runs the clients on the timed server"),
        (["--time-scale", "2"], "the clients send at --rate: drop --time-scale"),
    ],
)
def test_max_parallel_where_it_cannot_apply_is_one_line(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    argv = ["simulate", "--generate", "multiturn", "--max-parallel", "4", *extra]
    assert message in error_line(capsys, argv)
    other = ["simulate", "--generate", "chat", "--max-parallel", "4", "--unbounded"]
    assert "--max-parallel apply to --generate multiturn" in error_line(capsys, other)
