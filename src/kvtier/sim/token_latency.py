"""Token latencies as serving benchmarks define them (`sglang.bench_serving` calculate_metrics,
`vllm bench serve`), over the requests that finished:

  TTFT   first token - send time
  TPOT   (finish - first token) / (output tokens - 1), requests with more than one output token
  ITL    every gap between two consecutive chunks a request streams: the first token, then one
         chunk per decode iteration it ran in (with speculative decoding a chunk holds the
         accepted tokens, as the benchmarks' default backends count it)
  output tokens/s and requests/s over the benchmark's duration, first send to last finish

`kvtier.sim.metrics` summarises each latency by its mean and its 50th, 90th and 99th
percentiles (linear between order statistics, numpy's default).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from kvtier.sim.metrics import RequestRecord


def tpot_values(done: Sequence[RequestRecord]) -> list[float]:
    return [(r.finish_s - r.first_token_s) / (r.output_len - 1) for r in done if r.output_len > 1]


def itl_values(done: Sequence[RequestRecord], decode_ends: np.ndarray) -> list[float]:
    """Every request's gaps between its first token and each decode iteration it ran in."""
    gaps = []
    for r in done:
        first, end = r.decode_steps
        if end > first:
            gaps.append(np.diff(np.concatenate(([r.first_token_s], decode_ends[first:end]))))
    return np.concatenate(gaps).tolist() if gaps else []
