"""Every vLLM release a rule of kvtier names, in order; `main` sorts after them all, so a rule
"from vX" is `version >= VX` and holds on main too.

Without --vllm-version one release applies everywhere: `DEFAULT`, a
`kvtier.engines.version.Default`.
"""

from __future__ import annotations

from kvtier.engines.version import Default, Version

V0_6_5 = Version.release_of(0, 6, 5)
V0_8 = Version.release_of(0, 8)
V0_11 = Version.release_of(0, 11)
V0_12 = Version.release_of(0, 12)
V0_13 = Version.release_of(0, 13)
V0_14 = Version.release_of(0, 14)
V0_16 = Version.release_of(0, 16)
V0_19 = Version.release_of(0, 19)
V0_20 = Version.release_of(0, 20)
V0_21 = Version.release_of(0, 21)
V0_22 = Version.release_of(0, 22)
V0_23 = Version.release_of(0, 23)
V0_26 = Version.release_of(0, 26)
V0_27 = Version.release_of(0, 27)
V0_28 = Version.release_of(0, 28)
V0_29 = Version.release_of(0, 29)
V0_30 = Version.release_of(0, 30)
V0_32 = Version.release_of(0, 32)
V0_33 = Version.release_of(0, 33)

# The newest release whose wheel kvtier's rules were read in (stages.py's get_pp_indices, v0.33.0;
# sim/servers/vllm.py and sliding.py read v0.32.0): a later one is refused (`DEFAULT.resolve`),
# never read as this one's rules.
NEWEST = V0_33

DEFAULT = Default(
    "vLLM",
    V0_21,
    NEWEST,
    None,  # no floor: a release before v0.6.5, the first boundary, takes the V0 worker's rules
    rules="the V1 worker, the CUDA-graph estimate inside the budget",
    era_label="vLLM V1 >= v0.21 (default, pass --vllm-version)",
)
