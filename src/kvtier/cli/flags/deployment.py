"""The flags that describe a deployment (plan, explain, advise, simulate), advise's and explain's
own flags, and the output flags they share."""

from __future__ import annotations

from kvtier.cli.flags.row import ADVISE, EXPLAIN, PLAN, SIMULATE, flag, used
from kvtier.cli.values import (
    FRACTION,
    GBPS,
    GIB,
    GPUS,
    HOST_GB,
    MAX_GIB,
    MAX_RATIO,
    TOKENS,
    contexts,
    count,
    number,
    release,
)
from kvtier.engines.sglang import versions as sglang_versions
from kvtier.engines.sglang.flags import DEVICES
from kvtier.engines.vllm import versions as vllm_versions

PAGE = count(1, 1 << 20)
MAX_SLO_S = 1e6
# advise --objective's names (tests check them against kvtier.sim.advise.OBJECTIVES)
OBJECTIVES = ("ttft-p90", "throughput", "cost")
STARTUP = count(1, 1 << 16)
CARD_GIB = number(1.0, MAX_GIB)

BUILT = used(PLAN, ADVISE, SIMULATE)  # commands that build the deployment from the flags
EVERY = {**BUILT, **used(EXPLAIN)}
FROM_LOG = "the log states the deployment (kvtier plan and advise take it)"
NOT_EXPLAIN = {**BUILT, EXPLAIN: FROM_LOG}
RAN = "the log states what ran (kvtier plan and advise take it)"
# the engines whose deployments refuse a flag, and why
SGLANG_ONLY = {"vllm": "an SGLang flag; a vLLM deployment does not use it"}
VLLM_ONLY = {"sglang": "a vLLM flag; an SGLang deployment does not use it"}
HICACHE = {"vllm": "an SGLang HiCache flag; a vLLM deployment's host tier is --kv-offloading-size"}
SGLANG_FIGURE = {"vllm": "an SGLang log's figure; a vLLM deployment does not use it"}
VLLM_FIGURE = {"sglang": "a vLLM log's figure; an SGLang deployment does not use it"}

