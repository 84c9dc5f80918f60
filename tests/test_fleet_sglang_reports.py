"""What a router reads of an SGLang pod: its gauges (`sglang:num_queue_reqs`,
`sglang:token_usage`) and KV events as its scheduler's reports publish them (SGLang 0.5.23
`metrics_reporter.py`: `report_prefill_stats` after each prefill batch, `report_decode_stats`
every 40th decode batch, `on_idle`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvtier.cli import main
from kvtier.sim.fleet.policy import Scrape
from kvtier.sim.fleet.view import ReplicaView
from kvtier.sim.metrics import RequestRecord
from kvtier.sim.servers.sglang import SGLangServer, build
from kvtier.sim.servers.sglang_reports import report_due
from kvtier.sim.setup import SimConfig
from kvtier.sim.timing import Hardware, ModelCost, TimingModel
from kvtier.sim.trace import TraceRequest
from test_fleet_kv_events import BURSTY

TM = TimingModel(
    ModelCost(8_000_000_000, 16e9, 131_072, 32, 8192), Hardware(989.0, 3350.0, 25.0, 100.0, 8), 1
)
INF = float("inf")


def _server(running: int = 1) -> SGLangServer:
    """One SGLang server of 100 pages of 512 tokens running at most `running` requests."""
    return build(SimConfig(100 * 512, 0, 1, 512, "write_through", running, 8192, TM, ()))


def _req(rid: int, t: float, out: int = 100) -> TraceRequest:
    return TraceRequest(rid, t, 2048, out, tuple(range(10 * rid, 10 * rid + 4)))


def _arrive(s: SGLangServer, rid: int, t: float, out: int = 100) -> None:
    s.arrive(_req(rid, t, out), RequestRecord(rid, t, 2048, out), t)


def test_the_reports_fall_on_every_40th_decode_batch() -> None:
    assert [report_due(0, n) for n in (39, 40, 79, 80, 99)] == [0, 40, 40, 80, 80]
    assert report_due(40, 79) == 0


def test_a_gauge_does_not_move_until_the_report_that_publishes_it() -> None:
    s = _server()
    view = ReplicaView([s], 512, 100)
    _arrive(s, 0, 0.0)
    prefill = s.start_step(0.0, INF)
    assert prefill is not None
    _arrive(s, 1, prefill / 2)  # not received until the next batch is formed
    assert view.scraped(0, prefill / 2) == Scrape(0, 0.0)  # no report yet
    assert view.scraped(0, prefill / 2, live=True).waiting == 1
    s.finish_step(prefill)
    # report_prefill_stats: request 0's prompt locked (4 of 100 pages), request 1 not received
    assert view.scraped(0, prefill) == Scrape(0, 0.04)
    run = s.start_step(prefill, INF)  # request 1 waits (one running at most): 99 batches
    assert run is not None
    batch = run / 99
    before = view.scraped(0, prefill + 39.5 * batch)
    assert before.waiting == 0 and not before.settled  # request 1 waits; no report since
    assert view.scraped(0, prefill + 40.5 * batch).waiting == 1  # the 40th batch's report
    assert view.scraped(0, prefill + 40.5 * batch).usage == 0.05  # its output's page too
    s.finish_step(prefill + run)  # request 0 finishes at batch 99, no report
    assert view.scraped(0, prefill + run).usage == 0.05  # the 80th batch's
    assert view.scraped(0, prefill + run, live=True).usage == 0.0


def test_an_idle_server_reports_at_once() -> None:
    s = _server()
    view = ReplicaView([s], 512, 100)
    _arrive(s, 0, 0.0, out=10)
    prefill = s.start_step(0.0, INF)
    assert prefill is not None
    s.finish_step(prefill)
    run = s.start_step(prefill, INF)
    assert run is not None
    s.finish_step(prefill + run)  # 9 decode batches: no report
    assert view.scraped(0, prefill + run).usage == 0.04
    assert s.start_step(prefill + run, INF) is None  # on_idle
    assert view.scraped(0, prefill + run) == Scrape(0, 0.0)


def test_events_are_held_until_the_40th_decode_batch() -> None:
    s = _server(running=2)
    view = ReplicaView([s], 512, 100)
    assert view.publish_kv_events() == {0}
    _arrive(s, 0, 0.0, out=200)
    prefill = s.start_step(0.0, INF)
    assert prefill is not None
    assert view.held_prefixes(_req(0, prefill / 2)) == {}  # not yet published
    s.finish_step(prefill)
    assert view.held_prefixes(_req(0, prefill)) == {0: 4}  # report_prefill_stats
    # a short request prefilled and finished while request 0 decodes; its blocks, in the
    # tree, are announced by the prefill's report
    _arrive(s, 1, prefill, out=1)
    step = s.start_step(prefill, INF)
    assert step is not None
    s.finish_step(prefill + step)
    assert view.held_prefixes(_req(1, prefill + step)) == {0: 4}


def test_a_removal_waits_for_the_next_report() -> None:
    s = _server(running=1)
    view = ReplicaView([s], 512, 100)
    view.publish_kv_events()
    tree = s.reports.tree
    assert tree is not None
    _arrive(s, 0, 0.0, out=50)
    t = 0.0
    while (d := s.start_step(t, INF)) is not None:
        t += d
        s.finish_step(t)
    assert view.held_prefixes(_req(0, t)) == {0: 4}  # request 0 done, its prompt evictable
    _arrive(s, 1, t, out=50)
    s.cache.free_up(100)  # its pages evicted outside any report
    assert view.held_prefixes(_req(0, t)) == {0: 4}
    d = s.start_step(t, INF)  # request 1's prefill batch, then its report
    assert d is not None
    s.finish_step(t + d)
    assert view.held_prefixes(_req(0, t + d)) == {}


def _decode(s: SGLangServer, t: float, batches: int) -> float:
    """Run `batches` decode batches from `t` (a run stopped by a horizon); the time after."""
    kv, batch = s._decode_kv, len(s.decoding)
    # a horizon inside the last batch: the run stops at its end
    d = s.start_step(t, t + TM.decode_steps_s(batches - 0.5, kv, batch))
    assert d is not None and s._pending_decode == batches
    s.finish_step(t + d)
    return t + d


def test_an_eviction_by_decode_is_published_at_the_40th_decode_batch() -> None:
    # ten pages of 16 tokens: request 0's finished prompt (4 pages, evictable), then request 1
    # (4 pages) decodes; its output takes a third loose page at batch 33, evicting request 0's
    s = build(SimConfig(10 * 16, 0, 1, 16, "write_through", 1, 8192, TM, ()))
    view, live = ReplicaView([s], 16, 10), ReplicaView([s], 16, 10)
    view.publish_kv_events()
    r0, r1 = TraceRequest(0, 0.0, 64, 1, (0, 1, 2, 3)), TraceRequest(1, 0.0, 64, 90, (4, 5, 6, 7))
    s.arrive(r0, RequestRecord(0, 0.0, 64, 1), 0.0)
    t = s.start_step(0.0, INF)
    assert t is not None
    s.finish_step(t)
    s.arrive(r1, RequestRecord(1, t, 64, 90), t)
    d = s.start_step(t, INF)
    assert d is not None
    s.finish_step(t := t + d)
    t = _decode(s, t, 35)
    assert live.held_prefixes(r0) == {} and view.held_prefixes(r0) == {0: 4}
    t = _decode(s, t, 4)  # batch 39
    assert view.held_prefixes(r0) == {0: 4}
    t = _decode(s, t, 2)  # batch 40 reports inside this run
    assert view.held_prefixes(r0) == {}
    assert view.held_prefixes(r1) == {0: 4}


def _run(capsys: pytest.CaptureFixture[str], router: str, opts: list[str]) -> dict[str, Any]:
    # the bursty workload with longer stretches of decoding: 20 prompts a group, 200 tokens out
    # (at 25, with the 1.35 ms forward cost, dynamo-kv's picks land where they would unlagged)
    argv = [*BURSTY, "--router", router]
    argv[argv.index("--prompts-per-group") + 1], argv[argv.index("--output-tokens") + 1] = (
        "20",
        "200",
    )
    for opt in opts:
        argv += ["--router-opt", opt]
    assert main([*argv, "--", "python", "-m", "sglang.launch_server", "--model-path",
                 "Qwen/Qwen3-8B"]) == 0  # fmt: skip
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    out["fleet"].pop("router_options")
    return out


@pytest.mark.parametrize("router", ["llm-d-precise", "dynamo-kv"])
def test_step_events_and_stats_0_read_the_pod_as_it_stands(
    capsys: pytest.CaptureFixture[str], router: str
) -> None:
    live = _run(capsys, router, ["step-events=0"] + (["step-stats=0"] if "llm-d" in router else []))
    late = _run(capsys, router, [])
    assert live != late  # the reports' lag moves the routing
