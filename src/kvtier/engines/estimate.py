"""Terms of a budget that were not measured: a nominal value with a stated low-high range.

A `Term` is either exact (measured, or computed by the engine's own rule) or estimated with a
range. `spread` evaluates a formula at every corner of its terms' ranges, so the KV token count
of a plan carries the worst-case combination of the stated uncertainties, not a guess.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import NamedTuple

from kvtier.errors import KvtierError
from kvtier.units import GiB


class Term(NamedTuple):
    value: float
    low: float
    high: float
    source: str
    exact: bool

    @classmethod
    def known(cls, value: float, source: str) -> Term:
        return cls(value, value, value, source, True)

    @classmethod
    def estimated(cls, value: float, low: float, high: float, source: str) -> Term:
        return cls(value, low, high, source, False)

    def scaled(self, factor: float) -> Term:
        return Term(
            self.value * factor, self.low * factor, self.high * factor, self.source, self.exact
        )


# Driver-reserved memory: nvidia-smi memory.total minus the total cudaMemGetInfo reports.
# H100 80GB: 81,559 MiB (79.65 GiB) vs total_memory=79.19 GiB in vLLM 0.19 logs; RTX 3090:
# 24,576 MiB vs total_gpu_memory=23.57 GiB in a vLLM 0.6.6 log. Both about 0.45 GiB.
DRIVER_RESERVED_GIB = (0.45, 0.40, 0.50)
# CUDA context + allocator + library handles before any weights, one process per GPU.
# vLLM 0.19 on H100, TP1: non_torch_memory=0.51 GiB at init; SGLang on an RTX 5080: 15.92 GiB
# card, 15.16 GiB free before load (0.76 GiB, of which ~0.45 driver-reserved).
CUDA_CONTEXT_GIB = (0.5, 0.3, 1.0)
# NCCL / custom all-reduce buffers allocated at distributed init when TP x PP > 1.
# SGLang TP8 RTX PRO 6000: 95.59 GiB card, 94.04 free before load (1.55 total, ~0.6 after driver
# and context); vLLM 0.19 TP2 H100: 1.53 GiB non-torch at init (~1.0 after context).
COMM_BUFFERS_GIB = (0.6, 0.0, 1.2)
# The same on cards without peer access (GpuSpec.peer_to_peer False): NCCL's SHM transport keeps
# its buffers in host memory. SGLang on 4x L4: "Init torch distributed ends. mem usage=0.13 GB".
COMM_NO_PEER_GIB = (0.13, 0.0, 0.3)
# Weight bytes computed from parameter counts miss loader padding, extra scales and buffers.
WEIGHTS_REL_UNCERTAINTY = 0.015
# vLLM profile_run torch peak per 8,192 batched tokens: 1.09-2.21 GiB in five real logs
# (Qwen2.5-7B, Llama-3.1-8B, Qwen3-8B, DeepSeek-V2-Lite, Llama-3.3-70B TP2).
VLLM_ACTIVATION_GIB_PER_8K_TOKENS = (2.0, 1.0, 2.5)
# What vllm/profile.py's activation model leaves out of the profiled torch peak (measured peak
# minus the model, GiB). V1: 0.06-0.12 on twelve vLLM 0.19 H100 logs of text models, 0.17 on the
# three gemma ones (vocabulary 256,000), 0.38 where a multimodal checkpoint's encoder cache is
# held too (gemma-3-12b). V0: 0.00-0.01 on the two vLLM 0.6.4 Llama-3.1-8B logs, 0.06 on vLLM
# 0.6.6 Qwen2.5-7B with 16 sequences.
VLLM_PROFILE_UNMODELLED_GIB = (0.1, 0.0, 0.45)
VLLM_V0_PROFILE_UNMODELLED_GIB = (0.03, 0.0, 0.1)
# vLLM non-torch increase during profiling: 0.25-0.26 GiB at TP1, 2.10 GiB at TP2 (H100, v0.19).
VLLM_NON_TORCH_GIB_TP1 = (0.25, 0.1, 0.5)
VLLM_NON_TORCH_GIB_TP = (2.0, 0.5, 2.5)
# vLLM CUDA-graph estimate (>= v0.21): 0.84-1.82 GiB logged by v0.19 on H100 (8B to 70B TP2).
VLLM_CUDA_GRAPH_GIB = (1.2, 0.5, 2.0)


def from_constant(constant: tuple[float, float, float], source: str) -> Term:
    value, low, high = constant
    return Term.estimated(value, low, high, source)


def weights_term(nbytes: int, source: str) -> Term:
    """Weights computed from the model spec, with the stated relative uncertainty."""
    gib = nbytes / GiB
    return Term.estimated(
        gib,
        gib * (1 - WEIGHTS_REL_UNCERTAINTY),
        gib * (1 + WEIGHTS_REL_UNCERTAINTY),
        f"{source} (+-{WEIGHTS_REL_UNCERTAINTY:.1%})",
    )


def weights_per_gpu(
    measured_gib: float | None, measured_source: str, nbytes: int | None, spec_source: str
) -> Term:
    """The weights per GPU as measured, else from the model spec; neither fails closed."""
    if measured_gib is not None:
        return Term.known(measured_gib, measured_source)
    if nbytes is not None:
        return weights_term(nbytes, spec_source)
    raise KvtierError("the weights per GPU are unknown: pass --weights-gib")


def spread(terms: Mapping[str, Term], formula: Callable[[Mapping[str, float]], float]) -> Term:
    """`formula` at the nominal values and its min/max over every corner of the terms' ranges."""
    names = list(terms)
    nominal = formula({n: terms[n].value for n in names})
    loose = [n for n in names if not terms[n].exact]
    if not loose:
        return Term.known(nominal, "")
    results = []
    for corner in itertools.product((0, 1), repeat=len(loose)):
        values = {n: terms[n].value for n in names}
        for n, pick in zip(loose, corner, strict=True):
            values[n] = terms[n].high if pick else terms[n].low
        results.append(formula(values))
    low, high = min(results), max(results)
    return Term.estimated(nominal, low, high, _dominant(terms, formula, high - low))


def widest(budget: Term) -> tuple[str, ...]:
    """The note naming the estimated input a budget's range is widest in (none when exact)."""
    if budget.exact or not budget.source.startswith("the range is widest"):
        return ()
    return (budget.source,)


# what the builders call their estimated terms, for the note that names the widest
TERM_NAMES = {
    "pre": "free memory before load (driver, CUDA context, NCCL)",
    "total": "device total (card minus the driver's reserve)",
    "weights": "weights per GPU",
    "activation": "profile run's activation peak",
    "non_torch": "non-torch memory (NCCL, backend buffers)",
    "graphs": "CUDA graph memory",
}


def _dominant(
    terms: Mapping[str, Term],
    formula: Callable[[Mapping[str, float]], float],
    width: float,
) -> str:
    """Which estimated input the range's width comes from most: each moved alone over its own
    range, the others nominal."""
    base = {n: t.value for n, t in terms.items()}
    moved = {}
    for name, term in terms.items():
        if not term.exact:
            ends = [formula({**base, name: term.low}), formula({**base, name: term.high})]
            moved[name] = max(ends) - min(ends)
    name = max(moved, key=lambda n: moved[n])
    if width <= 0:
        return ""
    return (
        f"the range is widest in the estimated {TERM_NAMES.get(name, name)}: "
        f"{moved[name]:.2f} of the budget's {width:.2f} GiB spread (pass its measured figure "
        "to narrow it)"
    )
