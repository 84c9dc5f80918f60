"""`kvtier report`: one self-contained HTML file from a startup log, a serving log or /metrics,
and a simulation sweep.

It runs `kvtier explain LOG --json`, `kvtier observe SOURCE --json` and, when asked,
`kvtier simulate ... --json` in this process and draws the typed results they hand over (the
objects their `--json` prints), so the report never shows a number the commands would not
print. Saved `--json` output is read back into the same objects (`--from`); a file that does
not fit is refused, naming the field.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from typing import TYPE_CHECKING, Any

from kvtier.cli.parser import add_subcommand
from kvtier.errors import KvtierError
from kvtier.files import check_output, load_json, read_input

if TYPE_CHECKING:
    from kvtier.report.payloads import Payload

KINDS = ("plan", "advise", "advise-workload", "explain", "observe", "simulate")


EPILOG = """\
examples:
  kvtier report examples/logs/sglang-kimi-k25-eagle3.log -o report.html
  kvtier report examples/logs/vllm-llama31-8b-h100.log -o report.html --title "Llama 8B on H100"
  kvtier report --observe server.log -o serving.html
  kvtier simulate --generate chat --requests 500 -o chat.jsonl
  kvtier report examples/logs/sglang-kimi-k25-eagle3.log -o report.html --simulate chat.jsonl \\
      --gpu "RTX PRO 6000" --sweep hicache-ratio=0,2,4 -- python -m sglang.launch_server \\
      --model-path moonshotai/Kimi-K2.5 --tp 8 --mem-fraction-static 0.88
"""


def add_parser(subparsers: Any) -> None:
    parser = add_subcommand(
        subparsers,
        "report",
        usage="%(prog)s [LOG] -o HTML [options] [--simulate ARGS ... [-- LAUNCH COMMAND ...]]",
        epilog=EPILOG,
        help="write an HTML report with charts (memory, capacity, simulation)",
        description="Write one self-contained HTML file (no network needed to view or print it): "
        "per-GPU memory, KV capacity against context length with the options to grow it, and "
        "a simulation sweep. Everything after --simulate is passed to `kvtier simulate`.",
    )
    parser.add_argument("log", nargs="?", help="engine startup log to explain")
    parser.add_argument("-o", "--output", required=True, help="HTML file to write")
    parser.add_argument(
        "--observe",
        metavar="SOURCE",
        help="serving log, saved /metrics or a /metrics URL (what `kvtier observe` reads): "
        "its diagnosis and time series of KV usage, queue, throughput and hit rate",
    )
    parser.add_argument("--title", help="report title (default: from the model)")
    parser.add_argument(
        "--from",
        dest="saved",
        action="append",
        default=[],
        metavar="KIND=FILE",
        help=f"draw saved --json output of a command ({', '.join(KINDS)}); repeatable",
    )
    parser.add_argument(
        "--simulate",
        nargs=argparse.REMAINDER,
        default=None,
        metavar="ARGS",
        help="run `kvtier simulate ARGS --json` and add its results (must come last)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kvtier.report.html import write_html

    inputs = [args.log, args.observe, *_saved_paths(args.saved), *_simulate_inputs(args)]
    check_output(args.output, [i for i in inputs if i is None or "://" not in i])
    payloads: dict[str, Payload] = {}
    for spec in args.saved:
        kind, payload = saved_payload(spec)
        payloads[kind] = payload
    if args.log:
        payloads["explain"] = command_payload(["explain", args.log])
    if args.observe:
        payloads["observe"] = command_payload(["observe", args.observe])
    if args.launch and args.simulate is None:
        raise KvtierError("report: a launch command after `--` belongs to --simulate ARGS")
    if args.simulate is not None:
        if not args.simulate:
            raise KvtierError("report: --simulate needs the arguments for `kvtier simulate`")
        launch = ["--", *args.launch] if args.launch else []
        payloads["simulate"] = command_payload(["simulate", *args.simulate, *launch])
    if not payloads:
        raise KvtierError(
            "report: give a LOG, --observe SOURCE, --simulate ARGS or --from KIND=FILE"
        )
    title = args.title or default_title(payloads)
    size = write_html(args.output, payloads, title=title)
    print(f"wrote {args.output} ({size / 1000:.0f} kB): {', '.join(payloads)}")
    return 0


def _saved_paths(saved: list[str]) -> list[str]:
    return [spec.partition("=")[2] for spec in saved]


def _simulate_inputs(args: argparse.Namespace) -> list[str]:
    """The words of --simulate ARGS that may name a file it reads (the trace, --model)."""
    return [w for w in args.simulate or () if not w.startswith("-")]


def saved_payload(spec: str) -> tuple[str, Payload]:
    """Read `KIND=FILE`, the saved `--json` output of `kvtier KIND`, into its payload."""
    from kvtier.payload import from_json
    from kvtier.report.payloads import PAYLOAD_TYPES

    kind, sep, path = spec.partition("=")
    if not sep or kind not in KINDS:
        raise KvtierError(f"report: --from wants KIND=FILE with KIND one of {', '.join(KINDS)}")
    try:
        data = load_json(read_input(path, "saved payload"), path)
    except KvtierError as exc:
        raise KvtierError(f"report: {exc}") from None
    if not isinstance(data, dict):
        raise KvtierError(f"report: {path} holds no JSON object")
    try:
        return kind, from_json(PAYLOAD_TYPES[kind], data)
    except KvtierError as exc:
        raise KvtierError(f"report: {path}: {exc}") from None


def command_payload(argv: list[str]) -> Payload:
    """Run `kvtier ARGV --json` in this process and return the payload it hands over."""
    from kvtier.cli import shared_parser
    from kvtier.report.json_text import collecting

    parser = shared_parser()
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = parser.parse_args(with_json(argv))
    except SystemExit as exc:
        if not exc.code:  # --help: argparse printed it to stdout
            raise
        last = errors.getvalue().strip().splitlines()[-1:] or ["bad arguments"]
        raise KvtierError(f"report: {last[0].removeprefix('kvtier: error: ')}") from exc
    with contextlib.redirect_stdout(io.StringIO()), collecting() as handed:
        code = int(args.run(args) or 0)
    if code != 0:
        raise KvtierError(f"report: `kvtier {' '.join(argv)}` exited with status {code}")
    if len(handed) != 1:
        raise KvtierError(f"report: `kvtier {argv[0]} --json` gave no result to draw")
    return handed[0]  # type: ignore[no-any-return]


def with_json(argv: list[str]) -> list[str]:
    """`argv` with `--json` among the kvtier options, before any launch command after `--`."""
    cut = argv.index("--") if "--" in argv else len(argv)
    return [*argv[:cut], "--json", *argv[cut:]]


def default_title(payloads: dict[str, Payload]) -> str:
    from kvtier.report.html_sections import model_name

    names = [model_name(p) for p in payloads.values() if model_name(p)]
    return f"kvtier report: {names[0]}" if names else "kvtier report"