# fmt: off
DEPLOYMENT = (
    flag("--engine", group="deployment", commands=EVERY, field="engine", sample=("vllm",),
         choices=("sglang", "vllm")),
    flag("--model", group="deployment", commands=EVERY, field="model", sample=("qwen3-8b",),
         help="catalog id, config.json path or model directory"),
    flag("--gpu", group="deployment", commands=EVERY, field="gpu", sample=("a100",),
         help="GPU catalog name, e.g. 'H100 80GB', 'RTX PRO 6000'"),
    flag("--gpus", group="deployment", commands=EVERY, field="gpus_per_node", sample=("16",),
         type=GPUS, help="GPUs per node (default: tp x pp)"),
    flag("--tp", group="deployment", commands=EVERY, field="tp", sample=("2",), type=GPUS),
    flag("--pp", group="deployment", commands=EVERY, field="pp", sample=("2",), type=GPUS),
    flag("--dp", group="deployment", commands=EVERY, field="dp", sample=("2",), type=GPUS,
         help="data-parallel size (SGLang --dp-size, vLLM --data-parallel-size); with SGLang's "
         "--enable-dp-attention after --, tp / dp attention ranks of their own pool and, in "
         "simulate, their own radix cache"),
    flag("--mem-fraction-static", group="deployment", commands=EVERY, field="mem_fraction",
         sample=("0.5",), type=FRACTION),
    flag("--gpu-memory-utilization", group="deployment", commands=EVERY, field="mem_fraction",
         sample=("0.5",), type=FRACTION),
    flag("--device", group="deployment", commands=NOT_EXPLAIN, field="device", sample=("npu",),
         choices=DEVICES, engines=SGLANG_ONLY,
         help="SGLang --device: cuda (CUDA and ROCm builds), or npu with --mem-fraction-static"),
    flag("--kv-cache-dtype", group="deployment", commands=EVERY, field="kv_cache_dtype",
         sample=("fp8_e5m2",)),
    flag("--dtype", group="deployment", commands={**BUILT, EXPLAIN: RAN}, field="dtype",
         sample=("float32",), type=str.lower,
         choices=("auto", "half", "float16", "bfloat16", "float", "float32"),
         help="model dtype (default auto: vLLM resolves a float32 config by GPU and version)"),
    flag("--quantization", group="deployment", commands={**BUILT, EXPLAIN: RAN},
         field="quantization", sample=("fp8",),
         help="fp8 quantizes an unquantized checkpoint's Linear and MoE weights at load; on a "
         "quantized checkpoint it must name the checkpoint's method"),
    flag("--page-size", group="deployment", commands=EVERY, field="page_size", sample=("64",),
         type=PAGE),
    flag("--block-size", group="deployment", commands=EVERY, field="page_size", sample=("64",),
         type=PAGE),
    flag("--context-length", group="deployment", commands=EVERY, field="context_length",
         sample=("4096",), type=TOKENS),
    flag("--max-model-len", group="deployment", commands=EVERY, field="context_length",
         sample=("4096",), type=TOKENS),
    flag("--max-running-requests", "--max-num-seqs", group="deployment", commands=EVERY,
         field="max_running_requests", sample=("7",), type=TOKENS),
    flag("--max-total-tokens", group="deployment", commands=EVERY, field="max_total_tokens",
         sample=("20000",), type=TOKENS, engines=SGLANG_ONLY),
    flag("--chunked-prefill-size", "--max-num-batched-tokens", group="deployment",
         commands=EVERY, field="chunked_prefill_size", sample=("1024",), type=TOKENS),
    flag("--cuda-graph-max-bs", group="deployment", commands=EVERY, field="cuda_graph_max_bs",
         sample=("8",), type=TOKENS, engines=SGLANG_ONLY),
    flag("--speculative-algorithm", group="deployment", commands=EVERY,
         field="speculative_algorithm", sample=("eagle",), type=str.upper),
    flag("--speculative-draft-model-path", "--draft-model", group="deployment", commands=EVERY,
         field="draft_model", sample=("Qwen/Qwen3-0.6B",), dest="draft_model", engines=SGLANG_ONLY),
    flag("--speculative-num-draft-tokens", group="deployment", commands=EVERY,
         field="speculative_num_draft_tokens", sample=("3",), type=TOKENS, engines=SGLANG_ONLY),
    flag("--hicache-ratio", group="deployment", commands=NOT_EXPLAIN, field="hicache.ratio",
         sample=("3",), type=number(0.0, MAX_RATIO), engines=HICACHE),
    flag("--hicache-size", group="deployment", commands=NOT_EXPLAIN, field="hicache.size_gb",
         sample=("100",), type=HOST_GB, help="host pool per rank, decimal GB", engines=HICACHE),
    flag("--kv-cache-memory-bytes", group="deployment", commands=NOT_EXPLAIN,
         field="kv_cache_memory_bytes", sample=("30000000000",), type=count(1, 1 << 50),
         engines=VLLM_ONLY),
    flag("--mamba-full-memory-ratio", group="hybrid", commands=EVERY,
         field="hybrid.mamba_full_memory_ratio", sample=("0.5",),
         type=number(0.0, MAX_RATIO, above=True),
         help="SGLang: recurrent-state memory / full-attention KV memory (default 0.9)",
         engines=SGLANG_ONLY),
    flag("--max-mamba-cache-size", group="hybrid", commands=EVERY,
         field="hybrid.max_mamba_cache_size", sample=("16",), type=TOKENS,
         help="SGLang: state slots, fixed", engines=SGLANG_ONLY),
    flag("--mamba-ssm-dtype", "--mamba-ssm-cache-dtype", group="hybrid", commands=EVERY,
         field="hybrid.mamba_ssm_dtype", sample=("float16",),
         choices=("auto", "float32", "bfloat16", "float16"),
         help="SSM state dtype (default: the config's mamba_ssm_dtype, else the engine's)"),
    flag("--disable-radix-cache", group="hybrid", commands=EVERY,
         field="hybrid.disable_radix_cache", action="store_true", default=None,
         help="SGLang: one state slot per running request instead of three", engines=SGLANG_ONLY),
    flag("--enable-prefix-caching", group="hybrid", commands=EVERY,
         field="hybrid.enable_prefix_caching", action="store_true", default=None,
         help="vLLM: two state blocks per request per linear-attention group instead of one",
         engines=VLLM_ONLY),
    flag("--sglang-version", group="deployment", commands=EVERY, field="engine_version",
         sample=("0.4.0",), type=release(sglang_versions.DEFAULT.resolve, "--sglang-version"),
         help=f"SGLang version whose rules apply ({sglang_versions.DEFAULT.known}). "
              f"{sglang_versions.DEFAULT.sentence}",
         engines={"vllm": "SGLang's release; a vLLM deployment takes --vllm-version"}),
    flag("--vllm-version", group="deployment", commands=EVERY, field="engine_version",
         sample=("0.10.0",), type=release(vllm_versions.DEFAULT.resolve, "--vllm-version"),
         help=f"vLLM version whose rules apply ({vllm_versions.DEFAULT.known}). "
              f"{vllm_versions.DEFAULT.sentence}",
         engines={"sglang": "vLLM's release; an SGLang deployment takes --sglang-version"}),
)
# fmt: on

