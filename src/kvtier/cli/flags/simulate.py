"""`kvtier simulate`'s own flags: synthetic workloads, the simulation, SGLang's multi-turn
benchmark, HiCache's L3 prefetch, the timing model and the workload fitted from a serving log.

A new simulate flag is one row here: its group, `commands=SIM`, the Deployment field it sets if
any, a sample value for the table's test, and argparse's keywords."""

from __future__ import annotations

from kvtier.cli.flags.row import SIMULATE, flag, used
from kvtier.cli.values import (
    FINITE,
    FRACTION,
    GBPS,
    GPUS,
    MAX_REQUESTS,
    MAX_TOKENS,
    SECONDS,
    TFLOPS,
    TOKENS,
    count,
    counts,
    number,
    rate_stages,
    release,
)
from kvtier.engines.sglang import versions as sglang_versions
from kvtier.engines.sglang.flags import PREFETCH_POLICIES, WRITE_POLICIES
from kvtier.routers import NAMES

SIM = used(SIMULATE)

# Names the help states; kvtier.sim is imported only when a simulation runs (tests check these
# against kvtier.sim.workload.GENERATORS, sim.sweep.SWEEPABLE, sim.multiturn, sim.engine.prefetch).
WORKLOADS = ("chat", "system-prompt", "agent", "doc-qa", "multiturn", "shared-prefix", "random")
CLIENTS = ("sglang", "vllm")  # whose random draws (tests check them against kvtier.sim.bench)
SWEEPS = ("hicache-ratio", "mem-fraction-static", "kv-cache-dtype", "pcie-gbps")
READY_QUEUES = ("random", "fifo")
LOAD_TYPES = ("poisson", "constant")  # --rate-stages timers (tests check sim.shared_prefix's)
# --measure-stages (tests check them against sim.fleet.run's STAGES_MEASURED)
MEASURED_STAGES = ("last", "all", "ladder")
# the multi-turn benchmark's own defaults (tests check them against kvtier.sim.multiturn)
MULTITURN_DEFAULTS = {"clients": 256, "rounds": 5, "request_tokens": 512, "output_tokens": 64}

MULTITURN_HELP = """\
Each turn sends the client's whole history (earlier requests and answers) plus a new request; a
sender pops the ready queue at Poisson times of --rate turns/s. Lines carry `round` (0 first), and
--json reports hit_rate_by_round. With --max-parallel the clients run against the simulated
server instead (closed loop). With --store-tokens, a request whose prefix continues in the L3
store prefetches it while it waits; --hicache-storage-prefetch-policy says how long it waits.
  kvtier simulate --generate multiturn --clients 16 --rounds 6 --request-tokens 2048 \\
      --output-tokens 64 --rate 1 --round-barrier --block-tokens 64 --seed 1 -o mt.jsonl
  kvtier simulate mt.jsonl --block-tokens 64 --engine sglang --model llama-3.1-8b --gpu h100 \\
      --device-tokens 30000 --hicache-ratio 2 --store-tokens 10000000 --store-gbps 0.2 \\
      --hicache-storage-prefetch-policy wait_complete --json"""

MAX_REPLICAS = 4096  # tests check it against kvtier.sim.fleet.run.MAX_REPLICAS
ROUTERS = NAMES  # the policies' CLI names (kvtier.routers)
DEFAULT_ROUTER = "sglang-cache-aware"  # sglang-router's own default policy, cache_aware
ROUTER_OPT_HELP = "help"  # --router-opt help: list the policy's options (cli/router_options.py)
FLEET_HELP = f"""\
N identical replicas (each sized by the ledger as one server is) behind a router that sees only
its own counters (and, for power-of-two, the replicas' /get_load polls). Policies:
{", ".join(ROUTERS)} (default {DEFAULT_ROUTER}).
--router-opt KEY=VALUE sets a policy's option; --router-opt help lists the policy's options (key,
default, values, what it sets; with --json, as JSON; last example). The llm-d policies'
step-stats=0 read a vLLM pod's queue and KV usage at the scrape, not as its last completed step
left them, and llm-d-precise's and dynamo-kv's step-events=0 read a replica's blocks as they
stand, not from the KV events its vLLM step published.
--sweep router=a,b,c or --sweep replicas=2,4,8 runs one fleet per value.
  kvtier simulate --generate shared-prefix --groups 16 --prompts-per-group 5 \\
      --system-tokens 6000 --question-tokens 1200 --output-tokens 256 --rate 4 \\
      --requests 800 --seed 1 -o sp.jsonl
  kvtier simulate sp.jsonl --engine sglang --model qwen3-32b --gpu h100 --tp 2 \\
      --replicas 4 --sweep router=round-robin,sglang-cache-aware --json
  kvtier simulate --router llm-d-precise --router-opt help"""
