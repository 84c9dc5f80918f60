"""explain names the engine release whose rules it applied, with where it came from: the log
line that states it, the version flag, or the default release (`versions.DEFAULT`'s sentence)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtier.cli import main
from kvtier.engines.sglang.versions import DEFAULT as SGLANG_DEFAULT
from kvtier.engines.vllm.versions import DEFAULT as VLLM_DEFAULT

ROOT = Path(__file__).resolve().parents[1]
VLLM_LOG = ROOT / "examples" / "logs" / "vllm-llama31-8b-h100.log"  # line 1: 'version 0.19.0'
SGLANG_LOG = ROOT / "examples" / "logs" / "sglang-kimi-k25-eagle3.log"  # states no version


def _release(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["explain", *argv, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["inputs"]
    [row] = [r for r in rows if r["name"] == "engine release"]
    return row  # type: ignore[no-any-return]


def test_the_release_the_log_states_is_cited_by_its_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    row = _release([str(VLLM_LOG)], capsys)
    assert row["value"] == "0.19.0"
    assert row["source"]["line"] == 1 and "version 0.19.0" in row["source"]["text"]
    assert main(["explain", str(VLLM_LOG)]) == 0
    assert "engine release" in capsys.readouterr().out


def test_a_log_stating_no_version_takes_the_default_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row = _release([str(SGLANG_LOG)], capsys)
    assert row["value"] == "0.5.9" == str(SGLANG_DEFAULT.release)
    assert row["source"] == {
        "line": None,
        "text": f"default: the log states no version. {SGLANG_DEFAULT.sentence}",
        "rank": None,
    }
    unstated = tmp_path / "vllm.log"
    unstated.write_text("".join(VLLM_LOG.read_text().splitlines(keepends=True)[1:]))
    row = _release([str(unstated)], capsys)
    assert row["value"] == str(VLLM_DEFAULT.release) == "0.21.0"
    assert "default: the log states no version. Without --vllm-version" in str(row["source"])


def test_the_version_flag_is_named_where_the_log_states_none(
    capsys: pytest.CaptureFixture[str],
) -> None:
    row = _release([str(SGLANG_LOG), "--sglang-version", "0.5.14"], capsys)
    assert row["value"] == "0.5.14"
    assert row["source"] == {"line": None, "text": "--sglang-version", "rank": None}


@pytest.mark.parametrize(
    ("log", "release", "line"),
    [
        ("public/vllm-0.19-codellama-34b-tp2-failed.log", "0.19.0", True),  # a failed start
        ("eras/vllm-0.4-blocks-only.log", "0.4.2", True),  # a count only, nothing recomputed
        ("public/sglang-2026-summary-256k-context.log", "0.5.9", False),  # states none
    ],
)
def test_a_start_whose_pool_is_not_recomputed_names_its_release_too(
    log: str, release: str, line: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    row = _release([str(ROOT / "tests" / "fixtures" / "logs" / log)], capsys)
    assert row["value"] == release
    assert (row["source"]["line"] is not None) is line
