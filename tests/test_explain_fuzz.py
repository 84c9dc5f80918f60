"""No log text, however mangled, makes the log readers raise anything but a KvtierError.

Each Hypothesis example draws a seed and a few arbitrary strings and byte blobs, then builds a
batch of texts from fragments of real startup lines: cut, spliced, with numbers made huge or
negative, units swapped, fields dropped, prefixes and random bytes added. Batching keeps well
over 100,000 texts within a minute.
"""

from __future__ import annotations

import contextlib
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtier.engines.detect import detect_log
from kvtier.engines.sglang.log import parse_sglang
from kvtier.engines.vllm.log import parse_vllm
from kvtier.errors import KvtierError
from kvtier.ledger.explain import explain_log

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"
REAL_LINES = [
    line
    for path in sorted(FIXTURES.glob("*.log"))
    for line in path.read_text(encoding="utf-8").splitlines()
    if line.strip()
]
EXTRA_LINES = [
    "[t TP0] Load weight begin. avail mem=78.10 GB",
    "[t TP1] Capture cuda graph end. Time elapsed: 18.28 s. mem usage=0.11 GB. avail mem=1.70 GB.",
    "[t TP0] Capture draft decode CUDA graph end. elapsed=1.0 s, mem usage=0.2 GB, avail mem=9 GB.",
    "[t TP0] Allocating 44.77 GB host memory for hierarchical KV cache.",
    "(Worker_TP1 pid=4) INFO [gpu_worker.py:1] Initial free memory 70.00 GiB, reserved 30.00 GiB "
    "memory for KV Cache as specified by kv_cache_memory_bytes config",
    "INFO 01-01 [gpu_model_runner.py:1] Graph capturing finished in 12 secs, took 0.55 GiB",
    "INFO [gpu_worker.py:1] CUDA graph pool memory: 0.50 GiB (actual), 0.84 GiB (estimated)",
    "INFO [gpu_worker.py:1] CUDA graph memory profiling is enabled (default since v0.21.0).",
    "INFO Using fp8 data type to store kv cache. It reduces the GPU memory footprint.",
    "INFO args: Namespace(model='Qwen/Qwen3-8B', tensor_parallel_size=2, block_size=32)",
    "(VllmWorker rank=1 pid=9) INFO [gpu_worker.py:1] Available KV cache memory: 12.34 GiB",
]
LINES = REAL_LINES + EXTRA_LINES
NUMBER = re.compile(r"\d+(?:\.\d+)?")
HUGE = ("9" * 400, "1e308", "-5.00", "0", "0.00", "nan", "inf", "12345678901234567890.5", "-0")
UNITS = ("GB", "GiB", "MiB", "TB", "gb", "", "G B", "GiBGiB")
PREFIXES = ("", "sglang-1  | ", "Nov 29 18:00:00 host unit[1]: ", "\x1b[31m", "2026-01-01T00:00Z ")
TEXTS_PER_EXAMPLE = 500
EXAMPLES = 220
EXPLAIN_EVERY = 5  # the full explain path (model lookup, reconcile) on every fifth text
FLAG_SETS = ({}, {"model": "Qwen/Qwen3-8B"}, {"engine": "sglang"}, {"engine": "vllm"})


def _mutate_line(rng: random.Random, line: str, fragments: list[str]) -> str:
    choice = rng.randrange(9)
    if choice == 0:  # cut short
        return line[: rng.randrange(len(line) + 1)]
    if choice == 1:  # huge, negative or odd numbers
        return NUMBER.sub(lambda m: rng.choice(HUGE) if rng.random() < 0.5 else m.group(), line)
    if choice == 2:  # swapped units
        return re.sub(r"Gi?B", lambda m: rng.choice(UNITS), line)
    if choice == 3:  # a field dropped
        parts = line.split(", ")
        if len(parts) > 1:
            parts.pop(rng.randrange(len(parts)))
        return ", ".join(parts)
    if choice == 4:  # splice two lines
        other = rng.choice(LINES)
        return line[: rng.randrange(len(line) + 1)] + other[rng.randrange(len(other) + 1) :]
    if choice == 5 and fragments:  # arbitrary text inserted
        at = rng.randrange(len(line) + 1)
        return line[:at] + rng.choice(fragments) + line[at:]
    if choice == 6:  # a prefix
        return rng.choice(PREFIXES) + line
    if choice == 7:  # characters replaced
        chars = list(line)
        for _ in range(rng.randrange(1, 4)):
            if chars:
                chars[rng.randrange(len(chars))] = chr(rng.randrange(0, 0x3000))
        return "".join(chars)
    return line


def _texts(seed: int, fragments: list[str], blobs: list[bytes]) -> list[str]:
    rng = random.Random(seed)
    noise = fragments + [b.decode("latin-1") for b in blobs]
    texts = []
    for _ in range(TEXTS_PER_EXAMPLE):
        lines = [_mutate_line(rng, rng.choice(LINES), noise) for _ in range(rng.randrange(1, 14))]
        if rng.random() < 0.1:
            lines.append(rng.choice(noise) if noise else "")
        sep = rng.choice(("\n", "\n", "\r\n", "\r", ""))
        texts.append(sep.join(lines))
    return texts


def _parse(text: str) -> None:
    """Both parsers on every text: they never refuse, whatever the lines say."""
    lines = detect_log(text).lines
    parse_sglang(lines)
    parse_vllm(lines)


def _explain(text: str, flags: dict[str, object]) -> None:
    """The whole explain path: it answers or refuses with a KvtierError."""
    with contextlib.suppress(KvtierError):
        explain_log(text, flags)


@pytest.mark.slow
def test_mangled_logs_never_raise_anything_but_kvtier_errors() -> None:
    checked = [0]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        seed=st.integers(0, 2**32 - 1),
        fragments=st.lists(st.text(max_size=40), max_size=4),
        blobs=st.lists(st.binary(max_size=48), max_size=3),
    )
    def run(seed: int, fragments: list[str], blobs: list[bytes]) -> None:
        for index, text in enumerate(_texts(seed, fragments, blobs)):
            _parse(text)
            if index % EXPLAIN_EVERY == 0:
                _explain(text, FLAG_SETS[index // EXPLAIN_EVERY % len(FLAG_SETS)])
            checked[0] += 1

    run()
    assert checked[0] >= 100_000


def test_whole_real_logs_with_every_line_cut_short() -> None:
    """Each fixture log with one line cut at every position: parse or refuse, never crash."""
    for path in sorted(FIXTURES.glob("*.log")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for index, line in enumerate(lines):
            for cut in range(0, len(line), 7):
                text = "\n".join([*lines[:index], line[:cut], *lines[index + 1 :]])
                _parse(text)
                _explain(text, {})


@pytest.mark.parametrize("name", ["a" * 300, "~kvtier-no-such-user/m"])
@pytest.mark.parametrize("where", ["log", "flag"])
def test_a_model_name_no_local_path_can_be_is_refused(name: str, where: str) -> None:
    """A model name over the file system's name limit, or `~user` of an unknown user: neither is
    a path here, so it is an unknown model (a refusal naming it), not an OSError or a
    RuntimeError from the path lookup."""
    text = "\n".join(
        [f"INFO args: Namespace(model='{name}', tensor_parallel_size=2)", EXTRA_LINES[-1]]
    )
    with pytest.raises(KvtierError, match=re.escape(name[:40])):
        explain_log(text, {"model": name} if where == "flag" else {})
