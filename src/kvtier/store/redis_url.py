"""Redis store URLs: what `open_store` accepts, checked strictly when the store is opened.

`redis://host:port/db`, `rediss://...`, `unix:///path?db=N`; `cluster+` before the scheme
(`cluster+redis://host:port`) addresses a Redis Cluster through any of its nodes. A missing
host, a port outside 1..65535, a database that is not a number (or not 0 for a cluster), an
unknown query option or one out of its range is a `KvtierError` naming the URL (its password
shown as `***`), so a typo fails at start-up rather than as misses.
"""

from __future__ import annotations

import importlib.util
from urllib.parse import parse_qs, urlsplit, urlunsplit

from kvtier.errors import KvtierError
from kvtier.store.options import check_timeout

CLUSTER_SCHEME_PREFIX = "cluster+"
MAX_CONNECTIONS = 65536  # a connection pool larger than this is a typo
MAX_DATABASES = (1 << 31) - 1  # redis.conf `databases` is at most INT_MAX (config.c)
SCHEMES = ("redis", "rediss", "unix")
# query options a URL may carry (redis-py's own parsers check their values); retries stay off
QUERY_OPTIONS = frozenset(
    {
        "db",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "health_check_interval",
        "max_connections",
        "protocol",
        "ssl_check_hostname",
        "ssl_min_version",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_certfile",
        "ssl_keyfile",
    }
)


def redact(url: str) -> str:
    """`url` with its password, if any, replaced by `***` (for messages)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.rpartition("@")[2]
        user = parts.username or ""
        return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))
    except ValueError:
        return url


def check_url(url: str) -> None:
    """Raise `KvtierError` (one line naming the URL) unless `url` is a Redis URL this store can
    use: scheme, host, port, database and query options are all checked here, at open."""
    shown = redact(url)

    def bad(why: str) -> KvtierError:
        return KvtierError(f"bad Redis store URL {shown!r}: {why}")

    cluster = url.startswith(CLUSTER_SCHEME_PREFIX)
    plain = url.removeprefix(CLUSTER_SCHEME_PREFIX)
    try:
        parts = urlsplit(plain)
        port = parts.port
    except ValueError as exc:
        raise bad(f"{exc} (a port is 1..65535)") from None
    if parts.scheme not in SCHEMES:
        raise bad(f"unknown scheme {parts.scheme!r}: use redis://, rediss:// or unix://")
    if parts.fragment:
        raise bad("a store URL has no #fragment")
    try:
        query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise bad(f"cannot parse the query {parts.query!r}") from None
    for name, values in query.items():
        if name not in QUERY_OPTIONS:
            raise bad(f"unknown option {name!r}; known: {', '.join(sorted(QUERY_OPTIONS))}")
        if len(values) != 1:
            raise bad(f"option {name!r} is given {len(values)} times")
        why = _query_value_problem(name, values[0])
        if why is not None:
            raise bad(why)
    db_text = query.get("db", [None])[0]
    if parts.scheme == "unix":
        if cluster:
            raise bad("a cluster is addressed over TCP: cluster+redis://host:port")
        if parts.hostname:
            raise bad(f"a unix:// URL names a socket path, not host {parts.hostname!r}")
        if not parts.path.startswith("/") or parts.path == "/":
            raise bad("a unix:// URL needs the socket's absolute path: unix:///run/redis.sock")
    else:
        if not parts.hostname:
            raise bad("no host: use redis://host:port/db")
        if port == 0:
            raise bad("port 0 (a port is 1..65535)")
        path = parts.path.strip("/") if parts.path != "/" else ""
        if path and db_text is not None:
            raise bad("the database is given twice, in the path and as ?db=")
        if path:
            db_text = path
        if "/" in parts.path.strip("/"):
            raise bad(f"path {parts.path!r} is not a database number")
    if db_text is not None and not (db_text.isascii() and db_text.isdigit()):
        raise bad(f"database {db_text!r} is not a number")
    if db_text is not None and int(db_text) >= MAX_DATABASES:
        raise bad(f"database {db_text:.40} is beyond any server's (at most 2^31 - 1 databases)")
    if cluster and db_text is not None and int(db_text) != 0:
        raise bad("a Redis Cluster has only database 0")
    if importlib.util.find_spec("redis") is not None:
        from redis.connection import parse_url

        try:
            parse_url(plain)
        except ValueError as exc:
            raise bad(str(exc)) from None


def _query_value_problem(name: str, text: str) -> str | None:
    """Why the numeric query option `name` cannot take `text`, or None (redis-py parses the
    others, and these only as numbers, without a range)."""
    if name == "health_check_interval" and text == "0":
        return None  # redis-py's default: no health checks
    if name in ("socket_timeout", "socket_connect_timeout", "health_check_interval"):
        try:
            check_timeout(float(text), name)
        except (ValueError, KvtierError) as exc:
            return str(exc) if isinstance(exc, KvtierError) else f"{name}={text!r} is no number"
    elif name == "max_connections" and not (text.isdigit() and 1 <= int(text) <= MAX_CONNECTIONS):
        return f"max_connections={text!r}: a whole number from 1 to {MAX_CONNECTIONS}"
    elif name == "protocol" and text not in ("2", "3"):
        return f"protocol={text!r}: RESP 2 or 3"
    return None
