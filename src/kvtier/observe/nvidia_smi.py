"""nvidia-smi's "used" against the startup log's ledger: what fills the card while it serves.

Reads nvidia-smi's default table or `nvidia-smi --query-gpu=index,memory.used,memory.total
--format=csv[,noheader][,nounits]`. Both print MiB (2^20 bytes). One GPU, SGLang:

    |- CUDA context -|- weights -|- KV pool -|- pool extras -|- draft, graphs -|- remainder -|
     total - free      Load weight  KV Cache is  after load - KV  the log's reserve  used - items:
     before load       end          allocated    - pool end       consumers          caching
                                                                                     allocator
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass

from kvtier.engines.ledger import LedgerItem
from kvtier.engines.sglang.explain_memory import SGLangMemory
from kvtier.engines.sglang.log import SGLangStartup
from kvtier.errors import KvtierError
from kvtier.ledger.explain import Explanation
from kvtier.logs.facts import Fact
from kvtier.units import GiB

MiB = 1 << 20

_TABLE_MEMORY = re.compile(r"\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|")
_TABLE_GPU = re.compile(r"^\|\s+(\d+)\s+\S")
_CSV_HEAD = re.compile(r"^\s*index\s*,", re.IGNORECASE)
_CSV_VALUE = re.compile(r"^\s*(\d+)(?:\s*MiB)?\s*$")
_CSV_COLUMNS = ("index", "memory.used", "memory.total")


@dataclass(frozen=True, slots=True)
class GpuMemory:
    """One GPU row of nvidia-smi: memory in MiB, as printed, and the line it came from."""

    index: int
    used_mib: int
    total_mib: int
    line: int

    @property
    def used_gib(self) -> float:
        return self.used_mib * MiB / GiB

    @property
    def total_gib(self) -> float:
        return self.total_mib * MiB / GiB


@dataclass(frozen=True, slots=True)
class CardReconciliation:
    """nvidia-smi's "used" on one GPU, item by item from the log, and what stays unexplained."""

    gpus: tuple[GpuMemory, ...]
    compared: GpuMemory  # the fullest GPU: the log's figures are the min over ranks of free memory
    items: tuple[LedgerItem, ...]  # held while serving, context first
    remainder: LedgerItem  # used - the items: the caching allocator's keep, and unsized items
    unsized: tuple[str, ...]  # consumers the log does not size: they hide in the remainder
    notes: tuple[str, ...]


def parse_nvidia_smi(text: str, source: str) -> tuple[GpuMemory, ...]:
    """Every GPU row of an nvidia-smi table or --query-gpu CSV; a KvtierError naming bad input."""
    lines = text.splitlines()
    first = next((i for i, s in enumerate(lines) if s.strip()), None)
    if first is None:
        raise KvtierError(f"{source}: empty, not nvidia-smi output")
    if any(s.lstrip().startswith("|") or "NVIDIA-SMI" in s for s in lines):
        gpus = _table(lines, source)
    else:
        gpus = _csv(lines, first, source)
    seen = [g.index for g in gpus]
    if len(set(seen)) != len(seen):
        raise KvtierError(f"{source}: GPU {_repeated(seen)} appears twice")
    for g in gpus:
        if g.used_mib > g.total_mib:
            raise KvtierError(
                f"{source}: line {g.line}: GPU {g.index} uses {g.used_mib} MiB of {g.total_mib} MiB"
            )
    return gpus


def _repeated(seen: list[int]) -> int:
    return next(i for i in seen if seen.count(i) > 1)


def _table(lines: list[str], source: str) -> tuple[GpuMemory, ...]:
    gpus: list[GpuMemory] = []
    index: int | None = None
    for number, line in enumerate(lines, 1):
        if "Processes:" in line or "MIG devices:" in line:
            break  # per-process and per-MIG memory are not the card's
        if (m := _TABLE_MEMORY.search(line)) is not None:
            if index is None:
                raise KvtierError(f"{source}: line {number}: memory with no GPU row before it")
            gpus.append(GpuMemory(index, int(m[1]), int(m[2]), number))
            index = None
        elif (g := _TABLE_GPU.match(line)) is not None:
            index = int(g[1])
    if not gpus:
        raise KvtierError(f"{source}: no GPU row with 'USED MiB / TOTAL MiB' in the table")
    return tuple(gpus)


