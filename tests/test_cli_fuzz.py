"""Hostile input to every command, run in this process: never a traceback; a refusal is exit 2 and
one line that names the input (the flag, the field or the file).

Families: every numeric flag of every subcommand, every config.json field, every trace field and
every leaf of a saved report payload, each given wrong types and out-of-range values. The cases
are a fixed list (no randomness), so a run under CI=true is the same every time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli_support import run_cli as call
from cli_support import with_flags
from kvtier.cli import shared_parser
from kvtier.cli.flags import COMMANDS, rows
from kvtier.model.catalog import catalog_entry

ROOT = Path(__file__).resolve().parents[1]
LOG = str(ROOT / "examples" / "logs" / "sglang-kimi-k25-eagle3.log")
KIMI = ["--engine", "sglang", "--model", "kimi-k2.5", "--gpu", "RTX PRO 6000", "--tp", "8"]
LLAMA = ["--engine", "vllm", "--model", "llama-3.1-8b", "--gpu", "h100"]
FLAG_VALUES = ("nan", "inf", "-inf", "0", "-1", "1e308", "1e400", "", "abc")
MORE_FLAG_VALUES = (
    *("NaN", "-0", "Infinity", "1e-308", "99999999999999999999", "0x10", " ", "1,2", "0.5", "1"),
    *("-1e308", "1e15", "2e9", "4097", "1_000", "+5", "1e", "--", "9" * 5000, "0.0"),
)
JSON_VALUES: tuple[Any, ...] = (
    *(None, True, False, "x", "", "1", "NaN", -8, -1, 0, 1, 0.5, 1.5, -1e308, 1e308, 2**64),
    *([], {}, [1], ["x"], {"a": 1}, [[[[]]]]),
)
RAW_VALUES = ("NaN", "Infinity", "-Infinity", "1e400", "9" * 5000, "[" * 3000 + "]" * 3000)
CONFIGS = ("llama-3.1-8b", "qwen3-32b", "deepseek-v3", "kimi-k2.5", "gemma-3-27b")


# the engines' own refusals to start (exit 1: an answer about the deployment, not bad input)
ENGINE_REFUSALS = ("Not enough memory", "No available memory", "max seq len", "derived maximum")


def problem(argv: list[str], names: tuple[str, ...]) -> str | None:
    """What is wrong with how `kvtier ARGV` ended, or None: it succeeded, it refused with exit 2
    and one `kvtier: error:` line naming one of `names`, or it exited 1 because the engine would
    not start the deployment (plan's answer on stdout, or the engine's words in one line)."""
    try:
        code, out, err = call(argv)
    except Exception as exc:  # the point: no exception may escape
        return f"{argv[:12]}: {type(exc).__name__}: {str(exc)[:120]}"
    if code == 0:
        return None
    lines = [line for line in err.strip().splitlines() if not line.startswith("kvtier: warning:")]
    if code == 1 and not lines and out.startswith(("Does not start: ", "starts 0", "{")):
        return None  # plan's answer: the engine would refuse to start this deployment
    if code == 1 and len(lines) == 1 and any(m in lines[0] for m in ENGINE_REFUSALS):
        return None  # another command on a deployment that does not start: the engine's words
    if code != 2 or len(lines) != 1 or not lines[0].startswith("kvtier: error: "):
        return f"{argv[:12]}: exit {code}, stderr {err[-300:]!r}"
    if not any(name in lines[0] for name in names):
        return f"{argv[:12]}: the error names none of {names}: {lines[0]!r}"
    return None


def run_cases(cases: list[tuple[list[str], tuple[str, ...]]]) -> None:
    found = [p for argv, names in cases if (p := problem(argv, names)) is not None]
    assert not found, f"{len(found)} of {len(cases)} cases:\n" + "\n".join(found[:15])


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz")
    trace = root / "trace.jsonl"
    assert call(["simulate", "--generate", "chat", "--requests", "6", "-o", str(trace)])[0] == 0
    return root


# ---- numeric flags -------------------------------------------------------------------------


def numeric_flags() -> Iterator[tuple[str, str]]:
    """(subcommand, flag) of every option whose value is read as a number."""
    sub = next(a for a in shared_parser()._actions if a.dest == "command")
    for name, parser in sub.choices.items():  # type: ignore[union-attr]
        for action in parser._actions:
            kind = getattr(action.type, "__name__", "")
            if action.option_strings and kind not in ("", "str", "upper"):
                yield name, action.option_strings[0]


def base_argv(command: str, work: Path) -> list[str]:
    return {
        "plan": ["plan", *LLAMA],
        "advise": ["advise", *KIMI],
        "explain": ["explain", LOG],
        "simulate": ["simulate", str(work / "trace.jsonl"), *KIMI],
        "observe": [
            "observe",
            str(ROOT / "tests" / "fixtures" / "observe" / "sglang-2024-01-new-fill-batch.log"),
        ],
        "trace": ["trace", str(ROOT / "tests" / "fixtures" / "requests" / "vllm-0.32-cpu.log")],
    }[command]


def test_every_numeric_flag_is_covered() -> None:
    flags = set(numeric_flags())
    assert len(flags) > 130
    sub = next(a for a in shared_parser()._actions if a.dest == "command")
    plain = [  # a bare int or float lets nan, inf and out-of-range values through
        (name, action.option_strings)
        for name, parser in sub.choices.items()  # type: ignore[union-attr]
        for action in parser._actions
        if action.type in (int, float)
    ]
    assert not plain
    for command in ("plan", "advise", "explain", "simulate", "observe", "trace"):
        assert any(c == command for c, _ in flags), command


# plan and advise again with the other engine, whose rules read the flags differently
OTHER_ENGINE = {"plan": ["plan", *KIMI], "advise": ["advise", *LLAMA]}


def flag_cases(work: Path) -> list[tuple[list[str], tuple[str, ...]]]:
    return [
        (with_flags(base, flag, value), (flag, flag[2:].replace("-", "_"), "memory"))
        for command, flag in sorted(set(numeric_flags()))
        for base in (base_argv(command, work), OTHER_ENGINE.get(command))
        if base is not None
        for value in (*FLAG_VALUES, *MORE_FLAG_VALUES)
    ]


def test_numeric_flags(work: Path) -> None:
    run_cases(flag_cases(work))


def empty_value_cases(work: Path) -> list[tuple[list[str], tuple[str, ...]]]:
    """Every flag of the table that takes a word as it is (no type, no choices), given nothing:
    `--sweep ''` ran no sweep and `--router ''` the default router."""
    return [
        (
            with_flags(base_argv(command, work), row.name, value),
            (f"{row.name} is given an empty value",),
        )
        for command in COMMANDS
        for row in rows(command)
        if not {"type", "choices", "action", "const"} & set(row.spec)
        for value in ("", " ", "\t")
    ]


def test_empty_flag_values(work: Path) -> None:
    cases = empty_value_cases(work)
    assert len(cases) > 60
    run_cases(cases)


# ---- config.json fields --------------------------------------------------------------------


def mutations(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """(path, replacement) for every leaf and object of `value`: wrong types and ranges, and
    for an object key, its removal (replacement `...`). Of a list, the first three items only."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*path, key), ...
            yield from mutations(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value[:3]):
            yield from mutations(child, (*path, index))
    if path:
        for replacement in JSON_VALUES:
            if replacement != value or type(replacement) is not type(value):
                yield path, replacement


