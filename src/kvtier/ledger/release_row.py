"""The engine release whose rules explain applied, as a row of its inputs: the log line that
states it, the version flag, or the default release (`versions.DEFAULT`, in its sentence)."""

from __future__ import annotations

from kvtier.engines.deployment import Measured
from kvtier.engines.explain import LogInputs
from kvtier.engines.inputs import PlanInputs
from kvtier.engines.rules import release_default, rules_for
from kvtier.logs.facts import Fact, stated

NAME = "engine release"


def release_row(inp: LogInputs, plan: PlanInputs) -> tuple[str, Fact[object]]:
    """The release as the log states it (its line), else as --<engine>-version gives it, else
    the default release, said as `Default.sentence` says it."""
    logged = dict(rules_for(inp.engine).explain.measured(inp, Measured())[1])
    fact = logged.get("engine_version")
    if fact is not None:
        return NAME, fact
    default = release_default(inp.engine)
    given = plan.deployment.engine_version
    if given is not None:
        flag = f"--{default.engine.lower()}-version"
        return NAME, stated(str(default.resolve(given)), flag)
    how = f"default: the log states no version. {default.sentence}"
    return NAME, stated(str(default.release), how)
