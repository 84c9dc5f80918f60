"""Multi-turn benchmark settings for the property tests of the client loop and the trace."""

from __future__ import annotations

from hypothesis import strategies as st

from kvtier.sim.multiturn import READY_QUEUE_POLICIES, MultiturnSpec


def multiturn_specs(
    rates: st.SearchStrategy[float], blocks: st.SearchStrategy[int]
) -> st.SearchStrategy[MultiturnSpec]:
    """1-12 clients of 1-8 rounds, requests of 1-700 tokens answered in 1-300, with or without
    the round barrier, under either ready-queue policy; rate and block size drawn from the
    arguments."""
    return st.builds(
        MultiturnSpec,
        clients=st.integers(1, 12),
        rounds=st.integers(1, 8),
        request_tokens=st.integers(1, 700),
        output_tokens=st.integers(1, 300),
        rate=rates,
        round_barrier=st.booleans(),
        ready_queue=st.sampled_from(READY_QUEUE_POLICIES),
        block_tokens=blocks,
    )