# Measured figures (`MEASURED_FIGURE` names the one each sets); explain reads the first five from
# the log.
_ALL: dict[str, str] = {}
_MEASURED = (
    (
        "--free-before-load-gib",
        "SGLang: 'Load weight begin. avail mem' (min over ranks)",
        "90",
        SGLANG_FIGURE,
    ),
    (
        "--free-after-load-gib",
        "SGLang: 'Load weight end. avail mem' (min over ranks)",
        "60",
        SGLANG_FIGURE,
    ),
    ("--weights-gib", "weights per GPU: vLLM 'Model loading took', SGLang 'mem usage'", "20", _ALL),
    ("--activation-gib", "vLLM: torch peak increase during profiling", "5", VLLM_FIGURE),
    ("--non-torch-gib", "vLLM: non-torch increase during profiling", "1", VLLM_FIGURE),
)
_MEASURED_ALSO_EXPLAIN = (
    (
        "--cuda-graph-gib",
        "CUDA graphs: SGLang 'Capture cuda graph end. mem usage', vLLM estimate",
        _ALL,
    ),
    ("--draft-weights-gib", "speculative draft weights per GPU", SGLANG_FIGURE),
    ("--free-end-gib", "SGLang: final 'available_gpu_mem'", SGLANG_FIGURE),
)
MEASURED = (
    *(
        flag(name, group="measured", commands=NOT_EXPLAIN, sample=(value,), engines=engines,
             type=GIB, help=text)
        for name, text, value, engines in _MEASURED
    ),
    *(
        flag(name, group="measured", commands=EVERY, sample=("3",), engines=engines, type=GIB,
             help=text)
        for name, text, engines in _MEASURED_ALSO_EXPLAIN
    ),
    flag("--gpu-mem-gib", group="measured", commands=EVERY, sample=("70",), type=CARD_GIB,
         help="card memory in GiB (vLLM: the total_memory it logs); overrides --gpu's"),
)  # fmt: skip
# a measured flag's dest -> the Measured figure it sets, a record's as `free.before_load_gib`
_IN_RECORDS = {
    "free_before_load_gib": "free.before_load_gib",
    "free_after_load_gib": "free.after_load_gib",
    "free_end_gib": "free.end_gib",
    "activation_gib": "profile.activation_gib",
    "non_torch_gib": "profile.non_torch_gib",
}
MEASURED_FIGURE = {row.dest: _IN_RECORDS.get(row.dest, row.dest) for row in MEASURED}

# fmt: off
OUTPUT = (
    flag("--context", group="output",
         commands={**used(PLAN, ADVISE), EXPLAIN: FROM_LOG,
                   SIMULATE: "the trace states the request lengths"},
         sample=("4k",), type=contexts,
         help="context lengths for concurrency, e.g. 8k,32k (default 8k,32k,128k,max)"),
    flag("--pcie-gbps", group="output",
         commands={**NOT_EXPLAIN, PLAN: "plan prices no transfer (kvtier advise and simulate "
                   "take it)"},
         sample=("7",), type=GBPS,
         help="host-to-GPU GB/s per card (default: catalog)"),
    flag("--json", group="output", commands=EVERY, action="store_true",
         help="machine-readable output"),
    flag("--quiet", group="output", commands=EVERY, action="store_true",
         help="only the key figures, as `key value`"),
)

