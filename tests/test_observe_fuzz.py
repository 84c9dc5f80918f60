"""No serving log or metrics text, however mangled, makes `kvtier observe` raise anything but a
KvtierError, and its JSON stays strict.

Lines are built from the real fixtures and from generated lines of every periodic format: cut,
spliced, joined, with numbers made huge, negative or NaN, labels swapped, fields dropped, ANSI
colours, CRs, NULs, invalid UTF-8 and random bytes added; then fed in chunks of random sizes.
Under CI the seed is fixed, so a run is reproducible; locally each run explores a new seed
(printed on failure).
"""

from __future__ import annotations

import json
import os
import random
import re

import pytest

from kvtier.errors import KvtierError
from kvtier.observe.logread import LogReader
from kvtier.observe.metrics import observe_scrapes, parse_scrape
from kvtier.observe.observer import Observer
from kvtier.payload import to_json
from kvtier.report.observe_payload import observe_payload
from observe_support import FIXTURES

LINES_PER_ROUND = 5_000
ROUNDS = 24  # 120,000 lines
SEED = 0 if os.environ.get("CI") else random.SystemRandom().randrange(1 << 30)

REAL = [
    line
    for path in sorted(FIXTURES.glob("*.log"))
    for line in path.read_text(encoding="utf-8").splitlines()
    if line.strip()
]
METRICS = [p.read_text(encoding="utf-8") for p in sorted(FIXTURES.glob("*.prom"))]
TITLES = (
    "Decode batch. ",
    "Decode batch, ",
    "Prefill batch. ",
    "Prefill batch, ",
    "new fill batch. ",
    "KV cache pool is full. Retract requests. ",
    "Decode out of memory happened. ",
    "KV Cache is allocated. ",
    "max_total_num_tokens=",
    "Engine 000: Avg prompt throughput: ",
    "Avg prompt throughput: ",
    "Prefix cache hit rate: GPU: ",
    "Sequence group 3 is preempted by PreemptionMode.RECOMPUTE mode because ",
    "GPU KV cache size: ",
    "#running-req: ",
)
LABELS = (
    "#running-req",
    "#queue-req",
    "token usage",
    "full token usage",
    "swa token usage",
    "mamba usage",
    "#new-token",
    "#cached-token",
    "gen throughput (token/s)",
    "input throughput (token/s)",
    "cache hit rate",
    "#prealloc-req",
    "#retracted-req",
    "#retracted_reqs",
    "Running",
    "Waiting",
    "Pending",
    "Swapped",
    "Preemptions",
    "GPU KV cache usage",
    "Prefix cache hit rate",
    "External prefix cache hit rate",
    "#tokens",
    "total_num_cumulative_preemption",
    "CPU",
)
VALUES = (
    "0",
    "1",
    "-1",
    "0.99",
    "99.9%",
    "1e308",
    "nan",
    "inf",
    "9" * 40,
    "",
    "True",
    "12,345",
    "%.",
)
PREFIXES = (
    "",
    "[2026-01-01 00:00:00 TP0] ",
    "[04:40:55 TP3 EP3] ",
    "(APIServer pid=1) INFO 05-12 08:01:39 ",
    "2026-05-12T08:01:39.3Z ",
    "\x1b[32m",
    "[2024-13-45 99:99:99 DP0 TP0] ",
    "INFO 02-30 25:61:61 ",
)
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _generated(rng: random.Random) -> str:
    fields = ", ".join(
        f"{rng.choice(LABELS)}: {rng.choice(VALUES)}" for _ in range(rng.randint(0, 10))
    )
    return rng.choice(PREFIXES) + rng.choice(TITLES) + fields + rng.choice(("", ", ", ".", "%"))


def _mutate(rng: random.Random, line: str) -> str:
    choice = rng.randrange(10)
    if choice == 0:
        return line[: rng.randint(0, len(line))]
    if choice == 1:
        return NUMBER.sub(lambda m: rng.choice(VALUES), line)
    if choice == 2:
        parts = line.split(", ")
        rng.shuffle(parts)
        return ", ".join(parts[: rng.randint(0, len(parts))])
    if choice == 3:
        return line + rng.choice(REAL)  # two lines joined, as pasted
    if choice == 4:
        at = rng.randint(0, len(line))
        return line[:at] + "".join(chr(rng.randrange(0x2FFF)) for _ in range(5)) + line[at:]
    if choice == 5:
        return line.replace(": ", rng.choice((":", ": : ", "=", ":  ")))
    if choice == 6:
        return "\x1b[1m" + line.replace(" ", "\r", 1) + "\x00\x1b[0m"
    if choice == 7:
        return rng.choice(PREFIXES) + line
    if choice == 8:
        return line.replace(rng.choice(LABELS), rng.choice(LABELS))
    return line


def _round(rng: random.Random) -> bytes:
    lines = []
    for _ in range(LINES_PER_ROUND):
        line = _generated(rng) if rng.random() < 0.5 else rng.choice(REAL)
        for _ in range(rng.randint(0, 2)):
            line = _mutate(rng, line)
        lines.append(line)
    data = "\n".join(lines).encode("utf-8", errors="replace")
    if rng.random() < 0.5:
        at = rng.randint(0, len(data))
        data = data[:at] + bytes(rng.randrange(256) for _ in range(64)) + data[at:]
    return data


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_mangled_logs_never_raise(round_: int) -> None:
    rng = random.Random(f"{SEED}-{round_}")
    data = _round(rng)
    observer = Observer("fuzz", points=rng.choice((1, 5, 120)))
    reader = LogReader(observer)
    try:
        at = 0
        while at < len(data):
            step = rng.randint(1, 1 << 16)
            reader.feed(data[at : at + step])
            at += step
        reader.close()
        json.dumps(to_json(observe_payload(observer.result())), allow_nan=False)
    except Exception as exc:  # pragma: no cover - the failure report
        raise AssertionError(f"seed {SEED}, round {round_}: {exc!r}") from exc


def test_mangled_metrics_raise_only_kvtier_errors() -> None:
    rng = random.Random(f"{SEED}-metrics")
    for _ in range(1_500):
        text = rng.choice(METRICS)
        lines = text.splitlines()
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(lines))
            lines[i] = _mutate(rng, lines[i])
        mangled = "\n".join(lines)
        observer = Observer("fuzz")
        try:
            observe_scrapes([parse_scrape(mangled, "fuzz", 0.0, "saved")], observer)
        except KvtierError:
            continue
        except Exception as exc:  # pragma: no cover - the failure report
            raise AssertionError(f"seed {SEED}: {exc!r} on {mangled[:300]!r}") from exc
        json.dumps(to_json(observe_payload(observer.result())), allow_nan=False)
