"""Parse an engine launch command into `Deployment` values: pasted after `--`, or found in a log.

Accepted: `python -m sglang.launch_server ...`, `sglang serve ...`, `vllm serve MODEL ...`,
`python -m vllm.entrypoints.openai.api_server ...`, with leading `VAR=value` assignments,
`--flag value` / `--flag=value`, dash or underscore spellings and shell line continuations.
Flags that change memory map to Deployment fields through the engine's table
(`engines/<engine>/flags.py`); flags known to leave memory alone are dropped silently; any other
flag, any SGLANG_* / VLLM_* / LMCACHE_* variable kvtier does not read, and PyTorch's allocator
settings (PYTORCH_CUDA_ALLOC_CONF and its kin), are reported in `ignored` so the caller can warn
about them. This is the one launch-command
parser: `kvtier plan -- ...` and the log readers (`find_launch`) both use it.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from typing import NamedTuple

from kvtier.engines.deployment import Engine
from kvtier.engines.flags import BadChoice, Flag, FlagTable, as_bool
from kvtier.engines.sglang import embedding
from kvtier.engines.sglang.flags import FLAGS as SGLANG_FLAGS
from kvtier.engines.vllm.flags import FLAGS as VLLM_FLAGS
from kvtier.errors import KvtierError
from kvtier.logs.lines import LogLine
from kvtier.logs.records import Args

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
        "no-enable-prefix-caching",
        "attention-backend",
        "hicache-io-backend",
        "hicache-mem-layout",
        "hicache-storage-backend",
        "kv-offloading-backend",
        "schedule-policy",
        "watchdog-timeout",
    }
)
# Switches (no value) kvtier does not model; the modelled ones are the flag tables' booleans,
# either engine's, so another engine's switch does not swallow the next word either.
_SWITCHES = frozenset(
    {
        "trust-remote-code",
        "enable-metrics",
        "enable-cache-report",
        "disable-log-requests",
        "disable-log-stats",
        "enable-auto-tool-choice",
        "no-enable-prefix-caching",
        "enforce-eager",
        "disable-cuda-graph",
    }
) | {
    s
    for table in (SGLANG_FLAGS, VLLM_FLAGS)
    for f in table.flags
    if f.convert is None
    for s in f.spellings
}

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


def _vllm_env(assigned: list[tuple[str, str, str]]) -> dict[str, object]:
    """The assignments vLLM reads that kvtier uses: VLLM_PP_LAYER_PARTITION (get_pp_indices
    reads it from envs), VLLM_USE_SIMPLE_KV_OFFLOAD and
    VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE (envs.py: bool(int(value))) and
    PYTORCH_CUDA_ALLOC_CONF's expandable_segments:True (engines/vllm/alloc_conf.py)."""
    values: dict[str, object] = {}
    for name, _, value in assigned:
        if name == "VLLM_PP_LAYER_PARTITION":
            values["pp_layer_partition"] = value
        elif name == "PYTORCH_CUDA_ALLOC_CONF":
            # still named among the settings not modelled; vLLM's check reads this substring
            values["expandable_segments"] = "expandable_segments:True" in value
        elif name in _BOOL_VARIABLES:
            try:
                values[_BOOL_VARIABLES[name]] = bool(int(value))
            except ValueError:
                raise KvtierError(
                    f"{name}={value!r:.40} is not a whole number (vLLM reads bool(int(value)))"
                ) from None
    return values


# vLLM's variables read as bool(int(value)) (envs.py), and the Deployment field each sets
_BOOL_VARIABLES = {
    "VLLM_USE_SIMPLE_KV_OFFLOAD": "simple_kv_offload",
    "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "allow_chunked_local_hma",
}


