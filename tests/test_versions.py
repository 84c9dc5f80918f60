"""One version ladder per engine (engines/<engine>/versions.py): every release a rule names is a
constant there, `main` sorts after them all, and "no version" is one default release, resolved
once and stated in one sentence that --help and docs/cli.md quote."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest

import cli_support
from cli_support import error_line
from conftest import require_shared
from kvtier.cli import build_parser
from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.detect import parse_log
from kvtier.engines.sglang import pool as sglang
from kvtier.engines.sglang import versions as sglang_versions
from kvtier.engines.version import Version
from kvtier.engines.vllm import pool as vllm
from kvtier.engines.vllm import versions as vllm_versions
from kvtier.errors import KvtierError
from kvtier.ledger.explain import explain_log
from kvtier.ledger.plan import plan

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "kvtier"
FIXTURES = ROOT / "tests" / "fixtures" / "logs"
LADDERS = {"sglang": sglang_versions, "vllm": vllm_versions}


def _flat(text: str) -> str:
    return " ".join(text.split())


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_release_constant_lives_in_its_engine_ladder() -> None:
    """No module but versions.py builds a release from literal numbers."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name in ("versions.py", "version.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("release_of", "parse")
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "Version"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert found == []


def test_no_rule_special_cases_main() -> None:
    """`main` sorts after every release, so `v.is_main or v >= X` is `v >= X`."""
    pattern = re.compile(r"is_main\s+or|not\s+\w+(\.version)?\.is_main\s+and")
    hits = [
        f"{path.relative_to(SRC)}:{n}"
        for path in sorted(SRC.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert hits == []
    main = Version.parse("main", "SGLang")
    assert main > sglang_versions.V0_5_23 and main > vllm_versions.V0_21


@pytest.mark.parametrize(
    ("text", "release"),
    [("0.5.9", (0, 5, 9)), ("v0.4.3.post4", (0, 4, 3)), ("0.10.1.dev101+g123", (0, 10, 1)),
     ("0.5", (0, 5, 0)), ("0.5.23rc1", (0, 5, 23)), ("0.6.3+cu128", (0, 6, 3)),
     ("0.10.1.1", (0, 10, 1)), ("0.8.5.post1", (0, 8, 5))],
)  # fmt: skip
def test_a_release_is_read_with_its_suffix_kept_in_the_text(
    text: str, release: tuple[int, int, int]
) -> None:
    v = Version.parse(text, "SGLang")
    assert v.release == release and v.text == text


@pytest.mark.parametrize("text", ["0.5.99999", "0.33.10000", "1.2.3.4.5", "0.12345.0", "x0.5.9"])
def test_a_number_past_the_release_is_refused_not_cut(text: str) -> None:
    """0.5.99999 was read as 0.5.0 (the patch too long for the pattern, the rest dropped)."""
    with pytest.raises(KvtierError, match=f"version '{re.escape(text)}' is not of the form"):
        Version.parse(text, "SGLang")


@pytest.mark.parametrize("engine", sorted(LADDERS))
def test_the_ladder_is_in_order(engine: str) -> None:
    ladder = LADDERS[engine]
    releases = [v for k, v in vars(ladder).items() if re.fullmatch(r"V\d+(_\d+)+", k)]
    assert releases == sorted(releases) and len(set(releases)) == len(releases)
    assert ladder.DEFAULT.release in releases
    assert ladder.DEFAULT.resolve(None) is ladder.DEFAULT.release
    assert ladder.DEFAULT.resolve("main").is_main


def test_no_version_is_the_default_release_in_every_era() -> None:
    assert sglang.era_for(None).version is sglang_versions.DEFAULT.release
    default, stated = sglang.era_for(None), sglang.era_for(str(sglang_versions.DEFAULT.release))
    assert (default.pool, default.fraction_rule) == (stated.pool, stated.fraction_rule)
    assert vllm.era_for(None).version is vllm_versions.DEFAULT.release
    assert vllm.era_for(None).worker is vllm.era_for(str(vllm_versions.DEFAULT.release)).worker


CASES = [  # models whose pools take different version rules: SWA, hybrid linear, DSA, MLA, draft
    (Engine.SGLANG, "gpt-oss-120b", 1, {}),
    (Engine.SGLANG, "qwen3.5-27b", 2, {}),
    (Engine.SGLANG, "Qwen/Qwen3-Next-80B-A3B-Instruct", 4, {}),
    (Engine.SGLANG, "deepseek-v3.2", 8, {"gpu": "B200"}),
    (Engine.SGLANG, "kimi-k2.5", 8, {"gpu": "H200", "speculative_algorithm": "EAGLE3"}),
    (Engine.SGLANG, "zai-org/GLM-4.7", 8, {"gpu": "H200", "speculative_algorithm": "NEXTN"}),
    (Engine.VLLM, "llama-3.1-8b", 1, {}),
    (Engine.VLLM, "gemma-3-27b-it", 2, {}),
    (Engine.VLLM, "qwen3.5-27b", 2, {}),
    (Engine.VLLM, "deepseek-v3.2", 8, {"gpu": "B200"}),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0].value}-{c[1]}" for c in CASES])
def test_a_plan_without_version_is_the_plan_at_the_default_release(case: tuple) -> None:
    """Every figure, item and note the same; only the era's label says it was not given."""
    engine, model, tp, extra = case
    ladder = LADDERS[engine.value]
    fields = {"gpu": "H100 80GB", **extra}
    unstated = plan(Deployment(engine=engine, model=model, tp=tp, **fields))
    stated = plan(
        Deployment(
            engine=engine, model=model, tp=tp, engine_version=str(ladder.DEFAULT.release), **fields
        )
    )
    assert unstated.era == ladder.DEFAULT.era_label
    assert stated.era != unstated.era

    def without_era(ledger: object) -> object:
        inputs = tuple(i for i in ledger.inputs if i.name != "version era")  # type: ignore[attr-defined]
        return dataclasses.replace(ledger, era="", inputs=inputs)  # type: ignore[type-var]

    assert without_era(unstated) == without_era(stated)


@pytest.mark.parametrize("engine", sorted(LADDERS))
def test_help_and_docs_state_the_default_in_the_same_sentence(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sentence = LADDERS[engine].DEFAULT.sentence
    assert _flat(sentence) in _flat((ROOT / "docs" / "cli.md").read_text())
    monkeypatch.setenv("COLUMNS", "10000")  # argparse wraps at hyphens otherwise
    flag = f"--{engine}-version"
    helps = {name: p.format_help() for name, p in _subcommands().items()}
    taking = [name for name, text in helps.items() if flag in text]
    assert "plan" in taking and "explain" in taking
    ladder = LADDERS[engine]
    oldest = getattr(ladder, "OLDEST", None)
    low = f"v{oldest} to" if oldest is not None else "up to"
    span = f"({low} v{ladder.NEWEST}, or main)"  # the releases taken, the rest refused
    for name in taking:
        assert _flat(sentence) in _flat(helps[name]), name
        assert f"version whose rules apply {span}" in _flat(helps[name]), name


def _after(release: Version) -> str:
    major, minor, patch = release.release
    return f"{major}.{minor}.{patch + 1}"


@pytest.mark.parametrize("engine", sorted(LADDERS))
def test_the_newest_release_is_the_ladder_s_last(engine: str) -> None:
    ladder = LADDERS[engine]
    releases = [v for k, v in vars(ladder).items() if re.fullmatch(r"V\d+(_\d+)+", k)]
    assert max(releases) == ladder.NEWEST
    assert ladder.DEFAULT.resolve(str(ladder.NEWEST)) == ladder.NEWEST
    later = _after(ladder.NEWEST)
    # a development build of a later release reads as it sorts, as before
    assert ladder.DEFAULT.resolve(f"{later}.dev12+g0123abc") > ladder.NEWEST
    with pytest.raises(KvtierError, match=rf"'{re.escape(later)}' is newer than {ladder.NEWEST}, "):
        ladder.DEFAULT.resolve(later)


@pytest.mark.parametrize("engine", sorted(LADDERS))
@pytest.mark.parametrize("given", ["99.99.99", "after"])
def test_a_release_after_the_newest_is_refused_naming_it(
    engine: str, given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was read as the newest release's rules; now one line names the newest, for the flag."""
    ladder = LADDERS[engine]
    version = _after(ladder.NEWEST) if given == "after" else given
    flag = f"--{engine}-version"
    for command in (["plan"], ["simulate", "--generate", "chat", "--requests", "4"]):
        argv = [*command, "--engine", engine, "--model", "llama-3.1-8b", "--gpu", "h100"]
        line = error_line(capsys, [*argv, flag, version])
        assert f"argument {flag}: " in line
        assert f"is newer than {ladder.NEWEST}, the newest release kvtier knows: " in line
        assert f"give {flag} {ladder.NEWEST} " in line
    # `main` sorts after every release and is read as today
    main_argv = ["plan", "--engine", engine, "--model", "llama-3.1-8b", "--gpu", "h100"]
    assert cli_support.run_cli([*main_argv, flag, "main"])[0] == 0


def test_bench_version_takes_the_sglang_ladder(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--bench", "sglang", "--requests", "4", "--model", "llama-3.1-8b"]
    line = error_line(capsys, [*argv, "--gpu", "h100", "--bench-version", "0.6.0"])
    assert "argument --bench-version: SGLang '0.6.0' is newer than 0.5.23" in line
    assert "give --bench-version 0.5.23 " in line


def test_a_vllm_log_of_a_later_release_is_refused_or_read_as_the_flag_s(tmp_path: Path) -> None:
    newest = str(vllm_versions.NEWEST)
    later = _after(vllm_versions.NEWEST)
    text = (FIXTURES / "l05-vllm.log").read_text().replace("version 0.19.0", f"version {later}")
    log = tmp_path / "later.log"
    log.write_text(text)
    code, _, err = cli_support.run_cli(["explain", str(log)])
    assert code == 2 and err.count("\n") == 1
    assert f"line 1: vLLM '{later}' is newer than {newest}" in err
    assert f"give --vllm-version {newest} to apply its rules" in err
    e = explain_log(text, {"engine_version": newest})
    d = e.deployment
    assert d.engine_version == newest
    assert d.origin("engine_version") == f"--vllm-version, for the log's vLLM {later} (line 1)"
    assert (
        e.reconciliation.predicted
        == explain_log(text.replace(later, newest), {}).reconciliation.predicted
    )


def test_no_bundled_log_states_a_release_kvtier_does_not_know() -> None:
    """Every log the project ships and the shared cases' logs read without a version flag."""
    logs = sorted((ROOT / "examples" / "logs").glob("*.log")) + sorted(FIXTURES.rglob("*.log"))
    texts = [p.read_text() for p in [*logs, require_shared("cases/seed-sglang.log")]]
    for case in json.loads(require_shared("cases/dev-logs.json").read_text()):
        texts.append(case["log"] if isinstance(case["log"], str) else "\n".join(case["log"]))
    assert len(texts) > 60
    for text in texts:
        try:
            parse_log(text)
        except KvtierError as exc:
            assert "newer than" not in str(exc), text[:200]


@pytest.mark.parametrize("given", ["0.0", "0.2.9"])
def test_an_sglang_release_before_the_first_rule_is_refused(
    given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each model file's split table starts at v0.3.0, so an earlier release found no row and
    raised ValueError from max(); now plan, simulate and explain refuse it in one line."""
    from kvtier.engines.sglang import versions as sglang

    assert sglang.DEFAULT.resolve(str(sglang.OLDEST)) == sglang.OLDEST
    base = ["--engine", "sglang", "--model", "kimi-k2.5", "--gpu", "h100", "--tp", "8"]
    for argv in (["plan", *base], ["simulate", "--generate", "chat", "--requests", "4", *base]):
        line = error_line(capsys, [*argv, "--sglang-version", given])
        assert f"argument --sglang-version: SGLang '{given}' is older than 0.3.0, " in line
    log = str(ROOT / "examples" / "logs" / "sglang-kimi-k25-eagle3.log")
    line = error_line(capsys, ["explain", log, "--sglang-version", given])
    assert f"SGLang '{given}' is older than 0.3.0" in line


def test_a_vllm_log_s_development_build_reads_as_it_sorts() -> None:
    """A log's `version 0.34.0.dev3+g12ab` was cut to 0.34.0 and refused as newer than the
    newest release read, where --vllm-version 0.34.0.dev3 is read as it sorts (docs/cli.md)."""
    from kvtier.engines.vllm import versions as vllm
    from kvtier.engines.vllm.log import _VERSION

    def read(text: str) -> str:
        m = _VERSION.search(text)
        assert m is not None, text
        return m.group(1)

    dev = read("INFO 12-01 api_server.py:1 vLLM API server version 0.34.0.dev3+g12ab")
    assert dev == "0.34.0.dev3" and vllm.DEFAULT.resolve(dev) > vllm.NEWEST
    assert read("Initializing a V1 LLM engine (v0.11.0) with config") == "0.11.0"
    assert read("vLLM API server version 0.29.1rc1.dev17+gabc") == "0.29.1rc1.dev17"
    with pytest.raises(KvtierError, match=r"newer than 0\.33\.0"):
        vllm.DEFAULT.resolve(read("vLLM API server version 0.34.0rc1"))
