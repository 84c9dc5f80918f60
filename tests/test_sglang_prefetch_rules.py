"""SGLang HiCache's L3 prefetch rules by version, as read in the sglang wheels 0.5.3-0.5.18."""

from __future__ import annotations

import math

import pytest

from kvtier.engines.sglang.prefetch import prefetch_era
from kvtier.errors import KvtierError
from kvtier.sim.servers.prefetch import PrefetchFlags, PrefetchPolicy


@pytest.mark.parametrize(
    ("version", "policy", "base", "per_ki", "cap", "after_host"),
    [
        (None, "best_effort", 1.0, 0.25, math.inf, False),
        ("0.5.3", "best_effort", 1.0, 0.25, math.inf, False),
        ("0.5.9", "best_effort", 1.0, 0.25, math.inf, False),
        ("0.5.10", "best_effort", 1.0, 0.25, math.inf, True),
        ("0.5.11", "best_effort", 1.0, 0.25, math.inf, True),
        ("0.5.12", "timeout", 2.0, 0.1, 30.0, True),
        ("0.5.14", "timeout", 2.0, 0.1, 30.0, True),
        ("0.5.15.post1", "timeout", 2.0, 0.1, 30.0, True),
        ("v0.5.18", "timeout", 2.0, 0.1, 30.0, True),
    ],
)
def test_each_version_has_its_defaults(
    version: str | None, policy: str, base: float, per_ki: float, cap: float, after_host: bool
) -> None:
    era = prefetch_era(version)
    assert (era.policy, era.timeout_base_s, era.timeout_per_ki_token_s) == (policy, base, per_ki)
    assert (era.timeout_max_s, era.start_after_host_hit, era.threshold_tokens) == (
        cap,
        after_host,
        256,
    )


def test_the_prefetch_capacity_changed_at_0_5_15() -> None:
    # HiCacheController.prefetch_capacity_limit: 0.8 x (host - device), then 0.5 x host
    assert prefetch_era("0.5.14").capacity_tokens(100_000, 40_000) == 48_000
    assert prefetch_era("0.5.9").capacity_tokens(40_000, 100_000) == 0
    assert prefetch_era("0.5.15").capacity_tokens(100_000, 40_000) == 50_000


@pytest.mark.parametrize("version", ["0.5.2", "0.5.19", "0.5.23", "main"])
def test_versions_not_read_are_refused(version: str) -> None:
    with pytest.raises(KvtierError, match=r"v0\.5\.3-v0\.5\.18, not "):
        prefetch_era(version)


def test_flags_override_the_version_s_defaults() -> None:
    era = prefetch_era("0.5.12")
    assert PrefetchFlags().rules(era).policy is PrefetchPolicy.TIMEOUT
    rules = PrefetchFlags("wait_complete", 512, None, 0.5, None).rules(era)
    assert rules.policy is PrefetchPolicy.WAIT_COMPLETE
    assert (rules.threshold_tokens, rules.timeout_base_s, rules.timeout_per_ki_token_s) == (
        512,
        2.0,
        0.5,
    )
    assert rules.timeout_max_s == 30.0 and rules.start_after_host_hit
