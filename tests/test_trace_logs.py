"""`kvtier trace` on request logs: vLLM and SGLang lines in every format their versions print.

The prompts of every excerpt but the real vLLM one are the same four: two groups, each sharing
its first 8 token ids, every prompt adding 3 of its own. Hashed in blocks of 4 tokens, a prompt
is 3 blocks (4, 4, 3) and a repeat shares its group's first 2 whole blocks: the trace must find
2 repeats x 8 tokens = 16 of the 44 prompt tokens reusable, no more and no less.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli_support import error_line, run_json
from kvtier.sim.trace import load_trace
from tokenizer_support import build_tokenizer

FIXTURES = Path(__file__).parent / "fixtures" / "requests"
PROMPTS = [
    [11, 12, 13, 14, 15, 16, 17, 18, 31, 32, 33],
    [21, 22, 23, 24, 25, 26, 27, 28, 41, 42, 43],
    [11, 12, 13, 14, 15, 16, 17, 18, 51, 52, 53],
    [21, 22, 23, 24, 25, 26, 27, 28, 61, 62, 63],
]
OUTPUTS = [2, 3, 1, 4]
REUSED, INPUT = 16, 44

# vLLM's RequestLogger format strings, as the wheels print them (vllm/entrypoints/logger.py;
# vllm/entrypoints/serve/utils/request_logger.py in 0.32)
V066 = (
    "Received request %s: prompt: %r, params: %s, prompt_token_ids: %s, lora_request: %s, "
    "prompt_adapter_request: %s."
)
V0102 = (
    "Received request %s: prompt: %r, params: %s, prompt_token_ids: %s, prompt_embeds shape: %s, "
    "lora_request: %s."
)
V012_DETAILS = "Request %s details: prompt: %r, prompt_token_ids: %s, prompt_embeds shape: %s."
V012_RECEIVED = "Received request %s: params: %s, lora_request: %s."
V0102_OUTPUT = "Generated response %s%s: output: %r, output_token_ids: %s, finish_reason: %s"
V020_OUTPUT = "Generated response %s%s: output: %r, finish_reason: %s"
V020_OUTPUT_DETAILS = "Generated response %s%s details: output_token_ids: %s"
# vllm/logger.py _FORMAT: 0.6.6 "%(levelname)s %(asctime)s %(filename)s:%(lineno)d] ", later
# "[%(fileinfo)s:%(lineno)d] ", behind "(APIServer pid=N) " in 0.32; _DATE_FORMAT "%m-%d %H:%M:%S"
PREFIX_066 = "INFO 12-01 12:00:{s:02d} logger.py:37] "
PREFIX = "(APIServer pid=7) {level} 12-01 12:00:{s:02d} [entrypoints/logger.py:50] "
# SamplingParams.__repr__ of vLLM 0.32 as the real server printed it (vllm-0.32-cpu.log)
PARAMS = (
    "SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
    "temperature=0.0, watermarking=None, top_p=1.0, top_k=0, min_p=0.0, seed=None, "
    "stop={stop}, stop_token_ids=[], bad_words=[], thinking_token_budget=None, "
    "include_stop_str_in_output=False, ignore_eos=True, max_tokens={max_tokens}, min_tokens=0, "
    "logprobs=None, prompt_logprobs=None, skip_special_tokens=True, "
    "spaces_between_special_tokens=True, structured_outputs=None, extra_args=None)"
)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("tokenizer"))


class _Raw(str):
    """A value `%s` prints as it is (a repr vLLM built itself)."""


def _params(max_tokens: int, stop: str = "[]") -> _Raw:
    return _Raw(PARAMS.format(stop=stop, max_tokens=max_tokens))


def _text(ids: list[int]) -> str:
    return " ".join(f"w{i}" for i in ids)


def _vllm_log(era: str, cap: int = 16) -> str:
    """The four prompts as vLLM `era` logs them: each one second after the one before, with
    output lines where that era has them."""
    lines = []
    for i, (ids, out) in enumerate(zip(PROMPTS, OUTPUTS, strict=True)):
        rid = f"cmpl-{i}-0"
        info, debug = PREFIX.format(level="INFO", s=i), PREFIX.format(level="DEBUG", s=i)
        if era == "0.6.6":
            lines.append(
                PREFIX_066.format(s=i) + V066 % (rid, _text(ids), _params(cap), ids, None, None)
            )
        elif era == "0.10.2":
            lines.append(info + V0102 % (rid, _text(ids), _params(cap), ids, None, None))
            generated = [7] * out
            lines.append(info + V0102_OUTPUT % (rid, "", "w7 " * out, generated, "length"))
        else:  # 0.12 on: the prompt at DEBUG, then the request at INFO
            lines.append(debug + V012_DETAILS % (rid, _text(ids), ids, None))
            lines.append(info + V012_RECEIVED % (rid, _params(cap), None))
            if era == "0.20":
                lines.append(info + V020_OUTPUT % (rid, "", "w7 " * out, "length"))
                lines.append(debug + V020_OUTPUT_DETAILS % (rid, "", [7] * out))
        lines.append(info + "Added request %s." % rid)  # noqa: UP031 (vLLM's own % format)
    return "\n".join(lines) + "\n"


def _trace(
    capsys: pytest.CaptureFixture[str], log: Path, *extra: str, block: int = 4
) -> tuple[dict, list[dict]]:
    out = log.with_suffix(".jsonl")
    summary = run_json(
        capsys, ["trace", str(log), "-o", str(out), "--block-tokens", str(block), "--json", *extra]
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    # blocks other than Mooncake's 512 tokens are stated on every line
    assert all(row.pop("block_tokens", 512) == block for row in rows)
    return summary, rows


# ---- vLLM


def test_real_vllm_032_log(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The real CPU server's log: 2 groups x 3 prompts of 256 shared + 32 own words (one token
    each), max_tokens 8. In blocks of 64, each repeat shares 4 blocks: 2 x 2 x 256 = 1,024."""
    log = tmp_path / "server.log"
    shutil.copy(FIXTURES / "vllm-0.32-cpu.log", log)
    summary, rows = _trace(capsys, log, block=64)
    assert summary["format"] == "vllm"
    assert (summary["requests"], summary["input_tokens"]) == (6, 6 * 288)
    assert summary["reused_tokens"] == 1024
    assert summary["output_from"] == {"max_tokens": 6}
    assert [r["output_length"] for r in rows] == [8] * 6
    assert [len(r["hash_ids"]) for r in rows] == [5] * 6  # ceil(288 / 64)
    assert rows[0]["hash_ids"][:4] == rows[2]["hash_ids"][:4] == rows[4]["hash_ids"][:4]
    assert rows[0]["hash_ids"][4] != rows[2]["hash_ids"][4]
    assert summary["lines"] == 30 and summary["skipped_lines"] == 30 - 12


