"""Each routing policy's `--router-opt` keys, from the one place they are declared (the policy's
`RouterOption` rows): `--router-opt help` lists them, an unknown key is refused naming them, and
docs/fleet.md's policy table writes each key with the row's default."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli_support import cli_json, error_line, run_cli
from kvtier.errors import KvtierError
from kvtier.routers import NAMES
from kvtier.sim.fleet.policy import Policy, parse_options
from kvtier.sim.fleet.registry import policies

ROOT = Path(__file__).resolve().parents[1]
FLEET_MD = ROOT / "docs" / "fleet.md"
KEY = re.compile(r"`([a-z][a-z0-9-]*)` (\d+(?:\.\d+)?|\([^)]*\))")
POLICIES = policies(512)


def documented() -> dict[str, dict[str, str]]:
    """docs/fleet.md's policy table: each `--router` row's last cell as {key: default written}."""
    found: dict[str, dict[str, str]] = {}
    for line in FLEET_MD.read_text().splitlines():
        row = re.match(r"\| `([a-z-]+)` \|", line)
        if row and row.group(1) in NAMES:
            found[row.group(1)] = dict(KEY.findall(line.rstrip(" |").rsplit(" | ", 1)[1]))
    return found


def test_every_policy_has_a_row_in_the_docs_table() -> None:
    assert sorted(documented()) == sorted(NAMES) == sorted(POLICIES)


@pytest.mark.parametrize("name", NAMES)
def test_docs_name_each_option_with_its_default(name: str) -> None:
    written = documented()[name]
    options = POLICIES[name].options
    assert sorted(written) == sorted(options), written
    for key, option in options.items():
        text = written[key]
        if option.follows:
            assert text == option.default_text, key
        else:
            assert float(text) == option.default, (key, text, option.default)


@pytest.mark.parametrize("name", NAMES)
def test_a_default_marked_as_following_the_trace_is_the_only_kind_that_moves(name: str) -> None:
    other = policies(64)[name].options
    for key, option in POLICIES[name].options.items():
        assert (other[key].default != option.default) == bool(option.follows), key


def listed(name: str, *extra: str) -> tuple[int, str, str]:
    return run_cli(["simulate", "--router", name, "--router-opt", "help", *extra])


@pytest.mark.parametrize("name", NAMES)
def test_router_opt_help_lists_each_row(name: str) -> None:
    code, out, err = listed(name)
    assert code == 0 and err == ""
    policy: Policy = POLICIES[name]
    lines = out.splitlines()
    assert policy.source in lines[0]
    if not policy.options:
        assert lines == [f"--router {name} takes no --router-opt options ({policy.source})"]
        return
    assert lines[1].split() == ["KEY", "DEFAULT", "VALUES", "WHAT", "IT", "SETS"]
    assert len(lines) == 2 + len(policy.options)
    for line, (key, option) in zip(lines[2:], policy.options.items(), strict=True):
        cells = re.split(r"\s{2,}", line.strip(), maxsplit=3)
        assert cells == [key, option.default_text, option.parse.allowed, option.help]


def test_router_opt_help_prints_ranges_and_defaults_as_written() -> None:
    out = listed("sglang-cache-aware")[1]
    assert re.search(r"max-tree-size +67108864 +integer in \[1, 4611686018427387904\]", out)
    assert re.search(r"cache-threshold +0\.3 +number in \[0, 1\] +match ratio", out)
    out = listed("llm-d-precise")[1]
    assert re.search(r"block-size +\(the trace's\) +integer in \[1, 1048576\]", out)
    assert re.search(r"step-events +1 +0 or 1 +1: a replica's blocks", out)


@pytest.mark.parametrize("name", NAMES)
def test_router_opt_help_json_is_the_rows(name: str) -> None:
    data = cli_json(["simulate", "--router", name, "--router-opt", "help", "--json"])
    policy = POLICIES[name]
    assert data["router"] == name and data["source"] == policy.source
    assert [o["key"] for o in data["options"]] == list(policy.options)
    for item in data["options"]:
        option = policy.options[item["key"]]
        assert item["allowed"] == option.parse.allowed and item["help"] == option.help
        if option.follows:
            assert item["default"] is None and item["follows"] == option.follows
        else:
            assert item["default"] == option.default and "follows" not in item


def test_router_opt_help_without_router_lists_the_default_policy() -> None:
    code, out, _ = run_cli(["simulate", "--router-opt", "help"])
    assert code == 0 and out.startswith("--router sglang-cache-aware options")


def test_router_opt_help_beside_another_option_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["simulate", "--router-opt", "help", "--router-opt", "cache-threshold=0.5"]
    assert "--router-opt help lists the options: give it alone" in error_line(capsys, argv)


def test_router_opt_help_over_a_router_sweep_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--router-opt", "help", "--sweep", "router=random,llm-d-precise"]
    assert error_line(capsys, argv) == (
        "kvtier: error: --router-opt help lists one policy's options: give --router POLICY, "
        "not --sweep router=random,llm-d-precise\n"
    )
    code, out, _ = run_cli([*argv, "--router", "random"])
    assert code == 0 and out.startswith("--router random takes no --router-opt options")


@pytest.mark.parametrize("name", NAMES)
def test_an_unknown_option_is_refused_naming_the_policys_keys(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = error_line(capsys, ["simulate", "--router", name, "--router-opt", "nosuch=1"])
    head = f"kvtier: error: --router-opt nosuch: not an option of --router {name} "
    keys = ", ".join(POLICIES[name].options)
    if keys:
        assert line == f"{head}(its options: {keys}; --router-opt help describes them)\n"
    else:
        assert line == f"{head}(it takes none)\n"


def test_simulate_help_says_how_to_list_a_policys_options() -> None:
    code, out, _ = run_cli(["simulate", "--help"])
    assert code == 0
    text = " ".join(out.split())
    assert "--router-opt help lists the policy's options" in text
    assert "kvtier simulate --router llm-d-precise --router-opt help" in text


@pytest.mark.parametrize(
    ("given", "refusal"),
    [
        (["a\nb=1"], "--router-opt 'a\\nb': not an option of --router sglang-cache-aware ("),
        (["k" * 3000 + "=1"], f"--router-opt {'k' * 60}: not an option of"),
        (["cache-threshold=" + "9" * 3000], f"--router-opt cache-threshold: {'9' * 40} is outside"),
        (["cache-threshold=" + "x" * 3000], f"--router-opt cache-threshold: '{'x' * 39} is not"),
    ],
)
def test_a_refusal_shows_the_input_on_one_short_line(given: list[str], refusal: str) -> None:
    """A key with a newline is quoted and every echo of the input is cut, so the refusal stays
    one line of at most a few hundred characters."""
    with pytest.raises(KvtierError) as caught:
        parse_options("sglang-cache-aware", POLICIES["sglang-cache-aware"], given)
    line = str(caught.value)
    assert line.startswith(refusal) and "\n" not in line and len(line) < 400
