"""`kvtier simulate --from-log LOG`: a workload fitted from a serving log, the timing model
calibrated to it, the calibrated baseline beside the log, and `--sweep` over that traffic."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from kvtier.engines.deployment import Deployment, Engine
from kvtier.errors import KvtierError
from kvtier.files import MAX_LOG_BYTES, check_output, open_input
from kvtier.report.json_text import emit

if TYPE_CHECKING:
    from kvtier.sim.sweep import SweepResult


def run(args: argparse.Namespace, flags: Any, deployment: Any) -> int:
    from kvtier.observe.samples import read_samples
    from kvtier.observe.workload_fit import fit_workload
    from kvtier.report.fit_view import baseline_tables, log_baseline, quiet_lines
    from kvtier.report.sim_view import sweep_table
    from kvtier.sim.baseline import compare
    from kvtier.sim.calibrate import calibrate, run_window
    from kvtier.sim.from_log import FIT_BLOCK_TOKENS, fitted_trace
    from kvtier.sim.payload import SimulatePayload
    from kvtier.sim.run import simulate
    from kvtier.sim.setup import build_config, refuse_dp_attention
    from kvtier.sim.sweep import CHANGES_DEVICE_TOKENS, parse_sweep, run_sweep, sweep_result

    if args.trace or args.generate:
        raise KvtierError("--from-log fits its own trace: give no TRACE and no --generate")
    refuse_dp_attention(deployment, "--from-log")
    if args.unbounded or args.lru_tokens is not None:
        raise KvtierError("--from-log runs the timed simulation: drop --unbounded / --lru-tokens")
    if args.output:
        check_output(args.output, [args.from_log])
    with open_input(args.from_log, "serving log", MAX_LOG_BYTES) as stream:
        samples = read_samples(stream, args.from_log)
    deployment = with_logged_async(deployment, samples.async_scheduling, args.from_log)
    fit = fit_workload(samples, args.mean_prompt_tokens, args.mean_output_tokens)
    device_tokens = args.device_tokens or fit.pool_tokens

    def config_for(t: Any, d: Any = deployment, tokens: int | None = device_tokens) -> Any:
        return build_config(d, FIT_BLOCK_TOKENS, tokens, t, args.store_tokens)

    calibration = calibrate(fit, flags, config_for)
    fitted, window = run_window(fit, config_for(calibration.flags))
    rows = compare(fit.window, window)
    if args.output:
        from kvtier.sim.trace import write_trace

        n = write_trace(fitted.trace.requests, args.output, FIT_BLOCK_TOKENS)
        blocks = f"blocks of {FIT_BLOCK_TOKENS} tokens, stated on every line"
        print(f"wrote the fitted trace, {n} requests ({blocks}), to {args.output}", file=sys.stderr)
    sweep_payload: SweepResult | None = None
    sweep_view = None
    if args.sweep:
        sweep = parse_sweep(args.sweep)
        pinned = device_tokens if sweep.param not in CHANGES_DEVICE_TOKENS else None
        if sweep.param in CHANGES_DEVICE_TOKENS and args.device_tokens is not None:
            raise KvtierError(
                f"--sweep {sweep.param} changes the device pool; "
                "drop --device-tokens so the ledger sizes it"
            )

        def run_one(d: Any, t: Any, params: dict[str, object]) -> Any:
            config = config_for(t, d, pinned)
            trace = fitted_trace(fit, config)
            warmup = trace.before / len(trace.trace.requests)
            return simulate(trace.trace, config, warmup, None, params)

        results = run_sweep(sweep, deployment, calibration.flags, run_one)
        sweep_payload = sweep_result(sweep, results)
        sweep_view = sweep_table(sweep.param, sweep.values, results)
    if args.json:
        baseline = log_baseline(fit, calibration, fitted, rows)
        emit(SimulatePayload(from_log=baseline, sweep=sweep_payload))
        return 0
    if args.quiet:
        print("\n".join(quiet_lines(calibration, rows)))
        return 0
    from kvtier.report.ledger_view import terminal

    console = terminal()
    for table in baseline_tables(fit, calibration, rows):
        console.print(table)
    if sweep_view is not None:
        console.print(sweep_view)
    misses = [r.metric for r in rows if not r.within]
    verdict = "within the stated tolerances" if not misses else f"outside: {', '.join(misses)}"
    print(f"baseline: {verdict} (docs/simulate.md)")
    return 0


def with_logged_async(d: Deployment, found: tuple[int, bool] | None, path: str) -> Deployment:
    """A vLLM deployment with the async-scheduling choice its log `path` printed, `found` (its
    line and the choice, as the serving samples read it; a sliding-window group's blocks depend
    on it from v0.26.0); a flag that says otherwise describes another server, and is refused."""
    if d.engine is not Engine.VLLM or found is None:
        return d
    number, on = found
    if d.async_scheduling is None:
        return d.with_values(f"log line {number}", async_scheduling=on)
    if d.async_scheduling != on:
        flag = "--async-scheduling" if d.async_scheduling else "--no-async-scheduling"
        logged = "enabled" if on else "disabled"
        raise KvtierError(
            f"{flag} contradicts {path} line {number}: vLLM logged asynchronous scheduling "
            f"{logged}; give the launch command of the server that wrote the log"
        )
    return d
