"""The KV events llm-d-precise's and dynamo-kv's indexes learn a vLLM pod's blocks from: taken
from the block pool and published once a step (vLLM v0.12.0 on: `Scheduler.update_from_output`,
after the forward pass; v0.10.x - v0.11.x: the end of `Scheduler.schedule`), `event-delay-ms`
later still when asked (sim/fleet/kv_events.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvtier.cli import main
from kvtier.engines.deployment import Engine
from kvtier.sim.fleet.registry import make_router
from kvtier.sim.fleet.view import ReplicaView
from kvtier.sim.metrics import RequestRecord
from kvtier.sim.servers.vllm import VllmServer, build
from kvtier.sim.setup import SimConfig
from kvtier.sim.timing import Hardware, ModelCost, TimingModel
from kvtier.sim.trace import TraceRequest

TM = TimingModel(
    ModelCost(8_000_000_000, 16e9, 131_072, 32, 8192), Hardware(989.0, 3350.0, 25.0, 100.0, 8), 1
)
GROUP = (7, 8, 9, 10)  # one prompt group's four trace blocks of 512 tokens
PRECISE = ["queue-weight=0", "kv-usage-weight=0"]  # the prefix scorer alone


def _server(at_schedule: bool = False) -> VllmServer:
    """One vLLM server of 1,000 blocks of 16 tokens."""
    config = SimConfig(
        1001 * 16, 0, 16, 512, "", 64, 8192, TM, (), engine=Engine.VLLM,
        kv_events_at_schedule=at_schedule,
    )  # fmt: skip
    return build(config)


def _req(rid: int, t: float) -> TraceRequest:
    return TraceRequest(rid, t, 2048, 16, GROUP)


def _arrive(server: VllmServer, rid: int, t: float) -> None:
    server.arrive(_req(rid, t), RequestRecord(rid, t, 2048, 16), t)


def test_blocks_are_announced_when_the_step_that_cached_them_ends() -> None:
    s = _server()
    view = ReplicaView([s], 512, 62)
    assert view.publish_kv_events() == {0}
    _arrive(s, 0, 0.0)
    step = s.start_step(0.0, float("inf"))
    assert step is not None
    assert set(GROUP) <= s.pool.cached.keys()  # allocate_slots cached them at schedule
    assert view.held_prefixes(_req(1, step / 2)) == {}  # not yet published
    s.finish_step(step)
    assert view.held_prefixes(_req(1, step)) == {0: 4}


def test_before_v0_12_the_schedule_publishes_them() -> None:
    s = _server(at_schedule=True)
    view = ReplicaView([s], 512, 62)
    view.publish_kv_events()
    _arrive(s, 0, 0.0)
    assert s.start_step(0.0, float("inf")) is not None
    assert view.held_prefixes(_req(1, 0.0)) == {0: 4}  # before the forward pass ran


def test_without_events_the_pool_is_read_at_once() -> None:
    s = _server()
    view = ReplicaView([s], 512, 62)
    _arrive(s, 0, 0.0)
    assert s.start_step(0.0, float("inf")) is not None
    assert view.held_prefixes(_req(1, 0.0)) == {0: 4}


def _fleet(opts: list[str]) -> tuple[list[VllmServer], object]:
    servers = [_server(), _server()]
    view = ReplicaView(servers, 512, 62)
    router = make_router("llm-d-precise", 2, [*PRECISE, *opts], 0, view, 512)[0]
    return servers, router


def test_a_burst_of_one_group_within_one_step_all_miss_the_new_blocks() -> None:
    servers, router = _fleet([])
    _arrive(servers[0], 0, 0.0)  # the group's first request, on replica 0
    step = servers[0].start_step(0.0, float("inf"))
    assert step is not None
    burst = [router._prefix_scores(_req(i, step * i / 10), GROUP, step * i / 10) for i in (1, 5, 9)]
    assert burst == [{}, {}, {}]  # every replica scores 0: the picker's ties decide
    servers[0].finish_step(step)
    assert router._prefix_scores(_req(10, step), GROUP, step) == {0: 1.0}


def test_a_removal_is_published_with_its_step_too() -> None:
    servers, router = _fleet([])
    s = servers[0]
    _arrive(s, 0, 0.0)
    t = 0.0
    while s.run or s.queued:  # request 0 runs to its end; its blocks stay cached, free
        step = s.start_step(t, float("inf"))
        assert step is not None
        t += step
        s.finish_step(t)
    assert router._prefix_scores(_req(1, t), GROUP, t) == {0: 1.0}
    s.pool.take(s.pool.free)  # every free block taken: the group's evicted
    assert not set(GROUP) & s.pool.cached.keys()
    assert router._prefix_scores(_req(1, t), GROUP, t) == {0: 1.0}  # not yet published
    s._publish(t)
    assert router._prefix_scores(_req(1, t), GROUP, t) == {}


def _one_step(server: VllmServer) -> float:
    """Request 0 arrives at 0 and its first step runs to its end: that step's time."""
    _arrive(server, 0, 0.0)
    step = server.start_step(0.0, float("inf"))
    assert step is not None
    server.finish_step(step)
    return step


def test_a_delay_holds_each_publication_back_that_long() -> None:
    servers, router = _fleet(["event-delay-ms=100"])
    step = _one_step(servers[0])
    assert router._prefix_scores(_req(1, step), GROUP, step + 0.0999) == {}
    assert router._prefix_scores(_req(1, step), GROUP, step + 0.1) == {0: 1.0}