def mutated(document: Any, path: tuple[Any, ...], replacement: Any) -> Any:
    copy = json.loads(json.dumps(document))
    node = copy
    for step in path[:-1]:
        node = node[step]
    if replacement is ...:
        del node[path[-1]]
    else:
        node[path[-1]] = replacement
    return copy


def config_cases(work: Path) -> list[tuple[list[str], tuple[str, ...]]]:
    cases = []
    for number, model in enumerate(CONFIGS):
        config = dict(catalog_entry(model).config)  # type: ignore[union-attr]
        config.setdefault("max_position_embeddings", 8192)
        folder = work / f"config{number}"
        folder.mkdir(exist_ok=True)
        texts = [json.dumps(mutated(config, p, r)) for p, r in mutations(config)]
        texts += [json.dumps(config)[:-1] + f', "extra": {raw}}}' for raw in RAW_VALUES]
        for index, text in enumerate(texts):
            path = folder / f"{index}.json"
            path.write_text(text)
            argv = ["plan", "--engine", "vllm", "--model", str(path), "--gpu", "b200", "--tp", "8"]
            cases.append((argv, (str(path), "config", "memory")))
    return cases


def test_config_fields(work: Path) -> None:
    run_cases(config_cases(work))


# ---- trace fields --------------------------------------------------------------------------

GOOD_ROW = {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]}


def trace_cases(work: Path) -> list[tuple[list[str], tuple[str, ...]]]:
    rows = [json.dumps(mutated(GOOD_ROW, p, r)) for p, r in mutations(GOOD_ROW)]
    rows += [json.dumps(GOOD_ROW)[:-1] + f', "timestamp": {raw}}}' for raw in RAW_VALUES]
    rows += [raw for raw in RAW_VALUES] + ["x" * (9 << 20)]
    for key in GOOD_ROW:
        rows += [json.dumps(GOOD_ROW).replace(f'"{key}": ', f'"{key}": {raw}, "_": ', 1)
                 for raw in RAW_VALUES]  # fmt: skip
    cases = []
    for index, row in enumerate(rows):
        path = work / f"trace{index}.jsonl"
        path.write_text(json.dumps(GOOD_ROW) + "\n" + row + "\n")
        for mode in (["--unbounded"], ["--lru-tokens", "1024"]):
            cases.append((["simulate", str(path), *mode], (path.name,)))
    return cases


def test_trace_fields(work: Path) -> None:
    run_cases(trace_cases(work))


# ---- report payload leaves -----------------------------------------------------------------

PAYLOADS = {
    "explain": ["explain", LOG],
    "plan": ["plan", *LLAMA],
    "advise": ["advise", *KIMI],
    "simulate": None,  # from the trace
}


def payload_cases(work: Path) -> list[tuple[list[str], tuple[str, ...]]]:
    cases = []
    for kind, argv in PAYLOADS.items():
        if argv is None:
            argv = ["simulate", str(work / "trace.jsonl"), *KIMI, "--sweep", "hicache-ratio=0,2"]
        code, out, err = call([*argv, "--json"])
        assert code == 0, err
        payload = json.loads(out)
        folder = work / f"payload-{kind}"
        folder.mkdir(exist_ok=True)
        for index, (path, replacement) in enumerate(mutations(payload)):
            file = folder / f"{index}.json"
            file.write_text(json.dumps(mutated(payload, path, replacement)))
            html = str(folder / "out.html")
            cases.append((["report", "-o", html, "--from", f"{kind}={file}"], ("report: ",)))
    return cases


def test_report_payload_leaves(work: Path) -> None:
    run_cases(payload_cases(work))


def test_at_least_20000_cases(work: Path) -> None:
    total = sum(
        len(family(work))
        for family in (flag_cases, empty_value_cases, config_cases, trace_cases, payload_cases)
    )
    assert total >= 20_000, total
