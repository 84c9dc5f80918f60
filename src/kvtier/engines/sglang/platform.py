"""The SGLang build a deployment's GPU is served by, and what it does to the default fraction.

ROCm (an AMD catalog GPU) takes the CUDA rules of defaults.py over get_device_memory_capacity's
figure (amd-smi / rocm-smi, MiB) with two differences, both where SGLang asks is_cuda(): v0.4.7's
0.79 for cards above 180,000 MiB is CUDA-only (an MI300X takes the > 96 GiB formula), and no
prefill CUDA graph is reserved (piecewise graphs are off on non-CUDA hardware in v0.5.10 - v0.5.21,
default_prefill_backend is breakable only on CUDA, disabled elsewhere from v0.5.22).
tests/test_oracle_sglang.py runs every release's own code with is_hip() True and agrees.
Ascend NPU builds count the pool as on CUDA (model_runner_kv_cache_mixin.py profile_max_num_token
has no NPU branch in v0.5.9; the ascend pools are then allocated for that count) on a page of 128
tokens unless --page-size is given (v0.5.4 _handle_page_size for the ascend backend, v0.5.9
hardware_backend/npu/utils.py set_default_server_args). Their default fraction is the CUDA
rule's own arithmetic over get_npu_memory_capacity's MiB (the card's memory here), with every
is_cuda()-only term off as on ROCm, after the NPU build has set chunked_prefill_size and
cuda_graph_max_bs from its own tiers (`npu_tiers`): v0.5.4-v0.5.5 two is_npu() tiers inside
_handle_gpu_memory_settings; from v0.5.7 set_default_server_args, which runs before
_handle_gpu_memory_settings (v0.5.7 - v0.5.23). --device npu arrives in v0.4.7, whose
get_device_memory_capacity has no npu branch (the rule runs without the card's memory).
A DSA model on NPU skips the DP-attention and page rules kvtier models, so it needs its fraction.
"""

from __future__ import annotations

from dataclasses import replace

from kvtier.engines.deployment import Deployment
from kvtier.engines.sglang.versions import V0_4_7, V0_4_8, V0_5_4, V0_5_7
from kvtier.engines.version import Version
from kvtier.errors import KvtierError
from kvtier.model.gpu import resolve_gpu

NPU_DSA = (
    "SGLang's Ascend NPU build (--device npu) serves a DSA model without the DP-attention and "
    "page rules kvtier models for it: pass --mem-fraction-static"
)
NPU_PAGE = 128  # the ascend backend's page size when --page-size is unset (v0.5.4, v0.5.9)


def check_device(d: Deployment, v: Version, dsa: bool = False) -> None:
    """Fail closed on a device whose build kvtier does not model (cuda covers ROCm; npu from
    v0.4.7, with its fraction given for a DSA model)."""
    if d.device is None or d.device == "cuda":
        return
    if d.device == "npu":
        if v < V0_4_7:
            raise KvtierError(f"SGLang {v} has no --device npu (its choices gain npu in v0.4.7)")
        if dsa and d.mem_fraction is None:
            raise KvtierError(NPU_DSA)
        return
    modelled = "cuda (ROCm included) and npu are"
    raise KvtierError(f"SGLang on --device {d.device} is not modelled ({modelled})")


def default_page(d: Deployment) -> int | None:
    """The page size a device's build sets when --page-size is unset (None: the engine's)."""
    return NPU_PAGE if d.device == "npu" else None


def npu_tiers(gpu: int | None, tp: int, v: Version) -> tuple[int, int] | None:
    """chunked_prefill_size and cuda_graph_max_bs the NPU build sets by its memory (MiB) before
    the CUDA tiers fill what is still unset; None where the CUDA tiers decide. v0.5.4-v0.5.5:
    is_npu() tiers in _handle_gpu_memory_settings, 20-32 GiB and 60-64 GiB (upper bound out);
    from v0.5.7: set_default_server_args, up to 32 GiB and up to 64 GiB (bounds in)."""
    if gpu is None or v < V0_5_4:
        return None
    small_tp = tp < 4
    if v < V0_5_7:
        if 20 * 1024 <= gpu < 32 * 1024:
            return 32768, 16 if small_tp else 64
        if 60 * 1024 <= gpu < 64 * 1024:
            return 32768, 64 if small_tp else 128
        return None
    if gpu <= 32 * 1024:
        return 4096, 16 if small_tp else 64
    if gpu <= 64 * 1024:
        return 8192, 64 if small_tp else 256
    return None


def device_memory(d: Deployment, gpu: int | None, v: Version) -> int | None:
    """The memory (MiB) get_device_memory_capacity hands the fraction rule: none on NPU in
    v0.4.7, whose function has no npu branch yet (get_npu_memory_capacity from v0.4.8)."""
    return None if d.device == "npu" and v < V0_4_8 else gpu


def as_built(d: Deployment, gpu: int | None, v: Version) -> Deployment:
    """`d` as its build hands it to the fraction rule: on NPU, its tiers fill the unset chunk
    and CUDA-graph batch."""
    tiers = npu_tiers(gpu, d.tp, v) if d.device == "npu" else None
    if tiers is None:
        return d
    chunk = d.chunked_prefill_size if d.chunked_prefill_size is not None else tiers[0]
    max_bs = d.cuda_graph_max_bs if d.cuda_graph_max_bs is not None else tiers[1]
    return replace(d, chunked_prefill_size=chunk, cuda_graph_max_bs=max_bs)


def not_cuda(d: Deployment) -> bool:
    """Whether SGLang's is_cuda() is False for `d`: its ROCm build or its NPU build."""
    return d.device == "npu" or rocm(d)


def rocm(d: Deployment) -> bool:
    """Whether SGLang's ROCm build serves the deployment's GPU (an AMD catalog card)."""
    if d.gpu is None:
        return False
    try:
        return resolve_gpu(d.gpu).vendor == "AMD"
    except KvtierError:
        return False


def platform_notes(d: Deployment) -> tuple[str, ...]:
    """One sentence when SGLang's ROCm build picks the fraction, or its NPU build runs."""
    if d.device == "npu":
        note = (
            "Ascend NPU build: the pool sized as on CUDA (profile_max_num_token, v0.5.9) on pages "
            f"of {d.page_size or NPU_PAGE} tokens"
        )
        if d.mem_fraction is not None:
            return (note,)
        return (
            f"{note}; the default fraction is the CUDA rule over the card's memory with the NPU "
            "chunk and CUDA-graph batch tiers and no is_cuda()-only term, so it moves with the "
            "card's memory as torch_npu reports it (v0.5.4-v0.5.5 reserve 48 GiB for a "
            "32,768-token chunk on 20-32 and 60-64 GiB cards)",
        )
    if d.mem_fraction is not None or not rocm(d):
        return ()
    return (
        f"ROCm build (AMD {d.gpu}): SGLang's default --mem-fraction-static, chunk and CUDA-graph "
        "batch take its CUDA rules over the card's memory as amd-smi reports it, without a "
        "prefill CUDA-graph reserve (is_cuda() only) and, in v0.4.7, without the 0.79 above "
        "180,000 MiB",
    )
