"""Run SGLang's own default-memory code over configurations; print what it picked as JSON.

Executed by a bare interpreter (`python3 -I -S`), never imported by kvtier:

    python -I -S sglang_defaults.py <tree> <site> [cuda|hip|npu] < configs.json

<tree> holds the wheel's sglang/srt/server_args.py and, from v0.5.14, the pure-Python modules the
memory rule moved into (model_executor/cuda_graph_config.py, arg_groups/, ...). Those run as
released, with msgspec from <site>; every other import (torch, the device query, the rest of
SGLang) is a stub. Called:
`ServerArgs.__post_init__` (before v0.5.3); `_handle_gpu_memory_settings` (v0.5.3-v0.5.18,
after `_handle_piecewise_cuda_graph` or `_handle_cuda_graph_config` where they exist); the hooks
cuda_graph_hook.handle_cuda_graph_config and memory_hook.handle_gpu_memory_settings (v0.5.19+),
with the GPU capacity the stubbed get_*_memory_capacity() reports. The chunk and decode CUDA-graph
batch are the first values the engine assigns (later steps divide the chunk by the DP size); the
fraction is its final value.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
import json
import sys
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # a bare interpreter leaves the script's folder out
from oracle_stubs import StubFinder

RECORDED = ("chunked_prefill_size", "cuda_graph_max_bs")


class _Finder(StubFinder):
    """Loads the modules present under the tree as released; stubs every other module that is
    not the standard library."""

    def __init__(self, tree: Path) -> None:
        super().__init__(real=("msgspec",))
        self.tree = tree

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name == MODEL_CONFIG:  # needs torch; its architecture lists are read as text
            return self.stub_spec(name)
        base = self.tree.joinpath(*name.split("."))
        if (base / "__init__.py").is_file():
            return importlib.util.spec_from_file_location(
                name, base / "__init__.py", submodule_search_locations=[str(base)]
            )
        if base.with_suffix(".py").is_file():
            return importlib.util.spec_from_file_location(name, base.with_suffix(".py"))
        return super().find_spec(name, path, target)


MODEL_CONFIG = "sglang.srt.configs.model_config"
GPU: list[int | None] = [None]
PLATFORM = ["cuda"]
MODEL: list[Any] = [None]


def _install_stubs(tree: Path, platform: str) -> None:
    """`platform` "cuda", "hip": a ROCm build (torch.version.hip set, so SGLang's is_cuda()
    is False and is_hip() True; the device is still "cuda"), or "npu": an Ascend build (is_npu()
    True, the device "npu", get_npu_memory_capacity the GPU's capacity)."""
    sys.meta_path.insert(0, _Finder(tree))
    import sglang.srt.utils  # the stubs
    import sglang.srt.utils.common

    def capacity(*args: Any, **kwargs: Any) -> int | None:
        return GPU[0]

    for utils in (sglang.srt.utils, sglang.srt.utils.common):
        for name in (
            "get_nvgpu_memory_capacity",
            "get_amdgpu_memory_capacity",
            "get_hpu_memory_capacity",
            "get_device_memory_capacity",
            "get_npu_memory_capacity",
        ):
            setattr(utils, name, capacity)
        utils.get_device = lambda *a: "cuda"  # type: ignore[attr-defined]
        for name in ("is_hip", "is_npu", "is_cpu", "is_mps", "is_xpu", "is_flashinfer_available"):
            setattr(utils, name, lambda *a: False)
        utils.is_cuda = lambda: platform == "cuda"  # type: ignore[attr-defined]
        utils.is_hip = lambda *a: platform == "hip"  # type: ignore[attr-defined]
        utils.is_npu = lambda *a: platform == "npu"  # type: ignore[attr-defined]
    PLATFORM[0] = platform
    import torch  # the stub

    torch.cuda = types.SimpleNamespace(is_available=lambda: True)  # type: ignore[attr-defined]
    import sglang.srt.configs.model_config as model_config

    class ModelConfig:
        @staticmethod
        def from_server_args(*args: Any, **kwargs: Any) -> Any:
            return MODEL[0]

    model_config.ModelConfig = ModelConfig  # type: ignore[attr-defined]
    model_config.AttentionArch = types.SimpleNamespace(MLA="MLA", MHA="MHA")  # type: ignore[attr-defined]


def _load() -> Any:
    from sglang.srt.server_args import ServerArgs

    return ServerArgs


def _arch_lists(tree: Path) -> dict[str, list[str]]:
    """The architecture lists configs/model_config.py keeps for CUDA-graph decisions, read as
    literals (the module itself needs torch)."""
    path = tree / "sglang" / "srt" / "configs" / "model_config.py"
    if not path.is_file():
        return {}
    lists = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.endswith("_archs") and "cuda_graph" in name:
                lists[name] = ast.literal_eval(node.value)
    return lists


ARCHS: dict[str, list[str]] = {}


def _listed(name: str, arch: str) -> bool:
    return arch in ARCHS.get(name, [])


def _model(c: dict[str, Any]) -> Any:
    arch = c["architecture"]
    hf = types.SimpleNamespace(architectures=[arch])
    if c["multimodal"]:
        vision = types.SimpleNamespace()
        if c["vision_layers"] is not None:
            vision.num_hidden_layers = c["vision_layers"]
        if c["vision_hidden_size"] is not None:
            vision.hidden_size = c["vision_hidden_size"]
        hf.vision_config = vision
    multimodal = c["multimodal"]
    piecewise_mm = multimodal and _listed(
        "multimodal_piecewise_cuda_graph_supported_model_archs", arch
    )
    return types.SimpleNamespace(
        hf_config=hf,
        is_multimodal=multimodal,
        attention_arch="MLA" if c["mla"] else "MHA",
        is_piecewise_cuda_graph_disabled_model=(
            _listed("piecewise_cuda_graph_disabled_model_archs", arch)
            or (multimodal and not piecewise_mm)
        ),
        is_multimodal_piecewise_cuda_graph_supported=piecewise_mm,
        is_multimodal_breakable_cuda_graph_supported=multimodal
        and _listed("multimodal_breakable_cuda_graph_supported_model_archs", arch),
        is_hybrid_swa=False,
    )


def _field_names(server_args_cls: Any) -> set[str]:
    if dataclasses.is_dataclass(server_args_cls):
        return {f.name for f in dataclasses.fields(server_args_cls)}
    import msgspec.structs  # v0.5.20+: a msgspec record

    return {f.name for f in msgspec.structs.fields(server_args_cls)}


def _record(server_args_cls: Any, given: dict[str, Any]) -> Any:
    """A ServerArgs with the given fields and every other at its default, before resolution."""
    if not dataclasses.is_dataclass(server_args_cls):
        return server_args_cls(**given)  # v0.5.20+: construction resolves nothing
    args = object.__new__(server_args_cls)
    for f in dataclasses.fields(server_args_cls):
        if f.default is not dataclasses.MISSING:
            object.__setattr__(args, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            object.__setattr__(args, f.name, f.default_factory())
    for name, value in given.items():
        object.__setattr__(args, name, value)
    return args


# v0.5.19+: the resolution steps that decide the memory settings, in the pipeline's order
HOOKS_IN_ORDER = (
    ("parallel_hook", "handle_deprecated_dp_attention"),  # --dp-size N --enable-dp-attention
    ("cuda_graph_hook", "handle_cuda_graph_config"),
    ("platform_hook", "handle_npu_backends"),  # NPU chunk and graph-batch tiers
    ("memory_hook", "handle_gpu_memory_settings"),
)


def _run_hooks(args: Any) -> dict[str, Any]:
    """v0.5.19+: the resolution hooks, read back through the engine's own resolving view."""
    import importlib

    from sglang.srt.arg_groups.overrides import resolving_view

    for module_name, name in HOOKS_IN_ORDER:
        module = importlib.import_module(f"sglang.srt.arg_groups.{module_name}")
        hook = getattr(module, name, None)
        if hook is None:
            continue
        if len(inspect.signature(hook).parameters) == 2:  # v0.5.19 passes the capacity in
            hook(args, GPU[0])
        else:
            hook(args)
    view = resolving_view(args)
    return {
        "mem_fraction_static": view.mem_fraction_static,
        "chunked_prefill_size": view.chunked_prefill_size,
        "cuda_graph_max_bs": view.cuda_graph_config.decode.max_bs,
    }


def run(server_args_cls: Any, c: dict[str, Any]) -> dict[str, Any]:
    GPU[0] = c["gpu_mem_mib"]
    MODEL[0] = _model(c)
    names = _field_names(server_args_cls)
    given: dict[str, Any] = {"mem_fraction_static": None}
    if PLATFORM[0] == "npu":
        given["device"] = "npu"
    for name, value in c["args"].items():
        if name not in names and f"{name}_decode" in names:  # v0.5.14+: --cuda-graph-max-bs
            name = f"{name}_decode"
        given[name] = value
    args = _record(server_args_cls, given)
    if HOOKS[0]:
        return _run_hooks(args)
    first: dict[str, Any] = {}

    def record(self: Any, name: str, value: Any) -> None:
        if name in RECORDED and name not in first and getattr(self, name, None) is None:
            first[name] = value
        object.__setattr__(self, name, value)

    server_args_cls.__setattr__ = record
    if hasattr(server_args_cls, "_handle_gpu_memory_settings"):
        args.model_config = MODEL[0]
        args._model_config = MODEL[0]
        for step in ("_handle_piecewise_cuda_graph", "_handle_cuda_graph_config"):
            if hasattr(server_args_cls, step):
                getattr(args, step)()
        if hasattr(server_args_cls, "_handle_npu_backends"):  # v0.5.7+: a no-op off NPU
            args._handle_npu_backends()
        args._handle_gpu_memory_settings(GPU[0])
    else:
        try:
            args.__post_init__()
        except Exception as exc:  # later steps of __post_init__ meet the stubs
            if "mem_fraction_static" not in first and args.mem_fraction_static is None:
                raise
            first["error"] = repr(exc)
    graphs = getattr(args, "cuda_graph_config", None)
    if graphs is not None and not isinstance(graphs, dict):  # v0.5.14+: per-phase settings
        first.setdefault("cuda_graph_max_bs", graphs.decode.max_bs)
    return {
        "mem_fraction_static": args.mem_fraction_static,
        **{name: first.get(name, c["args"].get(name)) for name in RECORDED},
    }


HOOKS = [False]


def main() -> None:
    tree = Path(sys.argv[1])
    sys.path.insert(0, sys.argv[2])  # msgspec, the one real dependency
    _install_stubs(tree, sys.argv[3] if len(sys.argv) > 3 else "cuda")
    ARCHS.update(_arch_lists(tree))
    HOOKS[0] = (tree / "sglang" / "srt" / "arg_groups" / "memory_hook.py").is_file()
    server_args_cls = _load()
    configs = json.load(sys.stdin)
    json.dump([run(server_args_cls, c) for c in configs], sys.stdout)


if __name__ == "__main__":
    main()
