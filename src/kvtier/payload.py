"""Typed payloads: a command's result is a frozen dataclass; `--json` is one serialisation of it
(`to_json`) and a saved `--json` file one deserialisation (`from_json`).

A key is the field's name and keys come in the order the fields are declared, so adding a field
to the output is one line in the dataclass, placed where its key goes. Nested dataclasses are
objects, tuples and lists arrays, dicts objects. Two field options:

    run: SimResult = field(metadata=INLINE)      the nested object's keys are written in its place
    notes: tuple[str, ...] | None = field(default=None, metadata=OMITTED)
                                                 the key is left out when the value is None

`from_json` checks every value against its annotation (whole numbers, finite numbers, the
bounds an `Annotated[..., Bounds(...)]` states) and refuses the first bad one as one line naming
its path (`sweep.runs[2].hit_rate`). Keys the class does not declare are not read.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from kvtier.errors import KvtierError

T = TypeVar("T")
MAX_VALUE = 1e15  # tokens, GiB, rates: anything larger is not a figure a command prints
_INLINE, _OMITTED = "payload_inline", "payload_omitted"
# Field metadata: `field(metadata=INLINE)` writes a nested dataclass's keys in the place of the
# field's own key (an optional one, default None, is read when any of its keys is there);
# `field(default=None, metadata=OMITTED)` leaves the key out when the value is None.
INLINE = types.MappingProxyType({_INLINE: True})
OMITTED = types.MappingProxyType({_OMITTED: True})


@dataclass(frozen=True, slots=True)
class Bounds:
    """`Annotated[float, Bounds(0, 1)]`: the closed range a value must lie in (None: open)."""

    low: float | None = None
    high: float | None = None

    def check(self, value: float) -> bool:
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def words(self) -> str:
        if self.high is None:
            return f">= {self.low:g}"
        return f"in [{self.low:g}, {self.high:g}]"


class NonEmpty:
    """`Annotated[str, NON_EMPTY]`: a name, not blank."""


NON_EMPTY = NonEmpty()
Share = Annotated[float, Bounds(0, 1)]
Count = Annotated[int, Bounds(0)]
Positive = Annotated[int, Bounds(1)]
Amount = Annotated[float, Bounds(0)]
Name = Annotated[str, NON_EMPTY]


def to_json(value: Any) -> Any:
    """`value` as JSON-ready data: dicts, lists, strings, numbers, booleans and None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.metadata.get(_INLINE):
                out.update(to_json(item) if item is not None else {})
            elif item is not None or not f.metadata.get(_OMITTED):
                out[f.name] = to_json(item)
        return out
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    return value


def copied(cls: type[T], source: object, **given: Any) -> T:
    """A `cls` (a dataclass) whose fields are `given`, the others `source`'s attributes of the
    same names: a payload that repeats a result's figures states only those it changes."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    return cls(**{f.name: getattr(source, f.name) for f in fields if f.name not in given}, **given)


def from_json(cls: type[T], data: Any, where: str = "") -> T:
    """The `cls` that `data` (parsed JSON) holds; a KvtierError naming the first bad field."""
    return typing.cast(T, _read(cls, data, where))


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _wrong(where: str, wanted: str, value: Any) -> KvtierError:
    return KvtierError(f"`{where or 'the payload'}` must be {wanted}, got {_shown(value)}")


def _read(tp: Any, value: Any, where: str) -> Any:
    origin = get_origin(tp)
    if origin is Annotated:
        base, *marks = get_args(tp)
        return _checked(_read(base, value, where), marks, where)
    if origin in (Union, types.UnionType):
        return _read_union(get_args(tp), value, where)
    if dataclasses.is_dataclass(tp):
        return _read_object(tp, value, where)
    if origin in (tuple, list):
        return _read_array(tp, value, where)
    if origin in (dict, Mapping):
        if not isinstance(value, dict):
            raise _wrong(where, "an object", value)
        _, item = get_args(tp)
        return {k: _read(item, v, f"{where}.{k}") for k, v in value.items()}
    return _read_leaf(tp, value, where)


def _read_leaf(tp: Any, value: Any, where: str) -> Any:
    if tp is Any or tp is object:
        if isinstance(value, float) and not _finite(value):
            raise _wrong(where, "a finite number", value)
        return value
    if tp is type(None):
        if value is not None:
            raise _wrong(where, "null", value)
        return None
    if tp is bool:
        if not isinstance(value, bool):
            raise _wrong(where, "true or false", value)
        return value
    if tp is str:
        if not isinstance(value, str):
            raise _wrong(where, "a string", value)
        return value
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        if not (is_number and _finite(value) and float(value).is_integer()):
            raise _wrong(where, "a whole number", value)
        return int(value)
    if tp is float:
        if not (is_number and _finite(value)):
            raise _wrong(where, "a finite number", value)
        return float(value)
    raise TypeError(f"no JSON reading for {tp!r} at {where}")


def _finite(value: float) -> bool:
    return abs(value) <= MAX_VALUE and math.isfinite(value)  # a huge int never reaches float()


def _checked(value: Any, marks: list[Any], where: str) -> Any:
    for mark in marks:
        if isinstance(mark, Bounds) and value is not None and not mark.check(value):
            raise _wrong(where, f"a number {mark.words()}", value)
        if mark is NON_EMPTY and not value.strip():
            raise _wrong(where, "a name", value)
    return value


def _read_union(arms: tuple[Any, ...], value: Any, where: str) -> Any:
    if value is None and type(None) in arms:
        return None
    real = [a for a in arms if a is not type(None)]
    if len(real) == 1:
        return _read(real[0], value, where)
    for arm in real:
        try:
            return _read(arm, value, where)
        except KvtierError:
            continue
    raise _wrong(where, " or ".join(_arm_words(a) for a in real), value)


def _arm_words(tp: Any) -> str:
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    names = {str: "a string", int: "a whole number", float: "a number", bool: "true or false"}
    return names.get(tp, "null" if tp is type(None) else "an object or a list")


def _read_array(tp: Any, value: Any, where: str) -> Any:
    if not isinstance(value, list):
        raise _wrong(where, "a list", value)
    args = get_args(tp)
    if get_origin(tp) is list or (len(args) == 2 and args[1] is Ellipsis):
        items = [_read(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if get_origin(tp) is list else tuple(items)
    if len(value) != len(args):
        raise _wrong(where, f"a list of {len(args)}", value)
    return tuple(
        _read(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True))
    )


def _read_object(cls: Any, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise _wrong(where, "an object", value)
    hints = _hints(cls)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if f.metadata.get(_INLINE):
            fields[f.name] = _read_inline(tp, value, where)
            continue
        at = f"{where}.{f.name}" if where else f.name
        if value.get(f.name) is None and not _nullable(tp):
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise KvtierError(f"no `{at}`")
            continue
        fields[f.name] = _read(tp, value.get(f.name), at)
    return cls(**fields)


def _nullable(tp: Any) -> bool:
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp is Any or tp is object or type(None) in get_args(tp)


def _read_inline(tp: Any, value: dict[str, Any], where: str) -> Any:
    """An inlined object: its keys sit beside the outer ones; optional when none of them do."""
    arms = get_args(tp) if get_origin(tp) in (Union, types.UnionType) else (tp,)
    cls = next(a for a in arms if dataclasses.is_dataclass(a))
    names = {f.name for f in dataclasses.fields(cls)}
    if type(None) in arms and not names & value.keys():
        return None
    return _read_object(cls, value, where)
