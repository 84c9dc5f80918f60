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
hardware_backend/npu/utils.py set_default_server_args), but pick the default fraction from their
own chunk and graph-batch tiers over npu-smi's memory (v0.5.4: is_npu() tiers inside
_handle_gpu_memory_settings; v0.5.9: set_default_server_args), which kvtier does not model: an
NPU deployment needs --mem-fraction-static (a log states it in server_args), else fails closed.
"""

from __future__ import annotations

from kvtier.engines.deployment import Deployment
from kvtier.errors import KvtierError
from kvtier.model.gpu import resolve_gpu

NPU = (
    "SGLang's Ascend NPU build (--device npu) picks its default --mem-fraction-static from its "
    "own chunk and CUDA-graph batch tiers over npu-smi's memory (v0.5.4: is_npu() tiers in "
    "_handle_gpu_memory_settings; v0.5.9: hardware_backend/npu/utils.py set_default_server_args), "
    "which kvtier does not model: pass --mem-fraction-static"
)
NPU_PAGE = 128  # the ascend backend's page size when --page-size is unset (v0.5.4, v0.5.9)


def check_device(d: Deployment) -> None:
    """Fail closed on a device whose build kvtier does not model (cuda covers ROCm; npu with
    its fraction given)."""
    if d.device is None or d.device == "cuda":
        return
    if d.device == "npu":
        if d.mem_fraction is None:
            raise KvtierError(NPU)
        return
    raise KvtierError(f"SGLang on --device {d.device} is not modelled (only cuda: CUDA and ROCm)")


def default_page(d: Deployment) -> int | None:
    """The page size a device's build sets when --page-size is unset (None: the engine's)."""
    return NPU_PAGE if d.device == "npu" else None


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
        return (
            "Ascend NPU build: the pool sized as on CUDA (profile_max_num_token, v0.5.9) at the "
            f"stated fraction, on pages of {d.page_size or NPU_PAGE} tokens",
        )
    if d.mem_fraction is not None or not rocm(d):
        return ()
    return (
        f"ROCm build (AMD {d.gpu}): SGLang's default --mem-fraction-static, chunk and CUDA-graph "
        "batch take its CUDA rules over the card's memory as amd-smi reports it, without a "
        "prefill CUDA-graph reserve (is_cuda() only) and, in v0.4.7, without the 0.79 above "
        "180,000 MiB",
    )
