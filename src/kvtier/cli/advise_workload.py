"""`kvtier advise --workload SOURCE`: every option of the menu simulated on the operator's
traffic by `kvtier simulate` itself (in this process, its typed result collected), ranked.

The baseline runs first (its running-request cap and prefill chunk set two of the options), then
every option, in parallel with --jobs N, then pairs of the top options."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from kvtier.cli.advise_menu import (
    IMPLIED,
    Candidate,
    candidates,
    deployment_words,
    fields_of,
    pairs,
    sim_rows,
)
from kvtier.cli.advise_source import Workload, command_payload, prepare
from kvtier.cli.flags import given_names
from kvtier.cli.flags.deployment import WORKLOAD_ONLY
from kvtier.cli.progress import Progress
from kvtier.errors import KvtierError
from kvtier.files import check_output
from kvtier.sim.advise import (
    MAX_COMBINATIONS,
    AdvisedOption,
    Outcome,
    WorkloadAdvice,
    beats_baseline,
    rank,
)
from kvtier.units import GB

FAMILY = {"store": "host-tier"}  # options of one family are not paired


def check(args: argparse.Namespace) -> None:
    if args.workload:
        if args.target_requests is not None:
            raise KvtierError("--target-requests answers the capacity question: drop --workload")
        return
    given = given_names(args, WORKLOAD_ONLY)
    if given:
        raise KvtierError(f"{given[0]} applies to --workload SOURCE")


def simulate_words(words: Sequence[str]) -> tuple[Outcome | None, str | None]:
    """`kvtier simulate WORDS --json` in this process: its outcome, or why it could not run."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            payload = command_payload(["simulate", *words])
    except KvtierError as exc:
        return None, str(exc)
    if payload.run is None:
        return None, "simulate gave no run"
    return Outcome.of(payload.run), None


def words_for(
    args: argparse.Namespace, workload: Workload, cand: Candidate, pinned: int | None = None
) -> tuple[tuple[str, ...], str | None]:
    """The simulate words that model `cand` (its device pool `pinned` when given), or why it
    cannot be simulated."""
    table = sim_rows()
    own: list[str] = []
    extra: list[str] = []  # engine flags kvtier has no flag for: they join the launch command
    for flag, values in pairs(cand.flags):
        if flag in table:
            own += [flag, *values]
        elif args.launch:
            extra += [flag, *values]
        elif flag not in IMPLIED:
            return (), f"{flag} is read from the engine's command: give it after --"
    own += cand.sim_words
    if pinned is not None:
        own += ["--device-tokens", str(pinned)]
    words = [*workload.replay, *deployment_words(args, set(fields_of(own))), *own]
    if args.launch:
        words += ["--", *with_launch(args.launch, extra)]
    return tuple(words), None


def with_launch(launch: Sequence[str], extra: Sequence[str]) -> list[str]:
    """The launch command with `extra`'s flags set: a flag it has takes the new value in its
    place (the launch parser refuses a flag given twice), another is appended."""
    out = list(launch)
    for flag, values in pairs(extra):
        at = next((i for i, w in enumerate(out) if w == flag or w.startswith(f"{flag}=")), None)
        if at is None:
            out += [flag, *values]
        elif "=" in out[at]:
            out[at] = f"{flag}={values[0]}" if values else flag
        else:
            out[at + 1 : at + 1 + len(values)] = values
    return out


def _run_all(
    jobs: int, batch: list[tuple[str, ...]], bar: Callable[[int], None] | None
) -> list[tuple[Outcome | None, str | None]]:
    if jobs > 1 and len(batch) > 1:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(min(jobs, len(batch))) as pool:
            futures = {pool.submit(simulate_words, w): i for i, w in enumerate(batch)}
            out: list[Any] = [None] * len(batch)
            for done, future in enumerate(as_completed(futures), 1):
                out[futures[future]] = future.result()
                if bar:
                    bar(done)
            return out
    results = []
    for done, words in enumerate(batch, 1):
        results.append(simulate_words(words))
        if bar:
            bar(done)
    return results


