"""The engine release whose rules explain applied, as a row of its inputs: the log line that
states it, the version flag, or the default release (`versions.DEFAULT`, in its sentence)."""

from __future__ import annotations

from kvtier.engines.explain import LogInputs
from kvtier.engines.inputs import PlanInputs
from kvtier.engines.rules import release_default
from kvtier.logs.facts import Fact, stated

NAME = "engine release"


def release_row(
    inp: LogInputs, plan: PlanInputs, logged: Fact[object] | None
) -> tuple[str, Fact[object]]:
    """The release as the log states it (`logged`, the engine's `engine_version` fact), else as
    --<engine>-version gives it, else the default release, said as `Default.sentence` says it."""
    if logged is not None:
        return NAME, logged
    default = release_default(inp.engine)
    given = plan.deployment.engine_version
    if given is not None:
        flag = f"--{default.engine.lower()}-version"
        return NAME, stated(str(default.resolve(given)), flag)
    how = f"default: the log states no version. {default.sentence}"
    return NAME, stated(str(default.release), how)
