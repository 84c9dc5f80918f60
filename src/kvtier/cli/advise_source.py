"""What `kvtier advise --workload SOURCE` replays, and observe's verdict where SOURCE has one.

A Mooncake trace replays as it is; a request log (vLLM --enable-log-requests, SGLang
--log-requests, an OpenAI JSONL dump) is turned into one by `kvtier trace`; a serving log gives
observe's verdict and, without request lines, the workload `kvtier simulate --from-log` fits to
it (its calibrated timing and warm-up carried as flags); a saved /metrics text gives the verdict
only, so it comes with a second --workload to replay. Every step is the command itself, run in
this process (`command_payload`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvtier.errors import KvtierError
from kvtier.files import MAX_LOG_BYTES, MAX_TRACE_BYTES, open_input
from kvtier.observe.metrics import is_metrics_text
from kvtier.sim.advise import Verdict

SNIFF_BYTES = 1 << 16


@dataclass(frozen=True, slots=True)
class Workload:
    label: str
    replay: tuple[str, ...]  # the simulate words that name the workload (a trace and its flags)
    verdict: Verdict | None
    notes: tuple[str, ...] = ()


def command_payload(argv: Sequence[str]) -> Any:
    """Run `kvtier ARGV --json` in this process; the payload it hands to `emit`."""
    from kvtier.cli import shared_parser
    from kvtier.cli.report import with_json
    from kvtier.report.json_text import collecting

    errors = io.StringIO()
    with contextlib.redirect_stderr(errors):
        try:
            args = shared_parser().parse_args(with_json(list(argv)))
        except SystemExit as exc:
            last = errors.getvalue().strip().splitlines()[-1:] or ["bad arguments"]
            raise KvtierError(last[0].removeprefix("kvtier: error: ")) from exc
        with contextlib.redirect_stdout(io.StringIO()), collecting() as handed:
            args.run(args)
    if len(handed) != 1:
        raise KvtierError(f"`kvtier {argv[0]}` gave no result")
    return handed[0]


def kind_of(path: str) -> str:
    """trace, request-json, metrics or log, from the file's first 64 KiB: metrics where
    `kvtier observe` reads the file as a /metrics scrape."""
    with open_input(path, "--workload", max(MAX_TRACE_BYTES, MAX_LOG_BYTES)) as stream:
        head = stream.read(SNIFF_BYTES).decode("utf-8", "replace")
    lines = [line.strip() for line in head.splitlines() if line.strip()]
    if not lines:
        raise KvtierError(f"--workload {path}: the file is empty")
    if lines[0].startswith("{"):
        try:
            first = json.loads(lines[0])
        except ValueError:
            first = None
        if isinstance(first, dict):
            return "trace" if "hash_ids" in first else "request-json"
    return "metrics" if is_metrics_text(head) else "log"


def _verdict(path: str, kind: str) -> Verdict | None:
    """observe's verdict, or None when the file holds no serving lines."""
    try:
        observed = command_payload(["observe", path])
    except KvtierError as exc:
        if kind == "metrics":
            raise KvtierError(f"--workload {path}: {exc}") from None
        return None
    if not observed.samples and not observed.preemptions:
        return None
    return Verdict(
        source=path,
        verdict=observed.diagnosis,
        reason=observed.reason,
        evidence=tuple(
            f"line {e.line}: {e.text}" if e.line is not None else e.text
            for e in observed.evidence[:3]
        ),
        next_steps=observed.next_steps,
    )


def _as_trace(path: str, tmp: str) -> str | None:
    """`kvtier trace PATH -o FILE`: the request log as a trace, or None when it holds none."""
    out = os.path.join(tmp, "requests.jsonl")
    try:
        command_payload(["trace", path, "-o", out])
    except KvtierError:
        return None
    return out if os.path.exists(out) and os.path.getsize(out) else None


