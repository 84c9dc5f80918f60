"""The one table of kvtier flags (plan, explain, advise, simulate) and the views derived from it:
each command's argparse groups, the settings a command reads from the flags, and its refusals.

A flag is one `KvFlag` row (flags/deployment.py, flags/simulate.py): its spellings, group,
Deployment field, a sample value, argparse's keywords, per command whether it is used or refused
and why, and the engines whose deployments refuse it and why. The engine's own spelling of a
field is its flag table's (engines/<engine>/flags.py).

Adding a flag is one row in the file of its group, e.g. for simulate
    flag("--store-gbps", group="timing", commands=SIM, sample=("0.1",), type=GBPS, help="...")
then reading `args.store_gbps` where it is used. A new group is one GROUPS entry and a place in
LAYOUT. tests/test_cli_flag_table.py runs every row's sample and fails on a flag that changes
nothing without being refused by name.
"""

from __future__ import annotations

import argparse

from kvtier.cli.flags.deployment import ADVICE, DEPLOYMENT, EXPLAIN_OWN, MEASURED, OUTPUT
from kvtier.cli.flags.row import ADVISE, EXPLAIN, PLAN, SIMULATE, USED, KvFlag
from kvtier.cli.flags.simulate import FLEET_HELP, MULTITURN_HELP, RANDOM_HELP, SHARED_PREFIX_HELP
from kvtier.cli.flags.simulate import ROWS as SIMULATE_ROWS
from kvtier.engines.settings import GivenFlags
from kvtier.errors import KvtierError

__all__ = [
    "ADVISE",
    "COMMANDS",
    "EXPLAIN",
    "FLAGS",
    "PLAN",
    "SIMULATE",
    "KvFlag",
    "add_flags",
    "given_names",
    "refuse",
    "refuse_for_engine",
    "rows",
    "settings",
]

FLAGS: tuple[KvFlag, ...] = (
    *DEPLOYMENT,
    *MEASURED,
    *OUTPUT,
    *ADVICE,
    *EXPLAIN_OWN,
    *SIMULATE_ROWS,
)
COMMANDS = (PLAN, EXPLAIN, ADVISE, SIMULATE)

_LAUNCH = """\
after `--`: the engine's own command (python -m sglang.launch_server ... or vllm serve ...);
kvtier reads the flags it models and names the ones it ignores, and the VAR=value words before
it that it models (VLLM_PP_LAYER_PARTITION, VLLM_USE_SIMPLE_KV_OFFLOAD, LMCache's settings,
SGLANG_ENABLE_EMBED_REPLICATION), naming the other SGLANG_*, VLLM_* and LMCACHE_* ones and
PyTorch's allocator settings (PYTORCH_CUDA_ALLOC_CONF), which it does not model:
  kvtier plan --gpu h100 -- VLLM_PP_LAYER_PARTITION=20,16 vllm serve Qwen/Qwen3-8B \\
      --pipeline-parallel-size 2
  kvtier plan --gpu h200 -- python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \\
      --tp 8 --dp 2 --enable-dp-attention --enable-dp-lm-head"""