SHARED_PREFIX_HELP = """\
G groups of P prompts: a group's S-token system prompt, then a Q-token question of the prompt's
own; the G x P prompts shuffled once and sent in that order again and again, at Poisson times of
--rate, --requests in all, each asking --output-tokens. With --replicas, --rate-stages runs
inference-perf's load ladder instead (docs/fleet.md): each stage once the one before has finished,
the run measured over the last stage (--measure-stages all: every stage, as inference-perf's
summary; ladder: every stage after the first, as llm-d's reports' summary across QPS);
--load-type constant for a report's `type: constant`.
  kvtier simulate --generate shared-prefix --groups 4 --prompts-per-group 3 --system-tokens 2000 \\
      --question-tokens 200 --output-tokens 64 --rate-stages 2:10,6:10 --load-type constant \\
      --seed 1 --engine vllm --model qwen3-8b --gpu h100 --replicas 2 --router llm-d-precise"""

RANDOM_HELP = """\
The random dataset of `python -m sglang.bench_serving --dataset-name random` (or, with --bench
vllm, of `vllm bench serve`), with the same length draws for the same --seed, run against the
simulated server: every request is sent at once (or at Poisson times of --request-rate), at
most --max-concurrency at a time. --json adds ttft_s, tpot_s and itl_s {mean, p50, p90, p99},
output_tok_s and request_throughput, as the benchmarks define them.
  kvtier simulate --generate random --input-tokens 1024 --output-tokens 1024 \\
      --range-ratio 0.5 --requests 200 --seed 1 --max-concurrency 16 --gpu h100 \\
      --json -- python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct"""

FROM_LOG_HELP = """\
fit a workload to a SGLang or vLLM serving log's periodic lines (arrivals, prompt and output
lengths, reuse), calibrate the timing model's efficiencies to the throughput the log shows, and
print observed vs simulated (hit rate, throughput, queue); with --sweep, the options for that
traffic. A log with speculative decoding is fitted with its mean accept length (the deployment
must name the algorithm). Refused (exit 2, one line): a log admitting fewer than 25 requests
(the window a fit needs is said)"""

# The two HiCache policies set Deployment fields through simulate_hicache.with_policies, which
# refuses a pasted launch command's other value instead of overriding it.
# fmt: off
WRITE_POLICY = flag("--hicache-write-policy", group="simulation", commands=SIM,
                    sample=("write_back",), choices=WRITE_POLICIES,
                    help="when the host tier takes a copy of device pages (default: a pasted "
                    "launch command's --hicache-write-policy, else write_through, SGLang's "
                    "default)")
PREFETCH_POLICY = flag("--hicache-storage-prefetch-policy", group="simulation", commands=SIM,
                       sample=("wait_complete",), choices=PREFETCH_POLICIES,
                       help="how long a request waits for its L3 hit: not at all, keeping what "
                       "arrived (best_effort), until all arrived (wait_complete), or until then "
                       "or a timeout (timeout); default: the SGLang version's (best_effort up to "
                       "v0.5.11, timeout from v0.5.12)")
POLICIES = (WRITE_POLICY, PREFETCH_POLICY)

WORKLOAD = (
    flag("--generate", group="workloads", commands=SIM, sample=("agent",), choices=WORKLOADS,
         metavar="KIND", help=f"generate a workload: {', '.join(WORKLOADS)}"),
    flag("--seed", group="workloads", commands=SIM, sample=("7",), type=count(0, 1 << 63),
         default=0),
    flag("--requests", group="workloads", commands=SIM, sample=("30",),
         type=count(1, MAX_REQUESTS),
         help="requests to generate (default 1000; multiturn: clients x rounds)"),
    flag("--rate", group="workloads", commands=SIM, sample=("5",), type=number(1e-6, 1e6),
         default=1.0, help="sessions (or requests) per second"),
    flag("-o", "--output", group="workloads", commands=SIM, sample=("{tmp}/trace.jsonl",),
         help="write the generated trace here and stop (--from-log: the fitted trace, and go on)"),
)

