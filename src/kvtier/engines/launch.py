"""Parse a pasted engine launch command into `Deployment` values.

Accepted: `python -m sglang.launch_server ...`, `sglang serve ...`, `vllm serve MODEL ...`,
`python -m vllm.entrypoints.openai.api_server ...`, with leading `VAR=value` assignments,
`--flag value` / `--flag=value`, dash or underscore spellings and shell line continuations.
Flags that change memory map to Deployment fields; flags known to leave memory alone are dropped
silently; any other flag is reported in `ignored` so the caller can warn about it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Sequence
from typing import NamedTuple

from kvtier.engines.deployment import Engine
from kvtier.errors import KvtierError

Convert = Callable[[str], object]


def _bool(raw: str) -> bool:
    return raw.lower() not in ("false", "0", "no")


def _upper(raw: str) -> str:
    return raw.upper()


# flag (dashes) -> (Deployment field, converter); None converter marks a boolean switch.
_SGLANG: dict[str, tuple[str, Convert | None]] = {
    "model-path": ("model", str),
    "model": ("model", str),
    "tp-size": ("tp", int),
    "tp": ("tp", int),
    "tensor-parallel-size": ("tp", int),
    "pp-size": ("pp", int),
    "pp": ("pp", int),
    "pipeline-parallel-size": ("pp", int),
    "dp-size": ("dp", int),
    "dp": ("dp", int),
    "data-parallel-size": ("dp", int),
    "enable-dp-attention": ("enable_dp_attention", None),
    "mem-fraction-static": ("mem_fraction", float),
    "kv-cache-dtype": ("kv_cache_dtype", str),
    "dtype": ("dtype", str),
    "page-size": ("page_size", int),
    "context-length": ("context_length", int),
    "max-running-requests": ("max_running_requests", int),
    "max-total-tokens": ("max_total_tokens", int),
    "chunked-prefill-size": ("chunked_prefill_size", int),
    "cuda-graph-max-bs": ("cuda_graph_max_bs", int),
    "speculative-algorithm": ("speculative_algorithm", _upper),
    "speculative-algo": ("speculative_algorithm", _upper),
    "speculative-draft-model-path": ("draft_model", str),
    "speculative-draft-model": ("draft_model", str),
    "speculative-draft": ("draft_model", str),
    "speculative-num-steps": ("speculative_num_steps", int),
    "speculative-eagle-topk": ("speculative_eagle_topk", int),
    "speculative-num-draft-tokens": ("speculative_num_draft_tokens", int),
    "enable-hierarchical-cache": ("enable_hierarchical_cache", None),
    "hicache-ratio": ("hicache_ratio", float),
    "hicache-size": ("hicache_size_gb", float),
}
_VLLM: dict[str, tuple[str, Convert | None]] = {
    "model": ("model", str),
    "tensor-parallel-size": ("tp", int),
    "tp": ("tp", int),
    "pipeline-parallel-size": ("pp", int),
    "pp": ("pp", int),
    "data-parallel-size": ("dp", int),
    "dp": ("dp", int),
    "gpu-memory-utilization": ("mem_fraction", float),
    "kv-cache-dtype": ("kv_cache_dtype", str),
    "dtype": ("dtype", str),
    "block-size": ("page_size", int),
    "max-model-len": ("context_length", int),
    "max-num-seqs": ("max_running_requests", int),
    "max-num-batched-tokens": ("chunked_prefill_size", int),
    "kv-cache-memory-bytes": ("kv_cache_memory_bytes", int),
    "kv-offloading-size": ("kv_offloading_size_gib", float),
}
_SHORT = {
    "-tp": "tensor-parallel-size",
    "-pp": "pipeline-parallel-size",
    "-dp": "data-parallel-size",
    "-O": "compilation-config",
}
# Flags with no effect on the memory ledger: dropped without a warning.
_NO_MEMORY_EFFECT = frozenset(
    {
        "host",
        "port",
        "served-model-name",
        "trust-remote-code",
        "tool-call-parser",
        "reasoning-parser",
        "enable-metrics",
        "enable-cache-report",
        "log-level",
        "api-key",
        "tokenizer-path",
        "tokenizer",
        "chat-template",
        "disable-log-requests",
        "disable-log-stats",
        "enable-auto-tool-choice",
        "uvicorn-log-level",
        "revision",
        "download-dir",
        "seed",
        "random-seed",
        "enable-prefix-caching",
        "no-enable-prefix-caching",
        "disable-radix-cache",
        "attention-backend",
        "hicache-write-policy",
        "hicache-io-backend",
        "hicache-mem-layout",
        "hicache-storage-backend",
        "kv-offloading-backend",
        "schedule-policy",
        "watchdog-timeout",
    }
)
_BOOL_FLAGS = frozenset(
    {
        "enable-dp-attention",
        "enable-hierarchical-cache",
        "trust-remote-code",
        "enable-metrics",
        "enable-cache-report",
        "disable-log-requests",
        "disable-log-stats",
        "enable-auto-tool-choice",
        "enable-prefix-caching",
        "no-enable-prefix-caching",
        "disable-radix-cache",
        "enforce-eager",
        "disable-cuda-graph",
    }
)

USAGE = (
    "expected 'python -m sglang.launch_server ...', 'sglang serve ...', 'vllm serve MODEL "
    "...' or 'python -m vllm.entrypoints.openai.api_server ...'"
)


class LaunchCommand(NamedTuple):
    engine: Engine
    values: dict[str, object]  # Deployment field -> value
    ignored: tuple[str, ...]  # flags kvtier did not use, as written


def _tokens(command: Sequence[str]) -> list[str]:
    """Shell words of the command; a single pasted string (with continuations) is split here."""
    if len(command) == 1:
        text = command[0].replace("\\\r\n", " ").replace("\\\n", " ")
        try:
            command = shlex.split(text)
        except ValueError as exc:
            raise KvtierError(f"malformed launch command ({exc}); {USAGE}") from None
    return [w.strip() for w in command if w.strip() not in ("", "\\")]


def _engine(words: list[str]) -> tuple[Engine, list[str], str | None]:
    """Engine, the words after the program, and a positional model for `vllm serve MODEL`."""
    i = 0
    while i < len(words) and "=" in words[i] and not words[i].startswith("-"):
        i += 1  # VAR=value assignments
    rest = words[i:]
    if len(rest) >= 3 and rest[0].rsplit("/", 1)[-1].startswith("python") and rest[1] == "-m":
        module = rest[2]
        if module == "sglang.launch_server":
            return Engine.SGLANG, rest[3:], None
        if module.startswith("vllm.entrypoints"):
            return Engine.VLLM, rest[3:], None
    if len(rest) >= 2 and rest[1] == "serve":
        program = rest[0].rsplit("/", 1)[-1]
        if program == "sglang":
            return Engine.SGLANG, rest[2:], None
        if program == "vllm":
            if len(rest) >= 3 and not rest[2].startswith("-"):
                return Engine.VLLM, rest[3:], rest[2]
            return Engine.VLLM, rest[2:], None
    shown = " ".join(words[:3]) or "nothing"
    raise KvtierError(f"launch command not recognised (starts with {shown!r}); {USAGE}")


def _speculative_config(raw: str, values: dict[str, object]) -> None:
    """vLLM `--speculative-config '{"method": ..., "model": ..., "num_speculative_tokens": N}'`."""
    try:
        config = json.loads(raw)
    except ValueError:
        raise KvtierError(f"--speculative-config is not JSON: {raw!r}") from None
    if not isinstance(config, dict):
        raise KvtierError("--speculative-config must be a JSON object")
    if config.get("method"):
        values["speculative_algorithm"] = str(config["method"]).upper()
    if config.get("model"):
        values["draft_model"] = str(config["model"])
    if config.get("num_speculative_tokens"):
        values["speculative_num_draft_tokens"] = int(config["num_speculative_tokens"])


def parse_launch(command: Sequence[str]) -> LaunchCommand:
    """Parse an engine launch command; raises KvtierError (one line) when it is malformed."""
    words = _tokens(command)
    engine, args, positional_model = _engine(words)
    table = _SGLANG if engine is Engine.SGLANG else _VLLM
    values: dict[str, object] = {}
    if positional_model:
        values["model"] = positional_model
    ignored: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if not word.startswith("-"):
            ignored.append(word)
            continue
        name, eq, inline = word.partition("=")
        flag = _SHORT.get(name, name.lstrip("-")).replace("_", "-")
        raw: str | None = inline if eq else None
        takes_value = flag not in _BOOL_FLAGS and (flag not in table or table[flag][1] is not None)
        if raw is None and takes_value and i < len(args) and not args[i].startswith("--"):
            raw = args[i]
            i += 1
        if flag == "speculative-config" and engine is Engine.VLLM:
            if raw is None:
                raise KvtierError("--speculative-config needs a value")
            _speculative_config(raw, values)
        elif flag in table:
            field, convert = table[flag]
            if convert is None:
                values[field] = _bool(raw) if raw is not None else True
                continue
            if raw is None:
                raise KvtierError(f"launch command flag --{flag} needs a value")
            try:
                values[field] = convert(raw)
            except ValueError:
                raise KvtierError(f"launch command flag --{flag}: bad value {raw!r}") from None
        elif flag not in _NO_MEMORY_EFFECT:
            ignored.append(name)
    if "model" not in values:
        raise KvtierError("launch command names no model (--model-path / vllm serve MODEL)")
    return LaunchCommand(engine, values, tuple(ignored))