GROUPS: dict[str, tuple[str, str | None]] = {
    "launch": ("launch command", _LAUNCH),
    "deployment": ("deployment", None),
    "hybrid": ("hybrid linear-attention models (Qwen3-Next, Qwen3.5 / 3.6)", None),
    "measured": ("measured figures (GiB per GPU; from a real startup)", None),
    "output": ("output", None),
    "advice": ("advice", None),
    "workloads": ("synthetic workloads (written in the Mooncake format)", None),
    "simulation": ("simulation", None),
    "multiturn": (
        "--generate multiturn: SGLang's benchmark/hicache/bench_multiturn.py as a trace",
        MULTITURN_HELP,
    ),
    "fleet": ("fleet: replicas behind a router", FLEET_HELP),
    "shared_prefix": (
        "--generate shared-prefix: inference-perf's shared_prefix data",
        SHARED_PREFIX_HELP,
    ),
    "bench": ("--generate random: a serving benchmark's random dataset", RANDOM_HELP),
    "timing": ("timing model (defaults: see the end of this help)", None),
    "from_log": ("a workload fitted from a serving log", None),
}
_DEPLOYMENT = ("launch", "deployment", "hybrid", "measured", "output")
# each command's groups in help order; "" is the command's own options
LAYOUT: dict[str, tuple[str, ...]] = {
    PLAN: ("", *_DEPLOYMENT),
    ADVISE: ("", "advice", *_DEPLOYMENT),
    EXPLAIN: ("", *_DEPLOYMENT[1:]),
    SIMULATE: (
        "",
        "workloads",
        "simulation",
        "multiturn",
        "fleet",
        "shared_prefix",
        "bench",
        "timing",
        "from_log",
        *_DEPLOYMENT,
    ),
}


def rows(command: str) -> tuple[KvFlag, ...]:
    """The flags `command` accepts (uses or refuses), in table order."""
    return tuple(f for f in FLAGS if command in f.commands)


def add_flags(p: argparse.ArgumentParser, command: str) -> None:
    """`command`'s flags, group by group; its positionals are added before."""
    launch = "launch" in LAYOUT[command]
    for key in LAYOUT[command]:
        target: argparse.ArgumentParser | argparse._ArgumentGroup = p
        if key:
            title, description = GROUPS[key]
            if key == "deployment" and launch:
                title += " (override the launch command)"
            target = p.add_argument_group(title, description)
        for row in rows(command):
            if row.group == key:
                target.add_argument(*row.names, **row.spec)


def _given(args: argparse.Namespace, row: KvFlag) -> object:
    """The row's value when the user gave it, else None."""
    value = getattr(args, row.dest, None)
    if value is None or value is False or value == row.spec.get("default"):
        return None
    return value


def given_names(args: argparse.Namespace, flags: tuple[KvFlag, ...]) -> list[str]:
    """The names of `flags` given on the command line, in table order."""
    return [row.name for row in flags if _given(args, row) is not None]


def refuse(args: argparse.Namespace, command: str) -> None:
    """Exit 2 naming the first flag `command` refuses that was given, and why; or the first
    given an empty value (`--sweep ''` read as no sweep, `--router ''` as the default)."""
    for row in rows(command):
        value = getattr(args, row.dest, None)
        words = value if isinstance(value, list) else [value]
        if "const" not in row.spec and any(isinstance(w, str) and not w.strip() for w in words):
            raise KvtierError(f"{row.name} is given an empty value")
    for row in rows(command):
        why = row.commands[command]
        if why != USED and _given(args, row) is not None:
            raise KvtierError(f"{command} does not use {row.name}: {why}")


def refuse_for_engine(args: argparse.Namespace, command: str, engine: str) -> None:
    """Exit 2 naming the first flag given that `engine`'s deployments do not use, and why."""
    for row in rows(command):
        why = row.engines.get(engine)
        if why and _given(args, row) is not None:
            raise KvtierError(f"{row.name} is {why}")


def settings(args: argparse.Namespace, command: str, skip: tuple[str, ...] = ()) -> GivenFlags:
    """The fields the given flags set (fields in `skip` left out), each with the flag that set
    it; two flags of one field must agree (`--gpu-memory-utilization` and
    `--mem-fraction-static`), or both are refused."""
    given = GivenFlags()
    for row in rows(command):
        if row.field is None or row.field in skip or row.commands[command] != USED:
            continue
        value = getattr(args, row.dest, None)
        if value is None:
            continue
        name = row.field
        if name in given and given[name] != value:
            raise KvtierError(
                f"{given.written[name]} {given[name]} contradicts {row.name} {value} "
                f"(both set {name}); give one"
            )
        if name not in given:
            given.set(name, value, row.name)
    return given
