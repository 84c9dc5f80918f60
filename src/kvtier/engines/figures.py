"""The figures an engine's ledger builder works out beyond the items: what advise and the
simulator re-read (the pool's base, its cell, the prefill chunk, the request limit's inputs).

One frozen class per engine, named fields, so a reader narrows on the type instead of looking
a figure up by name. GPU memory in GiB (2**30 bytes), per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SGLangFigures:
    free_before_load_gib: float  # the fraction's base, as the builder took it
    free_after_load_gib: float
    rest_gib: float  # free_after - free_before x (1 - fraction), before the page rounding
    cell_bytes: int  # one token of the pool on one GPU, the draft's layers included when pooled
    draft_cell_bytes: int  # 0: no draft KV pool
    free_end_gib: float  # the reserve left after the draft, request table and CUDA graphs
    chunked_prefill_size: int  # 0: chunked prefill off
    cuda_graph_max_bs: int
    max_running_requests_flag: int  # 0: not given; what `request_limits` reads
    dp_attention_size: int
    host_bytes_per_token: int  # HostKVCache.get_size_per_token
    state_slot_request_cap: int | None = None  # None: no linear-attention state slots


@dataclass(frozen=True, slots=True)
class VllmFigures:
    num_blocks: int
    available_kv_gib: float
    total_gib: float
    free_end_gib: float  # outside the budget, less CUDA graphs the budget does not hold
    max_num_batched_tokens: int
    chunked_prefill: bool  # V1 always schedules in chunks; V0 only with chunked prefill on


EngineFigures = SGLangFigures | VllmFigures
