"""The one rule for files the commands read and write (docs/cli.md, "Files").

Input: a regular file (or `-`, standard input, where the command takes it) no larger than the
command's bound. A FIFO, device, socket or directory is refused without being read: the file is
opened with O_NONBLOCK and checked with fstat, so a FIFO with no writer cannot block.
Output: never a path the same command reads, never a directory; a failed write is one line.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterable
from typing import Any, BinaryIO

from kvtier.errors import KvtierError

MAX_LOG_BYTES = 1 << 30  # a startup log, a saved --json payload
MAX_TRACE_BYTES = 16 << 30  # a workload trace, read line by line
MAX_CONFIG_BYTES = 64 << 20  # a model's config.json
MAX_JSON_DEPTH = 64  # nesting of a config.json or a saved payload


def open_input(path: str, what: str, limit: int) -> BinaryIO:
    """`path` opened for reading: a regular file of at most `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise KvtierError(f"cannot read {path} ({what}): {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise KvtierError(f"cannot read {path} ({what}): {kind} (give a regular file)")
        if info.st_size > limit:
            raise KvtierError(
                f"cannot read {path} ({what}): {info.st_size:,} bytes, over the {limit:,} bound"
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


# the first bytes of the compressed formats logs are shipped in, and how to read each
_COMPRESSED = (
    (b"\x1f\x8b", "gzip", "zcat"),
    (b"\x28\xb5\x2f\xfd", "zstd", "zstdcat"),
    (b"\xfd7zXZ\x00", "xz", "xzcat"),
    (b"BZh", "bzip2", "bzcat"),
)


def refuse_compressed(head: bytes, path: str) -> None:
    """Refuse, naming its format, a file that starts as a compressed file does."""
    for magic, name, tool in _COMPRESSED:
        if head.startswith(magic) and (name != "bzip2" or head[3:4].isdigit()):
            raise KvtierError(
                f"{path} is {name}-compressed: decompress it first ({tool} {path} | kvtier ... -)"
            )


def read_input(path: str, what: str, limit: int = MAX_LOG_BYTES) -> bytes:
    """The bytes of `path` (`-`: standard input), at most `limit` of them."""
    if path == "-":
        data = sys.stdin.buffer.read(limit + 1)
    else:
        with open_input(path, what, limit) as stream:
            try:
                data = stream.read(limit + 1)
            except OSError as exc:
                raise KvtierError(f"cannot read {path} ({what}): {exc.strerror or exc}") from None
    if len(data) > limit:
        raise KvtierError(f"cannot read {path} ({what}): over the {limit:,}-byte bound")
    refuse_compressed(data[:8], path)
    return data


def read_text(path: str, what: str, limit: int = MAX_LOG_BYTES) -> str:
    return read_input(path, what, limit).decode("utf-8", errors="replace")


def load_json(data: bytes | str, where: str) -> Any:
    """Strict JSON (no NaN or Infinity), nested at most MAX_JSON_DEPTH deep."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = json.loads(text, parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise KvtierError(f"{where} is not JSON: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise KvtierError(f"{where} is not JSON: {exc.msg} at line {exc.lineno}") from None
    except (ValueError, RecursionError) as exc:
        raise KvtierError(f"{where} is not JSON: {str(exc).splitlines()[0][:80]}") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise KvtierError(f"{where} is not JSON kvtier reads: nested over {MAX_JSON_DEPTH} deep")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _depth(value: Any) -> int:
    """Nesting depth, walked without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth > MAX_JSON_DEPTH:
                break
            children: Iterable[Any] = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def check_model_path(model: str) -> None:
    """A `--model` that names a path on this machine: its config.json under the input rule."""
    if model == "-" or not os.path.lexists(os.path.expanduser(model)):
        return  # a catalog id or Hub id: resolved elsewhere
    path = os.path.expanduser(model)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
        if not os.path.lexists(path):
            raise KvtierError(f"no config.json in {model}")
    with open_input(path, "model config", MAX_CONFIG_BYTES) as stream:
        data = stream.read(MAX_CONFIG_BYTES + 1)
    load_json(data, f"model config {path}")


def check_output(path: str, inputs: Iterable[str | None], flag: str = "-o") -> None:
    """Refuse an output path that is a directory or one of the command's `inputs`."""
    if os.path.isdir(path):
        raise KvtierError(f"{flag} {path}: a directory; give a file name")
    for given in inputs:
        if given and given != "-" and _same(path, given):
            raise KvtierError(
                f"{flag} {path}: the same file as the input {given}; it would be lost"
            )


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def write_output(path: str, data: bytes) -> None:
    """Write `data` to `path`; a failure (no such folder, a full disk) is one line."""
    try:
        with open(path, "wb") as stream:
            stream.write(data)
    except OSError as exc:
        raise KvtierError(f"cannot write {path}: {exc.strerror or exc}") from None
