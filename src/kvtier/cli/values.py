"""Argument types of every numeric flag: finite, within the range the flag allows.

A value outside its range is refused by argparse as one line that names the flag:
`kvtier: error: argument --tp: must be a whole number from 1 to 4,096, got '0'`. The bounds are
wide enough for any real deployment and narrow enough that no later sum or product overflows.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from kvtier.errors import KvtierError

MAX_GPUS = 4096  # tp, pp, dp, GPUs per node
MAX_TOKENS = 1 << 40  # token counts, context lengths, batch sizes
MAX_GIB = 4096.0  # GiB per GPU: a measured figure or a margin
MAX_HOST_GB = 1e7  # decimal GB of host RAM or host pool
MAX_GBPS = 1e6  # any bandwidth, GB/s
MAX_TFLOPS = 1e6
MAX_RATIO = 1e4  # hicache ratio
MAX_SECONDS = 1e7
MAX_REQUESTS = 10_000_000  # a generated trace


def _few(text: str, most: int) -> bool:
    """Whether `text` may hold at most `most` comma-separated values, asked before any is read
    (a 10^7-stage --rate-stages took 7.7 s and 1.7 GB to be refused)."""
    return text.count(",") < 16 * most


def count(least: int = 1, most: int = MAX_TOKENS) -> Callable[[str], int]:
    """A whole number in [least, most]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not least <= value <= most:
            raise argparse.ArgumentTypeError(
                f"must be a whole number from {least:,} to {most:,}, got {text!r:.60}"
            )
        return value

    parse.__name__ = "count"
    return parse


def number(
    least: float = 0.0, most: float = math.inf, *, above: bool = False, below: bool = False
) -> Callable[[str], float]:
    """A finite number from `least` to `most`; `above` / `below` leave out that end."""
    low = f"({least:g}" if above else f"[{least:g}"
    high = f"{most:g})" if below else f"{most:g}]"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        inside = (least < value if above else least <= value) and (
            value < most if below else value <= most
        )
        if not (math.isfinite(value) and inside):
            raise argparse.ArgumentTypeError(f"must be a number in {low}, {high}, got {text!r:.60}")
        return value

    parse.__name__ = "number"
    return parse


def release(resolve: Callable[[str, str], object], flag: str) -> Callable[[str], str]:
    """An engine version `resolve(text, flag)` reads (its ladder refuses one it does not know),
    kept as the text given."""

    def parse(text: str) -> str:
        try:
            resolve(text, flag)
        except KvtierError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    parse.__name__ = "release"
    return parse


def counts(least: int = 1, most: int = MAX_TOKENS) -> Callable[[str], list[int]]:
    """A comma-separated list of token counts in [least, most], at least one."""
    one = count(least, most)

    def parse(text: str) -> list[int]:
        words = [w for w in text.split(",") if w.strip()] if _few(text, 64) else []
        if not words or len(words) > 64:
            raise argparse.ArgumentTypeError(
                f"expected N[,N...] tokens, 1 to 64 of them, got {text!r:.60}"
            )
        try:
            return [one(w) for w in words]
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"expected N[,N...] tokens, each a whole number from {least:,} to {most:,}, "
                f"got {text!r:.60}"
            ) from None

    parse.__name__ = "counts"
    return parse


def rate_stages(text: str) -> tuple[tuple[float, int], ...]:
    """Load stages like 15:50,3:20: 1 to 256 of RATE (requests a second, above 0, at most 1e6)
    and whole SECONDS (1 to MAX_SECONDS) each, as inference-perf's `load.stages` give them."""
    out: list[tuple[float, int]] = []
    words = [w.strip() for w in text.split(",") if w.strip()] if _few(text, 256) else []
    for word in words:
        rate_text, _, seconds_text = word.partition(":")
        try:
            rate, seconds = float(rate_text), int(seconds_text)
        except ValueError:
            rate, seconds = math.nan, 0
        if not (0 < rate <= 1e6 and 1 <= seconds <= MAX_SECONDS):
            out = []
            break
        out.append((rate, seconds))
    if not 1 <= len(out) <= 256:
        raise argparse.ArgumentTypeError(
            f"wants RATE:SECONDS[,RATE:SECONDS...] (1 to 256 stages, RATE in (0, 1e6], whole "
            f"SECONDS from 1 to {MAX_SECONDS:g}), got {text!r:.60}"
        )
    return tuple(out)


def contexts(raw: str) -> tuple[int, ...]:
    """Context lengths like 8192,32k: 1 to 64 whole lengths from 1 to MAX_TOKENS."""
    values = []
    words = [w.strip().lower() for w in raw.split(",") if w.strip()] if _few(raw, 64) else []
    for word in words:
        scale = 1024 if word.endswith("k") else 1
        try:
            value = float(word.removesuffix("k")) * scale
        except ValueError:
            value = math.nan
        if not (1 <= value <= MAX_TOKENS and value == int(value)):
            raise argparse.ArgumentTypeError(
                f"wants whole lengths like 8192,32k from 1 to {MAX_TOKENS:,}, got {raw!r:.60}"
            )
        values.append(int(value))
    if not values or len(values) > 64:
        raise argparse.ArgumentTypeError(f"wants 1 to 64 lengths like 8192,32k, got {raw!r:.60}")
    return tuple(values)


GPUS = count(1, MAX_GPUS)
TOKENS = count(1, MAX_TOKENS)
FRACTION = number(0.0, 1.0, above=True)  # (0, 1]: a memory fraction, an efficiency
GIB = number(0.0, MAX_GIB)
HOST_GB = number(0.0, MAX_HOST_GB)
GBPS = number(0.0, MAX_GBPS, above=True)
TFLOPS = number(0.0, MAX_TFLOPS, above=True)
SECONDS = number(0.0, MAX_SECONDS)
FINITE = number(-1e12, 1e12)  # a flag whose range its command checks, naming the rule