class _Runner:
    """Simulates candidates against one workload; prices their host RAM from the run."""

    def __init__(self, args: argparse.Namespace, workload: Workload, ctx: Any, progress: Any):
        self.args, self.workload, self.ctx, self.progress = args, workload, ctx, progress

    def options(self, cands: Sequence[Candidate], label: str) -> list[AdvisedOption]:
        cands = [self.ctx.priced(c) for c in cands]
        planned = [(c, *words_for(self.args, self.workload, c, self.ctx.pinned(c))) for c in cands]
        runnable = [words for c, words, why in planned if c.fits and why is None]
        bar = self.progress.bar(f"simulating {len(runnable)} {label}", len(runnable))
        results = iter(_run_all(self.args.jobs, runnable, bar))
        out = []
        for c, words, why in planned:
            outcome, error = next(results) if c.fits and why is None else (None, why)
            out.append(self._advised(c, words, outcome, c.why_not or error))
        return out

    def _advised(
        self, c: Candidate, words: tuple[str, ...], outcome: Outcome | None, why: str | None
    ) -> AdvisedOption:
        host_gb, fits = c.host_gb_per_node, c.fits
        priced = self._host_gb((*c.flags, *c.sim_words), outcome)
        if priced is not None:
            host_gb = priced
        ram = self.args.host_ram_gb
        if fits and ram is not None and host_gb > ram:
            fits = False
            why = f"host RAM: {host_gb:.1f} GB per node over the {ram:g} GB available"
        return AdvisedOption(
            name=c.name,
            kind=c.kind,
            flags=c.flags,
            simulate_args=words,
            fits=fits and outcome is not None,
            why_not=why,
            risk=c.risk,
            host_gb_per_node=round(host_gb, 3),
            gpus=self.ctx.gpus * c.replicas,
            outcome=outcome,
        )

    def _host_gb(self, words: Sequence[str], outcome: Outcome | None) -> float | None:
        """SGLang: the host pool the run held, host tokens x bytes per token x GPUs."""
        from kvtier.engines.figures import SGLangFigures
        from kvtier.ledger.advise import variant

        if outcome is None or not outcome.host_tokens:
            return None
        fields = fields_of(words)
        led = variant(self.ctx.inputs, **fields) if fields else self.ctx.base
        figures = (led or self.ctx.base).figures
        if not isinstance(figures, SGLangFigures):
            return None
        return float(outcome.host_tokens * figures.host_bytes_per_token * self.ctx.gpus / GB)


def _family(kind: str) -> str:
    return FAMILY.get(kind, kind)


def combinations(ranked: Sequence[AdvisedOption], cands: Sequence[Candidate]) -> list[Candidate]:
    """Pairs of the top three options that beat the baseline, each the best of its kind."""
    by_name = {c.name: c for c in cands}
    top: list[Candidate] = []
    for o in ranked:  # the best of each family, three families at most
        c = by_name.get(o.name)
        if c and beats_baseline(o) and all(_family(t.kind) != _family(c.kind) for t in top):
            top.append(c)
    top = top[:3]
    out = []
    for i, a in enumerate(top):
        for b in top[i + 1 :]:
            clash = set(fields_of(a.flags)) & set(fields_of(b.flags))
            if _family(a.kind) == _family(b.kind) or clash:
                continue
            out.append(
                Candidate(
                    f"{a.name} + {b.name}",
                    "combination",
                    (*a.flags, *b.flags),
                    f"{a.risk}; {b.risk}",
                    (*a.sim_words, *b.sim_words),
                    host_gb_per_node=a.host_gb_per_node + b.host_gb_per_node,
                    replicas=max(a.replicas, b.replicas),
                )
            )
    return out[:MAX_COMBINATIONS]


