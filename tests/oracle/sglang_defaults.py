"""Run SGLang's own default-memory code over configurations; print what it picked as JSON.

Executed by a bare interpreter (`python3 -I -S`), never imported by kvtier:

    python3 -I -S sglang_defaults.py <server_args.py> < configs.json

Only the wheel's python/sglang/srt/server_args.py is loaded; everything it imports (torch, the
device query, the rest of SGLang) is a stub, so the engine's functions run as released:
`ServerArgs._handle_gpu_memory_settings` (v0.5.3+, after `_handle_piecewise_cuda_graph` when it
exists) or `ServerArgs.__post_init__` (before), with the GPU capacity the stubbed
get_*_memory_capacity() reports. The chunk and CUDA-graph batch are the first values the engine
assigns (later steps divide the chunk by the DP size); the fraction is its final value.
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import importlib.util
import json
import sys
import types
from typing import Any

RECORDED = ("chunked_prefill_size", "cuda_graph_max_bs")


class _StubMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub_class(name)

    def __getitem__(cls, item: Any) -> Any:
        return cls


class _Stub(metaclass=_StubMeta):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __bool__(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return _stub_class(name)()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _Stub()


def _stub_class(name: str) -> type:
    return _StubMeta(name, (_Stub,), {})


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stub_class(name)
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stubs every module that is not the standard library."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name.split(".")[0] in sys.stdlib_module_names:
            return None
        return importlib.util.spec_from_loader(name, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


GPU: list[int | None] = [None]
MODEL: list[Any] = [None]


def _install_stubs() -> None:
    sys.meta_path.insert(0, _Finder())
    import sglang.srt.utils as utils  # the stub

    def capacity(*args: Any, **kwargs: Any) -> int | None:
        return GPU[0]

    for name in (
        "get_nvgpu_memory_capacity",
        "get_amdgpu_memory_capacity",
        "get_hpu_memory_capacity",
        "get_device_memory_capacity",
    ):
        setattr(utils, name, capacity)
    utils.is_cuda = lambda: True  # type: ignore[attr-defined]
    utils.get_device = lambda *a: "cuda"  # type: ignore[attr-defined]
    for name in ("is_hip", "is_npu", "is_cpu", "is_mps", "is_xpu", "is_flashinfer_available"):
        setattr(utils, name, lambda *a: False)
    import torch  # the stub

    torch.cuda = types.SimpleNamespace(is_available=lambda: True)  # type: ignore[attr-defined]
    import sglang.srt.configs.model_config as model_config

    class ModelConfig:
        @staticmethod
        def from_server_args(*args: Any, **kwargs: Any) -> Any:
            return MODEL[0]

    model_config.ModelConfig = ModelConfig  # type: ignore[attr-defined]
    model_config.AttentionArch = types.SimpleNamespace(MLA="MLA", MHA="MHA")  # type: ignore[attr-defined]


def _load(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("sglang.srt.server_args", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sglang.srt.server_args"] = module
    spec.loader.exec_module(module)
    return module.ServerArgs


def _model(c: dict[str, Any]) -> Any:
    hf = types.SimpleNamespace(architectures=[c["architecture"]])
    if c["multimodal"]:
        vision = types.SimpleNamespace()
        if c["vision_layers"] is not None:
            vision.num_hidden_layers = c["vision_layers"]
        if c["vision_hidden_size"] is not None:
            vision.hidden_size = c["vision_hidden_size"]
        hf.vision_config = vision
    return types.SimpleNamespace(
        hf_config=hf,
        is_multimodal=c["multimodal"],
        attention_arch="MLA" if c["mla"] else "MHA",
        is_piecewise_cuda_graph_disabled_model=False,
    )


def run(server_args_cls: Any, c: dict[str, Any]) -> dict[str, Any]:
    GPU[0] = c["gpu_mem_mib"]
    MODEL[0] = _model(c)
    args = object.__new__(server_args_cls)
    for f in dataclasses.fields(server_args_cls):
        if f.default is not dataclasses.MISSING:
            object.__setattr__(args, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            object.__setattr__(args, f.name, f.default_factory())
    for name, value in c["args"].items():
        object.__setattr__(args, name, value)
    object.__setattr__(args, "mem_fraction_static", None)
    first: dict[str, Any] = {}

    def record(self: Any, name: str, value: Any) -> None:
        if name in RECORDED and name not in first and getattr(self, name, None) is None:
            first[name] = value
        object.__setattr__(self, name, value)

    server_args_cls.__setattr__ = record
    if hasattr(server_args_cls, "_handle_gpu_memory_settings"):
        args.model_config = MODEL[0]
        if hasattr(server_args_cls, "_handle_piecewise_cuda_graph"):
            args._handle_piecewise_cuda_graph()
        args._handle_gpu_memory_settings(GPU[0])
    else:
        try:
            args.__post_init__()
        except Exception as exc:  # later steps of __post_init__ meet the stubs
            if "mem_fraction_static" not in first and args.mem_fraction_static is None:
                raise
            first["error"] = repr(exc)
    return {
        "mem_fraction_static": args.mem_fraction_static,
        **{name: first.get(name, c["args"].get(name)) for name in RECORDED},
    }


def main() -> None:
    _install_stubs()
    server_args_cls = _load(sys.argv[1])
    configs = json.load(sys.stdin)
    json.dump([run(server_args_cls, c) for c in configs], sys.stdout)


if __name__ == "__main__":
    main()