# advise's flags that only the --workload run reads
WORKLOAD_ONLY = (
    flag("--objective", group="advice", commands=used(ADVISE), sample=("throughput",),
         choices=OBJECTIVES, default="ttft-p90",
         help="what --workload ranks by: the lowest TTFT p90, the highest output throughput, "
         "or the least cost (extra GPUs, then host RAM, then TTFT p90) (default ttft-p90)"),
    flag("--ttft-p90-max", group="advice", commands=used(ADVISE), sample=("2",),
         type=number(0.0, MAX_SLO_S, above=True), metavar="SECONDS",
         help="SLO: an option whose TTFT p90 is above this ranks after those that meet it"),
    flag("--jobs", group="advice", commands=used(ADVISE), sample=("2",), type=count(1, 256),
         default=1, help="simulate the --workload options in N processes"),
    flag("--html", group="advice", commands=used(ADVISE), metavar="FILE",
         sample=("{tmp}/advise.html",),
         help="--workload: also write the answer as one self-contained HTML file, with a "
         "chart of each option's TTFT p90 and throughput against the baseline"),
    flag("--mean-prompt-tokens", group="advice", commands=used(ADVISE), sample=("100",),
         type=TOKENS, help="a serving log --workload: as `simulate --from-log` takes it"),
    flag("--mean-output-tokens", group="advice", commands=used(ADVISE), sample=("100",),
         type=TOKENS, help="a serving log --workload: as `simulate --from-log` takes it"),
)

ADVICE = (
    flag("--margin-gib", group="advice", commands=used(ADVISE), sample=("5",), type=GIB,
         default=2.0, help="GiB to keep free at the end of startup when raising the fraction"),
    flag("--host-ram-gb", group="advice", commands=used(ADVISE), sample=("64",), type=HOST_GB,
         help="host RAM available on the node (GB, as `free -g` available)"),
    flag("--load-tokens", group="advice", commands=used(ADVISE), sample=("1000",), type=TOKENS,
         default=32768, help="tokens to reload from host when pricing the host tier"),
    flag("--node-host-gbps", group="advice", commands=used(ADVISE), sample=("10",), type=GBPS,
         help="host-to-GPU GB/s the node sustains in total (shared by its GPUs)"),
    flag("--target-requests", group="advice", commands=used(ADVISE), sample=("64",),
         type=TOKENS, help="requests that must run at once (with one --context length)"),
    flag("--workload", group="advice", commands=used(ADVISE), action="append",
         metavar="SOURCE", sample=("tests/fixtures/advise/chat-40.jsonl",),
         help="simulate every option on this traffic and rank them: a Mooncake trace, a "
         "request log, a serving log (observe's verdict first) or a saved /metrics text "
         "(the verdict; give a second --workload to replay). Pairs of the top three options "
         "that beat the baseline (at most 3) are simulated too"),
    *WORKLOAD_ONLY,
)

EXPLAIN_OWN = (
    flag("--host-ram-gb", group="", commands=used(EXPLAIN), field="host_ram_gb",
         sample=("64",), type=HOST_GB,
         help="host RAM available per node, decimal GB (HiCache check)"),
    flag("--startup", group="", commands=used(EXPLAIN), metavar="K", sample=("1",),
         type=STARTUP, help="the server start to explain when the log holds several (1 the "
         "first; default: the last that printed memory lines)"),
    flag("--nvidia-smi", group="", commands=used(EXPLAIN), metavar="FILE",
         sample=("tests/fixtures/observe/nvidia-smi/kimi-k25-serving.txt",),
         help="nvidia-smi's table or --query-gpu=index,memory.used,memory.total CSV, taken "
         "while serving: its 'used' reconciled item by item with the log's ledger"),
)
# fmt: on
