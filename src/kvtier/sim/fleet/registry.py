"""Routing policies by their CLI names."""

from __future__ import annotations

from collections.abc import Sequence

from kvtier.errors import KvtierError
from kvtier.sim.fleet import cache_aware, dynamo, llmd, load, predict, rotation, session
from kvtier.sim.fleet.policy import FleetView, Policy, Router, parse_options


def policies(block_size: int) -> dict[str, Policy]:
    approximate, precise = llmd.policies(block_size)
    return {
        "round-robin": rotation.ROUND_ROBIN,
        "random": rotation.RANDOM,
        "least-load": load.LEAST_LOAD,
        "power-of-two": load.POWER_OF_TWO,
        "session-affinity": session.SESSION_AFFINITY,
        "sglang-cache-aware": cache_aware.policy(block_size),
        "llm-d-approximate": approximate,
        "llm-d-precise": precise,
        "ttft-predict": predict.policy(block_size),
        "dynamo-kv": dynamo.policy(block_size),
    }


def lookup(name: str, block_size: int) -> Policy:
    table = policies(block_size)
    if name not in table:
        raise KvtierError(f"--router {name!r}: unknown policy; choose one of {', '.join(table)}")
    return table[name]


def make_router(
    name: str,
    replicas: int,
    options: Sequence[str],
    seed: int,
    view: FleetView,
    block_size: int,
) -> tuple[Router, dict[str, float]]:
    """The router `name` for `replicas` servers, and the options it runs with."""
    policy = lookup(name, block_size)
    opts = parse_options(name, policy, options)
    return policy.build(replicas, opts, seed, view), opts