SIMULATION = (
    flag("--device-tokens", group="simulation", commands=SIM, sample=("20000",), type=TOKENS,
         help="device KV tokens (default: the ledger's)"),
    WRITE_POLICY,
    flag("--store-tokens", group="simulation", commands=SIM, sample=("50000",),
         type=count(0, MAX_TOKENS), default=0,
         help="L3 store (disk) capacity in tokens behind the host tier (default: none)"),
    flag("--unbounded", group="simulation", commands=SIM, action="store_true",
         help="reference: a cache that never evicts"),
    flag("--lru-tokens", group="simulation", commands=SIM, sample=("5000",),
         type=counts(1, MAX_TOKENS), metavar="N[,N...]",
         help="reference: single-tier LRU of N tokens; several sizes replay in one pass"),
    flag("--warmup-fraction", group="simulation", commands=SIM, sample=("0.5",), type=FINITE,
         default=0.0,
         help="measure hit rates and latency only after the first F of the requests"),
    flag("--time-scale", group="simulation", commands=SIM, sample=("2",), type=FINITE,
         default=1.0, metavar="F",
         help="multiply arrival times by F (2: the same trace at half the load)"),
    flag("--sweep", group="simulation", commands=SIM, sample=("hicache-ratio=1,4",),
         metavar="NAME=V1,V2",
         help=f"one run per value; NAME one of {', '.join(SWEEPS)}, or (a fleet) router, replicas"),
)

MULTITURN = (
    flag("--clients", group="multiturn", commands=SIM, sample=("4",),
         type=count(1, MAX_REQUESTS), metavar="N",
         help=f"conversations (default {MULTITURN_DEFAULTS['clients']})"),
    flag("--rounds", group="multiturn", commands=SIM, sample=("3",), type=count(1, 1 << 20),
         metavar="R", help=f"turns per conversation (default {MULTITURN_DEFAULTS['rounds']})"),
    flag("--request-tokens", group="multiturn", commands=SIM, sample=("100",),
         type=count(1, 1 << 27), metavar="L",
         help=f"new tokens each turn (default {MULTITURN_DEFAULTS['request_tokens']})"),
    flag("--output-tokens", group="multiturn", commands=SIM, sample=("10",),
         type=count(1, 1 << 27), metavar="O",
         help=f"answer tokens each turn (default {MULTITURN_DEFAULTS['output_tokens']})"),
    flag("--round-barrier", group="multiturn", commands=SIM, action="store_true",
         help="send a round's turns only after the whole previous round"),
    flag("--ready-queue", group="multiturn", commands=SIM, sample=("fifo",),
         choices=READY_QUEUES, help="which ready turn is sent next (default random)"),
    flag("--max-parallel", group="multiturn", commands=SIM, sample=("2",),
         type=count(1, MAX_REQUESTS), metavar="N",
         help="run the clients against the simulated server (closed loop): a turn goes out only "
         "after the client's previous answer, at most N at once (the benchmark's default: 128); "
         "without it the trace is open loop, each answer taken as instant"),
)
BLOCK_TOKENS = flag("--block-tokens", group="multiturn", commands=SIM, sample=("32",),
                    type=count(1, 1 << 20), default=None, metavar="B",
                    help="tokens per hashed block of a generated or read trace (default 512, "
                    "Mooncake's)")

PREFETCH = (
    PREFETCH_POLICY,
    flag("--prefetch-threshold", group="simulation", commands=SIM, sample=("10000",),
         type=count(0, 1 << 40), metavar="TOKENS",
         help="fewest store-hit tokens worth a prefetch (default 256)"),
    flag("--prefetch-timeout-base", group="simulation", commands=SIM, sample=("0.001",),
         type=SECONDS, metavar="S",
         help="timeout = base + per-ki-token x tokens / 1024, at most max "
         "(default: 1, 0.25, none up to v0.5.11; 2, 0.1, 30 from v0.5.12)"),
    flag("--prefetch-timeout-per-ki-token", group="simulation", commands=SIM,
         sample=("0.001",), type=SECONDS, metavar="S"),
    flag("--prefetch-timeout-max", group="simulation", commands=SIM, sample=("0.001",),
         type=SECONDS, metavar="S"),
)

