"""`kvtier trace INPUT -o TRACE`: a server's request log or an OpenAI request dump as a
Mooncake trace that `kvtier simulate` replays."""

from __future__ import annotations

import argparse
import os
import sys

from kvtier.cli.parser import add_subcommand
from kvtier.cli.values import count, number
from kvtier.errors import KvtierError

FORMATS = ("auto", "vllm", "sglang", "openai")  # kvtier.sim.request_sources.FORMATS

DESCRIPTION = """\
Turn what a server logged about its requests into a Mooncake JSONL trace (timestamp ms,
input_length, output_length, hash_ids) for `kvtier simulate`. Each prompt is hashed in blocks of
--block-tokens tokens, every block's hash chained to the one before it, so equal ids mean an
equal prefix; token ids are never written.

Inputs:
  vLLM   --enable-log-requests (0.6.6 logs unless --disable-log-requests). From vLLM 0.12
         the prompt's token ids are printed only at DEBUG: run the server with
         VLLM_LOGGING_LEVEL=DEBUG. Output length: the generated count where an output line
         gives it (--enable-log-outputs, chat), else the request's max_tokens.
  SGLang --log-requests --log-requests-level 3 (level 2 prints prompts up to 2,048 tokens;
         0 and 1 print none), text or --log-requests-format json. Output length: the
         generated count (completion_tokens).
  OpenAI a JSONL dump of request bodies (prompt or messages; or OpenAI batch lines with
         `body`), tokenized with --tokenizer; `timestamp` ms or `created` s per line, or --rate.

A prompt logged as text is counted with --tokenizer: a local folder or a model already in the
local Hugging Face cache, never downloaded. A line that starts a request but cannot be read
stops the run (exit 2) naming it; other lines are counted as skipped. A progress bar shows on
stderr for large files, except under --json or --quiet or when stderr is not a terminal.
"""

EPILOG = """\
examples:
  kvtier trace vllm-server.log -o trace.jsonl
  docker logs vllm 2>&1 | kvtier trace - --block-tokens 64 -o trace.jsonl --json
  kvtier trace requests.jsonl --tokenizer ./Qwen3-8B --rate 2 -o trace.jsonl
  kvtier simulate trace.jsonl --unbounded
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = add_subcommand(
        subparsers,
        "trace",
        usage="%(prog)s INPUT [-o TRACE] [options]",
        help="turn a vLLM/SGLang request log or an OpenAI request dump into a Mooncake trace",
        description=DESCRIPTION,
        epilog=EPILOG,
    )
    p.add_argument("input", help="server log or OpenAI-format JSONL dump, or '-' (stdin)")
    p.add_argument("-o", "--output", metavar="TRACE", help="the Mooncake JSONL trace to write")
    p.add_argument(
        "--format", choices=FORMATS, default="auto", help="what INPUT is (default: auto)"
    )
    p.add_argument(
        "--block-tokens",
        type=count(1, 1 << 20),
        default=512,
        metavar="N",
        help="tokens per hashed block (default 512, Mooncake's); `kvtier simulate` must read "
        "the trace with the same block size",
    )
    p.add_argument(
        "--tokenizer",
        metavar="NAME",
        help="local tokenizer folder or cached model id, for prompts logged or dumped as text",
    )
    p.add_argument(
        "--rate",
        type=number(0.0, 1e6, above=True),
        metavar="R",
        help="requests per second, for a dump whose lines carry no time",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="machine-readable summary")
    out.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kvtier.cli.progress import Progress
    from kvtier.files import MAX_TRACE_BYTES, check_output, open_input
    from kvtier.report.trace_view import print_trace
    from kvtier.sim.block_hash import PromptHasher
    from kvtier.sim.from_requests import build_trace
    from kvtier.sim.request_sources import read_requests
    from kvtier.sim.tokenizer import load_tokenizer
    from kvtier.sim.trace import write_trace

    if args.launch:
        raise KvtierError(f"trace takes no launch command ({' '.join(args.launch)[:60]!r})")
    if args.output:
        check_output(args.output, [args.input])
    hasher = PromptHasher(args.block_tokens)
    tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else None
    with Progress(not (args.quiet or args.json)) as progress:
        if args.input == "-":  # a pipe has no size: no bar
            found = read_requests(sys.stdin.buffer, args.format, hasher, tokenizer, args.rate)
        else:
            with open_input(args.input, "request log", MAX_TRACE_BYTES) as stream:
                bar = progress.bar("reading requests", os.fstat(stream.fileno()).st_size)
                found = read_requests(stream, args.format, hasher, tokenizer, args.rate, bar)
        requests, source = found
        build = build_trace(requests, hasher, tokenizer.encode if tokenizer else None)
        progress.done()
    if args.output:
        write_trace(build.requests, args.output, build.counts.block_tokens)
    print_trace(build, source, args.input, args.output, args.json)
    return 0
