"""The single parsed form of a deployment: engine, model, parallelism, memory flags, measurements.

Built from an engine launch command (`kvtier.engines.launch`), from plain kvtier flags, or by
a log parser; `plan`, `advise`, `explain` and the simulator all read this one type. Every field
that was set records where it came from (`origins`), so a ledger can cite its inputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, cast

from kvtier.errors import KvtierError


class Engine(StrEnum):
    SGLANG = "sglang"
    VLLM = "vllm"


@dataclass(frozen=True, slots=True)
class FreeMemory:
    """SGLang's free GPU memory per rank at three points of a startup, in GiB:
    `before_load_gib` is 'Load weight begin. avail mem', `after_load_gib` 'Load weight end.
    avail mem' (weights are their difference, the log's 'mem usage'), `end_gib` the scheduler's
    final 'available_gpu_mem'."""

    before_load_gib: float | None = None
    after_load_gib: float | None = None
    end_gib: float | None = None


@dataclass(frozen=True, slots=True)
class Profile:
    """vLLM's profile run, in GiB: `activation_gib` the torch peak increase, `non_torch_gib`
    the non-torch increase, `kv_available_gib` the KV budget the engine printed ('Available KV
    cache memory', V0 'the rest of the memory reserved for KV Cache') at the utilization
    `kv_available_utilization`."""

    activation_gib: float | None = None
    non_torch_gib: float | None = None
    kv_available_gib: float | None = None
    kv_available_utilization: float | None = None


@dataclass(frozen=True, slots=True)
class Measured:
    """Per-GPU figures read from a real startup, in GiB; None where nothing was measured.

    SGLang's free memory is `free`, vLLM's profile run `profile`; both engines' own:
    `weights_gib` (vLLM 'Model loading took', SGLang 'mem usage'), `cuda_graph_gib` (SGLang's
    capture, vLLM's estimate), `draft_weights_gib`, `gpu_mem_gib` the device total the engine
    sees. `state_pool_gib` is the part of SGLang's 'Mamba Cache is allocated' conv + SSM state
    that the release charges to the KV budget (without the padding slot before v0.5.17), taken
    out of it when the model's state is not known. A name `free.end_gib` addresses a field of a
    record (`value`, `with_values`).
    """

    free: FreeMemory = field(default_factory=FreeMemory)
    profile: Profile = field(default_factory=Profile)
    weights_gib: float | None = None
    cuda_graph_gib: float | None = None
    draft_weights_gib: float | None = None
    gpu_mem_gib: float | None = None
    state_pool_gib: float | None = None

    def value(self, name: str) -> float | None:
        """A figure by name; `free.end_gib` names a field of a record."""
        return cast("float | None", _named(self, name))

    def with_values(self, **values: float | None) -> Measured:
        """A copy with `values` set by name; `free.end_gib` sets a field of a record."""
        fields = _gathered(values, lambda group: getattr(self, group))
        return dataclasses.replace(self, **fields)  # type: ignore[arg-type]


# Bounds wide enough for any real deployment, narrow enough that no sum or product overflows.
_MAX_GPUS = 4096
_MAX_PAGE = 1 << 20
_MAX_TOKENS = 1 << 40
MAX_OFFLOADING_GIB = 1e7  # the most --kv-offloading-size takes (GiB over all ranks)
# field -> the flag named in an error (SGLang's name; vLLM's takes the same check), the bound
_HICACHE_SIZES = (("ratio", "--hicache-ratio", 1e4), ("size_gb", "--hicache-size", 1e7))
_HOST_SIZES = (
    ("kv_cache_memory_bytes", "--kv-cache-memory-bytes", float(1 << 50)),
    ("kv_offloading_size_gib", "--kv-offloading-size", MAX_OFFLOADING_GIB),
)
# field -> the flag named in an error; every count is from 1 to _MAX_TOKENS
_COUNTS = {
    "context_length": "context length",
    "max_running_requests": "--max-running-requests",
    "max_total_tokens": "--max-total-tokens",
    "cuda_graph_max_bs": "--cuda-graph-max-bs",
    "speculative_num_steps": "--speculative-num-steps",
    "speculative_eagle_topk": "--speculative-eagle-topk",
    "speculative_num_draft_tokens": "--speculative-num-draft-tokens",
}


def _check_bounds(
    record: object,
    counts: Mapping[str, str] | None = None,
    sizes: tuple[tuple[str, str, float], ...] = (),
) -> None:
    """Each count of `record` from 1 to _MAX_TOKENS, each size from 0 to its most; written as
    `not (low <= x <= high)` so that NaN, which compares false, is refused."""
    for name, flag in (counts or {}).items():
        value = getattr(record, name)
        if value is not None and not 1 <= value <= _MAX_TOKENS:
            raise KvtierError(f"{flag} must be from 1 to {_MAX_TOKENS:,}, got {value}")
    for name, flag, most in sizes:
        value = getattr(record, name)
        if value is not None and not 0 <= value <= most:
            raise KvtierError(f"{flag} must be from 0 to {most:g}, got {value}")


@dataclass(frozen=True, slots=True)
class HiCache:
    """SGLang's hierarchical cache: `enable` (--enable-hierarchical-cache), its host pool as
    `ratio` of the device pool or `size_gb` decimal GB per rank, and the write and storage
    prefetch policies the simulator follows (None: the version's default)."""

    enable: bool = False
    ratio: float | None = None
    size_gb: float | None = None
    write_policy: str | None = None
    storage_prefetch_policy: str | None = None

    def __post_init__(self) -> None:
        _check_bounds(self, sizes=_HICACHE_SIZES)


@dataclass(frozen=True, slots=True)
class Hybrid:
    """Prefix caching and state-pool settings of hybrid linear-attention models: vLLM
    --enable-prefix-caching, --mamba-ssm-cache-dtype; SGLang --disable-radix-cache,
    --mamba-full-memory-ratio, --max-mamba-cache-size, --mamba-ssm-dtype (None: the engine's
    default)."""

    enable_prefix_caching: bool | None = None
    disable_radix_cache: bool = False
    mamba_full_memory_ratio: float | None = None
    max_mamba_cache_size: int | None = None
    mamba_ssm_dtype: str | None = None

    def __post_init__(self) -> None:
        _check_bounds(self, counts={"max_mamba_cache_size": "--max-mamba-cache-size"})
        ratio = self.mamba_full_memory_ratio
        if ratio is not None and not 0.0 < ratio <= 1e4:
            raise KvtierError(f"--mamba-full-memory-ratio must be in (0, 10000], got {ratio}")


# the sub-records of a Deployment, by field: a name `hicache.ratio` addresses one of their fields
_GROUPS: dict[str, type[HiCache] | type[Hybrid]] = {"hicache": HiCache, "hybrid": Hybrid}


@dataclass(frozen=True, slots=True)
class Deployment:
    """One engine instance on one node as the engine would configure it.

    `None` means "not given: the engine's default applies"; the budget modules resolve
    defaults and say which rule they used. Host sizes follow the engines: SGLang
    `hicache.size_gb` is decimal GB per rank, vLLM `kv_offloading_size_gib` is GiB over all ranks.
    """

    engine: Engine
    model: str
    tp: int = 1
    pp: int = 1
    dp: int = 1
    enable_dp_attention: bool = False
    enable_dp_lm_head: bool = False  # SGLang: the LM head over the attention-TP group
    gpu: str | None = None
    gpus_per_node: int | None = None
    engine_version: str | None = None
    mem_fraction: float | None = None  # SGLang mem_fraction_static / vLLM gpu_memory_utilization
    kv_cache_dtype: str = "auto"
    dtype: str = "auto"
    quantization: str | None = None  # vLLM --quantization (online methods and checkpoint checks)
    enable_chunked_prefill: bool | None = None  # vLLM; None: the version's default rule
    page_size: int | None = None  # SGLang page_size / vLLM block_size
    context_length: int | None = None  # SGLang context_length / vLLM max_model_len
    max_running_requests: int | None = None  # SGLang max_running_requests / vLLM max_num_seqs
    max_total_tokens: int | None = None
    chunked_prefill_size: int | None = (
        None  # SGLang chunked_prefill_size / vLLM max_num_batched_tokens
    )
    cuda_graph_max_bs: int | None = None
    speculative_algorithm: str | None = None
    draft_model: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    hicache: HiCache = field(default_factory=HiCache)
    kv_cache_memory_bytes: int | None = None
    kv_offloading_size_gib: float | None = None
    # vLLM's host tier beyond --kv-offloading-size: --kv-offloading-backend (native, lmcache),
    # --kv-transfer-config (JSON, checked by engines/vllm/kv_transfer.py read once a plan),
    # LMCACHE_* assignments before the command
    kv_offloading_backend: str | None = None
    kv_transfer_config: str | None = None
    lmcache_env: tuple[tuple[str, str], ...] = ()
    # SGLANG_* assignments before a pasted SGLang command (SGLang reads them in environ.py)
    sglang_env: tuple[tuple[str, str], ...] = ()
    # vLLM's layers per pipeline stage, VLLM_PP_LAYER_PARTITION as written (checked against the
    # model's layers when the ledger is built); None: get_pp_indices' default split
    pp_layer_partition: str | None = None
    # vLLM's VLLM_USE_SIMPLE_KV_OFFLOAD (envs.py bool(int(...)), v0.19.0 on): --kv-offloading-size
    # then names SimpleCPUOffloadConnector (engines/vllm/simple_offload.py)
    simple_kv_offload: bool = False
    scheduling_policy: str | None = None  # vLLM --scheduling-policy (fcfs, priority)
    long_prefill_token_threshold: int | None = None  # vLLM; None: 0, no cap on a prefill chunk
    # vLLM --[no-]async-scheduling (None: the engine's choice, engines/vllm/sliding.py)
    async_scheduling: bool | None = None
    # vLLM --[no-]disable-hybrid-kv-cache-manager (None: the engine's choice, engines/vllm/hma.py)
    disable_hybrid_kv_cache_manager: bool | None = None
    kv_events_config: str | None = None  # vLLM --kv-events-config (JSON), engines/vllm/hma.py
    # vLLM's VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE (None: unset, the release's
    # default), engines/vllm/hma.py
    allow_chunked_local_hma: bool | None = None
    # PYTORCH_CUDA_ALLOC_CONF holds 'expandable_segments:True', and vLLM's --enable-sleep-mode /
    # --enable-cumem-allocator: with a KV connector vLLM refuses the first without one of the
    # others (engines/vllm/alloc_conf.py)
    expandable_segments: bool = False
    enable_sleep_mode: bool | None = None
    enable_cumem_allocator: bool | None = None
    hybrid: Hybrid = field(default_factory=Hybrid)
    # SGLang --device (None: auto-detected); "cuda" is also what its ROCm build runs as
    device: str | None = None
    measured: Measured = field(default_factory=Measured)
    origins: tuple[tuple[str, str], ...] = ()
    ignored_flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # written as `not (low <= x <= high)` so that NaN, which compares false, is refused
        for name in ("tp", "pp", "dp"):
            if not 1 <= getattr(self, name) <= _MAX_GPUS:
                raise KvtierError(
                    f"--{name} must be from 1 to {_MAX_GPUS:,}, got {getattr(self, name)}"
                )
        if self.enable_dp_attention and self.tp % self.dp:
            # SGLang's server_args: assert self.tp_size % self.dp_size == 0 under DP attention
            raise KvtierError(
                f"--tp {self.tp} is not a multiple of --dp {self.dp}, as --enable-dp-attention "
                "needs (SGLang splits each DP rank's attention over tp / dp GPUs)"
            )
        if self.gpus_per_node is not None and not 1 <= self.gpus_per_node <= _MAX_GPUS:
            raise KvtierError(f"--gpus must be from 1 to {_MAX_GPUS:,}, got {self.gpus_per_node}")
        if self.mem_fraction is not None and not 0.0 < self.mem_fraction <= 1.0:
            raise KvtierError(f"memory fraction must be in (0, 1], got {self.mem_fraction}")
        if self.page_size is not None and not 1 <= self.page_size <= _MAX_PAGE:
            raise KvtierError(
                f"page/block size must be from 1 to {_MAX_PAGE:,}, got {self.page_size}"
            )
        _check_bounds(self, _COUNTS, _HOST_SIZES)

    @property
    def gpus(self) -> int:
        """GPUs of the node that serve this deployment (all ranks share its host RAM and PCIe)."""
        return self.gpus_per_node or self.tp * self.pp

    def origin(self, name: str) -> str:
        """Where a field's value came from ('launch command', 'kvtier flag', ...), or 'default'."""
        return dict(self.origins).get(name, "default")

    def value(self, name: str) -> object:
        """A field's value by name; `hicache.ratio` names a field of a sub-record."""
        return _named(self, name)

    def with_values(self, origin: str, **values: object) -> Deployment:
        """A copy with `values` set and their origin recorded (how options and overrides apply);
        a name `hicache.ratio` sets a field of a sub-record."""
        origins = dict(self.origins)
        origins.update(dict.fromkeys(values, origin))
        fields = grouped(values, self)
        return dataclasses.replace(self, origins=tuple(origins.items()), **fields)  # type: ignore[arg-type]


def _named(record: object, name: str) -> object:
    """A field of `record` by name; `group.field` names a field of its sub-record `group`."""
    group, _, sub = name.rpartition(".")
    return getattr(getattr(record, group) if group else record, sub)


def _gathered(values: Mapping[str, object], record: Callable[[str], Any]) -> dict[str, object]:
    """`values` by field name as keywords: the `group.field` names of one sub-record gathered
    into a copy of `record(group)`."""
    out: dict[str, object] = {}
    parts: dict[str, dict[str, object]] = {}
    for name, value in values.items():
        group, dot, sub = name.partition(".")
        if dot:
            parts.setdefault(group, {})[sub] = value
        else:
            out[name] = value
    for group, changed in parts.items():
        out[group] = dataclasses.replace(record(group), **changed)
    return out


def grouped(values: Mapping[str, object], base: Deployment | None = None) -> dict[str, object]:
    """`values` by field name as Deployment's keywords: the `group.field` names of one
    sub-record gathered into that record, built on `base`'s (without a base, the default)."""
    if base is None:
        return _gathered(values, lambda group: _GROUPS[group]())
    return _gathered(values, lambda group: getattr(base, group))


def field_default(name: str) -> object:
    """The default of a Deployment field by name (`hicache.ratio` for a sub-record's)."""
    group, _, sub = name.rpartition(".")
    record = _GROUPS[group] if group else Deployment
    return record.__dataclass_fields__[sub].default