class _Context:
    """The deployment advised on; `logged_tokens` is the pool a startup log states."""

    def __init__(self, args: argparse.Namespace, logged_tokens: int | None = None) -> None:
        from kvtier.cli.flags import ADVISE
        from kvtier.cli.plan import deployment_from_args, warn_ignored
        from kvtier.ledger.advise import HostSetup
        from kvtier.ledger.plan import build_ledger, resolve

        deployment = deployment_from_args(args, ADVISE)
        warn_ignored(deployment)
        self.inputs = resolve(deployment, args.context, args.pcie_gbps)
        self.base = build_ledger(self.inputs)
        self.host = HostSetup(args.host_ram_gb, args.load_tokens, args.node_host_gbps)
        self.gpus = self.inputs.deployment.gpus
        self.logged_tokens = logged_tokens

    def _same_pool(self, c: Candidate) -> bool:
        from kvtier.ledger.advise import variant

        fields = fields_of((*c.flags, *c.sim_words))
        led = variant(self.inputs, **fields) if fields else self.base
        return led is not None and led.kv_tokens == self.base.kv_tokens

    def pinned(self, c: Candidate) -> int | None:
        """The logged pool, for an option that leaves the ledger's pool as it is."""
        return self.logged_tokens if self.logged_tokens and self._same_pool(c) else None

    def priced(self, c: Candidate) -> Candidate:
        """`c`, its risk saying so where its pool is the ledger's rather than the log's."""
        if not self.logged_tokens or self._same_pool(c):
            return c
        note = "its pool is the ledger's, from the log's measured figures, not a logged count"
        return dataclasses.replace(c, risk=f"{c.risk}; {note}")


def run(args: argparse.Namespace) -> int:
    from kvtier.report.advise_workload_view import print_workload_advice

    check(args)
    if args.html:
        check_output(args.html, [*args.workload, args.model], "--html")
    logged = None
    if args.log:
        from kvtier.cli.advise_log import read_log

        logged = read_log(args)
    ctx = _Context(args, logged)
    with (
        tempfile.TemporaryDirectory(prefix="kvtier-advise-") as tmp,
        Progress(not (args.quiet or args.json)) as progress,
    ):
        advice = advise(args, ctx, tmp, progress)
    print_workload_advice(advice, as_json=args.json, quiet=args.quiet)
    if args.html:
        from kvtier.report.html import write_html

        size = write_html(args.html, {"advise-workload": advice}, title=advice.headline)
        print(f"wrote {args.html} ({size / 1000:.0f} kB)", file=sys.stderr)
    return 0


def advise(args: argparse.Namespace, ctx: _Context, tmp: str, progress: Any) -> WorkloadAdvice:
    from kvtier.sim.advise import headline

    deploy = deployment_words(args, set())
    workload = prepare(args, deploy, args.launch, tmp)
    runner = _Runner(args, workload, ctx, progress)
    base_cand = Candidate("baseline", "baseline", (), "the deployment as it runs")
    (baseline,) = runner.options([base_cand], "baseline")
    if baseline.outcome is None:
        raise KvtierError(f"the baseline did not simulate: {baseline.why_not}")
    cands = candidates(ctx.inputs, ctx.base, args.margin_gib, ctx.host, _params(baseline))
    slo = args.ttft_p90_max
    baseline, ranked = rank(baseline, runner.options(cands, "options"), args.objective, slo)
    pairs_ = combinations(ranked, cands)
    _, combos = rank(baseline, runner.options(pairs_, "combinations"), args.objective, slo)
    progress.done()
    return WorkloadAdvice(
        headline=headline(workload.verdict, ranked, args.objective),
        workload=workload.label,
        objective=args.objective,
        ttft_p90_max_s=slo,
        baseline=baseline,
        options=ranked,
        combinations=combos,
        verdict=workload.verdict,
        notes=(*_log_note(args, ctx), *workload.notes),
    )


def _log_note(args: argparse.Namespace, ctx: _Context) -> tuple[str, ...]:
    if not ctx.logged_tokens:
        return ()
    return (
        f"the deployment is read from {args.log} as `kvtier explain` reads it; the baseline and "
        f"every option that leaves the pool as it is run on its logged {ctx.logged_tokens:,} "
        "KV tokens (--device-tokens), the others on the ledger's pool from its measured figures",
    )


def _params(option: AdvisedOption) -> dict[str, object]:
    """The baseline's running-request cap and prefill chunk, from its own run."""
    o = option.outcome
    assert o is not None
    return {"max_running_requests": o.max_running_requests, "chunked_prefill_size": o.chunk}