def test_real_vllm_032_chat_log_counts_what_was_generated(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The real server with --enable-log-outputs: two chats (5-token prompts, max_tokens 5 and
    6, ignore_eos) each sent whole and streamed. The whole answer's ids and the streamed pieces'
    (the `streaming complete` line prints None) both count 5 and 6. In blocks of 2 the repeat of
    a chat shares all 3 blocks, 5 tokens; the second chat shares the first block: 5 + 2 + 5."""
    log = tmp_path / "chat.log"
    shutil.copy(FIXTURES / "vllm-0.32-cpu-chat.log", log)
    summary, rows = _trace(capsys, log, block=2)
    assert [r["output_length"] for r in rows] == [5, 5, 6, 6]
    assert summary["output_from"] == {"generated": 4}
    assert (summary["reused_tokens"], summary["input_tokens"]) == (12, 20)


@pytest.mark.parametrize(
    ("era", "output_from"),
    [
        ("0.6.6", "max_tokens"),
        ("0.10.2", "generated"),
        ("0.12", "max_tokens"),
        ("0.20", "generated"),
    ],
)
def test_vllm_eras(
    era: str, output_from: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(_vllm_log(era))
    summary, rows = _trace(capsys, log)
    assert (summary["reused_tokens"], summary["input_tokens"]) == (REUSED, INPUT)
    assert [r["timestamp"] for r in rows] == [0, 1000, 2000, 3000]
    expected = OUTPUTS if output_from == "generated" else [16] * 4
    assert [r["output_length"] for r in rows] == expected
    assert summary["output_from"] == {output_from: 4}
    assert load_trace(log.with_suffix(".jsonl"), 4).input_tokens == INPUT


def test_vllm_info_only_log_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    text = _vllm_log("0.12")
    log.write_text("\n".join(line for line in text.splitlines() if " DEBUG " not in line))
    err = error_line(capsys, ["trace", str(log)])
    assert "line 1:" in err and "VLLM_LOGGING_LEVEL=DEBUG" in err


def test_vllm_max_log_len_cut_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = tmp_path / "vllm.log"
    args = "(APIServer pid=7) INFO 12-01 11:59:00 [api_utils.py:286] non-default args: "
    log.write_text(args + "{'model': 'm', 'enable_log_requests': True, 'max_log_len': 11}\n")
    with log.open("a") as f:
        f.write(_vllm_log("0.12"))
    err = error_line(capsys, ["trace", str(log)])
    assert "line 2:" in err and "--max-log-len 11 (line 1)" in err


def test_vllm_prompt_text_cannot_pass_for_fields(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A prompt and stop strings that print like the fields after them are read as strings."""
    decoy = "x', params: SamplingParams(max_tokens=99), prompt_token_ids: [1, 2, 3], y"
    decoy += " args: {'max_log_len': 3}"  # no startup line: no bound on the ids
    ids = PROMPTS[0]
    stop = _Raw(repr(["max_tokens=77", "prompt_token_ids: [5]"]))
    line = PREFIX_066.format(s=0) + V066 % ("r", decoy, _params(5, stop), ids, None, None)
    log = tmp_path / "vllm.log"
    log.write_text(line + "\n")
    _, rows = _trace(capsys, log)
    assert rows == [{"timestamp": 0, "input_length": 11, "output_length": 5, "hash_ids": [0, 1, 2]}]


def test_vllm_malformed_request_line_names_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = _vllm_log("0.6.6").splitlines()
    text[2] = text[2][:120]  # the third request's line, cut inside its prompt
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(text) + "\n")
    err = error_line(capsys, ["trace", str(log)])
    assert err.startswith("kvtier: error: line 3: not a vLLM request line")


