"""What a simulated router is, and the policies by name.

A router sees what the real one sees: the requests it routed and when they finished (its own
counters), and, for policies that poll the servers, what a server's load endpoint reports at the
poll. It never reads the simulator's caches. Each policy family has its own module, with the
router's source, file and release in its docstring; `POLICIES` maps the CLI names to them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from kvtier.errors import KvtierError, shown
from kvtier.sim.trace import TraceRequest


class Scrape(NamedTuple):
    """A replica's metrics endpoint as a scrape reads it (a tuple: one per replica a scrape)."""

    waiting: int  # requests waiting (vllm:num_requests_waiting, sglang:num_queue_reqs)
    usage: float  # KV-cache usage, 0 to 1
    settled: bool = True  # False: what it reports changes before the replica's next event


# a replica's KV event publication: the replica, when, the blocks stored, the blocks removed
EventListener = Callable[[int, float, list[int], list[int]], None]


class FleetView(Protocol):
    """What a router may read of the replicas, each reading standing for an endpoint or an
    event stream the real router consumes; a policy reads only the ones its router does."""

    def token_loads(self) -> Sequence[int]:
        """Each replica's /get_load `num_tokens` (-1 where the server has no such endpoint)."""
        ...

    def scraped(self, replica: int, now: float, live: bool = False) -> Scrape:
        """One replica's metrics scraped at `now`: what its engine last published (vLLM: its
        last completed iteration's scheduler stats); `live`, its state at `now` instead."""
        ...

    def device_prefixes(self, req: TraceRequest) -> Sequence[int]:
        """Leading blocks of `req` resident on each replica's device, as their KV events report
        them; read without touching the caches."""
        ...

    def held_prefixes(self, req: TraceRequest) -> dict[int, int]:
        """`device_prefixes`, only the replicas holding at least one block."""
        ...

    def resident(self, replica: int) -> set[int]:
        """The trace blocks resident on `replica`'s device, as its KV events (stored less
        removed) have reported them."""
        ...

    def publish_kv_events(self, listener: EventListener | None = None) -> set[int]:
        """Read the replicas whose engine publishes KV events once a step (vLLM) as those
        events have said, each publication told to `listener`; those replicas."""
        ...

    def pending_prefill(self) -> Sequence[Sequence[tuple[int, int]]]:
        """Each replica's requests not yet through prefill, as (rid, prompt tokens left), as a
        global scheduler that tracks its requests knows them."""
        ...

    def prefill_s(self, new_tokens: int, prefix_tokens: int) -> float:
        """The deployment's prefill time for `new_tokens` after `prefix_tokens` cached ones."""
        ...

    @property
    def device_blocks(self) -> int:
        """A replica's device capacity, in trace blocks (the GPU blocks it reports)."""
        ...


class Router(Protocol):
    """Picks a replica for each arriving request."""

    def route(self, req: TraceRequest, now: float) -> int:
        """The replica (0-based) `req` goes to; the router counts it in flight there."""
        ...

    def finished(self, replica: int, req: TraceRequest, now: float) -> None:
        """`req`'s response on `replica` completed (or the server refused it)."""
        ...

    def next_tick(self, now: float) -> float:
        """When the router next acts on its own (a load poll, a tree eviction); inf: never."""
        ...

    def tick(self, now: float) -> None:
        """Act on its own at `now`."""
        ...


class Untimed:
    """A router that never acts on its own (no load poll, no timer): `Router`'s tick half."""

    def next_tick(self, now: float) -> float:
        return math.inf

    def tick(self, now: float) -> None:
        pass


class Stateless(Untimed):
    """A router that keeps nothing per request in flight, nor acts on its own."""

    def finished(self, replica: int, req: TraceRequest, now: float) -> None:
        pass


@dataclass(frozen=True, slots=True)
class Number:
    """A `--router-opt` value: a number (or an integer) in [lo, hi]. Called on the text, it
    returns the value or raises ValueError with a reason."""

    lo: float
    hi: float
    integer: bool = False

    def __call__(self, raw: str) -> float:
        try:
            value = int(raw) if self.integer else float(raw)
        except ValueError:
            kind = "an integer" if self.integer else "a number"
            raise ValueError(f"{raw!r:.40} is not {kind}") from None
        if not (math.isfinite(value) and self.lo <= value <= self.hi):
            raise ValueError(f"{raw:.40} is outside {self._range}")
        return value

    @property
    def _range(self) -> str:
        if self.integer:
            return f"[{int(self.lo)}, {int(self.hi)}]"
        return f"[{self.lo:g}, {self.hi:g}]"

    @property
    def allowed(self) -> str:
        """The values taken, as `--router-opt help` prints them."""
        if self.integer and (self.lo, self.hi) == (0, 1):
            return "0 or 1"
        return f"{'integer' if self.integer else 'number'} in {self._range}"


@dataclass(frozen=True, slots=True)
class RouterOption:
    """One `--router-opt` key: its values, default and help (`--router-opt help` prints them,
    and a test checks docs/fleet.md against them). `follows` names what the default is taken
    from where it is not a constant (the trace's block size)."""

    parse: Number
    default: float
    help: str
    follows: str = ""

    @property
    def default_text(self) -> str:
        """The default as the listing and docs/fleet.md write it."""
        if self.follows:
            return f"({self.follows})"
        value = float(self.default)
        return str(int(value)) if value.is_integer() else f"{value:g}"


def published(what: str, vllm: str, otherwise: str) -> RouterOption:
    """A `--router-opt` switch: 1 reads a replica's `what` when its engine publishes them (vLLM
    `vllm`, SGLang at its scheduler's reports), 0 `otherwise`."""
    text = f"1: a replica's {what} (vLLM {vllm}, SGLang at its reports); 0: {otherwise}"
    return RouterOption(Number(0, 1, integer=True), 1, text)


@dataclass(frozen=True, slots=True)
class Policy:
    """A routing policy: its options and how to build it for `replicas` servers."""

    options: dict[str, RouterOption]
    build: Callable[[int, dict[str, float], int, FleetView], Router]
    source: str  # the router, file and release it is modelled from


def parse_options(name: str, policy: Policy, given: Sequence[str]) -> dict[str, float]:
    """`KEY=VALUE` strings into the policy's options, defaults filled in; one line per refusal."""
    values = {k: o.default for k, o in policy.options.items()}
    given_keys: set[str] = set()
    for item in given:
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq:
            raise KvtierError(f"--router-opt {item!r:.60}: expected KEY=VALUE")
        if key in given_keys:
            raise KvtierError(f"--router-opt {shown(key):.60} is given twice")
        given_keys.add(key)
        if key not in policy.options:
            known = ", ".join(policy.options)
            which = "it takes none"
            if known:
                which = f"its options: {known}; --router-opt help describes them"
            raise KvtierError(
                f"--router-opt {shown(key):.60}: not an option of --router {name} ({which})"
            )
        try:
            values[key] = policy.options[key].parse(raw.strip())
        except ValueError as exc:
            raise KvtierError(f"--router-opt {key}: {exc}") from None
    return values
