"""The SGLang build a deployment's GPU is served by, and what it does to the default fraction.

ROCm (an AMD catalog GPU): server_args.py ServerArgs._handle_gpu_memory_settings (v0.5.2, v0.5.4,
v0.5.9) and arg_groups/memory_hook.py handle_gpu_memory_settings (v0.5.23) have no is_hip()
branch, so the default --mem-fraction-static, chunked_prefill_size and cuda_graph_max_bs follow
the CUDA rules (defaults.py) over get_device_memory_capacity's figure, which amd-smi / rocm-smi
gives in MiB there; is_hip() changes only the Triton attention's KV splits
(_handle_amd_specifics). Ascend NPU builds do differ (v0.5.4: is_npu() tiers of chunk and graph
batch inside _handle_gpu_memory_settings; v0.5.9: hardware_backend/npu/utils.py
set_default_server_args, page size 128, tiers by npu-smi memory) and are not modelled: no NPU is
in the catalog, so plan refuses the card by name.
"""

from __future__ import annotations

from kvtier.engines.deployment import Deployment
from kvtier.errors import KvtierError
from kvtier.model.gpu import resolve_gpu

NPU = (
    "SGLang's Ascend NPU build (--device npu) sets its own chunk, CUDA-graph batch and page size "
    "(v0.5.4: is_npu() tiers in _handle_gpu_memory_settings; v0.5.9: hardware_backend/npu/utils.py "
    "set_default_server_args, page size 128) over npu-smi's memory, and kvtier does not model it"
)


def check_device(d: Deployment) -> None:
    """Fail closed on a device whose build kvtier does not model (cuda covers ROCm)."""
    if d.device is None or d.device == "cuda":
        return
    if d.device == "npu":
        raise KvtierError(NPU)
    raise KvtierError(f"SGLang on --device {d.device} is not modelled (only cuda: CUDA and ROCm)")


def platform_notes(d: Deployment) -> tuple[str, ...]:
    """One sentence when the GPU is served by SGLang's ROCm build and the fraction is its
    default."""
    if d.gpu is None or d.mem_fraction is not None:
        return ()
    try:
        vendor = resolve_gpu(d.gpu).vendor
    except KvtierError:
        return ()
    if vendor != "AMD":
        return ()
    return (
        f"ROCm build ({vendor} {d.gpu}): SGLang's default --mem-fraction-static, chunk and "
        "CUDA-graph batch follow the CUDA rules over the card's memory as amd-smi reports it "
        "(no is_hip() branch in _handle_gpu_memory_settings of v0.5.2, v0.5.4 and v0.5.9 or "
        "memory_hook.py of v0.5.23)",
    )
