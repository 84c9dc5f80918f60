"""The interface each engine implements (`engines/<engine>/rules.py`), handed out by `rules_for`.

Everything engine-specific that plan, explain, advise and simulate need is reached through it:
the launch-flag table, the ledger builder (which holds the pool formula, the default rules and
the version era it prints), the reading of a parsed startup log (explain's engine half) and the
host-RAM tier advise prices. `kvtier.engines.detect` picks the engine's log grammar.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.flags import FlagTable
from kvtier.engines.host import HostTier
from kvtier.engines.inputs import PlanInputs
from kvtier.engines.ledger import Ledger
from kvtier.model.description import ModelSpec

if TYPE_CHECKING:  # the explain half loads with the engine's rules, not with the interface
    from kvtier.engines.explain import ExplainRules


@dataclass(frozen=True, slots=True)
class EngineRules:
    engine: Engine
    flags: FlagTable  # launch flags: Deployment field, printed name, spellings
    build_ledger: Callable[[PlanInputs], Ledger]  # pool formula, default rules, ledger items
    rounded_measures: Callable[[Deployment], tuple[str, ...]]  # printed figures the pool reads
    # the model as the engine loads it under the deployment's flags (--quantization), and why
    load_model: Callable[[ModelSpec, Deployment], tuple[ModelSpec, str | None]]
    explain: ExplainRules  # a parsed startup log read into inputs, a deployment and a ledger
    host_tier: HostTier | None = None  # a host-RAM KV tier the engine sizes by flags (HiCache)
    # the ranks the attention projections are split over under DP attention and why
    attention_ranks: Callable[[ModelSpec, Deployment], tuple[int, str] | None] | None = None
    # the ranks the input embedding is split over and why, where not over TP (None: over TP)
    embedding_ranks: Callable[[ModelSpec, Deployment], tuple[int, str] | None] | None = None
    lm_head_ranks: Callable[[ModelSpec, Deployment], tuple[int, str] | None] | None = None
