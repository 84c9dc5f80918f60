"""`kvtier simulate --generate random`: serving benchmarks' random workloads run closed loop, and
the step-cost flags (speculative decoding's accept length, the interconnect); the flags
themselves are rows of `kvtier.cli.flags.simulate`."""

from __future__ import annotations

import argparse
import math
from typing import Any

from kvtier.cli.flags import given_names
from kvtier.cli.flags.simulate import BENCH
from kvtier.errors import KvtierError

RANDOM = "random"


def check(args: argparse.Namespace) -> None:
    """Refuse benchmark flags without --generate random, and its use with a trace file."""
    given = given_names(args, BENCH)
    if args.generate != RANDOM:
        if given:
            raise KvtierError(f"{', '.join(given)} apply to --generate random")
        return
    refuse_open_loop(
        args,
        "--generate random runs closed loop against the server: drop -o",
        "--generate random runs on the timed server: drop the reference flags",
        "--generate random sends at --request-rate: drop --time-scale",
    )


def refuse_open_loop(args: argparse.Namespace, output: str, reference: str, scale: str) -> None:
    """A closed-loop run writes no trace (-o), runs on the timed server (not the reference
    caches) and sends at its own pace (no --time-scale): each refusal with its message."""
    refused = (
        (bool(args.output), output),
        (args.unbounded or args.lru_tokens is not None, reference),
        (args.time_scale != 1.0, scale),
    )
    for given, message in refused:
        if given:
            raise KvtierError(message)


def bench(args: argparse.Namespace) -> Any:
    """The benchmark run the flags describe (`kvtier.sim.bench.RandomBench`)."""
    from kvtier.sim.bench import RandomBench

    zero = False
    if args.bench_version is not None:
        if args.bench == "vllm":
            raise KvtierError("--bench-version names an sglang release: drop it with --bench vllm")
        from kvtier.engines.sglang import versions

        zero = versions.DEFAULT.resolve(args.bench_version, "--bench-version") < versions.V0_5_7
    spec = RandomBench(
        args.bench or "sglang",
        args.input_tokens or 1024,
        args.output_tokens or 1024,
        args.range_ratio if args.range_ratio is not None else 0.0,
        args.requests or 1000,
        args.seed,
        args.max_concurrency,
        args.request_rate or math.inf,
        args.special_tokens or 0,
        zero_outputs=zero,
    )
    spec.check()
    return spec


def timing_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The step-cost flags given, as `TimingFlags` fields."""
    given = {
        "accept_length": args.accept_length,
        "allreduce_gbps": args.allreduce_gbps,
        "allreduce_latency_us": args.allreduce_latency_us,
        "step_overhead_ms": args.step_overhead_ms,
    }
    return {k: v for k, v in given.items() if v is not None}


def params(source: Any) -> dict[str, object]:
    """What a benchmark run states beside its figures (the tools' totals, its settings)."""
    from kvtier.sim.bench import RandomBench

    return {"benchmark": source.summary()} if isinstance(source, RandomBench) else {}


def gain_lines(result: Any) -> list[str]:
    """One note per batch size: what the speculative draft costs and buys a decode iteration."""
    gain = result.params.get("speculative_gain")
    if not gain:
        return []
    out = []
    for g in gain["by_batch"]:
        out.append(
            f"speculative decoding at {g['batch']} request(s) of {gain['context_tokens']:,} "
            f"tokens: draft {g['draft_s'] * 1e3:.2f} ms + verify {g['verify_s'] * 1e3:.2f} ms "
            f"for {g['accept_length']:g} tokens a request, against {g['plain_step_s'] * 1e3:.2f} "
            f"ms for 1 without it: {g['speedup']:.2f}x the tokens per second"
        )
    return out
