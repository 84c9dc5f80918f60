"""Typed payloads: `--json` is one serialisation of a frozen dataclass, a saved file one reading."""

from __future__ import annotations

import copy
import json
import re

import pytest

from kvtier.errors import KvtierError
from kvtier.payload import from_json, to_json
from kvtier.sim.payload import SimulatePayload
from report_cases import fixture


def test_a_saved_sweep_reads_back_and_writes_what_it_holds() -> None:
    saved = fixture("simulate-sweep.json")
    payload = from_json(SimulatePayload, saved)
    assert payload.sweep is not None and payload.run is None and payload.from_log is None
    assert [r.value for r in payload.sweep.runs] == ["0", "1", "2", "4", "8"]
    max_running = saved["sweep"]["runs"][3]["concurrency"]["max"]
    assert payload.sweep.runs[3].run.concurrency.max == max_running
    written = to_json(payload)
    assert json.dumps(to_json(from_json(SimulatePayload, written))) == json.dumps(written)
    assert written["notes"] == saved["notes"]
    for was, now in zip(saved["sweep"]["runs"], written["sweep"]["runs"], strict=True):
        assert {key: now[key] for key in was} == was  # every saved key kept as it was


def test_a_single_run_inlines_its_keys_and_leaves_out_what_it_lacks() -> None:
    run = fixture("simulate-sweep.json")["sweep"]["runs"][0]
    del run["value"]
    payload = from_json(SimulatePayload, run)
    assert payload.run is not None and payload.sweep is None and payload.notes is None
    written = to_json(payload)
    assert {key: written[key] for key in run} == run
    assert not {"sweep", "notes", "value", "fleet"} & set(written)


@pytest.mark.parametrize(
    ("path", "value", "says"),
    [
        (("hit_rate",), 1.5, "`sweep.runs[2].hit_rate` must be a number in [0, 1], got 1.5"),
        (("requests",), 2.5, "`sweep.runs[2].requests` must be a whole number, got 2.5"),
        (("ttft_s", "p50"), "fast", "`sweep.runs[2].ttft_s.p50` must be a finite number"),
        (("requests",), None, "no `sweep.runs[2].requests`"),
        (("hit_rate_by_tier", "host"), -0.1, "`sweep.runs[2].hit_rate_by_tier.host` must be"),
        (("rejected_ids",), {}, "`sweep.runs[2].rejected_ids` must be a list, got {}"),
    ],
)
def test_a_bad_field_is_refused_by_its_path(
    path: tuple[str, ...], value: object, says: str
) -> None:
    saved = copy.deepcopy(fixture("simulate-sweep.json"))
    where = saved["sweep"]["runs"][2]
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    with pytest.raises(KvtierError, match=re.escape(says)):
        from_json(SimulatePayload, saved)
