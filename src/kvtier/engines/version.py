"""Engine versions as ordered values: `0.4.9 < 0.5.10 < main`.

A release is its (major, minor, patch) numbers; suffixes (`.post4`, `rc1`, `+cu128`, `.dev101`)
do not move it between rule eras, so they are kept in the text only. `main` (the development
branch) orders after every release.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kvtier.errors import KvtierError

# major.minor[.patch[.n]]: a fourth number is a release of its own (vLLM 0.10.1.1, PEP 440's
# release segment) that sorts inside its patch's era, so it is kept in the text only; a number
# running past the pattern (0.5.99999, 1.2.3.4.5) is refused, not read as 0.5.0
_RELEASE = re.compile(r"v?(\d{1,4})\.(\d{1,4})(?:\.(\d{1,4})(?:\.\d{1,4})?)?(?!\.?\d)")
_DEV = re.compile(r"\.?dev\d*", re.IGNORECASE)  # PEP 440's development build: 0.10.1.dev101


@dataclass(frozen=True, order=True, slots=True)
class Version:
    is_main: bool
    release: tuple[int, int, int]
    text: str = field(compare=False)

    @classmethod
    def parse(cls, text: str, engine: str) -> Version:
        """`0.5.9`, `v0.4.3.post4`, `0.10.1.dev101+g123`, or `main`; one error line otherwise."""
        plain = text.strip()
        if plain == "main":
            return cls(True, (0, 0, 0), plain)
        match = _RELEASE.match(plain)
        if match is None:
            raise KvtierError(f"{engine} version {text!r} is not of the form 0.5.9 (or 'main')")
        major, minor, patch = (int(g or 0) for g in match.groups())
        return cls(False, (major, minor, patch), plain)

    @classmethod
    def release_of(cls, major: int, minor: int, patch: int = 0) -> Version:
        return cls(False, (major, minor, patch), f"{major}.{minor}.{patch}")

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Default:
    """The release whose rules apply where no version is given (each engine's
    `versions.DEFAULT`): resolved by `resolve` only, stated in one sentence that --help and
    docs/cli.md quote, and named in the era label `plan` prints."""

    engine: str  # as printed: "SGLang", "vLLM"
    release: Version
    newest: Version  # the newest release kvtier's rules were read in; a later one is refused
    oldest: Version | None  # the first release a rule of kvtier names; an earlier one is refused
    rules: str  # what the release's rules are, said in the sentence's parentheses
    era_label: str

    @property
    def sentence(self) -> str:
        return (
            f"Without --{self.engine.lower()}-version, kvtier applies the rules of "
            f"{self.engine} v{self.release} ({self.rules})."
        )

    @property
    def known(self) -> str:
        """The releases taken, as --help states them (a release outside is refused)."""
        low = f"v{self.oldest} to" if self.oldest is not None else "up to"
        return f"{low} v{self.newest}, or main"

    def resolve(self, version: str | Version | None, flag: str | None = None) -> Version:
        """`version` (parsed when text), or the default release when none is given; a release
        after `newest` is refused in one line naming it, which `flag` (the engine's version flag
        unless given) can give. `main` and development builds (`.devN`) are read as they sort."""
        if version is None:
            return self.release
        v = version if isinstance(version, Version) else Version.parse(version, self.engine)
        if self.oldest is not None and v < self.oldest:
            raise KvtierError(
                f"{self.engine} {v.text!r:.60} is older than {self.oldest}, the first release "
                "kvtier's rules name: kvtier has not read its source"
            )
        known = v.release <= self.newest.release or _DEV.search(v.text) is not None
        if known or v.is_main:  # `main` sorts after every release: read as before
            return v
        raise KvtierError(
            f"{self.engine} {v.text!r:.60} is newer than {self.newest}, the newest release kvtier "
            f"knows: give {flag or f'--{self.engine.lower()}-version'} {self.newest} to apply "
            "its rules"
        )
