"""The inverse question: the smallest change that lets N requests of L tokens run at once."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvtier.engines.deployment import Engine
from kvtier.engines.inputs import PlanInputs
from kvtier.engines.ledger import Ledger
from kvtier.ledger.advise import (
    Option,
    OptionKind,
    fraction_flag,
    max_safe_fraction,
    spelled,
    stores_fp8,
    variant,
)


@dataclass(frozen=True, slots=True)
class TargetAnswer:
    requests: int
    context: int
    tokens_needed: int
    option: Option | None  # None: nothing within the margin reaches it
    reason: str


def tokens_needed(base: Ledger, requests: int, context: int) -> int:
    """KV tokens N requests of L tokens occupy (vLLM: whole blocks per request)."""
    if base.engine == "vllm":
        return requests * math.ceil(context / base.page_size) * base.page_size
    return requests * context


def _smallest_fraction(
    p: PlanInputs, start: float, top: float, need: int, **values: object
) -> tuple[float, Ledger] | None:
    f = math.ceil(start * 100) / 100
    while f <= top + 1e-9:
        led = variant(p, mem_fraction=round(f, 2), **values)
        if led is not None and led.kv_tokens >= need:
            return round(f, 2), led
        f += 0.01
    return None


def solve(
    p: PlanInputs, base: Ledger, margin_gib: float, requests: int, context: int
) -> TargetAnswer:
    """Try, in order: nothing, a higher fraction, FP8 KV, FP8 plus a higher fraction."""
    need = tokens_needed(base, requests, context)

    def answer(option: Option | None, reason: str) -> TargetAnswer:
        return TargetAnswer(requests, context, need, option, reason)

    flag = fraction_flag(p)
    dtype_flag = spelled(p, "kv_cache_dtype")
    fp8 = "fp8_e4m3" if p.deployment.engine is Engine.SGLANG else "fp8"
    top = max_safe_fraction(p, base, margin_gib)
    if base.kv_tokens >= need:
        return answer(None, f"already fits: {base.kv_tokens:,} tokens >= {need:,}")
    found = _smallest_fraction(p, base.mem_fraction, top, need)
    if found:
        f, led = found
        return answer(
            Option(
                f"{flag} {f:.2f}",
                OptionKind.FRACTION,
                (flag, f"{f:.2f}"),
                led.kv_tokens,
                (),
                "raise the fraction",
            ),
            f"{flag} {f:.2f} gives {led.kv_tokens:,} tokens (max safe {top:.2f})",
        )
    to_fp8 = not stores_fp8(base)
    if to_fp8:
        halved = variant(p, kv_cache_dtype=fp8)
        if halved is not None and halved.kv_tokens >= need:
            return answer(
                Option(
                    f"KV cache {fp8}",
                    OptionKind.KV_DTYPE,
                    (dtype_flag, fp8),
                    halved.kv_tokens,
                    (),
                    "FP8 KV: quality risk",
                ),
                f"FP8 KV gives {halved.kv_tokens:,} tokens",
            )
        found = _smallest_fraction(p, base.mem_fraction, top, need, kv_cache_dtype=fp8)
        if found:
            f, led = found
            return answer(
                Option(
                    f"KV cache {fp8} + {flag} {f:.2f}",
                    OptionKind.COMBINATION,
                    (dtype_flag, fp8, flag, f"{f:.2f}"),
                    led.kv_tokens,
                    (),
                    "FP8 KV (quality risk) and a higher fraction",
                ),
                f"FP8 KV at {flag} {f:.2f} gives {led.kv_tokens:,} tokens",
            )
    best = variant(p, mem_fraction=top, **({"kv_cache_dtype": fp8} if to_fp8 else {}))
    best_tokens = best.kv_tokens if best else base.kv_tokens
    ratio = math.ceil(need / base.kv_tokens)
    return answer(
        None,
        f"none reaches it within a {margin_gib:.1f} GiB margin: at best "
        f"{best_tokens:,} tokens ({best_tokens / context:.1f} requests of {context:,}); "
        f"a host tier (ratio >= {ratio}) can keep {requests} such contexts cached "
        "but not running; use more GPUs or a shorter context",
    )