def test_step_events_0_reads_the_pool_as_it_stands() -> None:
    servers = [_server(), _server()]
    view = ReplicaView(servers, 512, 62)
    router = make_router("llm-d-precise", 2, [*PRECISE, "step-events=0"], 0, view, 512)[0]
    _arrive(servers[0], 0, 0.0)
    assert servers[0].start_step(0.0, float("inf")) is not None
    assert router._prefix_scores(_req(1, 0.0), GROUP, 0.0) == {0: 1.0}


BURSTY = [
    "simulate", "--generate", "shared-prefix", "--groups", "12", "--prompts-per-group", "8",
    "--system-tokens", "3000", "--question-tokens", "300", "--output-tokens", "100",
    "--rate", "60", "--requests", "300", "--seed", "1", "--gpu", "H100 SXM",
    "--device-tokens", "60000", "--replicas", "4", "--json",
]  # fmt: skip


def _run(
    capsys: pytest.CaptureFixture[str],
    version: str,
    step_events: int,
    router: str = "llm-d-precise",
) -> dict[str, Any]:
    argv = [*BURSTY, "--router", router, "--vllm-version", version]
    argv += ["--router-opt", f"step-events={step_events}"]
    assert main([*argv, "--", "vllm", "serve", "Qwen/Qwen3-8B"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert out["fleet"].pop("router_options")["step-events"] == step_events
    return out


def test_events_at_schedule_are_the_pool_as_it_stands(capsys: pytest.CaptureFixture[str]) -> None:
    # v0.11: schedule() publishes what allocate_slots cached, and nothing changes the pool
    # between one schedule and the next step's end: the index is the pool whenever it is read
    assert _run(capsys, "0.11.0", 1) == _run(capsys, "0.11.0", 0)


def test_events_after_the_forward_pass_hide_a_step_s_blocks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # v0.12 on: a group's prompts arriving during the step that prefills the group's first go
    # by load alone; at 60 requests/s over 12 groups that costs hits and TTFT
    late, live = _run(capsys, "0.12.0", 1), _run(capsys, "0.12.0", 0)
    assert late["hit_rate"] < live["hit_rate"] - 0.01
    assert late["ttft_s"]["p90"] > live["ttft_s"]["p90"]


# dynamo-kv: Dynamo's KvIndexer applies the same published events (RadixTree::apply_event)


def _dynamo(opts: list[str]) -> tuple[list[VllmServer], Any]:
    servers = [_server(), _server()]
    view = ReplicaView(servers, 512, 62)
    return servers, make_router("dynamo-kv", 2, opts, 0, view, 512)[0]


def test_dynamo_kv_sees_a_step_s_blocks_when_the_step_ends() -> None:
    servers, router = _dynamo([])
    _arrive(servers[0], 0, 0.0)
    step = servers[0].start_step(0.0, float("inf"))
    assert step is not None
    assert router._held(_req(1, step / 2), step / 2) == [0, 0]  # cached, not yet published
    # each worker would prefill the prompt's 4 blocks and hold them active: a tie
    assert router.logits(_req(1, step / 2), step / 2) == ([8.0, 8.0], [2048, 2048])
    servers[0].finish_step(step)
    assert router._held(_req(1, step), step) == [4, 0]
    assert router.logits(_req(1, step), step) == ([4.0, 8.0], [0, 2048])


def test_dynamo_kv_hears_a_removal_with_its_step() -> None:
    servers, router = _dynamo([])
    s = servers[0]
    _arrive(s, 0, 0.0)
    t = 0.0
    while s.run or s.queued:
        step = s.start_step(t, float("inf"))
        assert step is not None
        t += step
        s.finish_step(t)
    s.pool.take(s.pool.free)
    assert router._held(_req(1, t), t) == [4, 0]  # evicted, not yet published
    s._publish(t)
    assert router._held(_req(1, t), t) == [0, 0]


def test_dynamo_kv_event_delay_holds_each_publication_back() -> None:
    servers, router = _dynamo(["event-delay-ms=100"])
    step = _one_step(servers[0])
    assert router._held(_req(1, step), step + 0.0999) == [0, 0]
    assert router._held(_req(1, step), step + 0.1) == [4, 0]


def test_dynamo_kv_step_events_0_reads_the_pool_as_it_stands() -> None:
    servers, router = _dynamo(["step-events=0"])
    _arrive(servers[0], 0, 0.0)
    assert servers[0].start_step(0.0, float("inf")) is not None
    assert router._held(_req(1, 0.0), 0.0) == [4, 0]


def test_dynamo_kv_events_at_schedule_are_the_pool(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(capsys, "0.11.0", 1, "dynamo-kv") == _run(capsys, "0.11.0", 0, "dynamo-kv")


def test_dynamo_kv_events_after_the_forward_pass_hide_a_step_s_blocks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # a burst's prompts no longer see the step's blocks: the prefill term ties and the decode
    # term (the router's own active blocks, shared ones once) still draws them to the worker
    # it sent their group to; on this trace the hit rate comes out higher (0.8575 -> 0.8675)
    late, live = _run(capsys, "0.12.0", 1, "dynamo-kv"), _run(capsys, "0.12.0", 0, "dynamo-kv")
    assert late["hit_rate"] == pytest.approx(0.8675, abs=1e-4)
    assert live["hit_rate"] == pytest.approx(0.8575, abs=1e-4)
