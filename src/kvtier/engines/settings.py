"""Settings of a logged start: what the log states wins over a flag, a flag over a default.

A flag that contradicts the log is reported as a warning, not applied: the log is what the engine
actually ran with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from kvtier.engines.flags import FlagTable
from kvtier.errors import KvtierError
from kvtier.logs.facts import Fact, stated
from kvtier.logs.records import Args

T = TypeVar("T")


class GivenFlags(dict[str, object]):
    """The user's settings by name, each with the flag that gave it (`written`), so a message
    names the flag as typed: `--mem-fraction-static 0.5`, not the setting's name."""

    def __init__(self) -> None:
        super().__init__()
        self.written: dict[str, str] = {}

    def set(self, name: str, value: object, flag: str) -> None:
        self[name] = value
        self.written[name] = flag


@dataclass
class Settings:
    """Reads named settings from the log's argument dumps, then the user's flags, then defaults."""

    printed: list[Args]  # argument dumps / launch commands in the log, most authoritative first
    flags: Mapping[str, object]  # kvtier flags the user passed (None: not given)
    table: FlagTable  # the engine's flags: the names it prints each setting under
    warnings: list[str] = field(default_factory=list)

    def get(
        self,
        name: str,
        convert: Callable[[object], T],
        default: T | None = None,
        default_how: str = "default",
    ) -> Fact[T] | None:
        """Deployment setting `name` (flag `--name`): as the log printed it, under the name the
        engine prints it (its flag table), else the user's flag, else `default`."""
        keys = self.table.printed(name) or (name,)
        from_log = self._from_log(name, keys, convert)
        flag = self.flags.get(name)
        label = self.flag_name(name)
        flag_value = None if flag is None else _convert(name, flag, convert, label)
        if from_log is not None:
            if flag_value is not None and flag_value != from_log.value:
                self.warnings.append(
                    f"{label} {flag} contradicts the log ({from_log.where}: "
                    f"{from_log.value}); the log's value is used"
                )
            return from_log
        if flag_value is not None:
            return stated(flag_value, label)
        if default is not None:
            return stated(default, default_how)
        return None

    def flag_name(self, name: str) -> str:
        """The flag that gave setting `name`: as the user typed it, else the engine's spelling."""
        if isinstance(self.flags, GivenFlags) and name in self.flags.written:
            return self.flags.written[name]
        return self.table.spelling(name) or "--" + name.replace("_", "-")

    def _from_log(
        self, name: str, keys: tuple[str, ...], convert: Callable[[object], T]
    ) -> Fact[T] | None:
        for args in self.printed:
            for key in keys:
                raw = args.values.get(key)
                if raw is None or raw == "...":
                    continue
                try:
                    return args.fact(convert(raw))
                except (TypeError, ValueError):
                    self.warnings.append(f"line {args.line}: {key}={raw!r} is not a valid {name}")
        return None


def _convert(name: str, raw: object, convert: Callable[[object], T], label: str) -> T:
    try:
        return convert(raw)
    except (TypeError, ValueError):
        raise KvtierError(f"{label}: {raw!r} is not a valid {name}") from None


def to_assignments(raw: object) -> tuple[tuple[str, str], ...]:
    """`VAR=value` pairs a launch command runs under, as `read_launch` keeps them."""
    if not isinstance(raw, tuple) or not all(
        isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(w, str) for w in pair)
        for pair in raw
    ):
        raise TypeError(raw)
    return raw


def to_int(raw: object) -> int:
    """A count of at least 1 (ranks, page size, tokens)."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise TypeError(raw)
    if isinstance(raw, int):  # exact, and no float overflow on a mangled huge number
        if raw < 1:
            raise ValueError(raw)
        return raw
    value = float(raw)
    if not value.is_integer() or value < 1:
        raise ValueError(raw)
    return int(value)


def to_fraction(raw: object) -> float:
    """A memory fraction in (0, 1]."""
    return _positive(raw, 1.0)


def to_ratio(raw: object) -> float:
    """A ratio of two memories, > 0 (SGLang's mamba_full_memory_ratio)."""
    return _positive(raw, 1e4)


def _positive(raw: object, high: float) -> float:
    """A number in (0, high]."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise TypeError(raw)
    value = float(raw)
    if not 0.0 < value <= high:
        raise ValueError(raw)
    return value


def to_str(raw: object) -> str:
    if not isinstance(raw, str) or not raw:
        raise TypeError(raw)
    return raw


def to_bool(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if raw in ("True", "true", "1"):
        return True
    if raw in ("False", "false", "0"):
        return False
    raise ValueError(raw)
