"""`kvtier simulate` with SGLang's multi-turn benchmark (`--generate multiturn`), the trace's block
size, and HiCache's L3 prefetch policy: their checks and what they build (the flags are rows of
cli/flags/simulate.py)."""

from __future__ import annotations

import argparse
from typing import Any

from kvtier.cli.flags import given_names
from kvtier.cli.flags.simulate import MULTITURN as MULTITURN_ROWS
from kvtier.cli.flags.simulate import MULTITURN_DEFAULTS as DEFAULTS
from kvtier.cli.flags.simulate import POLICIES, PREFETCH, PREFETCH_POLICY
from kvtier.cli.simulate_bench import refuse_open_loop
from kvtier.errors import KvtierError

MULTITURN = "multiturn"
SHARED_PREFIX = "shared-prefix"  # kvtier.cli.simulate_fleet's generator, which also asks O tokens


def check(args: argparse.Namespace) -> None:
    """Refuse generator flags that the chosen input does not use."""
    given = given_names(args, MULTITURN_ROWS)
    if args.generate in (SHARED_PREFIX, "random") and args.output_tokens is not None:
        given.remove("--output-tokens")  # the shared-prefix and random generators ask it too
    if args.generate == MULTITURN:
        if args.requests is not None:
            raise KvtierError(
                "--generate multiturn sends --clients x --rounds requests: drop --requests"
            )
    elif given:
        raise KvtierError(f"{', '.join(given)} apply to --generate multiturn")
    if args.max_parallel is not None:
        refuse_open_loop(
            args,
            "-o writes the open-loop trace: drop --max-parallel",
            "--max-parallel runs the clients on the timed server: drop it",
            "the clients send at --rate: drop --time-scale",
        )
    prefetch = given_names(args, PREFETCH)
    if prefetch and not _has_store(args):
        raise KvtierError(f"{', '.join(prefetch)} apply to an L3 store: give --store-tokens")
    if args.block_tokens is not None and args.generate not in (None, MULTITURN, SHARED_PREFIX):
        raise KvtierError(
            f"--generate {args.generate} hashes 512-token blocks: drop --block-tokens"
        )


def _has_store(args: argparse.Namespace) -> bool:
    """An L3 store: one per replica (--store-tokens) or the fleet's (--shared-store-tokens)."""
    return bool(args.store_tokens or getattr(args, "shared_store_tokens", None))


def generate(args: argparse.Namespace) -> Any:
    """The multi-turn trace the flags describe, as a `Trace`; with --max-parallel, the clients
    themselves (a `ClientLoop`), to run against the simulated server."""
    from kvtier.sim.multiturn import MultiturnSpec, multiturn
    from kvtier.sim.trace import MOONCAKE_BLOCK_TOKENS, Trace

    given = {k: getattr(args, k) for k in DEFAULTS if getattr(args, k) is not None}
    spec = MultiturnSpec(
        **{**DEFAULTS, **given},
        rate=args.rate,
        round_barrier=args.round_barrier,
        ready_queue=args.ready_queue or "random",
        block_tokens=args.block_tokens or MOONCAKE_BLOCK_TOKENS,
    )
    if args.max_parallel is not None:
        from kvtier.sim.clients import ClientLoop

        spec.check()
        return ClientLoop(spec, args.seed, args.max_parallel)
    return Trace(
        multiturn(spec, args.seed), spec.block_tokens, f"generated multiturn seed {args.seed}"
    )


def request_count(source: Any) -> int:
    """Requests a trace holds, or turns the benchmark's clients will send."""
    from kvtier.sim.bench import RandomBench
    from kvtier.sim.clients import ClientLoop

    if isinstance(source, ClientLoop | RandomBench):
        return source.turns
    return len(source.requests)


def with_policies(args: argparse.Namespace, deployment: Any) -> Any:
    """`deployment` with kvtier's HiCache policy flags set; a flag that contradicts the launch
    command's is refused naming both, and a prefetch policy needs an L3 store."""
    from kvtier.engines.sglang.flags import FLAGS as SGLANG_FLAGS

    given: dict[str, str] = {}
    for row in POLICIES:  # SGLang's own flags: a pasted launch command may also set them
        engine_flag = SGLANG_FLAGS.find(row.name.removeprefix("--"))
        assert engine_flag is not None  # each is spelled as SGLang's own flag
        name, flag = engine_flag.field, row.name
        mine, pasted = getattr(args, row.dest), deployment.value(name)
        if mine is not None and pasted is not None and mine != pasted:
            raise KvtierError(
                f"kvtier's {flag} {mine} contradicts the {deployment.origin(name)}'s "
                f"{flag} {pasted}; give one"
            )
        if mine is not None:
            given[name] = mine
    policy = deployment.hicache.storage_prefetch_policy
    if policy is not None and not _has_store(args):
        origin = deployment.origin("hicache.storage_prefetch_policy")
        raise KvtierError(
            f"{PREFETCH_POLICY.name} {policy} ({origin}) applies to an L3 store: give "
            "--store-tokens"
        )
    return deployment.with_values("kvtier flag", **given) if given else deployment


def prefetch_flags(args: argparse.Namespace) -> Any:
    """The threshold and timeouts given (the policy travels in the deployment)."""
    from kvtier.sim.servers.prefetch import PrefetchFlags

    return PrefetchFlags(
        None,
        args.prefetch_threshold,
        args.prefetch_timeout_base,
        args.prefetch_timeout_per_ki_token,
        args.prefetch_timeout_max,
    )
