"""`kvtier simulate` with a fleet (replicas behind a router, an L3 store they share) and with
inference-perf's shared-prefix workload (`--generate shared-prefix`): their checks and runs (the
flags are rows of cli/flags/simulate.py)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from kvtier.cli.flags import given_names
from kvtier.cli.flags.simulate import DEFAULT_ROUTER
from kvtier.cli.flags.simulate import SHARED_PREFIX as GENERATOR
from kvtier.errors import KvtierError
from kvtier.report.json_text import emit

SHARED_PREFIX = "shared-prefix"
STAGES = "--rate-stages"
LOAD_TYPE = "--load-type"
MEASURE = "--measure-stages"
FLEET_SWEEPS = ("router", "replicas")


def sweep_name(args: argparse.Namespace) -> str | None:
    """The fleet setting `--sweep NAME=...` sweeps (None: none, or not a fleet's)."""
    if not args.sweep:
        return None
    name = args.sweep.partition("=")[0].strip()
    return name if name in FLEET_SWEEPS else None


def active(args: argparse.Namespace) -> bool:
    """Whether the run is a fleet's: more than one replica, a shared store, or a sweep over
    router or replicas. One replica without them is today's single server, printed as before
    (a router in front of one server sends it everything)."""
    return (
        (args.replicas or 1) > 1
        or args.shared_store_tokens is not None
        or sweep_name(args) is not None
    )


def check(args: argparse.Namespace) -> None:
    """Refuse fleet and generator flags the run cannot use, one line each."""
    if args.generate != SHARED_PREFIX:
        given = given_names(args, GENERATOR)
        if given:
            raise KvtierError(f"{', '.join(given)} apply to --generate {SHARED_PREFIX}")
    else:
        missing = [
            row.name
            for row in GENERATOR
            if getattr(args, row.dest) is None and row.name not in (STAGES, LOAD_TYPE, MEASURE)
        ]
        if missing:
            raise KvtierError(f"--generate {SHARED_PREFIX} needs {', '.join(missing)}")
    if args.rate_stages:
        _check_stages(args)
    elif args.load_type is not None:
        raise KvtierError(f"{LOAD_TYPE} times {STAGES}: give the stages")
    elif args.measure_stages is not None:
        raise KvtierError(f"{MEASURE} picks the {STAGES} measured: give the stages")
    store = args.shared_store_gbps is not None or args.shared_store_latency_ms is not None
    if store and args.shared_store_tokens is None:
        raise KvtierError(
            "--shared-store-gbps / --shared-store-latency-ms describe a shared store: "
            "give --shared-store-tokens"
        )
    if args.shared_store_tokens is not None and args.store_tokens:
        raise KvtierError("give --store-tokens (one store per replica) or --shared-store-tokens")
    if args.shared_store_gbps is not None and args.store_gbps is not None:
        raise KvtierError("give --store-gbps or --shared-store-gbps, not both")
    if args.router is not None or args.router_opt:
        from kvtier.sim.fleet.policy import parse_options
        from kvtier.sim.fleet.registry import lookup

        name = args.router or DEFAULT_ROUTER
        parse_options(name, lookup(name, 512), args.router_opt)
    if args.ray is not None and sweep_name(args) is None:
        raise KvtierError(
            "--ray runs a fleet sweep's points on a Ray cluster: give --sweep router= or replicas="
        )
    if args.ray is not None and args.jobs > 1:
        raise KvtierError("give --jobs N (local processes) or --ray ADDRESS, not both")
    if args.jobs > 1 and sweep_name(args) is None:
        raise KvtierError(
            "--jobs runs a fleet sweep's points in parallel: give --sweep router= or replicas="
        )
    if not active(args):
        return
    for flag, used in (
        ("--unbounded / --lru-tokens", args.unbounded or args.lru_tokens is not None),
        ("--from-log", bool(args.from_log)),
        ("--max-parallel", args.max_parallel is not None),
    ):
        if used:
            raise KvtierError(f"{flag} runs one server: drop the fleet flags")


def _check_stages(args: argparse.Namespace) -> None:
    """--rate-stages stands for --rate and --requests, holds each stage until the one before
    has finished (a fleet's loop does), and is measured over its last stage, all of them, or all
    but the first (ladder: two stages at least)."""
    if args.rate != 1.0 or args.requests is not None:
        flag = "--rate" if args.rate != 1.0 else "--requests"
        raise KvtierError(f"{STAGES} replaces {flag}: drop it")
    for flag, used in (
        ("--warmup-fraction", args.warmup_fraction != 0.0),
        ("--time-scale", args.time_scale != 1.0),
        ("-o", bool(args.output)),
    ):
        if used:
            raise KvtierError(
                f"{STAGES} does not take {flag}: the fleet runs it, its stages measured"
            )
    if not active(args):
        raise KvtierError(f"{STAGES} runs a fleet: give --replicas N (N > 1)")
    if args.measure_stages == "ladder" and len(args.rate_stages) < 2:
        raise KvtierError(
            f"{MEASURE} ladder measures the stages after the first (its warm-up): give two or "
            f"more {STAGES}, not {len(args.rate_stages)}"
        )


def generate(args: argparse.Namespace) -> Any:
    from kvtier.sim.shared_prefix import POISSON, SharedPrefixSpec, ladder, shared_prefix
    from kvtier.sim.trace import MOONCAKE_BLOCK_TOKENS, Trace

    spec = SharedPrefixSpec(
        args.groups,
        args.prompts_per_group,
        args.system_tokens,
        args.question_tokens,
        args.output_tokens or 256,
        args.rate,
        args.requests or 1000,
        args.block_tokens or MOONCAKE_BLOCK_TOKENS,
        args.rate_stages or (),
        args.load_type or POISSON,
    )
    if spec.stages:
        return ladder(spec, args.seed)
    requests = shared_prefix(spec, args.seed)
    return Trace(requests, spec.block_tokens, f"generated {SHARED_PREFIX} seed {args.seed}")


def _spec(args: argparse.Namespace, replicas: int | None = None, router: str | None = None) -> Any:
    from kvtier.sim.fleet.run import FleetSpec

    return FleetSpec(
        replicas=replicas if replicas is not None else args.replicas or 1,
        router=router or args.router or DEFAULT_ROUTER,
        router_options=tuple(args.router_opt),
        seed=args.seed,
        shared_store=args.shared_store_tokens is not None,
        store_latency_s=(args.shared_store_latency_ms or 0.0) / 1e3,
        stages_measured=args.measure_stages or "last",
    )


def _points(args: argparse.Namespace) -> tuple[str, list[tuple[str, Any]]]:
    """The sweep's parameter and (value, FleetSpec) per point; one point without a sweep."""
    name = sweep_name(args)
    if name is None:
        return "", [("", _spec(args))]
    from kvtier.sim.sweep import sweep_values

    values = sweep_values(name, args.sweep.partition("=")[2])
    points = []
    for v in values:
        if name == "router":
            points.append((v, _spec(args, router=v)))
            continue
        try:
            n = int(v)
        except ValueError:
            raise KvtierError(f"--sweep replicas: {v!r} is not a whole number") from None
        points.append((v, _spec(args, replicas=n)))
    for _, spec in points:
        spec.check()
    return name, points


def run(args: argparse.Namespace, trace: Any, deployment: Any, flags: Any, progress: Any) -> int:
    """Simulate the fleet (or a sweep of fleets) and print it."""
    from kvtier.cli import simulate_hicache
    from kvtier.sim.fleet.policy import parse_options
    from kvtier.sim.fleet.registry import lookup
    from kvtier.sim.setup import build_config, refuse_dp_attention

    refuse_dp_attention(deployment, "--replicas")
    if args.shared_store_gbps is not None:
        flags = dataclasses.replace(flags, store_gbps=args.shared_store_gbps)
    store = args.shared_store_tokens or args.store_tokens
    config = build_config(
        deployment,
        trace.block_size,
        args.device_tokens,
        flags,
        store,
        simulate_hicache.prefetch_flags(args),
    )
    if args.shared_store_tokens is not None and not config.store_blocks:
        raise KvtierError(
            f"--shared-store-tokens {args.shared_store_tokens:,} holds no whole block "
            f"({config.block_tokens:,} tokens)"
        )
    param, points = _points(args)
    for _, spec in points:  # every point's policy and options, before the first run
        parse_options(spec.router, lookup(spec.router, trace.block_size), spec.router_options)
    runs = _run_points(args, trace, config, param, points, progress)
    progress.done()
    _print(args, deployment, config, param, [v for v, _ in points], runs)
    return 0


def _run_points(
    args: argparse.Namespace,
    trace: Any,
    config: Any,
    param: str,
    points: list[tuple[str, Any]],
    progress: Any,
) -> list[Any]:
    """One fleet per point, in order; with --jobs N > 1, in N processes (no progress bars)."""
    from kvtier.sim.fleet.run import simulate_fleet

    def extra(value: str) -> dict[str, object]:
        out: dict[str, object] = {"time_scale": args.time_scale}
        if param:
            out |= {"sweep_param": param, "sweep_value": value}
        return out

    if args.ray is not None:
        return _on_ray(
            args.ray,
            [(trace, config, spec, args.warmup_fraction, None, extra(v)) for v, spec in points],
        )
    if args.jobs > 1 and len(points) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(min(args.jobs, len(points))) as pool:
            futures = [
                pool.submit(
                    simulate_fleet, trace, config, spec, args.warmup_fraction, None, extra(v)
                )
                for v, spec in points
            ]
            return [f.result() for f in futures]
    runs = []
    for value, spec in points:
        bar = progress.bar(
            f"simulating {spec.replicas} replicas, {spec.router}", len(trace.requests)
        )
        runs.append(simulate_fleet(trace, config, spec, args.warmup_fraction, bar, extra(value)))
    return runs


def _on_ray(address: str, calls: list[tuple[Any, ...]]) -> list[Any]:
    """Each point a Ray task on the cluster at `address` (empty: RAY_ADDRESS), in order."""
    import logging
    import os

    address = address or os.environ.get("RAY_ADDRESS", "")
    if not address:
        raise KvtierError("--ray without ADDRESS reads RAY_ADDRESS, which is not set")
    _check_reachable(address)
    try:
        import ray
    except ImportError:
        raise KvtierError("--ray needs the ray package: pip install 'kvtier[ray]'") from None
    from kvtier.sim.fleet.run import simulate_fleet

    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise KvtierError(f"--ray {address:.80}: no Ray cluster there ({str(exc)[:80]})") from None
    try:
        task = ray.remote(simulate_fleet)
        return list(ray.get([task.remote(*call) for call in calls]))
    finally:
        ray.shutdown()


def _check_reachable(address: str) -> None:
    """A HOST:PORT (or ray://HOST:PORT) address must take a TCP connection within 5 s: ray.init
    retries an unreachable one for a minute or more. Other forms ('auto') go to Ray as given."""
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon:
        return
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535 and host):
        raise KvtierError(f"--ray {address!r:.80}: expected HOST:PORT (or ray://HOST:PORT)")
    import socket

    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except (OSError, UnicodeError) as exc:
        raise KvtierError(f"--ray {address:.80}: no Ray cluster there ({str(exc)[:80]})") from None


