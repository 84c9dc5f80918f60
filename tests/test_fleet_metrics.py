"""The queue and KV-usage metrics llm-d's scorers read: what a vLLM server's /metrics says (its
last completed iteration's scheduler stats), scraped every `metrics-interval-ms`."""

from __future__ import annotations

import pytest

from cli_support import cli_json
from kvtier.engines.deployment import Engine
from kvtier.sim.fleet.policy import Scrape
from kvtier.sim.fleet.registry import make_router
from kvtier.sim.fleet.view import ReplicaView
from kvtier.sim.metrics import RequestRecord
from kvtier.sim.servers.vllm import build
from kvtier.sim.setup import SimConfig
from kvtier.sim.timing import Hardware, ModelCost, TimingModel
from kvtier.sim.trace import TraceRequest

TM = TimingModel(
    ModelCost(8_000_000_000, 16e9, 131_072, 32, 8192), Hardware(989.0, 3350.0, 25.0, 100.0, 8), 1
)


def _server(seqs: int):  # type: ignore[no-untyped-def]
    """One vLLM server of 1,000 blocks of 16 tokens running at most `seqs` requests."""
    return build(SimConfig(1001 * 16, 0, 16, 512, "", seqs, 8192, TM, (), engine=Engine.VLLM))


def _arrive(server, rid: int, t: float, out: int = 16) -> None:  # type: ignore[no-untyped-def]
    req = TraceRequest(rid, t, 2048, out, (10 * rid, 10 * rid + 1, 10 * rid + 2, 10 * rid + 3))
    server.arrive(req, RequestRecord(rid, t, 2048, out), t)


def test_a_request_shows_as_waiting_only_after_an_iteration_that_began_with_it() -> None:
    s = _server(seqs=1)
    view = ReplicaView([s], 512, 62)
    _arrive(s, 0, 0.0)
    step = s.start_step(0.0, float("inf"))
    assert step is not None
    _arrive(s, 1, step / 2)  # in the engine's input queue until the next step begins
    assert s.queued == 1
    assert view.scraped(0, step / 2) == Scrape(0, 0.0)  # no iteration has completed
    assert view.scraped(0, step / 2, live=True) == Scrape(1, 128 / 1000)
    s.finish_step(step)
    # the prefill step's stats: request 0's 128 blocks, request 1 not yet in `waiting`
    assert view.scraped(0, step) == Scrape(0, 128 / 1000)
    run = s.start_step(step, float("inf"))  # request 1 drained, refused (max_num_seqs 1)
    assert run is not None
    iteration = run / 15  # request 0's 15 decode steps advanced together
    assert not view.scraped(0, step + iteration / 2).settled
    assert view.scraped(0, step + iteration / 2).waiting == 0  # its first iteration runs
    assert view.scraped(0, step + 1.5 * iteration).waiting == 1


def _llmd(usage: list[float], opts: list[str]) -> tuple[object, _View]:
    view = _View(usage)
    return make_router("llm-d-approximate", len(usage), opts, 0, view, 512)[0], view


class _View:
    """Replicas whose KV usage is set by hand, all queues empty."""

    def __init__(self, usage: list[float]) -> None:
        self.usage = usage

    def scraped(self, replica: int, now: float, live: bool = False) -> Scrape:
        return Scrape(0, self.usage[replica])

    @property
    def device_blocks(self) -> int:
        return 4


LOAD = ["prefix-weight=0", "queue-weight=1", "kv-usage-weight=1"]


def test_a_burst_within_one_refresh_interval_herds_to_one_pod() -> None:
    # every queue empty (queue scores all 1): the least used pod wins, and goes on winning
    # until a scrape shows what the burst put on it
    r, view = _llmd([0.3, 0.1, 0.2], LOAD)
    r.tick(0.0)  # type: ignore[attr-defined]
    picks = []
    for i in range(5):
        now = 0.001 * (i + 1)
        pick = r.route(TraceRequest(i, now, 1024, 16, (i,)), now)  # type: ignore[attr-defined]
        view.usage[pick] += 0.2
        r.watch(now, pick)  # type: ignore[attr-defined]
        picks.append(pick)
    assert picks == [1] * 5
    r.tick(0.05)  # type: ignore[attr-defined]
    assert r.route(TraceRequest(5, 0.05, 1024, 16, (5,)), 0.05) == 2  # type: ignore[attr-defined]


def test_the_refresh_interval_is_the_endpoint_pickers_default() -> None:
    # gateway-api-inference-extension v0.5.1-v1.0.0 DefaultRefreshMetricsInterval: 50 ms
    r, _ = _llmd([0.0, 0.0], LOAD)
    r.tick(0.0)  # type: ignore[attr-defined]
    assert r.next_tick(0.0) == pytest.approx(0.05)  # type: ignore[attr-defined]


V18_10QPS = [
    *("--generate", "shared-prefix", "--groups", "150", "--prompts-per-group", "5"),
    *("--system-tokens", "6000", "--question-tokens", "1200", "--output-tokens", "1000"),
    *("--rate", "10", "--requests", "1500", "--seed", "1", "--device-tokens", "307328"),
    *("--replicas", "8", "--router", "llm-d-approximate", "--json"),
]
V18_DEPLOY = ["--gpu", "H100 SXM", "--", "vllm", "serve", "Qwen/Qwen3-32B"]
V18_DEPLOY += ["--tensor-parallel-size", "2"]


@pytest.mark.parametrize(
    ("step_stats", "p90", "throughput"), [("0", 80.163, 5517.4), ("1", 85.582, 5223.6)]
)
def test_step_stats_0_scrapes_the_live_state(
    step_stats: str, p90: float, throughput: float
) -> None:
    """V18's load scheduler at 10 QPS: `step-stats=0` routes on each replica's state at the
    scrape (the figures before the stats lag was modelled); 1, the default, on its last
    completed iteration's stats, which the burst between two step ends herds on."""
    opts = [*LOAD, f"step-stats={step_stats}"]
    argv = ["simulate", *V18_10QPS]
    for o in opts:
        argv += ["--router-opt", o]
    out = cli_json([*argv, *V18_DEPLOY])
    assert round(out["ttft_s"]["p90"], 3) == p90
    assert round(out["throughput_tok_s"], 1) == throughput