# ---- SGLang (excerpts printed by SGLang's own formatter, see fixtures/requests/README.md)


@pytest.mark.parametrize(
    ("name", "arrival_from", "timestamps", "left_out", "skipped"),
    [
        # received_time 0.5 s apart; one request received and never finished
        ("sglang-0.5.9-level3", "obj.received_time", [0, 500, 1000, 1500], 1, 5),
        # "[2025-12-01 12:00:0{i+2}] Finish" with e2e_latency 1.5 s
        ("sglang-0.5.3-level3", "line time - e2e_latency", [0, 1000, 2000, 3000], 0, 0),
        # JSON events at 0.5, 2.5, 4.5, 6.5 s, e2e_latency 0.25, 0.5, 0.75, 1.0 s
        ("sglang-0.5.9-json", "line time - e2e_latency", [0, 1750, 3500, 5250], 0, 0),
    ],
)
def test_sglang_formats(
    name: str,
    arrival_from: str,
    timestamps: list[int],
    left_out: int,
    skipped: int,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    log = tmp_path / f"{name}.log"
    shutil.copy(FIXTURES / f"{name}.log", log)
    summary, rows = _trace(capsys, log)
    assert summary["format"] == "sglang"
    assert (summary["reused_tokens"], summary["input_tokens"]) == (REUSED, INPUT)
    assert summary["arrival_from"] == {arrival_from: 4}
    assert [r["timestamp"] for r in rows] == timestamps
    assert [r["output_length"] for r in rows] == OUTPUTS  # completion_tokens
    assert (summary["left_out"], summary["skipped_lines"]) == (left_out, skipped)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("sglang-0.5.9-level2-cut", "line 1: SGLang cut this prompt"),
        ("sglang-0.5.9-json-level2-cut", "line 1: SGLang cut this prompt"),
        ("sglang-0.5.9-level1", "line 1: SGLang logged request meta without its prompt"),
        ("sglang-0.5.9-text-prompts", "line 1: request t0's prompt was logged as text"),
    ],
)
def test_sglang_without_whole_prompts_is_refused(
    name: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = error_line(capsys, ["trace", str(FIXTURES / f"{name}.log")])
    assert says in err


def test_sglang_text_prompts_with_a_local_tokenizer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tokenizer_dir: Path
) -> None:
    """Prompts logged as text, counted by the tokenizer (one token a word, plus <s>): 12
    tokens each, as SGLang's prompt_tokens says; the shared 8 words are 2 blocks after <s>."""
    log = tmp_path / "text.log"
    shutil.copy(FIXTURES / "sglang-0.5.9-text-prompts.log", log)
    summary, rows = _trace(capsys, log, "--tokenizer", str(tokenizer_dir))
    assert summary["input_tokens"] == 4 * 12
    assert summary["reused_tokens"] == 2 * 8  # <s> + 7 shared words: blocks 0 and 1
    assert [len(r["hash_ids"]) for r in rows] == [3] * 4


