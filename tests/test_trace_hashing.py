"""Chained block hashes: equal ids exactly when the prefixes are equal, and the reuse a trace
reports is what the prompts share, by brute force and by the simulator's own ceiling."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvtier.logs.requests import LoggedRequest
from kvtier.sim.block_hash import PromptHasher
from kvtier.sim.from_requests import build_trace
from kvtier.sim.reference import unbounded
from kvtier.sim.trace import Trace

_TOKENS = st.integers(0, 3)  # a small alphabet: prompts often share prefixes by chance too


@st.composite
def _prompts(draw: st.DrawFn) -> tuple[list[list[int]], int]:
    heads = draw(st.lists(st.lists(_TOKENS, min_size=0, max_size=24), min_size=1, max_size=4))
    prompts = []
    for _ in range(draw(st.integers(1, 12))):
        head = draw(st.sampled_from(heads))
        tail = draw(st.lists(_TOKENS, min_size=0 if head else 1, max_size=10))
        prompts.append(head + tail)
    return prompts, draw(st.integers(1, 9))


def _logged(prompts: list[list[int]], hasher: PromptHasher) -> list[LoggedRequest]:
    return [
        LoggedRequest(i + 1, f"r{i}", float(i), "test", False, hasher(p), None, None, 1, "test")
        for i, p in enumerate(prompts)
    ]


def _blocks(prompt: list[int], size: int) -> list[tuple[int, ...]]:
    return [tuple(prompt[i : i + size]) for i in range(0, len(prompt), size)]


def _shared_blocks(a: list[int], b: list[int], size: int) -> int:
    n = 0
    for x, y in zip(_blocks(a, size), _blocks(b, size), strict=False):
        if x != y:
            break
        n += 1
    return n


@given(_prompts())
def test_ids_and_reuse_are_the_prompts_shared_blocks(case: tuple[list[list[int]], int]) -> None:
    prompts, size = case
    hasher = PromptHasher(size)
    build = build_trace(_logged(prompts, hasher), hasher)
    expected = 0
    for i, prompt in enumerate(prompts):
        row = build.requests[i]
        assert (row.input_len, len(row.blocks)) == (len(prompt), -(-len(prompt) // size))
        for j in range(i):
            shared = _shared_blocks(prompt, prompts[j], size)
            other = build.requests[j].blocks
            for k in range(min(len(row.blocks), len(other))):
                # equal ids exactly on the blocks whose whole prefix is equal
                assert (row.blocks[k] == other[k]) == (k < shared)
        seen = max((_shared_blocks(prompt, prompts[j], size) for j in range(i)), default=0)
        expected += min(seen * size, len(prompt))
    assert build.counts.reused_tokens == expected
    assert build.counts.input_tokens == sum(map(len, prompts))
    ceiling = unbounded(Trace(build.requests, size)).hit_rate
    assert abs(ceiling - expected / build.counts.input_tokens) < 1e-12


def test_ids_are_numbered_in_arrival_order() -> None:
    """Requests logged out of order are put in arrival order before their blocks are numbered."""
    hasher = PromptHasher(2)
    late = LoggedRequest(1, "a", 5.0, "t", False, hasher([1, 2, 3, 4]), None, None, 2, "t")
    early = LoggedRequest(2, "b", 2.0, "t", False, hasher([1, 2, 9, 9]), None, None, 3, "t")
    build = build_trace([late, early], hasher)
    assert [(r.arrival_s, r.blocks, r.output_len) for r in build.requests] == [
        (0.0, (0, 1), 3),
        (3.0, (0, 2), 2),
    ]


_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(max_size=12)
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4)
        | st.tuples(inner, inner)
    ),
    max_leaves=20,
)


@given(_VALUES)
def test_python_reprs_read_back(value: object) -> None:
    """What the engines print with repr() or str() of lists and dicts reads back as the value:
    strings with quotes, backslashes, commas and brackets inside stay strings."""
    from kvtier.logs.pyrepr import read_value

    text = repr(value)
    assert read_value(text, 0) == (value, len(text))