def _csv(lines: list[str], first: int, source: str) -> tuple[GpuMemory, ...]:
    columns = list(range(3))
    start = first
    if _CSV_HEAD.match(lines[first]):
        names = [c.strip().split(" [")[0] for c in lines[first].split(",")]
        missing = [c for c in _CSV_COLUMNS if c not in names]
        if missing:
            raise KvtierError(f"{source}: line {first + 1}: the CSV has no {missing[0]} column")
        columns = [names.index(c) for c in _CSV_COLUMNS]
        start = first + 1
    gpus = []
    for number, row in enumerate(csv.reader(lines[start:]), start + 1):
        if not row or not "".join(row).strip():
            continue
        if start == first and len(row) != 3:
            raise KvtierError(
                f"{source}: line {number}: not nvidia-smi output (a table, or CSV of "
                "--query-gpu=index,memory.used,memory.total)"
            )
        values = [_CSV_VALUE.match(row[c]) if c < len(row) else None for c in columns]
        if any(v is None for v in values):
            raise KvtierError(f"{source}: line {number}: not 'index, used MiB, total MiB'")
        index, used, total = (int(v[1]) for v in values if v is not None)
        gpus.append(GpuMemory(index, used, total, number))
    if not gpus:
        raise KvtierError(f"{source}: a CSV header and no GPU rows")
    return tuple(gpus)


# Ledger rows that are bases or budgets, not memory held: left out of the sum.
_NOT_HELD = (
    "free before load",
    "reserve:",
    "device total",
    "outside vLLM's budget",
    "KV cache budget",
    "activation peak",
    "CUDA-graph estimate",
)


def unreconciled(gpus: tuple[GpuMemory, ...], why: str) -> CardReconciliation:
    """nvidia-smi alone, with no ledger to set against it: all of "used" stays unexplained."""
    compared = _fullest(gpus)
    rest = LedgerItem(
        "unexplained: no startup ledger", compared.used_gib, f"used (line {compared.line})", False
    )
    return CardReconciliation(gpus, compared, (), rest, (), (why,))


def _fullest(gpus: tuple[GpuMemory, ...]) -> GpuMemory:
    return max(gpus, key=lambda g: (g.used_mib, -g.index))


def _free_at_pool_end(e: Explanation) -> Fact[float] | None:
    startup = e.inputs.parsed.startup
    return startup.free_at_pool_end() if isinstance(startup, SGLangStartup) else None


def reconcile_card(gpus: tuple[GpuMemory, ...], e: Explanation) -> CardReconciliation:
    """nvidia-smi's used on the fullest GPU, as the ledger's items plus a named remainder."""
    compared = _fullest(gpus)
    sglang = e.inputs.memory if isinstance(e.inputs.memory, SGLangMemory) else None
    notes = [
        f"GPU {compared.index} is compared: the most used of {len(gpus)}; the log's figures are "
        "the minimum over ranks of free memory, so the fullest rank"
    ]
    items: list[LedgerItem] = []
    if sglang is not None:
        before = sglang.free_before
        if before.value > compared.total_gib:
            raise KvtierError(
                f"nvidia-smi: GPU {compared.index} has {compared.total_gib:.2f} GiB in all, less "
                f"than the log's {before.value:.2f} GiB free before load: not this server's card"
            )
        items.append(
            LedgerItem(
                "CUDA context and before-load overheads",
                compared.total_gib - before.value,
                f"card total {compared.total_mib} MiB (line {compared.line}) - free before load "
                f"{before.value:.2f} GiB ({before.where})",
                True,
            )
        )
    ledger = e.ledger
    held = [*ledger.items, *ledger.reserve_uses]
    items += [i for i in held if not i.item.startswith(_NOT_HELD)]
    if not any(i.item.startswith("KV cache blocks") for i in items):
        items += [i for i in ledger.items if i.item == "KV cache budget"]
    unsized = tuple(u.item for u in ledger.unlogged)
    if sglang is None:
        unsized = ("the CUDA context", *unsized)
    rest = compared.used_gib - sum(i.gib for i in items)
    what = "kept by PyTorch's caching allocator after activation peaks"
    if unsized:
        what += ", and " + ", ".join(unsized) + " (not sized by the log)"
    remainder = LedgerItem(
        f"remainder: {what}",
        rest,
        f"used {compared.used_mib} MiB (line {compared.line}) - the items above",
        False,
    )
    pool_end = _free_at_pool_end(e)
    if pool_end is not None:
        at_start = compared.total_gib - pool_end.value
        notes.append(
            f"at the end of start-up the card held total - free at pool end = "
            f"{compared.total_gib:.2f} - {pool_end.value:.2f} = {at_start:.2f} GiB "
            f"({pool_end.where}); serving holds {compared.used_gib - at_start:.2f} GiB more, out "
            "of the reserve the fraction kept free for it"
        )
    if rest < 0:
        notes.append(
            f"the items exceed nvidia-smi's used by {-rest:.2f} GiB: nvidia-smi was read "
            "before the server finished starting, or on another card"
        )
    return CardReconciliation(gpus, compared, tuple(items), remainder, unsized, tuple(notes))
