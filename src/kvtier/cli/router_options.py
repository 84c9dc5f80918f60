"""`kvtier simulate --router POLICY --router-opt help`: the policy's `--router-opt` keys, each
with its default, the values it takes and its help, read from the policy's `RouterOption` rows
(sim/fleet/), the one place they are declared."""

from __future__ import annotations

import argparse

from kvtier.cli.flags.simulate import DEFAULT_ROUTER, ROUTER_OPT_HELP
from kvtier.cli.simulate_fleet import sweep_name
from kvtier.errors import KvtierError, shown
from kvtier.report.json_text import emit


def asked(args: argparse.Namespace) -> bool:
    """Whether `--router-opt help` was given; refused beside other `--router-opt` values, and
    beside a --sweep over routers without --router (it would list the default policy's)."""
    if ROUTER_OPT_HELP not in args.router_opt:
        return False
    if len(args.router_opt) > 1:
        raise KvtierError(f"--router-opt {ROUTER_OPT_HELP} lists the options: give it alone")
    if args.router is None and sweep_name(args) == "router":
        raise KvtierError(
            f"--router-opt {ROUTER_OPT_HELP} lists one policy's options: give --router POLICY, "
            f"not --sweep {shown(args.sweep):.60}"
        )
    return True


def show(args: argparse.Namespace) -> int:
    """Print the options of `--router` (the default policy without one)."""
    from kvtier.sim.fleet.payload import router_options
    from kvtier.sim.fleet.registry import lookup
    from kvtier.sim.trace import MOONCAKE_BLOCK_TOKENS

    name = args.router or DEFAULT_ROUTER
    policy = lookup(name, MOONCAKE_BLOCK_TOKENS)  # a default that follows the trace is marked
    if args.json:
        emit(router_options(name, policy))
        return 0
    if not policy.options:
        print(f"--router {name} takes no --router-opt options ({policy.source})")
        return 0
    print(f"--router {name} options, each --router-opt KEY=VALUE ({policy.source}):")
    rows = [("KEY", "DEFAULT", "VALUES", "WHAT IT SETS")]
    rows += [(k, o.default_text, o.parse.allowed, o.help) for k, o in policy.options.items()]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("  " + "  ".join([*cells, row[3]]))
    return 0
