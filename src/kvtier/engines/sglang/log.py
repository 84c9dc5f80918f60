"""SGLang startup logs (eras A, B and C) read into observed facts.

Line templates: `model_runner.py::load_model` (Load weight begin/end),
`mem_cache/memory_pool.py` (`KV Cache is allocated.` for MHA and MLA pools, from 2026 with
`dtype: ...` before the count; MambaPool's `Mamba Cache is allocated. max_mamba_cache_size: N,
conv_state size: X GB, ssm_state size: Y GB` for hybrid linear attention; SWAKVPool's
`SWAKVPool mem usage: X GB, swa size: S, full size: F` over its two pools), `init_memory_pool` /
`KVCacheConfigurator.configure` (`Memory pool end.`), `init_cuda_graphs` (`Capture ... graph
begin/end`), `Scheduler.__init__` (`max_total_num_tokens=..., available_gpu_mem=`)
and `HostKVCache.__init__` (HiCache host pool).
Every GPU figure SGLang prints as "GB" is GiB; the HiCache host figure is decimal GB.

A rank's lines after its own `Memory pool end` belong to the draft worker (speculative decoding):
its weights, its KV cache dtype and pool, and its CUDA graphs are kept apart from the target's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from kvtier.engines.launch import find_launch
from kvtier.logs.facts import Fact, min_over_ranks
from kvtier.logs.lines import LogLine, rank_of, rank_order
from kvtier.logs.pyargs import parse_kwargs
from kvtier.logs.records import NUM, Args, Figures, Printed, as_float, as_int, as_text, figures

_SERVER_ARGS = re.compile(r"server_args(?:=ServerArgs\()?")
_LOAD_BEGIN = re.compile(r"Load weight begin\. avail mem=" + NUM + " GB")
_LOAD_END = re.compile(r"Load weight end\.")
_KV_DTYPE = re.compile(r"Using KV cache dtype: ([\w.]{1,40})")
_KV_ALLOC = re.compile(r"KV Cache is allocated\.")
_POOL_END = re.compile(r"Memory pool end\. avail mem=" + NUM + " GB")
_GRAPH = re.compile(
    r"Capture (?:(target|draft) )?(?:([a-z]{1,10}) )?\w{1,10} graph (begin|end)", re.IGNORECASE
)
_SUMMARY = re.compile(r"max_total_num_tokens=(\d{1,15})(?!\d)")
_HOST_POOL = re.compile(r"Allocating " + NUM + " GB host memory for hierarchical KV cache")
_SWA_POOL = re.compile(
    r"SWAKVPool mem usage: " + NUM + r" GB, swa size: (\d{1,15}), full size: (\d{1,15})"
)
_MAMBA = re.compile(
    r"Mamba Cache is allocated\. max_mamba_cache_size: (\d{1,9}), conv_state size: "
    + NUM
    + r" ?GB, ssm_state size: "
    + NUM
    + r" ?GB"
)

# The figures each record reads after its line's marker (`kvtier.logs.records.figures`)
_DTYPE = re.compile(r"\bdtype[=:] ?([\w.]{1,40})")
_AVAIL = re.compile(r"\bavail mem=" + NUM + " GB")
_USAGE = re.compile(r"\bmem usage=" + NUM + " GB")
_WEIGHT_FIGURES: Figures = {
    "avail_gib": (_AVAIL, as_float),
    "usage_gib": (_USAGE, as_float),
    "architecture": (re.compile(r"\btype=(\w{1,120})"), as_text),
    "dtype": (_DTYPE, as_text),
    "quant": (re.compile(r"\bquant=([\w.-]{1,40})"), as_text),
}
_POOL_FIGURES: Figures = {
    "tokens": (re.compile(r"#tokens: (\d{1,15})(?!\d)"), as_int),
    "kv_gib": (re.compile(r"\bKV size: " + NUM + " GB"), as_float),
    "k_gib": (re.compile(r"\bK size: " + NUM + " GB"), as_float),
    "v_gib": (re.compile(r"\bV size: " + NUM + " GB"), as_float),
    "dtype": (_DTYPE, as_text),
}
_GRAPH_FIGURES: Figures = {"usage_gib": (_USAGE, as_float), "avail_gib": (_AVAIL, as_float)}
_SUMMARY_FIGURES: Figures = {
    "max_running_requests": (re.compile(r"max_running_requests=(\d{1,15})(?!\d)"), as_int),
    "context_len": (re.compile(r"context_len=(\d{1,15})(?!\d)"), as_int),
    "available_gpu_mem_gib": (re.compile(r"available_gpu_mem=" + NUM + " GB"), as_float),
}

# The engine's refusal when the weights leave no room for the pool: profile_max_num_token /
# init_memory_pool (v0.3 - v0.5: "Not enough memory. Please try to increase
# --mem-fraction-static"), KVCacheConfigurator (2026: "Loaded weights leave no GPU memory").
_FAILURE = re.compile(
    r"Not enough memory\. Please try to increase --mem-fraction-static"
    r"|leave no GPU memory for the KV cache"
)
FAILURE_MARKERS = ("Not enough memory", "leave no GPU memory")

MEMORY_MARKERS = (
    *FAILURE_MARKERS,
    "Load weight end",
    "KV Cache is allocated",
    "Mamba Cache is allocated",
    "Memory pool end",
    "max_total_num_tokens=",
)
# 'Load weight begin' opens a start, so it is no memory line: every rank prints one in turn.
START_MARKERS = ("server_args", "Load weight begin")
RESTART_MARKERS = ("Load weight end",)
COUNT_MARKERS = ("max_total_num_tokens=", *FAILURE_MARKERS)


@dataclass(frozen=True, slots=True)
class WeightLoad(Printed):
    """`Load weight end.`: free GiB after loading, GiB the weights took, model class, dtype."""

    avail_gib: float | None
    usage_gib: float | None
    architecture: str | None
    dtype: str | None
    quant: str | None
    draft: bool


@dataclass(frozen=True, slots=True)
class KVPool(Printed):
    """`KV Cache is allocated.`: pool tokens and GiB (one latent for MLA, K and V for MHA)."""

    tokens: int | None
    kv_gib: float | None
    k_gib: float | None
    v_gib: float | None
    dtype: str | None
    draft: bool

    @property
    def total_gib(self) -> float | None:
        if self.kv_gib is not None:
            return self.kv_gib
        if self.k_gib is not None and self.v_gib is not None:
            return self.k_gib + self.v_gib
        return None


@dataclass(frozen=True, slots=True)
class StatePool(Printed):
    """`Mamba Cache is allocated.`: request slots and the GiB of conv and SSM state they hold."""

    slots: int
    conv_gib: float
    ssm_gib: float

    @property
    def total_gib(self) -> float:
        return self.conv_gib + self.ssm_gib


@dataclass(frozen=True, slots=True)
class SlidingPools(Printed):
    """`SWAKVPool mem usage`: GiB of the full-layer and sliding-window pools, and their tokens."""

    gib: float
    swa_tokens: int
    full_tokens: int


@dataclass(frozen=True, slots=True)
class GraphCapture(Printed):
    """`Capture ... graph end.`: GiB the capture took and GiB free after it."""

    usage_gib: float | None
    avail_gib: float | None
    draft: bool


@dataclass(frozen=True, slots=True)
class Summary(Printed):
    """The scheduler's `max_total_num_tokens=..., available_gpu_mem=...` line (rank 0)."""

    max_total_num_tokens: int
    max_running_requests: int | None
    context_len: int | None
    available_gpu_mem_gib: float | None


