"""Every fixture kvtier produces is what its command prints today, and every file in the produced
fixtures' folders has a command: a stale fixture would let the report tests pass against a
contract the CLI no longer keeps.

The commands live in tests/fixtures/regenerate.py; rerun it after a change to what they print.
No field is ignored: the commands are deterministic, so the whole text is compared.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parent / "fixtures" / "regenerate.py"


def _regenerate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fixtures_regenerate", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


REGENERATE = _regenerate()
PRODUCED: dict[str, list[str]] = REGENERATE.PRODUCED
FIXTURES: Path = REGENERATE.FIXTURES


def differences(saved: Any, now: Any, at: str = "$") -> list[str]:
    """JSON paths where two parsed documents differ, with both values."""
    if isinstance(saved, dict) and isinstance(now, dict):
        found = [f"{at}.{k}: only in the fixture" for k in saved.keys() - now.keys()]
        found += [f"{at}.{k}: only in the output" for k in now.keys() - saved.keys()]
        for key in saved.keys() & now.keys():
            found += differences(saved[key], now[key], f"{at}.{key}")
        return sorted(found)
    if isinstance(saved, list) and isinstance(now, list) and len(saved) == len(now):
        return [
            d
            for i, (a, b) in enumerate(zip(saved, now, strict=True))
            for d in differences(a, b, f"{at}[{i}]")
        ]
    return [] if saved == now else [f"{at}: fixture {saved!r:.80}, now {now!r:.80}"]


@pytest.mark.parametrize("name", sorted(PRODUCED))
def test_fixture_is_what_its_command_prints(name: str) -> None:
    saved = (FIXTURES / name).read_text()
    now = REGENERATE.produce(PRODUCED[name])
    if saved != now:
        try:
            found = differences(json.loads(saved), json.loads(now)) or ["formatting only"]
        except json.JSONDecodeError:
            found = ["not both JSON"]
        pytest.fail(
            f"tests/fixtures/{name} is stale; run `.venv/bin/python tests/fixtures/regenerate.py` "
            f"and review the diff. {len(found)} differences, first ones:\n  "
            + "\n  ".join(found[:12]),
            pytrace=False,
        )


def test_every_fixture_in_a_produced_folder_has_its_command() -> None:
    folders = {(FIXTURES / name).parent for name in PRODUCED}
    present = {
        str(p.relative_to(FIXTURES)) for folder in folders for p in folder.iterdir() if p.is_file()
    }
    assert present == set(PRODUCED)


def test_differences_name_the_changed_paths() -> None:
    saved = {"a": 1, "b": [{"c": "TP0"}, 2], "gone": 0}
    now = {"a": 1, "b": [{"c": 0}, 2], "new": 0}
    assert differences(saved, now) == [
        "$.b[0].c: fixture 'TP0', now 0",
        "$.gone: only in the fixture",
        "$.new: only in the output",
    ]
    assert differences(saved, saved) == []
