"""Every example and fixture through plan / explain / advise / observe / simulate / trace `--json`,
compared between this tree and another git revision: a restructure must change no output.

    python benchmarks/golden.py --against main~5      # compare with an earlier commit
    python benchmarks/golden.py --list                # the cases it runs
    python benchmarks/golden.py --write out.json      # this tree's outputs, for a later --compare
    python benchmarks/golden.py --compare out.json    # this tree against saved outputs

Each side runs in its own interpreter with its tree's `src` first on the path, over the SAME input
files (this tree's examples and fixtures), calling `kvtier.cli.main` in-process per case and
recording the exit code, standard output and standard error. The other revision is exported with
`git archive` into a temporary folder (the work tree is not touched). Exit 0 when every case
gives identical output, 1 when any differs (each difference printed as a unified diff, cut at
--context lines), 2 on bad input.
"""

from __future__ import annotations

import argparse
import difflib
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLES = ROOT / "examples" / "logs"
SHARED = ROOT.parent / "shared"

# A deployment every generated workload runs against (the founding card, small enough to evict).
DEPLOYMENT = ["--engine", "sglang", "--model", "llama-3.1-8b", "--gpu", "h100"]
FOUNDING = ["--engine", "sglang", "--model", "kimi-k2.5", "--gpu", "RTX PRO 6000", "--tp", "8",
            "--mem-fraction-static", "0.88"]  # fmt: skip
PLAN_CARDS = (
    ("sglang", "h200", "8"),
    ("vllm", "h200", "8"),
    ("sglang", "RTX PRO 6000", "8"),
    ("sglang", "h100", "4"),
    ("vllm", "h100", "4"),
)
GENERATORS = ("chat", "system-prompt", "agent", "doc-qa", "multiturn")
# Serving logs --from-log fits (tests/test_sim_from_log.py), and one it refuses.
FROM_LOG = {
    "sglang-2024-10-prefill-cache-hit-rate.log": ["--mean-output-tokens", "256"],
    "sglang-2025-11-prefill-trailing-comma.log": ["--mean-output-tokens", "256"],
    "sglang-2026-07-mamba-pending-token.log": ["--mean-output-tokens", "256"],
    "sglang-2026-07-npu-ep-accept-len.log": ["--mean-output-tokens", "256"],
    "vllm-2026-03-v1-waiting-prefill.log": ["--mean-prompt-tokens", "2000"],
}

# Runs in the other interpreter: argv[1] = the tree's src, argv[2] = JSON list of [id, argv].
RUNNER = r"""
import contextlib, io, json, sys
sys.path.insert(0, sys.argv[1])
from kvtier.cli import main
cases = json.loads(open(sys.argv[2]).read())
results = {}
for case_id, argv in cases:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except Exception as exc:  # a traceback is an output like any other
            code, _ = "raised", err.write(f"{type(exc).__name__}: {exc}")
    results[case_id] = {"rc": code, "stdout": out.getvalue(), "stderr": err.getvalue()}
json.dump(results, sys.stdout)
"""


def _catalog_models() -> list[str]:
    folder = ROOT / "src" / "kvtier" / "model" / "catalog" / "models"
    if not folder.is_dir():
        folder = ROOT / "src" / "kvtier" / "model" / "catalog" / "models"
    return sorted(p.stem for p in folder.glob("*.json"))


def _logs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.log") if p.is_file())