@dataclass(frozen=True, slots=True)
class SGLangStartup:
    """Everything one SGLang server start printed about memory, in log order."""

    server_args: Args | None
    launch: Args | None
    load_begin: tuple[Fact[float], ...]
    weights: tuple[WeightLoad, ...]
    kv_dtype: Fact[str] | None  # `Using KV cache dtype` of the target
    draft_kv_dtype: Fact[str] | None
    pools: tuple[KVPool, ...]
    pool_end: tuple[Fact[float], ...]
    draft_pool_end: tuple[Fact[float], ...]
    graphs: tuple[GraphCapture, ...]
    summary: Summary | None
    host_pool_gb: Fact[float] | None
    failure: Fact[str] | None = None  # the engine's refusal line, when the start failed
    state_pools: tuple[StatePool, ...] = ()  # hybrid linear attention: the target's state pool
    sliding_pools: tuple[SlidingPools, ...] = ()  # a sliding-window model's two pools, together

    def weights_by_rank(self, draft: bool = False) -> list[WeightLoad]:
        """The target's (or the draft's) weight loads, one a rank."""
        return per_rank_records(w for w in self.weights if w.draft == draft)

    def pools_by_rank(self, draft: bool = False) -> list[KVPool]:
        """The target's (or the draft's) KV pools, one a rank."""
        return per_rank_records(p for p in self.pools if p.draft == draft)

    def free_before_load(self) -> Fact[float] | None:
        """Free GiB before the weights loaded, min over ranks, when the log prints it."""
        return min_over_ranks(self.load_begin)

    def free_at_pool_end(self) -> Fact[float] | None:
        return min_over_ranks(self.pool_end)


