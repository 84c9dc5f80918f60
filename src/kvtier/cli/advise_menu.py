"""The options `kvtier advise --workload` simulates: advise's menu (ledger/advise.py) plus the
scheduling knobs, the L3 store and a second replica, each as the engine flags an operator adds
and the `kvtier simulate` words that model them."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from kvtier.cli.flags import ADVISE, SIMULATE, rows
from kvtier.cli.flags.row import USED, KvFlag
from kvtier.engines.deployment import Engine
from kvtier.engines.inputs import PlanInputs
from kvtier.engines.ledger import Ledger
from kvtier.ledger.advise import (
    FRACTION_STEPS,
    HostSetup,
    Option,
    OptionKind,
    all_options,
    fraction_flag,
    free_at_end,
    max_safe_fraction,
    spelled,
    variant,
)
from kvtier.units import GB, GiB

STORE_POOLS = 20  # the L3 option's store: this many device pools of tokens
# engine switches kvtier's own flags already imply: the host tier is on once it has a size, a
# store once it has tokens, vLLM's native offloading is the backend --kv-offloading-size sizes
IMPLIED = {"--enable-hierarchical-cache": 0, "--hicache-storage-backend": 1}


@dataclass(frozen=True, slots=True)
class Candidate:
    """One option before it runs: engine flags, the simulate words beyond them, its price."""

    name: str
    kind: str
    flags: tuple[str, ...]
    risk: str
    sim_words: tuple[str, ...] = ()  # kvtier simulate words that are not engine flags
    fits: bool = True
    why_not: str | None = None
    host_gb_per_node: float = 0.0
    replicas: int = 1


def sim_rows() -> dict[str, KvFlag]:
    """simulate's flags by every spelling."""
    return {
        name: row for row in rows(SIMULATE) if row.commands[SIMULATE] == USED for name in row.names
    }