def cases(scratch: Path) -> list[tuple[str, list[str]]]:
    """(id, argv) for every case; files written by a case go under `scratch`."""
    out: list[tuple[str, list[str]]] = []
    startup = _logs(EXAMPLES) + _logs(FIXTURES / "logs")
    for log in startup:
        out.append((f"explain {log.relative_to(ROOT)}", ["explain", str(log), "--json"]))
    seed = EXAMPLES / "sglang-kimi-k25-eagle3.log"
    for extra in (
        ["--host-ram-gb", "396"],
        ["--sglang-version", "0.5.9"],
        ["--sglang-version", "main"],
    ):
        out.append((f"explain seed {' '.join(extra)}", ["explain", str(seed), "--json", *extra]))
        out.append((f"explain seed text {' '.join(extra)}", ["explain", str(seed), *extra]))
    for model in _catalog_models():
        for engine, gpu, tp in PLAN_CARDS:
            argv = [
                "plan",
                "--engine",
                engine,
                "--model",
                model,
                "--gpu",
                gpu,
                "--tp",
                tp,
                "--json",
            ]
            out.append((f"plan {engine} {model} {gpu} tp{tp}", argv))
    out.append(("plan text kimi", ["plan", *FOUNDING]))
    out.append(("plan vllm launch", ["plan", "--gpu", "h100", "--", "vllm", "serve",
                "meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-utilization", "0.95",
                "--max-model-len", "8192", "--json"]))  # fmt: skip
    advise = [*FOUNDING, "--host-ram-gb", "396", "--target-requests", "8", "--context", "32768"]
    out.append(("advise founding", ["advise", *advise, "--json"]))
    out.append(("advise founding text", ["advise", *advise]))
    out.append(("advise vllm", ["advise", "--engine", "vllm", "--model", "llama-3.1-70b", "--gpu",
                "h100", "--tp", "4", "--host-ram-gb", "512", "--json"]))  # fmt: skip
    observed = sorted(p for p in (FIXTURES / "observe").iterdir() if p.suffix in (".log", ".prom"))
    for path in [*observed, EXAMPLES / "sglang-serving-queue.log"]:
        out.append((f"observe {path.relative_to(ROOT)}", ["observe", str(path), "--json"]))
    for name, extra in FROM_LOG.items():
        argv = ["simulate", "--from-log", str(FIXTURES / "observe" / name), *DEPLOYMENT, *extra]
        out.append((f"simulate --from-log {name}", [*argv, "--json"]))
    for kind in GENERATORS:
        trace = scratch / f"{kind}.jsonl"
        size = (
            ["--clients", "12", "--rounds", "5"] if kind == "multiturn" else ["--requests", "120"]
        )
        gen = ["simulate", "--generate", kind, "--seed", "3", *size]
        out.append((f"generate {kind}", [*gen, "-o", str(trace)]))
        out.append((f"simulate {kind}", ["simulate", str(trace), *DEPLOYMENT, "--json"]))
        out.append((f"simulate {kind} references", ["simulate", str(trace), "--unbounded",
                    "--lru-tokens", "20000,80000", "--json"]))  # fmt: skip
    sweep = ["simulate", "--generate", "chat", "--seed", "1", "--requests", "60", "--rate", "0.1",
             *FOUNDING, "--device-tokens", "159277", "--sweep", "hicache-ratio=0,2,4",
             "--json"]  # fmt: skip
    out.append(("simulate founding sweep", sweep))
    mooncake = SHARED / "traces" / "mooncake-conversation.jsonl"
    if mooncake.is_file():  # the shared trace, where it sits beside the repository
        light = ["simulate", str(mooncake), "--time-scale", "20", *DEPLOYMENT, "--json"]
        out.append(("simulate mooncake light", light))
        out.append(
            (
                "simulate mooncake lru",
                ["simulate", str(mooncake), "--lru-tokens", "5120000", "--json"],
            )
        )
    for log in sorted((FIXTURES / "requests").glob("*.log")):
        trace = scratch / f"{log.stem}.trace.jsonl"
        out.append((f"trace {log.name}", ["trace", str(log), "-o", str(trace), "--json"]))
    return out


def run_tree(src: Path, case_list: list[tuple[str, list[str]]], scratch: Path) -> dict[str, dict]:
    listing = scratch / "cases.json"
    listing.write_text(json.dumps(case_list))
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(src), str(listing)],
        capture_output=True, text=True, check=False, cwd=scratch,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"golden: the runner failed under {src}:\n{done.stderr[-4000:]}")
    text = done.stdout.replace(json.dumps(str(scratch))[1:-1], "$SCRATCH")  # stable across runs
    return json.loads(text)


def export(ref: str, into: Path) -> Path:
    """The `src` folder of git revision `ref`, exported under `into`."""
    archive = into / "tree.tar"
    done = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), ref, "src"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        print(f"golden: --against {ref}: {done.stderr.strip()}", file=sys.stderr)
        raise SystemExit(2)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree" / "src"


def differences(before: dict[str, dict], after: dict[str, dict], context: int) -> list[str]:
    report = []
    for case_id in sorted(set(before) | set(after)):
        a, b = before.get(case_id), after.get(case_id)
        if a == b:
            continue
        if a is None or b is None:
            report.append(f"== {case_id}: only {'after' if a is None else 'before'}")
            continue
        lines = [f"== {case_id}: rc {a['rc']} -> {b['rc']}"]
        for stream in ("stdout", "stderr"):
            diff = difflib.unified_diff(
                a[stream].splitlines(), b[stream].splitlines(), "before", "after", lineterm="", n=1
            )
            lines += [f"  {stream}: {d}" for d in list(diff)[2 : 2 + context]]
        report.append("\n".join(lines))
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--against", metavar="REF", help="git revision to compare this tree with")
    group.add_argument("--compare", metavar="FILE", help="saved outputs (--write) to compare with")
    group.add_argument("--write", metavar="FILE", help="write this tree's outputs and stop")
    group.add_argument("--list", action="store_true", help="print the cases and stop")
    parser.add_argument("--context", type=int, default=12, help="diff lines shown per case")
    parser.add_argument("-k", metavar="TEXT", help="only the cases whose id contains TEXT")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvtier-golden-") as tmp:
        scratch = Path(tmp)
        case_list = [c for c in cases(scratch) if args.k is None or args.k in c[0]]
        if args.list:
            print("\n".join(case_id for case_id, _ in case_list))
            return 0
        after = run_tree(ROOT / "src", case_list, scratch)
        if args.write:
            Path(args.write).write_text(json.dumps(after, indent=1, sort_keys=True))
            print(f"golden: {len(after)} cases written to {args.write}")
            return 0
        if args.compare:
            try:
                before = json.loads(Path(args.compare).read_text())
            except (OSError, ValueError) as exc:
                print(f"golden: --compare {args.compare}: {exc}", file=sys.stderr)
                return 2
        else:
            before = run_tree(export(args.against, scratch), case_list, scratch)
    report = differences(before, after, args.context)
    print("\n".join(report))
    print(f"golden: {len(case_list)} cases, {len(report)} differ")
    return 1 if report else 0


if __name__ == "__main__":
    sys.exit(main())
