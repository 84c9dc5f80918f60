"""`kvtier trace` on OpenAI-format request dumps, tokenized by a tokenizer built at test time.

The tokenizer (tokenizer_support.py) gives one token a word and prepends <s>; its chat template
writes `<|role|> content` per message and ends with `<|assistant|>`. So every count below is
exact: a completion prompt of n words is n + 1 tokens; a chat of m messages and n words in all
is m + n + 1 tokens (a chat template's text is tokenized without special tokens, as the engines'
chat endpoints do: a template that wants <s> writes it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_support import error_line, run_json
from tokenizer_support import build_tokenizer

SHARED = " ".join(f"w{i}" for i in range(20))  # a 20-word system prompt


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def _dump(tmp_path: Path, rows: list[object], name: str = "dump.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _trace(capsys: pytest.CaptureFixture[str], dump: Path, *extra: str) -> tuple[dict, list[dict]]:
    out = dump.with_suffix(".trace.jsonl")
    summary = run_json(capsys, ["trace", str(dump), "-o", str(out), "--json", *extra])
    return summary, [json.loads(line) for line in out.read_text().splitlines()]


def test_completion_prompts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tokenizer_dir: Path
) -> None:
    """Three prompts of 20 shared + 3 own words (24 tokens with <s>), blocks of 8: each repeat
    shares <s> and 15 words, the first 2 blocks, 16 tokens."""
    rows = [
        {"timestamp": 1000 * i, "prompt": f"{SHARED} w{30 + i} w40 w41", "max_tokens": 5 + i}
        for i in range(3)
    ]
    summary, trace = _trace(
        capsys, _dump(tmp_path, rows), "--tokenizer", str(tokenizer_dir), "--block-tokens", "8"
    )
    assert summary["format"] == "openai"
    assert [r["input_length"] for r in trace] == [24, 24, 24]
    assert [r["output_length"] for r in trace] == [5, 6, 7]
    assert [r["timestamp"] for r in trace] == [0, 1000, 2000]
    assert summary["reused_tokens"] == 2 * 16
    assert summary["output_from"] == {"max_tokens": 3}


def test_chat_messages_through_the_chat_template(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tokenizer_dir: Path
) -> None:
    """A shared 20-word system message and a 2-word question: 2 + 22 + 1 = 25 tokens; the
    system part (<|system|>, 20 words, <|user|>) is 22 tokens, 2 whole blocks of 8."""
    rows = [
        {
            "created": 1_700_000_000 + 2 * i,
            "messages": [
                {"role": "system", "content": SHARED},
                {"role": "user", "content": f"w{50 + i} w51"},
            ],
            "max_completion_tokens": 9,
        }
        for i in range(3)
    ]
    summary, trace = _trace(
        capsys, _dump(tmp_path, rows), "--tokenizer", str(tokenizer_dir), "--block-tokens", "8"
    )
    assert [r["input_length"] for r in trace] == [25] * 3
    assert [r["timestamp"] for r in trace] == [0, 2000, 4000]
    assert summary["reused_tokens"] == 2 * 16
    assert summary["arrival_from"] == {"created": 3}


def test_batch_lines_with_responses_and_a_rate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """OpenAI batch input lines (`body`) with their output's usage; token-id prompts need no
    tokenizer; no time on the lines, so --rate 2 spaces them half a second apart."""
    rows = [
        {
            "custom_id": f"req-{i}",
            "method": "POST",
            "url": "/v1/completions",
            "body": {"prompt": [1, 2, 3, 4, 5, 6, 7, 8, 100 + i], "max_tokens": 50},
            "response": {"body": {"usage": {"prompt_tokens": 9, "completion_tokens": 10 + i}}},
        }
        for i in range(4)
    ]
    summary, trace = _trace(capsys, _dump(tmp_path, rows), "--rate", "2", "--block-tokens", "4")
    assert [r["timestamp"] for r in trace] == [0, 500, 1000, 1500]
    assert [r["output_length"] for r in trace] == [10, 11, 12, 13]
    assert summary["output_from"] == {"generated": 4}
    assert summary["reused_tokens"] == 3 * 8


@pytest.mark.parametrize(
    ("lines", "extra", "says"),
    [
        (['{"prompt": [1, 2], "max_tokens": 3, "timestamp": 0}', "{not json"], [], "line 2: not"),
        (['{"prompt": [1, 2], "timestamp": 0}'], [], "line 1: no output length"),
        (['{"prompt": [1, 2], "max_tokens": 3}'], [], "line 1: no `timestamp` (ms)"),
        (
            ['{"messages": [{"role": "user", "content": "w1"}], "max_tokens": 3}'],
            ["--rate", "1"],
            "line 1: chat messages need --tokenizer",
        ),
        (['{"prompt": "w1 w2", "max_tokens": 3}'], ["--rate", "1"], "line 1: request"),
        (['{"prompt": [[1], [2]], "max_tokens": 3}'], ["--rate", "1"], "several prompts"),
        (['{"prompt": [1], "max_tokens": 3, "timestamp": -5}'], [], "`timestamp` is not a time"),
    ],
)
def test_bad_dump_lines_are_named(
    lines: list[str],
    extra: list[str],
    says: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    dump = tmp_path / "dump.jsonl"
    dump.write_text("\n".join(lines) + "\n")
    err = error_line(capsys, ["trace", str(dump), "--format", "openai", *extra])
    assert says in err


def test_a_missing_tokenizer_is_refused_offline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    dump = _dump(tmp_path, [{"prompt": "w1", "max_tokens": 1, "timestamp": 0}])
    missing = tmp_path / "no-such-model"
    err = error_line(capsys, ["trace", str(dump), "--tokenizer", str(missing)])
    assert f"--tokenizer {missing}: no tokenizer there" in err