def test_sglang_tokenizer_disagreeing_with_the_engine_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tokenizer_dir: Path
) -> None:
    log = tmp_path / "text.log"
    text = (FIXTURES / "sglang-0.5.9-text-prompts.log").read_text()
    log.write_text(text.replace("'prompt_tokens': 12", "'prompt_tokens': 13", 1))
    err = error_line(capsys, ["trace", str(log), "--tokenizer", str(tokenizer_dir)])
    assert "line 1: the tokenizer gives 12 tokens where the engine counted 13" in err


# ---- the command


def test_a_log_without_request_lines_says_how_to_get_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = tmp_path / "startup.log"
    log.write_text("INFO 12-01 12:00:00 [api_server.py:1] vLLM API server version 0.32.0\n")
    err = error_line(capsys, ["trace", str(log)])
    assert "--enable-log-requests" in err and "--log-requests" in err


def test_format_flag_picks_the_grammar(capsys: pytest.CaptureFixture[str]) -> None:
    log = str(FIXTURES / "vllm-0.32-cpu.log")
    assert "no request lines" in error_line(capsys, ["trace", log, "--format", "sglang"])
    assert run_json(capsys, ["trace", log, "--format", "vllm", "--json"])["requests"] == 6


def test_output_over_the_input_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    log = str(FIXTURES / "vllm-0.32-cpu.log")
    assert "the same file as the input" in error_line(capsys, ["trace", log, "-o", log])


def test_formats_listed_by_the_parser_are_the_readers() -> None:
    from kvtier.cli import trace as cli
    from kvtier.sim.request_sources import FORMATS

    assert cli.FORMATS == FORMATS


