"""Every vLLM release a rule of kvtier names, in order; `main` sorts after them all, so a rule
"from vX" is `version >= VX` and holds on main too.

Without --vllm-version one release applies everywhere: `DEFAULT`, resolved here and only here
(`resolve`), and stated in one sentence (`DEFAULT_SENTENCE`) that --help and docs/cli.md quote.
"""

from __future__ import annotations

from kvtier.engines.version import Version

V0_6_5 = Version.release_of(0, 6, 5)
V0_8 = Version.release_of(0, 8)
V0_11 = Version.release_of(0, 11)
V0_12 = Version.release_of(0, 12)
V0_14 = Version.release_of(0, 14)
V0_19 = Version.release_of(0, 19)
V0_20 = Version.release_of(0, 20)
V0_21 = Version.release_of(0, 21)
V0_23 = Version.release_of(0, 23)
V0_26 = Version.release_of(0, 26)
V0_27 = Version.release_of(0, 27)

DEFAULT = V0_21
DEFAULT_SENTENCE = (
    "Without --vllm-version, kvtier applies the rules of vLLM v0.21.0 (the V1 worker, the "
    "CUDA-graph estimate inside the budget)."
)
DEFAULT_ERA_LABEL = "vLLM V1 >= v0.21 (default, pass --vllm-version)"


def resolve(version: str | Version | None) -> Version:
    """The release whose rules apply: `version`, or `DEFAULT` when none is given."""
    return Version.given_or(version, DEFAULT, "vLLM")