def _fitted(path: str, deploy: Sequence[str], fit_flags: Sequence[str], tmp: str) -> Workload:
    """`kvtier simulate --from-log PATH -o FILE`: the fitted trace, its warm-up and the
    calibrated timing as simulate flags."""
    out = os.path.join(tmp, "fitted.jsonl")
    payload = command_payload(["simulate", "--from-log", path, *fit_flags, "-o", out, *deploy])
    fit = payload.from_log
    warmup = fit.trace.before_window / fit.trace.requests if fit.trace.requests else 0.0
    replay = (
        out,
        "--warmup-fraction",
        repr(round(warmup, 6)),
        "--compute-efficiency",
        repr(fit.calibration.compute_efficiency),
        "--hbm-efficiency",
        repr(fit.calibration.hbm_efficiency),
    )
    note = (
        f"the workload is fitted to {path} ({fit.trace.requests} requests, "
        f"{fit.trace.before_window} before its window as warm-up; timing calibrated to it); "
        "each option's pool is the ledger's, not the log's; `simulate --from-log -o FILE` "
        "writes the trace (simulate_args name a temporary copy)"
    )
    return Workload(path, replay, None, (note,))


def prepare(
    args: argparse.Namespace, deploy: Sequence[str], launch: Sequence[str], tmp: str
) -> Workload:
    """The workload to replay and the verdict, from the --workload sources (one or two): the
    requests of the one trace or request log given, else a serving log's fitted workload."""
    sources = list(args.workload)
    if len(sources) > 2:
        raise KvtierError("--workload: give at most two (a serving log or /metrics, and a trace)")
    kinds = [(path, kind_of(path)) for path in sources]
    verdicts: dict[str, Verdict | None] = {}
    for path, kind in kinds:
        if kind in ("metrics", "log"):
            verdicts[path] = _verdict(path, kind)
            if kind == "metrics" and verdicts[path] is None:
                raise KvtierError(f"--workload {path}: a /metrics text with no KV usage or queue")
    verdict = next((v for v in verdicts.values() if v is not None), None)
    replays = [w for path, kind in kinds if (w := _requests(path, kind, tmp)) is not None]
    if len(replays) > 1:
        raise KvtierError(
            f"--workload {replays[1].label}: {replays[0].label} already gives the requests; "
            "give one trace or request log (and a serving log or /metrics for the verdict)"
        )
    fit_flags = _fit_flags(args)
    logs = [path for path, kind in kinds if kind == "log" and verdicts[path] is not None]
    if replays and fit_flags:
        raise KvtierError(
            f"{fit_flags[0]} fits a serving log's workload; the requests come from "
            f"{replays[0].label}: drop it"
        )
    if not replays and logs:
        tail = ["--", *launch] if launch else []
        replays = [_fitted(logs[0], [*deploy, *tail], fit_flags, tmp)]
    for path, kind in kinds:
        if kind != "metrics" and path not in logs and not any(w.label == path for w in replays):
            raise KvtierError(
                f"--workload {path}: not a Mooncake trace, a request log, a serving log "
                "or a /metrics text"
            )
    if not replays:
        raise KvtierError(
            "--workload: a /metrics text gives the verdict, not the requests: add a trace, "
            "request log or serving log as a second --workload"
        )
    return Workload(replays[0].label, replays[0].replay, verdict, replays[0].notes)


def _requests(path: str, kind: str, tmp: str) -> Workload | None:
    """`path`'s requests when it holds them: a Mooncake trace, or a log `kvtier trace` reads."""
    if kind == "trace":
        return Workload(path, (path,), None)
    if kind == "metrics":
        return None
    trace = _as_trace(path, tmp)
    if trace is None:
        return None
    note = (
        f"{path}: its requests as `kvtier trace {path} -o FILE` writes them "
        "(simulate_args name a temporary copy)"
    )
    return Workload(path, (trace,), None, (note,))


def _fit_flags(args: argparse.Namespace) -> list[str]:
    words: list[str] = []
    for name in ("mean_prompt_tokens", "mean_output_tokens"):
        value = getattr(args, name, None)
        if value is not None:
            words += [f"--{name.replace('_', '-')}", str(value)]
    return words
