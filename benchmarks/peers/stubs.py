"""Stand-in modules for GPU-only imports on the way to a peer's pure-Python cache code.

Only third-party accelerator packages named in STUBBED are replaced. The peer's own modules,
including the cache code under measurement, are imported unchanged.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

STUBBED = (
    "tvm_ffi",
    "sgl_kernel",
    "flashinfer",
    "deep_gemm",
    "deep_ep",
    "vllm._C",
    "xgrammar",
    "outlines",
    "cuda",
    "nvidia",
    "torchvision",
    "decord",
    "pynvml",
    "quack",
    "flash_attn",
    "mooncake",
    "nixl",
    "aiter",
    "apache_tvm_ffi",
)

STUB_VERSION = "0.0.0+stub"


class _Anything(types.ModuleType):
    """A module whose every attribute is another stand-in; callable, indexable, subclassable."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__: list[str] = []

    def __getattr__(self, item: str):
        if item.startswith("__") and item.endswith("__"):
            raise AttributeError(item)
        child = _Anything(f"{self.__name__}.{item}")
        setattr(self, item, child)
        return child

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a bare decorator
        return _Anything(f"{self.__name__}()")

    def __getitem__(self, item):
        return _Anything(f"{self.__name__}[]")

    def __mro_entries__(self, bases):
        return (object,)

    def __iter__(self):
        return iter(())

    def __bool__(self) -> bool:
        return False


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if any(fullname == s or fullname.startswith(s + ".") for s in STUBBED):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Anything(spec.name)
        if "." not in spec.name:
            # a version string for packages that probe it (transformers' torchvision check) when
            # no distribution metadata is installed; "0" reads as older than any real release
            module.__version__ = STUB_VERSION
        return module

    def exec_module(self, module) -> None:
        return None


def install() -> None:
    for name in list(sys.modules):
        if any(name == s or name.startswith(s + ".") for s in STUBBED):
            del sys.modules[name]
    sys.meta_path.insert(0, _StubFinder())