FLEET = (
    flag("--replicas", group="fleet", commands=SIM, sample=("2",),
         type=count(1, MAX_REPLICAS), metavar="N", help="identical servers (1)"),
    flag("--router", group="fleet", commands=SIM, sample=("round-robin",), metavar="POLICY",
         help=f"routing policy: {', '.join(ROUTERS)}"),
    flag("--router-opt", group="fleet", commands=SIM, sample=("cache-threshold=0.9",),
         action="append", default=[], metavar="KEY=VALUE",
         help="an option of the policy (repeatable), e.g. cache-threshold=0.5, step-events=0; "
         f"{ROUTER_OPT_HELP} lists them"),
    flag("--shared-store-tokens", group="fleet", commands=SIM, sample=("10000000",),
         type=count(1, MAX_TOKENS), metavar="N",
         help="one L3 store of N tokens that every replica writes to and reads from"),
    flag("--shared-store-gbps", group="fleet", commands=SIM, sample=("0.1",), type=GBPS,
         metavar="G", help="its read GB/s, shared"),
    flag("--shared-store-latency-ms", group="fleet", commands=SIM, sample=("50",),
         type=number(0.0, 1e6), metavar="MS", help="time to a read's first byte (default 0)"),
    flag("--jobs", group="fleet", commands=SIM, sample=("2",), type=count(1, 256), default=1,
         metavar="N",
         help="run a fleet sweep's points in N processes (default 1; results are the same)"),
    flag("--ray", group="fleet", commands=SIM, sample=("127.0.0.1:6379",), nargs="?", const="",
         metavar="ADDRESS",
         help="run a fleet sweep's points as tasks on the Ray cluster at ADDRESS (alone: "
         "RAY_ADDRESS); needs the ray package (pip install 'kvtier[ray]')"),
)

SHARED_PREFIX = (
    flag("--groups", group="shared_prefix", commands=SIM, sample=("4",),
         type=count(1, MAX_REQUESTS), metavar="G"),
    flag("--prompts-per-group", group="shared_prefix", commands=SIM, sample=("3",),
         type=count(1, MAX_REQUESTS), metavar="P"),
    flag("--system-tokens", group="shared_prefix", commands=SIM, sample=("1000",),
         type=count(0, 1 << 27), metavar="S"),
    flag("--question-tokens", group="shared_prefix", commands=SIM, sample=("100",),
         type=count(1, 1 << 27), metavar="Q"),
    flag("--rate-stages", group="shared_prefix", commands=SIM, sample=("2:3,4:2",),
         type=rate_stages, metavar="RATE:SECONDS,...",
         help="inference-perf's load stages in place of --rate and --requests: each sends "
         "RATE x SECONDS requests once the one before has finished; a fleet, measured over the "
         "last stage"),
    flag("--load-type", group="shared_prefix", commands=SIM, sample=("constant",),
         choices=LOAD_TYPES, metavar="TYPE",
         help="the --rate-stages timer, inference-perf's load.type: poisson (default) or "
         "constant (a stage's gaps drawn at once, scaled to end at its last second)"),
    flag("--measure-stages", group="shared_prefix", commands=SIM, sample=("all",),
         choices=MEASURED_STAGES, metavar="WHICH",
         help="the --rate-stages requests measured: last (default: the last stage, "
         "inference-perf's per-stage report), all (every stage's together, the first "
         "included: its summary report) or ladder (every stage's but the first, output tokens/s "
         "the mean of the stages' own: llm-d's reports' summary across QPS)"),
)

