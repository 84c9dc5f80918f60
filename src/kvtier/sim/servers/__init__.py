"""Simulated servers, one module per engine, behind `base.ServerModel`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kvtier.engines.deployment import Engine
from kvtier.sim.servers import sglang_dp, vllm
from kvtier.sim.servers.base import ServerModel

if TYPE_CHECKING:
    from kvtier.sim.setup import SimConfig

BUILDERS: dict[Engine, Callable[[SimConfig], ServerModel]] = {
    Engine.SGLANG: sglang_dp.build_dp,
    Engine.VLLM: vllm.build,
}


def build_server(config: SimConfig) -> ServerModel:
    """The server model of `config.engine`, sized and timed by `config`."""
    return BUILDERS[config.engine](config)