def pairs(words: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """`--flag value --switch` as (flag, values) pairs."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for word in words:
        if word.startswith("--") or not out:
            out.append((word, ()))
        else:
            flag, values = out[-1]
            out[-1] = (flag, (*values, word))
    return out


def deployment_words(args: argparse.Namespace, skip_fields: set[str]) -> list[str]:
    """The deployment flags given to advise, as simulate takes them (fields in `skip_fields`,
    which an option sets, left out so the option's spelling is the only one)."""
    words: list[str] = []
    for row in rows(ADVISE):
        if row.commands[ADVISE] != USED or row.commands.get(SIMULATE) != USED:
            continue
        if row.name in ("--json", "--quiet") or (row.field and row.field in skip_fields):
            continue
        value = getattr(args, row.dest, None)
        if value is None or value is False or value == row.spec.get("default"):
            continue
        words += [row.name] if value is True else [row.name, _word(value)]
    return words


def _word(value: object) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def fields_of(words: Sequence[str]) -> dict[str, object]:
    """The Deployment fields simulate words set, typed as the flag table reads them."""
    table = sim_rows()
    out: dict[str, object] = {}
    for flag, values in pairs(words):
        row = table.get(flag)
        if row is None or row.field is None:
            continue
        convert = row.spec.get("type")
        out[row.field] = True if not values else convert(values[0]) if convert else values[0]
    return out


def _from_ledger(option: Option, host: HostSetup) -> Candidate:
    figures = dict(option.figures)
    kind = option.kind.value
    if not option.flags:  # "no room": the fraction cannot rise within the margin
        return Candidate(option.name, kind, (), option.cost, fits=False, why_not=option.cost)
    host_gb = figures.get("host_gb_per_node", 0.0)
    # vLLM states its host tier as GiB over the ranks
    if option.kind is OptionKind.HOST_TIER and "host_gb_per_node" not in figures:
        host_gb = float(option.flags[-1]) * GiB / GB
    fits = figures.get("engine_check_ok", 1.0) == 1.0 and figures.get("node_check_ok", 1.0) == 1.0
    if host.ram_available_gb is not None and host_gb > host.ram_available_gb:
        fits = False
    why = None if fits else f"host RAM: {option.cost}"
    return Candidate(option.name, kind, option.flags, option.cost, (), fits, why, host_gb)


def candidates(
    p: PlanInputs,
    base: Ledger,
    margin_gib: float,
    host: HostSetup,
    params: dict[str, object],
) -> list[Candidate]:
    """Advise's menu and the knobs the baseline run's `params` (its running-request cap and
    prefill chunk) say are in force."""
    d = p.deployment
    out = [_from_ledger(o, host) for o in all_options(p, base, margin_gib, host)]
    out += _over_margin(p, base, margin_gib)
    cap, chunk = params.get("max_running_requests"), params.get("chunked_prefill_size")
    if isinstance(cap, int) and cap > 1:
        out.append(
            Candidate(
                f"max running requests {cap // 2}",
                OptionKind.RUNNING_CAP.value,
                (spelled(p, "max_running_requests"), str(cap // 2)),
                "fewer requests decode at once: each decodes faster, the queue grows",
            )
        )
    if isinstance(chunk, int) and chunk > 0:
        out.append(
            Candidate(
                f"chunked prefill {chunk * 2}",
                OptionKind.CHUNKED_PREFILL.value,
                (spelled(p, "chunked_prefill_size"), str(chunk * 2)),
                "long prompts prefill in fewer steps; a larger activation peak (OOM risk) and "
                "decode steps wait behind longer prefill batches",
            )
        )
    if d.engine is Engine.SGLANG:
        out.append(_store(p, base))
    out.append(_replicas())
    if d.speculative_algorithm:
        out += _speculative(p)
    return out


def _speculative(p: PlanInputs) -> list[Candidate]:
    """One draft step fewer and one more (a chain draft, top-k 1: draft tokens = steps + 1),
    where the launch command states its steps; otherwise listed, not run."""
    d = p.deployment
    steps, topk = d.speculative_num_steps, d.speculative_eagle_topk or 1
    if d.engine is not Engine.SGLANG or steps is None or topk != 1:
        return [
            Candidate(
                f"speculative decoding ({d.speculative_algorithm}) settings",
                "speculative",
                (),
                "draft acceptance decides its gain",
                fits=False,
                why_not="not varied: give SGLang's --speculative-num-steps with "
                "--speculative-eagle-topk 1 in the launch command",
            )
        ]
    return [
        Candidate(
            f"speculative steps {n}",
            "speculative",
            ("--speculative-num-steps", str(n), spelled(p, "speculative_num_draft_tokens"),
             str(n + 1)),
            f"{n} draft steps a decode iteration instead of {steps}: each accepted run "
            "is longer" if n > steps else f"{n} draft steps instead of {steps}: a cheaper "
            "draft, fewer tokens accepted a verify",
        )
        for n in (steps - 1, steps + 1)
        if n >= 1
    ]  # fmt: skip


def _over_margin(p: PlanInputs, base: Ledger, margin_gib: float) -> list[Candidate]:
    """The first fraction step past the highest safe one, shown as not fitting the margin."""
    if p.deployment.kv_cache_memory_bytes is not None:
        return []
    top = max_safe_fraction(p, base, margin_gib)
    over = next((f for f in FRACTION_STEPS if f > max(top, base.mem_fraction)), None)
    led = None if over is None else variant(p, mem_fraction=over)
    if over is None or led is None:
        return []

    def kv_gib(ledger: Ledger) -> float:
        return sum(i.gib for i in ledger.items if i.item in ("KV cache pool", "draft KV pool"))

    left = free_at_end(base) - (kv_gib(led) - kv_gib(base))
    flag = fraction_flag(p)
    why = (
        f"OOM margin: {left:.2f} GiB left free at the end of startup, under --margin-gib "
        f"{margin_gib:.2f}"
    )
    kind = OptionKind.FRACTION.value
    return [Candidate(f"{flag} {over:.2f}", kind, (flag, f"{over:.2f}"), why, (), False, why)]


def _store(p: PlanInputs, base: Ledger) -> Candidate:
    tokens = STORE_POOLS * base.kv_tokens
    return Candidate(
        "HiCache ratio 2 + L3 file store",
        "store",
        (
            spelled(p, "hicache.enable"),
            spelled(p, "hicache.ratio"),
            "2",
            "--hicache-storage-backend",
            "file",
        ),
        f"a disk store of {tokens:,} tokens ({STORE_POOLS} device pools) behind a host tier "
        "of 2x the device pool; prefetches wait on the disk's bandwidth",
        ("--store-tokens", str(tokens)),
    )


def _replicas() -> Candidate:
    router = "sglang-cache-aware"
    return Candidate(
        f"2 replicas behind {router}",
        "replicas",
        (),
        "a second server with the same flags, behind sglang-router --policy cache_aware: "
        "twice the GPUs",
        ("--replicas", "2", "--router", router),
        replicas=2,
    )