def _cuts(line: str) -> list[str]:
    step = max(1, len(line) // 40)
    cut = [line[:i] for i in range(1, len(line), step)]
    swapped = [line.replace(old, new, 1) for old, new in _SWAPS if old in line]
    return cut + swapped


_WHOLE_FILE = ("no request lines", "no complete request")
_SWAPS = [("[", "{"), ("]", ""), ("'", '"'), (", ", ","), ("=", ": "), ("1", "x"), ("(", "")]


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.log")))
def test_mangled_request_lines_never_escape_as_tracebacks(name: str) -> None:
    """Every request line of every excerpt, cut at 40 places and with its punctuation swapped:
    the log is read, or refused naming a line; no other exception leaves the readers."""
    import io

    from kvtier.errors import KvtierError
    from kvtier.sim.block_hash import PromptHasher
    from kvtier.sim.from_requests import build_trace
    from kvtier.sim.request_sources import read_requests

    lines = (FIXTURES / name).read_text().splitlines()
    marks = ("Received request", "details:", "Generated response", "Receive:", "Finish:", '"event"')
    for index, line in enumerate(lines):
        if not any(mark in line for mark in marks):
            continue
        for mangled in _cuts(line):
            text = "\n".join([*lines[:index], mangled, *lines[index + 1 :]]) + "\n"
            try:
                hasher = PromptHasher(4)
                requests, _ = read_requests(io.BytesIO(text.encode()), "auto", hasher)
                build_trace(requests, hasher)
            except KvtierError as exc:
                said = str(exc)
                assert said.startswith("line ") or said.startswith(_WHOLE_FILE), said


def test_a_log_on_standard_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    data = (FIXTURES / "sglang-0.5.9-json.log").read_bytes()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    summary = run_json(capsys, ["trace", "-", "--block-tokens", "4", "--json"])
    assert (summary["input"], summary["reused_tokens"], summary["input_tokens"]) == ("-", 16, 44)


@given(
    prompt=st.text(max_size=60),
    stop=st.lists(st.text(max_size=12), max_size=3),
    ids=st.lists(st.integers(0, 1 << 31), min_size=1, max_size=40),
    cap=st.integers(1, 1 << 20),
    era=st.sampled_from(["0.6.6", "0.12"]),
)
def test_any_prompt_and_stop_strings_read_back(
    prompt: str, stop: list[str], ids: list[int], cap: int, era: str
) -> None:
    """Whatever the prompt text and stop strings hold (quotes, backslashes, field names), the
    ids and max_tokens read are the ones printed."""
    from kvtier.engines.vllm.requests import VllmRequests
    from kvtier.sim.block_hash import PromptHasher

    params = _params(cap, _Raw(repr(stop)))
    if era == "0.6.6":
        lines = [PREFIX_066.format(s=1) + V066 % ("r", prompt, params, ids, None, None)]
    else:
        lines = [
            PREFIX.format(level="DEBUG", s=1) + V012_DETAILS % ("r", prompt, ids, None),
            PREFIX.format(level="INFO", s=1) + V012_RECEIVED % ("r", params, None),
        ]
    hasher = PromptHasher(4)
    grammar = VllmRequests(hasher)
    assert all(grammar.feed(n, line) for n, line in enumerate(lines, start=1))
    (request,) = grammar.requests()
    assert request.prompt == hasher(ids)
    assert (request.output_len, request.output_from) == (cap, "max_tokens")


def test_vllm_lines_behind_docker_timestamps_arrive_to_the_nanosecond(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`docker logs -t` puts a UTC time with nanoseconds before each line: the four requests,
    printed in one vLLM second, arrive 0.25 s apart by it."""
    lines = _vllm_log("0.12").splitlines()
    stamped = [
        f"2026-12-01T11:59:59.{250_000_000 * (n // 3):09d}Z {line}" for n, line in enumerate(lines)
    ]
    log = tmp_path / "docker.log"
    log.write_text("\n".join(stamped) + "\n")
    summary, rows = _trace(capsys, log)
    assert [r["timestamp"] for r in rows] == [0, 250, 500, 750]
    assert summary["arrival_from"] == {"the line's UTC time stamp": 4}
    # one line without its stamp: two clocks
    log.write_text("\n".join([*stamped[:-3], *lines[-3:]]) + "\n")
    assert "line 11: its arrival is on another clock" in error_line(capsys, ["trace", str(log)])
