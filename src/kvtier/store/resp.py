"""Batches of whole pages over one Redis connection, framed here rather than by redis-py.

redis-py joins a command's arguments and copies each reply into a new bytes object; for 2 MiB
pages that is most of a get's cost. Here a batch borrows one connection from redis-py's pool (so
redis-py still connects, authenticates, selects the database and follows the cluster's slot
map), sends each SET as its framing plus the page's own buffers (`sendmsg` gathers them, no
join), and reads each GET reply's head into a small buffer and its payload straight into the
caller's memory (`recv_into`). One round trip per batch: every command is sent before the first
reply is read.

Replies are parsed as RESP2 or RESP3 (`$` bulk, `$-1` or `_` nil, `+` simple, `:` integer,
`-` error). Anything else, a timeout or a short read leaves the connection in an unknown state:
it is closed, never returned to the pool for reuse.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

from kvtier.store.base import Buffer
from kvtier.store.pageio import IOV_MAX, advance, as_views

MAX_LINE = 1 << 16  # a reply line (not a bulk payload) longer than this is a broken stream
SCRATCH = 1 << 16


class ProtocolError(Exception):
    """The server's reply is not RESP: the connection cannot be used again."""


class ReplyError(Exception):
    """A `-ERR ...` reply to one command; the stream is still in step."""


def frame(*args: bytes | Sequence[Buffer]) -> list[Buffer]:
    """A command as buffers to send: each argument is bytes, or a value given as its runs
    (framed around them, never joined)."""
    out: list[Buffer] = []
    head = bytearray(b"*%d\r\n" % len(args))
    for arg in args:
        if isinstance(arg, bytes):
            head += b"$%d\r\n%s\r\n" % (len(arg), arg)
        else:
            head += b"$%d\r\n" % sum(memoryview(part).nbytes for part in arg)
            out.append(bytes(head))
            out.extend(arg)
            head = bytearray(b"\r\n")
    out.append(bytes(head))
    return out


def send_all(sock: socket.socket, buffers: Sequence[Buffer]) -> None:
    """Send every buffer in order with gathered writes (sendmsg), resuming after short sends."""
    views = as_views(buffers)
    first = advance(views, 0, 0)
    while first < len(views):
        sent = sock.sendmsg(views[first : first + IOV_MAX])
        first = advance(views, first, sent)


class Reader:
    """Replies read from a socket: lines through a small buffer, bulk payloads into the
    caller's memory."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray(SCRATCH)
        self.start = self.end = 0

    @property
    def pending(self) -> int:
        """Bytes read from the socket but not yet consumed."""
        return self.end - self.start

    def _fill(self) -> None:
        if self.start == self.end:
            self.start = self.end = 0
        elif self.end == len(self.buf):
            if self.start == 0:
                raise ProtocolError("a reply line longer than the read buffer")
            self.buf[: self.pending] = self.buf[self.start : self.end]
            self.end, self.start = self.pending, 0
        n = self.sock.recv_into(memoryview(self.buf)[self.end :])
        if n == 0:
            raise ConnectionError("the server closed the connection")
        self.end += n

    def line(self) -> bytes:
        while True:
            at = self.buf.find(b"\r\n", self.start, self.end)
            if at >= 0:
                out = bytes(self.buf[self.start : at])
                self.start = at + 2
                return out
            if self.pending >= MAX_LINE:
                raise ProtocolError("a reply line longer than the read buffer")
            self._fill()

    def into(self, buffers: Sequence[Buffer]) -> None:
        """Fill `buffers` in order with the next bytes of the stream."""
        for view in as_views(buffers):
            got = min(self.pending, view.nbytes)
            view[:got] = self.buf[self.start : self.start + got]
            self.start += got
            while got < view.nbytes:
                n = self.sock.recv_into(view[got:])
                if n == 0:
                    raise ConnectionError("the server closed the connection")
                got += n

    def skip(self, count: int) -> bytes:
        """The next `count` bytes (a value of an unexpected size, to classify and drop)."""
        out = bytearray(count)
        self.into([out])
        return bytes(out)

    def crlf(self) -> None:
        end = bytearray(2)
        self.into([end])
        if end != b"\r\n":
            raise ProtocolError("a bulk reply not ended by CRLF")

    def reply(self) -> Any:
        """A whole reply that is not a page: None, an int, bytes, or a `ReplyError`."""
        kind, rest = self.header()
        if kind == "bulk":
            data = self.skip(rest)
            self.crlf()
            return data
        return rest

    def header(self) -> tuple[str, Any]:
        """("bulk", length) for a bulk string, whose payload and CRLF follow; else ("done",
        value) with None, bytes, an int or a `ReplyError`."""
        line = self.line()
        if not line:
            raise ProtocolError("an empty reply line")
        kind, rest = line[:1], line[1:]
        if kind == b"$":
            length = int(rest)
            return ("done", None) if length < 0 else ("bulk", length)
        if kind == b"_":
            return "done", None
        if kind == b"+":
            return "done", rest
        if kind == b":":
            return "done", int(rest)
        if kind == b"-":
            return "done", ReplyError(rest.decode("utf-8", "replace"))
        raise ProtocolError(f"unexpected reply type {kind!r}")
