"""Every SGLang release a rule of kvtier names, in order; `main` sorts after them all, so a rule
"from vX" is `version >= VX` and holds on main too.

Without --sglang-version one release applies everywhere: `DEFAULT`, a
`kvtier.engines.version.Default`.
"""

from __future__ import annotations

from kvtier.engines.version import Default, Version

V0_3_0 = Version.release_of(0, 3, 0)
V0_4_0 = Version.release_of(0, 4, 0)
V0_4_6 = Version.release_of(0, 4, 6)
V0_4_7 = Version.release_of(0, 4, 7)
V0_4_8 = Version.release_of(0, 4, 8)
V0_4_9 = Version.release_of(0, 4, 9)
V0_4_10 = Version.release_of(0, 4, 10)
V0_5_0 = Version.release_of(0, 5, 0)
V0_5_1 = Version.release_of(0, 5, 1)
V0_5_2 = Version.release_of(0, 5, 2)
V0_5_3 = Version.release_of(0, 5, 3)
V0_5_4 = Version.release_of(0, 5, 4)
V0_5_5 = Version.release_of(0, 5, 5)
V0_5_7 = Version.release_of(0, 5, 7)
V0_5_8 = Version.release_of(0, 5, 8)
V0_5_9 = Version.release_of(0, 5, 9)
V0_5_10 = Version.release_of(0, 5, 10)
V0_5_11 = Version.release_of(0, 5, 11)
V0_5_12 = Version.release_of(0, 5, 12)
V0_5_13 = Version.release_of(0, 5, 13)
V0_5_14 = Version.release_of(0, 5, 14)
V0_5_15 = Version.release_of(0, 5, 15)
V0_5_16 = Version.release_of(0, 5, 16)
V0_5_17 = Version.release_of(0, 5, 17)
V0_5_18 = Version.release_of(0, 5, 18)
V0_5_19 = Version.release_of(0, 5, 19)
V0_5_20 = Version.release_of(0, 5, 20)
V0_5_22 = Version.release_of(0, 5, 22)
V0_5_23 = Version.release_of(0, 5, 23)
MAIN = Version.parse("main", "SGLang")

# Releases spanning every default-fraction rule (defaults.py): the TP table, the reserve table,
# the heuristics and main's memory hook, with each boundary's sides; explain checks a log that
# states neither fraction nor version against each.
FRACTION_RULE_CANDIDATES = (V0_3_0, V0_4_0, V0_4_6, V0_4_9, V0_5_0, V0_5_3, V0_5_4, V0_5_10, MAIN)

# The newest release whose source kvtier's rules were read in (sim/servers/sglang*.py, v0.5.23): a
# later one is refused (`DEFAULT.resolve`), never read as this one's rules.
NEWEST = V0_5_23

# The first release a rule names (Era A's TP table, and every model file's split from v0.3.0 in
# embedding.py, lm_head.py and attention.py): an earlier one is refused, not read as this one.
OLDEST = V0_3_0

DEFAULT = Default(
    "SGLang",
    V0_5_9,
    NEWEST,
    OLDEST,
    rules="Era B pool, the v0.5.3-v0.5.9 default-fraction heuristics",
    era_label="SGLang v0.5.3-v0.5.9 heuristics (Era B; default, pass --sglang-version)",
)
