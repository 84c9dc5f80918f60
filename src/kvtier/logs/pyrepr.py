"""Python reprs as the engines print them in request logs, read back into values.

vLLM prints a prompt with `%r` and its sampling parameters with their own `__repr__`
(`SamplingParams(n=1, ..., max_tokens=16, ...)`); SGLang prints its request objects field by
field (`GenerateReqInput(text='...', input_ids=[1, 2], ...)`) and dicts as `{'key': value}`,
and cuts a long string or list to its two ends joined by ` ... ` (`--log-requests-level 2`).

A string is read as a string whatever it holds, so a prompt that contains `max_tokens=5` or
`'prompt_tokens': 9` never passes for a field. Anything else (an enum, a tensor shape) is kept
as the text it printed. A value that does not close is a `ReprError`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

MAX_DEPTH = 64
MAX_NUMBER = 40  # characters of a printed number: a 64-bit integer or a float's repr, and more


class ReprError(ValueError):
    """The text at a position is not a value as the engines print them."""


@dataclass(frozen=True, slots=True)
class Call:
    """`Name(field=value, ...)`: a dataclass or an object's own repr; positional values are
    stored under their index ("0", "1", ...)."""

    name: str
    fields: dict[str, object]


@dataclass(frozen=True, slots=True)
class Truncation:
    """SGLang's truncation: the first and the last halves of a longer string or list."""

    head: object
    tail: object


_INTS = re.compile(r"\[(\d{1,19}(?:, \d{1,19})*)?\]")
_NAME = re.compile(r"[A-Za-z_][\w.]{0,200}")
_NUMBER = re.compile(r"-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|inf|nan)\Z")
_CUT = " ... "
_CLOSE = {"[": "]", "(": ")", "{": "}"}
_ENDS = ",)]}"


# a quoted literal as repr() writes it: unescaped characters in runs, each escape a pair
_STRING = {q: re.compile(rf"{q}[^{q}\\]*(?:\\.[^{q}\\]*)*{q}", re.DOTALL) for q in ("'", '"')}


def string_end(text: str, pos: int) -> int:
    """The index after the quoted string literal that starts at `pos`."""
    found = _STRING[text[pos]].match(text, pos)
    if found is None:
        raise ReprError(f"a string opened at column {pos + 1} does not close")
    return found.end()


def read_value(text: str, pos: int, depth: int = 0) -> tuple[object, int]:
    """The value printed at `text[pos:]` and the index after it."""
    value, end = _atom(text, pos, depth)
    if text.startswith(_CUT, end) and end + len(_CUT) < len(text):
        tail, end = _atom(text, end + len(_CUT), depth)
        return Truncation(value, tail), end
    return value, end


def _atom(text: str, pos: int, depth: int) -> tuple[object, int]:
    if depth > MAX_DEPTH:
        raise ReprError(f"values nested over {MAX_DEPTH} deep")
    if pos >= len(text):
        raise ReprError("a value is missing at the end of the line")
    c = text[pos]
    if c in "'\"":
        end = string_end(text, pos)
        try:
            return ast.literal_eval(text[pos:end]), end
        except (SyntaxError, ValueError) as exc:  # an escape repr() never writes
            reason = str(exc).splitlines()[0][:80]
            message = f"the string at column {pos + 1} is not one repr() writes ({reason})"
            raise ReprError(message) from None
    if c == "[":
        ints = _INTS.match(text, pos)
        if ints is not None:  # token ids: the common case, read without recursion
            body = ints.group(1)
            return ([int(v) for v in body.split(", ")] if body else []), ints.end()
        items, end = _items(text, pos + 1, "]", depth)
        return [v for _, v in items], end
    if c == "(":
        items, end = _items(text, pos + 1, ")", depth)
        return tuple(v for _, v in items), end
    if c == "{":
        items, end = _items(text, pos + 1, "}", depth)
        return {str(k): v for k, v in items}, end
    if c == "<":  # <object at 0x...>, <Enum.X: 1>
        end = text.find(">", pos)
        if end < 0:
            raise ReprError(f"'<' at column {pos + 1} does not close")
        return text[pos : end + 1], end + 1
    name = _NAME.match(text, pos)
    if name is not None and text.startswith("(", name.end()):
        items, end = _items(text, name.end() + 1, ")", depth)
        fields = {str(k) if k is not None else str(i): v for i, (k, v) in enumerate(items)}
        return Call(name.group(0), fields), end
    return _word(text, pos)


def _word(text: str, pos: int) -> tuple[object, int]:
    end = pos
    while end < len(text) and text[end] not in _ENDS and not text.startswith(_CUT, end):
        end += 1
    word = text[pos:end].strip()
    if not word:
        raise ReprError(f"no value at column {pos + 1}")
    if word in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[word], end
    if _NUMBER.match(word):
        if len(word) > MAX_NUMBER:
            raise ReprError(f"a number of {len(word):,} characters at column {pos + 1}")
        return (float(word) if any(ch in word for ch in ".eEn") else int(word)), end
    return word, end


def _items(text: str, pos: int, close: str, depth: int) -> tuple[list[tuple[object, object]], int]:
    """`key=value`, `key: value` or bare values up to `close`; a bare value has key None."""
    items: list[tuple[object, object]] = []
    i = pos
    while True:
        if text.startswith(close, i):
            return items, i + 1
        if items:
            if not text.startswith(", ", i):
                raise ReprError(f"expected ', ' or {close!r} at column {i + 1}")
            i += 2
            if text.startswith(close, i):  # a one-element tuple's trailing comma
                return items, i + 1
        key: object = None
        name = _NAME.match(text, i)
        if name is not None and text.startswith("=", name.end()):
            key, i = name.group(0), name.end() + 1
        value, i = read_value(text, i, depth + 1)
        if key is None and close == "}":
            if not text.startswith(": ", i):
                raise ReprError(f"expected ': ' after a key at column {i + 1}")
            key = value
            value, i = read_value(text, i + 2, depth + 1)
        items.append((key, value))