def _print(
    args: argparse.Namespace,
    deployment: Any,
    config: Any,
    param: str,
    values: list[str],
    runs: list[Any],
) -> None:
    from kvtier.report.fleet_view import fleet_sweep_table, fleet_table, replica_table
    from kvtier.report.ledger_view import terminal

    notes = config.notes()
    if args.json:
        emit(fleet_payload(param, values, runs, notes))
        return
    if args.quiet:
        for v, r in zip(values, runs, strict=True):
            prefix = f"{param}={v} " if param else ""
            print(f"{prefix}hit_rate={r.result.hit_rate:.4f} imbalance={r.imbalance:.3f}")
        return
    console = terminal()
    if param:
        console.print(fleet_sweep_table(param, values, runs))
    else:
        title = f"{deployment.model} on {deployment.tp} x {deployment.gpu}, fleet"
        console.print(fleet_table(runs[0], title))
        console.print(replica_table(runs[0]))
    for line in notes:
        print(f"note: {line}")
    for name, source in config.sources:
        print(f"source: {name}: {source}")


def fleet_payload(param: str, values: list[str], runs: list[Any], notes: list[str]) -> Any:
    """One fleet run, or a sweep of them, with the setup's notes."""
    from kvtier.sim.fleet.payload import fleet_run
    from kvtier.sim.payload import SimulatePayload
    from kvtier.sim.sweep import SweepResult, SweepRun

    if not param:
        run, fleet = fleet_run(runs[0])
        return SimulatePayload(run=run, fleet=fleet, notes=tuple(notes))
    swept = tuple(SweepRun(v, *fleet_run(r)) for v, r in zip(values, runs, strict=True))
    return SimulatePayload(sweep=SweepResult(param, swept), notes=tuple(notes))