_VARIABLE = re.compile(r"[A-Za-z_]\w*=", re.ASCII)  # a shell assignment's NAME=
# The prefixes of the engines' and LMCache's own variables: one kvtier does not read is named
# among the command's ignored words, as an unknown flag is (CUDA_VISIBLE_DEVICES and the like
# pass without a word).
_ENGINE_PREFIXES = ("SGLANG_", "VLLM_", "LMCACHE_")
# PyTorch's caching-allocator settings (torch 2.13 utils/collect_env.py names the three):
# expandable_segments, max_split_size_mb or the cudaMallocAsync backend change what the
# allocator reserves beyond what it holds, which the ledger's figures do not model
_ALLOCATOR_VARIABLES = frozenset(
    {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF"}
)
# LMCacheEngineConfig's settings sim/vllm_tiers.py reads from LMCACHE_<NAME>
LMCACHE_SETTINGS = (
    "chunk_size",
    "local_cpu",
    "max_local_cpu_size",
    "local_disk",
    "max_local_disk_size",
    "remote_url",
)
_READ_VARIABLES = {
    Engine.SGLANG: frozenset({embedding.REPLICATION_ENV}),
    Engine.VLLM: frozenset(
        {
            "VLLM_PP_LAYER_PARTITION",
            "VLLM_USE_SIMPLE_KV_OFFLOAD",
            "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE",
            *(f"LMCACHE_{name.upper()}" for name in LMCACHE_SETTINGS),
        }
    ),
}


def _engine(words: list[str]) -> tuple[Engine, list[str], str | None]:
    """Engine, the words after the program, and a positional model for `vllm serve MODEL`."""
    i = 0
    while i < len(words) and _VARIABLE.match(words[i]):
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


_MAX_DRAFT_TOKENS = 1024


def _speculative_config(raw: str, values: dict[str, object]) -> None:
    """vLLM `--speculative-config '{"method": ..., "model": ..., "num_speculative_tokens": N}'`."""
    try:
        config = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, a 5,000-digit number, deep nesting
        raise KvtierError(f"--speculative-config is not JSON: {raw[:60]!r}") from None
    values.update(speculative_config(config))


def speculative_config(config: object) -> dict[str, object]:
    """The Deployment fields a vLLM speculative config sets (`--speculative-config`, or the
    `speculative_config` dict a log's `non-default args` print): method, draft model, tokens."""
    if not isinstance(config, dict):
        raise KvtierError("--speculative-config must be a JSON object")
    values: dict[str, object] = {}
    for key, field in (("method", "speculative_algorithm"), ("model", "draft_model")):
        value = config.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise KvtierError(f"--speculative-config `{key}` must be a name, got {value!r:.40}")
        values[field] = value.upper() if key == "method" else value
    tokens = config.get("num_speculative_tokens")
    if tokens is not None:
        if (
            isinstance(tokens, bool)
            or not isinstance(tokens, int)
            or not 1 <= tokens <= _MAX_DRAFT_TOKENS
        ):
            raise KvtierError(
                "--speculative-config `num_speculative_tokens` must be a whole number from 1 "
                f"to {_MAX_DRAFT_TOKENS:,}, got {tokens!r:.40}"
            )
        values["speculative_num_draft_tokens"] = tokens
    return values


def _negated_switch(engine: Engine, table: FlagTable, spelling: str) -> Flag | None:
    """vLLM's switch a `--no-` spelling turns off: EngineArgs declares its booleans with
    argparse.BooleanOptionalAction, so `--no-enable-prefix-caching` sets the field False."""
    if engine is not Engine.VLLM or not spelling.startswith("no-"):
        return None
    flag = table.find(spelling.removeprefix("no-"))
    return flag if flag is not None and flag.convert is None else None


def flag_table(engine: Engine) -> FlagTable:
    return SGLANG_FLAGS if engine is Engine.SGLANG else VLLM_FLAGS


def read_launch(command: Sequence[str]) -> LaunchCommand:
    """Parse an engine launch command (a model need not be named); raises KvtierError (one line)
    when it is malformed."""
    words = _tokens(command)
    engine, args, positional_model = _engine(words)
    table = flag_table(engine)
    assignments = words[: len(words) - len(args)]
    values = _environment(engine, assignments)
    if positional_model:
        values["model"] = positional_model
    ignored = _unread_variables(engine, assignments)
    written: dict[str, str] = {}  # field -> the words that set it
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if not word.startswith("-"):
            ignored.append(word)
            continue
        name, eq, inline = word.partition("=")
        spelling = _SHORT.get(name, name.lstrip("-")).replace("_", "-")
        flag = table.find(spelling)
        raw: str | None = inline if eq else None
        negated = _negated_switch(engine, table, spelling)
        if negated is not None and raw is None:
            flag, raw = negated, "false"
        takes_value = flag.convert is not None if flag else spelling not in _SWITCHES
        if raw is None and takes_value and i < len(args) and not args[i].startswith("--"):
            raw = args[i]
            i += 1
        before = dict(values)
        if spelling == "speculative-config" and engine is Engine.VLLM:
            if raw is None:
                raise KvtierError("--speculative-config needs a value")
            _speculative_config(raw, values)
        elif flag is not None:
            if flag.convert is None:
                values[flag.field] = _switch(spelling, raw)
            elif raw is None:
                raise KvtierError(f"launch command flag --{spelling} needs a value")
            else:
                try:
                    values[flag.field] = flag.convert(raw)
                except ValueError as exc:
                    hint = f" (takes {exc})" if isinstance(exc, BadChoice) else ""
                    raise KvtierError(
                        f"launch command flag --{spelling}: bad value {raw!r:.60}{hint}"
                    ) from None
        elif spelling not in _NO_MEMORY_EFFECT:
            ignored.append(name)
        _check_agrees(before, values, written, word if eq or raw is None else f"{word} {raw}")
    return LaunchCommand(engine, values, tuple(ignored))


def _environment(engine: Engine, words: Sequence[str]) -> dict[str, object]:
    """The Deployment values the `VAR=value` words before the command set; a variable set twice
    to two values is refused (the shell would keep the last)."""
    assigned: dict[str, str] = {}
    for name, _, value in (w.partition("=") for w in words):
        if assigned.setdefault(name, value) != value:
            raise KvtierError(
                f"launch command: {name}={value} contradicts {name}={assigned[name]}; give one"
            )
    values: dict[str, object] = {}
    # LMCache reads its settings from LMCACHE_* variables, SGLang its own from SGLANG_* ones
    field, prefix = (
        ("lmcache_env", "LMCACHE_") if engine is Engine.VLLM else ("sglang_env", "SGLANG_")
    )
    env = tuple((name, value) for name, value in assigned.items() if name.startswith(prefix))
    if engine is Engine.SGLANG:
        embedding.check_env(env)
    if env:
        values[field] = env
    if engine is Engine.VLLM:
        values.update(_vllm_env([(name, "=", value) for name, value in assigned.items()]))
    return values


def _unread_variables(engine: Engine, words: Sequence[str]) -> list[str]:
    """The engine and allocator variables among the `VAR=value` words that kvtier does not
    read, by name."""
    names = dict.fromkeys(w.partition("=")[0] for w in words if _VARIABLE.match(w))
    return [
        n
        for n in names
        if (n.startswith(_ENGINE_PREFIXES) and n not in _READ_VARIABLES[engine])
        or n in _ALLOCATOR_VARIABLES
    ]


def _switch(spelling: str, raw: str | None) -> bool:
    """A switch's value: on when bare, else its explicit true or false."""
    try:
        return as_bool(raw) if raw is not None else True
    except ValueError:
        raise KvtierError(
            f"launch command flag --{spelling}: bad value {raw!r:.40} (a switch: bare, or "
            "=true / =false)"
        ) from None


def _check_agrees(
    before: dict[str, object], after: dict[str, object], written: dict[str, str], words: str
) -> None:
    """Refuse a flag that sets a field an earlier flag set to another value (`--tp 8` and
    `--tp-size 4`); the engine would silently keep the last."""
    for field, value in after.items():
        if field in before and before[field] != value:
            raise KvtierError(
                f"launch command: {words} contradicts {written[field]} (both set {field})"
            )
        written.setdefault(field, words)


def parse_launch(command: Sequence[str]) -> LaunchCommand:
    """`read_launch` of a command that must name its model (what `kvtier plan -- ...` takes)."""
    launch = read_launch(command)
    if "model" not in launch.values:
        raise KvtierError("launch command names no model (--model-path / vllm serve MODEL)")
    return launch


# Where a launch command starts inside a log line: the interpreter and module, or the CLI.
_IN_LOG = re.compile(
    r"(?:\S{0,200}python[\d.]{0,5}\s{1,4}-m\s{1,4})?"
    r"(?:sglang\.launch_server|vllm\.entrypoints\.openai\.api_server)\b"
    r"|\b(?:sglang|vllm) serve\b"
)
_CONTINUED_LINES = 40  # a wrapped command spans at most this many lines


def find_launch(lines: list[LogLine]) -> Args | None:
    """The last launch command in a log, read by `read_launch`, as the arguments it sets under
    the names the engine prints them (`tp_size`, `tensor_parallel_size`, ...).

    A command cut short or quoted oddly is read word by word; one that cannot be read at all is
    skipped.
    """
    found = None
    for index, line in enumerate(lines):
        if "serve" not in line.text and "launch_server" not in line.text:
            continue
        match = _IN_LOG.search(line.text)
        if match is None:
            continue
        parts = [line.text[match.start() :]]
        follow = index
        while parts[-1].rstrip().endswith("\\") and follow + 1 < min(
            len(lines), index + _CONTINUED_LINES
        ):
            follow += 1
            parts.append(lines[follow].text)
        command = " ".join(part.rstrip().rstrip("\\") for part in parts)
        if not match.group().startswith(("sglang ", "vllm ")) and "-m" not in match.group():
            command = "python -m " + command
        command = _assignments(line.text[: match.start()]) + command
        launch = _read_in_log(command)
        if launch is None:
            continue
        table = flag_table(launch.engine)
        values: dict[str, object] = {}
        for field, value in launch.values.items():
            names = table.printed(field) or (field,)
            values[names[0]] = value
        found = Args(line.number, line.text, None, values)
    return found


_ASSIGNMENT = re.compile(r"[A-Z_][A-Z0-9_]*=\S*")


def _assignments(before: str) -> str:
    """The `VAR=value` words just before a launch command on its line (`VLLM_PP_LAYER_PARTITION=
    16,32 vllm serve ...`), which the command runs under."""
    words = before.split()
    start = len(words)
    while start > 0 and _ASSIGNMENT.fullmatch(words[start - 1]):
        start -= 1
    return "".join(w + " " for w in words[start:])


def _read_in_log(command: str) -> LaunchCommand | None:
    try:
        return read_launch([command])
    except KvtierError:
        pass
    try:  # unbalanced quotes in a pasted or cut line: plain words
        return read_launch([w.strip("'\"") for w in command.split()])
    except KvtierError:
        return None