BENCH = (
    flag("--input-tokens", group="bench", commands=SIM, sample=("100",),
         type=count(1, 1 << 27), metavar="L",
         help="--random-input-len (default 1024, both tools')"),
    flag("--range-ratio", group="bench", commands=SIM, sample=("0.5",), type=number(0.0, 1.0),
         metavar="R",
         help="--random-range-ratio: lengths in [L x R, L] (sglang) or [L(1-R), L(1+R)] "
         "(vllm, R < 1); default 0.0, both tools'"),
    flag("--max-concurrency", group="bench", commands=SIM, sample=("4",),
         type=count(1, MAX_REQUESTS), metavar="C", help="requests out at once (default: no cap)"),
    flag("--request-rate", group="bench", commands=SIM, sample=("5",), type=number(1e-6, 1e6),
         metavar="R",
         help="requests per second, Poisson (default: all at once, the tools' inf)"),
    flag("--bench", group="bench", commands=SIM, sample=("vllm",), choices=CLIENTS,
         help="whose draws: sglang (default) or vllm"),
    flag("--bench-version", group="bench", commands=SIM, sample=("0.5.2",), metavar="V",
         type=release(sglang_versions.DEFAULT.resolve, "--bench-version"),
         help="the sglang release whose bench_serving draws (default 0.5.7 and later: outputs "
         "from max(int(O x R), 1); up to 0.5.6 from int(O x R))"),
    flag("--special-tokens", group="bench", commands=SIM, sample=("1",), type=count(0, 16),
         metavar="N",
         help="the tokenizer's num_special_tokens_to_add() (Llama 3, DeepSeek: 1 BOS; Qwen: "
         "0); the tools take it off the input length (default 0)"),
)

TIMING = (
    flag("--compute-efficiency", group="timing", commands=SIM, sample=("0.1",), type=FRACTION,
         help="share of dense bf16 peak prefill reaches (default: an A100 0.75, else 0.4)"),
    flag("--hbm-efficiency", group="timing", commands=SIM, sample=("0.1",), type=FRACTION,
         help="share of HBM bandwidth decode reaches"),
    flag("--bf16-tflops", group="timing", commands=SIM, sample=("50",), type=TFLOPS,
         help="dense bf16 TFLOP/s per GPU (default: catalog)"),
    flag("--hbm-gbps", group="timing", commands=SIM, sample=("500",), type=GBPS,
         help="HBM GB/s per GPU (default: catalog)"),
    flag("--host-gbps", group="timing", commands=SIM, sample=("1",), type=GBPS,
         help="host-side GB/s of the node shared by GPUs loading at once "
         "(default: --pcie-gbps x GPUs per node / 2)"),
    flag("--store-gbps", group="timing", commands=SIM, sample=("0.1",), type=GBPS,
         help="L3 store read GB/s of the node"),
    flag("--gpus-per-node", group="timing", commands=SIM, field="gpus_per_node",
         sample=("16",), type=GPUS, dest="gpus", help="same as --gpus"),
    flag("--accept-length", group="timing", commands=SIM, sample=("2",),
         type=number(0.0, 1e3), metavar="A",
         help="speculative decoding: tokens a request commits per decode iteration (SGLang's "
         "`accept len`), from 1 to the draft steps + 1; default per method"),
    flag("--allreduce-gbps", group="timing", commands=SIM, sample=("100",), type=GBPS,
         help="all-reduce bus bandwidth between TP ranks (default: catalog)"),
    flag("--allreduce-latency-us", group="timing", commands=SIM, sample=("5",),
         type=number(0.0, 1e5), metavar="US",
         help="one all-reduce's fixed cost (default: catalog)"),
    flag("--step-overhead-ms", group="timing", commands=SIM, sample=("1",),
         type=number(0.0, 1e4), metavar="MS",
         help="fixed cost of a forward pass: decode, verify, each draft pass, a prefill batch "
         "(CUDA-graph replay, sampling, scheduler; default 1.35, docs/validation.md)"),
)

FITTED = (
    flag("--from-log", group="from_log", commands=SIM,
         sample=("examples/logs/sglang-serving-queue.log",), metavar="LOG",
         help=FROM_LOG_HELP),
    flag("--mean-prompt-tokens", group="from_log", commands=SIM, sample=("100",),
         type=count(1, 1 << 27), metavar="N",
         help="mean prompt length where the log cannot count requests (vLLM)"),
    flag("--mean-output-tokens", group="from_log", commands=SIM, sample=("100",),
         type=count(1, 1 << 27), metavar="N",
         help="mean output length where the log prints no generation throughput"),
)
# fmt: on

ROWS = (
    *WORKLOAD,
    *SIMULATION,
    *MULTITURN,
    BLOCK_TOKENS,
    *PREFETCH,
    *FLEET,
    *SHARED_PREFIX,
    *BENCH,
    *TIMING,
    *FITTED,
)
