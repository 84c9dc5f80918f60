"""Read the Python reprs engines print their arguments as, tolerating abridged and cut text.

`ServerArgs(model_path='m', tp_size=8, ...)` and `Namespace(...)` are keyword lists;
`non-default args: {'model': 'm', 'max_model_len': 8192}` is a dict. Users paste them shortened
(`..., ... tp_size=4 ...`) or cut mid-value, so pairs are scanned one by one: a value that does
not close is dropped, a value that is not a plain literal is kept as its text. A value printed as
a dataclass's repr (`'kv_transfer_config': KVTransferConfig(kv_connector='X', ...)`, vLLM's
config objects) is read as the dict of its keyword pairs, and its inner keys never leak out as
the outer ones.
"""

from __future__ import annotations

import ast
import re
import warnings

_KWARG_KEY = re.compile(r"(?<![.'\"])\b([A-Za-z_]\w{0,80})=(?!=)")
_DICT_KEY = re.compile(r"(['\"])([A-Za-z_]\w{0,80})\1\s{0,4}:\s{0,4}")
_BARE = re.compile(r"[^,\s)\]}]{0,200}")
_CALL = re.compile(r"[A-Za-z_][\w.]{0,80}\(")  # a repr such as KVTransferConfig(
_CALL_VALUE = re.compile(r"[A-Za-z_][\w.]{0,80}\((.*)\)", re.DOTALL)
_NUMBER = re.compile(r"-?\d{1,18}(?:\.\d{1,18})?(?:[eE][-+]?\d{1,3})?")
_CLOSERS = {"(": ")", "[": "]", "{": "}"}
_BRACKET_OR_QUOTE = re.compile(r"[()\[\]{}'\"]")
_LITERAL_LIMIT = 4000  # longer bracketed values are kept as text


def parse_kwargs(text: str) -> dict[str, object]:
    """`key=value` pairs of a keyword repr such as `ServerArgs(...)` or `Namespace(...)`."""
    return _scan(text, _KWARG_KEY, key_group=1)


def parse_dict(text: str) -> dict[str, object]:
    """`'key': value` pairs of a dict repr."""
    return _scan(text, _DICT_KEY, key_group=2)


def _scan(text: str, key: re.Pattern[str], key_group: int) -> dict[str, object]:
    found: dict[str, object] = {}
    pos = 0
    while True:
        match = key.search(text, pos)
        if match is None:
            return found
        value_end = _value_end(text, match.end())
        if value_end is None:  # cut mid-value: nothing after it can be trusted
            return found
        found[match.group(key_group)] = _literal(text[match.end() : value_end])
        pos = max(value_end, match.end())


def _value_end(text: str, start: int) -> int | None:
    """End of the value starting at `start`, or None when the text is cut before it closes."""
    if start >= len(text):
        return None
    head = text[start]
    if head in "'\"":
        return _string_end(text, start)
    if head in _CLOSERS:
        return _bracket_end(text, start)
    if call := _CALL.match(text, start):
        return _bracket_end(text, call.end() - 1)
    match = _BARE.match(text, start)
    return match.end() if match else start


def _string_end(text: str, start: int) -> int | None:
    quote = text[start]
    i = start + 1
    while (end := text.find(quote, i)) >= 0:
        slashes = end - 1
        while slashes > start and text[slashes] == "\\":
            slashes -= 1
        if (end - 1 - slashes) % 2 == 0:  # not escaped
            return end + 1
        i = end + 1
    return None


def _bracket_end(text: str, start: int) -> int | None:
    stack = [_CLOSERS[text[start]]]
    i = start + 1
    while match := _BRACKET_OR_QUOTE.search(text, i):
        char = match.group()
        if char in "'\"":
            end = _string_end(text, match.start())
            if end is None:
                return None
            i = end
            continue
        if char in _CLOSERS:
            stack.append(_CLOSERS[char])
        elif char == stack[-1]:
            stack.pop()
            if not stack:
                return match.end()
        i = match.end()
    return None


def _literal(raw: str) -> object:
    """A plain Python literal (str, number, bool, None, list, dict) or the raw text."""
    if raw in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[raw]
    if _NUMBER.fullmatch(raw):
        return float(raw) if any(c in raw for c in ".eE") else int(raw)
    if len(raw) > 1 and raw[0] in "'\"" and raw[-1] == raw[0] and "\\" not in raw:
        return raw[1:-1]  # a plain quoted string: no need to compile it
    if len(raw) <= _LITERAL_LIMIT and (call := _CALL_VALUE.fullmatch(raw)):
        try:
            pairs = parse_kwargs(call.group(1))
        except RecursionError:  # reprs nested past the interpreter's depth are data too
            return raw
        return pairs or raw  # PosixPath('/m'): positional, kept as its text
    if raw and raw[0] in "'\"[{(" and len(raw) <= _LITERAL_LIMIT:
        try:
            with warnings.catch_warnings():  # odd escapes in pasted strings warn; they are data
                warnings.simplefilter("ignore")
                return ast.literal_eval(raw)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return raw
    return raw