R = TypeVar("R", bound=Printed)


def per_rank_records(records: Iterable[R]) -> list[R]:
    """The first record each rank printed, ordered by rank (untagged lines count as one rank)."""
    first: dict[str | None, R] = {}
    for record in records:
        first.setdefault(record.rank, record)
    return [first[rank] for rank in sorted(first, key=rank_order)]


def parse_sglang(lines: list[LogLine]) -> SGLangStartup:
    """Read one SGLang server start (the lines of a single run) into typed facts."""
    reading = _Reading()
    for line in lines:
        reading.read(line.text, line.number)
    return reading.startup(lines)


class _Reading:
    """What the lines of one start said so far; a draft's lines follow the target's pool."""

    def __init__(self) -> None:
        self.server_args: Args | None = None
        self.load_begin: list[Fact[float]] = []
        self.weights: list[WeightLoad] = []
        self.kv_dtypes: list[Fact[str]] = []
        self.draft_kv_dtypes: list[Fact[str]] = []
        self.pools: list[KVPool] = []
        self.pool_end: list[Fact[float]] = []
        self.draft_pool_end: list[Fact[float]] = []
        self.graphs: list[GraphCapture] = []
        self.summary: Summary | None = None
        self.host_pool: Fact[float] | None = None
        self.failure: Fact[str] | None = None
        self.state_pools: list[StatePool] = []
        self.sliding: list[SlidingPools] = []
        self.pool_done: set[str | None] = set()  # ranks whose target pool is complete
        self.draft_loading: set[str | None] = set()

    def read(self, text: str, number: int) -> None:
        if "server_args" in text and (m := _SERVER_ARGS.search(text)):
            self.server_args = Args(number, text, None, parse_kwargs(text[m.end() :]))
        elif "Load weight begin" in text and (m := _LOAD_BEGIN.search(text)):
            rank = rank_of(text, m.start())
            if rank in self.pool_done:
                self.draft_loading.add(rank)
            else:
                self.load_begin.append(Fact(float(m.group(1)), number, text, rank))
        elif "Load weight end" in text and (m := _LOAD_END.search(text)):
            self._load_end(text, number, m)
        elif "Using KV cache dtype" in text and (m := _KV_DTYPE.search(text)):
            rank = rank_of(text, m.start())
            into = self.draft_kv_dtypes if rank in self.pool_done else self.kv_dtypes
            into.append(Fact(m.group(1), number, text, rank))
        elif "KV Cache is allocated" in text and (m := _KV_ALLOC.search(text)):
            self._kv_pool(text, number, m)
        elif "Memory pool end" in text and (m := _POOL_END.search(text)):
            rank = rank_of(text, m.start())
            ends = self.draft_pool_end if rank in self.pool_done else self.pool_end
            ends.append(Fact(float(m.group(1)), number, text, rank))
            self.pool_done.add(rank)
        elif "graph" in text and (m := _GRAPH.search(text)) and m.group(3).lower() == "end":
            self._graph(text, number, m)
        elif "max_total_num_tokens=" in text and (m := _SUMMARY.search(text)):
            self._summary(text, number, m)
        else:
            self._pools_and_failure(text, number)

    def _pools_and_failure(self, text: str, number: int) -> None:
        if "SWAKVPool mem usage" in text and (m := _SWA_POOL.search(text)):
            if (rank := rank_of(text, m.start())) not in self.pool_done:
                gib, swa, full = float(m.group(1)), int(m.group(2)), int(m.group(3))
                self.sliding.append(SlidingPools(number, text, rank, gib, swa, full))
        elif "Mamba Cache is allocated" in text and (m := _MAMBA.search(text)):
            if (rank := rank_of(text, m.start())) not in self.pool_done:
                slots, conv, ssm = int(m.group(1)), float(m.group(2)), float(m.group(3))
                self.state_pools.append(StatePool(number, text, rank, slots, conv, ssm))
        elif "host memory for hierarchical" in text and (m := _HOST_POOL.search(text)):
            self.host_pool = Fact(float(m.group(1)), number, text, rank_of(text, m.start()))
        elif "memory" in text and (m := _FAILURE.search(text)):
            reason = "the weights leave no GPU memory for the KV cache at this fraction"
            self.failure = Fact(reason, number, text, rank_of(text, m.start()))

    def _load_end(self, text: str, number: int, m: re.Match[str]) -> None:
        rank = rank_of(text, m.start())
        draft = rank in self.pool_done
        if draft:
            self.draft_loading.add(rank)
        found = figures(_WEIGHT_FIGURES, text, m.end())
        self.weights.append(WeightLoad(number, text, rank, draft=draft, **found))

    def _kv_pool(self, text: str, number: int, m: re.Match[str]) -> None:
        rank = rank_of(text, m.start())
        found = figures(_POOL_FIGURES, text, m.end())
        self.pools.append(KVPool(number, text, rank, draft=rank in self.pool_done, **found))

    def _graph(self, text: str, number: int, m: re.Match[str]) -> None:
        rank = rank_of(text, m.start())
        who = (m.group(1) or "").lower()
        draft = who == "draft" or (not who and rank in self.draft_loading)
        found = figures(_GRAPH_FIGURES, text, m.end())
        self.graphs.append(GraphCapture(number, text, rank, draft=draft, **found))

    def _summary(self, text: str, number: int, m: re.Match[str]) -> None:
        rank, found = rank_of(text, m.start()), figures(_SUMMARY_FIGURES, text, m.end())
        self.summary = Summary(number, text, rank, max_total_num_tokens=int(m.group(1)), **found)

    def startup(self, lines: list[LogLine]) -> SGLangStartup:
        return SGLangStartup(
            server_args=self.server_args,
            launch=find_launch(lines),
            load_begin=tuple(self.load_begin),
            weights=tuple(self.weights),
            kv_dtype=self.kv_dtypes[0] if self.kv_dtypes else None,
            draft_kv_dtype=self.draft_kv_dtypes[0] if self.draft_kv_dtypes else None,
            pools=tuple(self.pools),
            pool_end=tuple(self.pool_end),
            draft_pool_end=tuple(self.draft_pool_end),
            graphs=tuple(self.graphs),
            summary=self.summary,
            host_pool_gb=self.host_pool,
            failure=self.failure,
            state_pools=tuple(per_rank_records(self.state_pools)),
            sliding_pools=tuple(per_rank_records(self.sliding)),
        )
