"""What an engine's part of the simulator's config is built from: `sim.setup` builds SGLang's,
`sim.setup_vllm` vLLM's, both from these inputs."""

from __future__ import annotations

from dataclasses import dataclass

from kvtier.engines.deployment import Deployment
from kvtier.engines.ledger import Ledger
from kvtier.sim.servers.prefetch import PrefetchFlags


@dataclass(frozen=True, slots=True)
class PartInputs:
    """The deployment, its ledger and the tiers asked for; a part appends the source of each
    figure it sets to `sources`."""

    deployment: Deployment
    ledger: Ledger
    device_tokens: int
    store_tokens: int
    prefetch: PrefetchFlags | None
    sources: list[tuple[str, str]]
