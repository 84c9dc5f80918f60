"""The one table of kvtier flags: every flag of plan, explain, advise and simulate is a row, a
row spelled like an engine flag sets the engine's field, and each flag given to a command with a
valid value other than its default either changes what the command prints or is refused in one
line that names it: none is ignored."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from cli_support import with_flags
from kvtier.cli import build_parser, main
from kvtier.cli.flags import COMMANDS, EXPLAIN, FLAGS, PLAN, SIMULATE, KvFlag, rows
from kvtier.cli.flags.row import USED
from kvtier.engines.flags import FlagTable
from kvtier.engines.sglang.flags import FLAGS as SGLANG_FLAGS
from kvtier.engines.vllm.flags import FLAGS as VLLM_FLAGS
from kvtier.ledger.advise import OFFLOADING_BACKEND

ROOT = Path(__file__).resolve().parents[1]
KIMI_LOG = "examples/logs/sglang-kimi-k25-eagle3.log"
PUBLIC = "tests/fixtures/logs/public/"
# explain reads a hybrid linear-attention model's flags against a hybrid model's log
HYBRID_LOG = {
    **dict.fromkeys(
        (
            "--mamba-full-memory-ratio",
            "--max-mamba-cache-size",
            "--mamba-ssm-dtype",
            "--mamba-ssm-cache-dtype",
            "--disable-radix-cache",
        ),
        PUBLIC + "sglang-2026-qwen3.5-397b-a17b-gdn-4090-tp2.log",
    ),
    "--enable-prefix-caching": PUBLIC + "vllm-v1-2026-qwen3.5-gguf-262k.log",
}
LLAMA = ["--engine", "sglang", "--model", "llama-3.1-8b", "--gpu", "h100"]
# each command's run that every flag is set against
BASE = {
    "plan": ["plan", *LLAMA],
    "advise": ["advise", *LLAMA],
    "explain": ["explain", KIMI_LOG],
    # SGLang's multi-turn benchmark
    "simulate": [
        "simulate", "--generate", "multiturn", "--clients", "16", "--rounds", "6",
        "--request-tokens", "2048", "--output-tokens", "64", "--block-tokens", "64", "--seed", "1",
        *LLAMA,
    ],
}  # fmt: skip


HYBRID = ["--model", "qwen3.5-27b"]
SPECULATIVE = ["--speculative-algorithm", "EAGLE"]
VLLM = ["--engine", "vllm"]
DP_ATTENTION = [
    "--",
    "python",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "meta-llama/Llama-3.1-8B-Instruct",
    "--tp",
    "2",
    "--enable-dp-attention",
]
# Flags whose effect the engine makes conditional on another setting: the base run of plan,
# advise and simulate gets that setting too, so the comparison is with and without the flag.
CONTEXT: dict[str, list[str]] = {
    **dict.fromkeys(
        (
            "--mamba-full-memory-ratio",
            "--max-mamba-cache-size",
            "--mamba-ssm-dtype",
            "--mamba-ssm-cache-dtype",
            "--disable-radix-cache",
        ),
        HYBRID,
    ),
    "--enable-prefix-caching": [*HYBRID, *VLLM, "--max-model-len", "32768"],
    **dict.fromkeys(
        (
            "--speculative-draft-model-path",
            "--draft-model",
            "--speculative-num-draft-tokens",
            "--draft-weights-gib",
        ),
        SPECULATIVE,
    ),
    **dict.fromkeys(("--kv-cache-memory-bytes", "--activation-gib", "--non-torch-gib"), VLLM),
    "--dp": DP_ATTENTION,
}
# simulate's host and store flags act once the device pool overflows (one of two histories)
# into a host tier and an L3 store; the router's once there are replicas
TIERS = ["--device-tokens", "30000", "--hicache-ratio", "2", "--store-tokens", "10000000"]
SIM_CONTEXT = {
    **dict.fromkeys(
        (
            "--store-tokens", "--store-gbps", "--hicache-write-policy", "--host-gbps",
            "--hicache-storage-prefetch-policy", "--prefetch-threshold",
            "--prefetch-timeout-base", "--prefetch-timeout-per-ki-token", "--prefetch-timeout-max",
            "--hicache-ratio", "--hicache-size", "--pcie-gbps", "--gpus", "--gpus-per-node",
        ),
        TIERS,
    ),
    **{name: ["--replicas", "2"] for name in ("--router", "--router-opt")},
    # all-reduces run between tensor-parallel ranks
    **{name: ["--tp", "2"] for name in ("--allreduce-gbps", "--allreduce-latency-us")},
    **{
        name: ["--device-tokens", "30000", "--hicache-ratio", "2"]
        for name in ("--shared-store-tokens", "--shared-store-gbps", "--shared-store-latency-ms")
    },
}  # fmt: skip
# Gaps in the table's promise, stated so that closing one fails this test until its line goes.
# Read, and with no effect on what the command prints:
_LOG_STATES = "the log prints the pool this sizes; the flag fills in only a log that leaves it out"
_OUTSIDE = "a figure outside SGLang's pool formula; simulate prints no ledger"
SILENT: dict[tuple[str, str], str] = {
    **{(EXPLAIN, name): _LOG_STATES for name in (*HYBRID_LOG, "--speculative-num-draft-tokens")},
    (EXPLAIN, "--dp"): "the log's pool is per GPU and the log states no DP attention",
    **{(SIMULATE, name): _OUTSIDE for name in ("--cuda-graph-gib", "--free-end-gib")},
}
# Refused in one line that names the deployment, not the flag:
UNNAMED: dict[tuple[str, str], str] = {}


def _options(command: str) -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {
        name
        for action in sub.choices[command]._actions
        for name in action.option_strings
        if name not in ("-h", "--help")
    }


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_of_a_command_is_a_row_of_the_table(command: str) -> None:
    assert _options(command) == {name for row in rows(command) for name in row.names}


def test_a_row_spelled_like_an_engine_flag_sets_the_engines_field() -> None:
    for table in (SGLANG_FLAGS, VLLM_FLAGS):
        for row in FLAGS:
            for name in row.names:
                engine_flag = table.find(name.lstrip("-"))
                if engine_flag is not None and row.field is not None:
                    assert engine_flag.field == row.field, (name, row.field)


def test_the_engine_spelling_is_the_engines_first() -> None:
    assert SGLANG_FLAGS.spelling("mem_fraction") == "--mem-fraction-static"
    assert VLLM_FLAGS.spelling("mem_fraction") == "--gpu-memory-utilization"
    assert VLLM_FLAGS.spelling("page_size") == "--block-size"
    assert SGLANG_FLAGS.spelling("kv_cache_memory_bytes") is None


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


_baselines: dict[str, str] = {}


def _baseline(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    if command not in _baselines:
        code, out, err = _run([*BASE[command], "--json"], capsys)
        assert code == 0, err
        _baselines[command] = out
    return _baselines[command]


def _cases() -> list[tuple[str, KvFlag, str]]:
    return [(c, row, name) for c in COMMANDS for row in rows(c) for name in row.names]


@pytest.mark.parametrize(
    ("command", "row", "name"), _cases(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_each_flag_is_used_or_refused_by_name(
    command: str,
    row: KvFlag,
    name: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    context = [] if command == EXPLAIN else CONTEXT.get(name, [])
    if command == SIMULATE:
        context = [*SIM_CONTEXT.get(name, []), *context]
    cut = context.index("--") if "--" in context else len(context)
    before, launch = context[:cut], context[cut:]  # a launch command goes last
    output = [] if name in ("--json", "--quiet") else ["--json"]
    argv = BASE[command]
    if command == EXPLAIN and name in HYBRID_LOG:
        argv = [EXPLAIN, HYBRID_LOG[name]]
    if command == EXPLAIN and name == "--startup":  # a log of two starts; the first is picked
        argv = [EXPLAIN, "tests/fixtures/logs/vllm-0.6-two-starts-3090.log"]
    sample = [word.format(tmp=tmp_path) for word in row.sample]
    given = with_flags([*argv, *output], *before)  # the context's value in place of the base's
    # the flag's sample in place of a value the run gives it already: no flag is given twice
    tried = with_flags(given, name, *sample) if len(sample) == 1 else [*given, name, *sample]
    if (command, name) in UNNAMED:
        code, _, err = _run([*tried, *launch], capsys)
        assert code == 2 and UNNAMED[command, name] in err and name not in err, err
        return
    if context or not output or argv != BASE[command]:
        code, base, err = _run([*given, *launch], capsys)
        assert code == 0, err
    else:
        base = _baseline(command, capsys)
    code, out, err = _run([*tried, *launch], capsys)
    if (command, name) in SILENT:
        assert code == 0 and out == base, f"{command} {name} now shows: drop it from SILENT"
    elif row.commands[command] != USED:
        assert code == 2 and f"{command} does not use {row.name}: " in err, err
    elif code == 2:
        assert name in err or row.name in err, err
        assert len(err.strip().splitlines()) == 1, err
    else:
        assert code == 0, err
        assert out != base, f"{command} {name} {' '.join(sample)} changed nothing"


def test_explain_names_the_fraction_flag_as_typed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["explain", KIMI_LOG, "--mem-fraction-static", "0.5", "--json"], capsys)
    assert code == 0
    assert (
        "--mem-fraction-static 0.5 contradicts the log (line 1: 0.88); the log's value is used"
        in out
    )
    assert "--mem-fraction 0.5" not in out


@pytest.mark.parametrize(("flag", "value"), [("--quantization", "fp8"), ("--dtype", "float16")])
def test_explain_refuses_what_the_log_states_ran(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(["explain", KIMI_LOG, flag, value], capsys)
    assert code == 2 and out == ""
    assert (
        err == f"kvtier: error: explain does not use {flag}: the log states what ran "
        "(kvtier plan and advise take it)\n"
    )


def test_explain_refuses_the_two_together_naming_the_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = _run(
        ["explain", KIMI_LOG, "--quantization", "fp8", "--dtype", "float16"], capsys
    )
    assert code == 2 and "explain does not use --dtype" in err


def test_simulate_and_plan_differ_where_the_table_says() -> None:
    context = next(row for row in FLAGS if row.name == "--context")
    assert context.commands[PLAN] == USED
    assert context.commands[SIMULATE] == "the trace states the request lengths"
    assert context.commands[EXPLAIN] != USED


VLLM_LOG = "examples/logs/vllm-llama31-8b-h100.log"


def _engine_base(command: str, engine: str) -> list[str]:
    if command == EXPLAIN:
        return [EXPLAIN, KIMI_LOG if engine == "sglang" else VLLM_LOG]
    deployment = ["--engine", engine, "--model", "llama-3.1-8b", "--gpu", "h100"]
    if command == SIMULATE:
        return [SIMULATE, "--generate", "chat", "--requests", "10", *deployment]
    return [command, *deployment]


@pytest.mark.parametrize(
    ("command", "row", "engine"),
    [
        (command, row, engine)
        for command in COMMANDS
        for row in rows(command)
        if row.commands[command] == USED
        for engine in row.engines
    ],
    ids=lambda v: v if isinstance(v, str) else v.name,
)
def test_an_engine_refuses_the_other_engines_flags_by_name(
    command: str,
    row: KvFlag,
    engine: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    code, out, err = _run([*_engine_base(command, engine), row.name, *row.sample], capsys)
    assert (code, out) == (2, "")
    assert err == f"kvtier: error: {row.name} is {row.engines[engine]}\n"


def test_hicache_on_vllm_names_vllms_host_tier(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["plan", *VLLM, "--model", "llama-3.1-8b", "--hicache-ratio", "2"], capsys)
    assert code == 2 and err == (
        "kvtier: error: --hicache-ratio is an SGLang HiCache flag; a vLLM deployment's host tier "
        "is --kv-offloading-size\n"
    )


@pytest.mark.parametrize(
    ("engine", "table", "extra"),
    [
        ("sglang", SGLANG_FLAGS, ["--target-requests", "64", "--context", "8k"]),
        (
            "vllm",
            VLLM_FLAGS,
            ["--max-model-len", "8192", "--target-requests", "70", "--context", "8k"],
        ),
    ],
)
def test_advise_prints_the_engines_own_spellings(
    engine: str, table: FlagTable, extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["advise", "--engine", engine, "--model", "llama-3.1-8b", "--gpu", "h100", *extra]
    code, out, err = _run([*argv, "--json"], capsys)
    assert code == 0, err
    payload = json.loads(out)
    options = [*payload["options"], payload["target"]["option"]]
    printed = {w for option in options for w in option["flags"] if w.startswith("--")}
    assert payload["target"]["option"] is not None and printed
    for word in printed - {OFFLOADING_BACKEND}:
        found = table.find(word[2:])
        assert found is not None and table.spelling(found.field) == word, word
