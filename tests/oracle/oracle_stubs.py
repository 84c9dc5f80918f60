"""Stand-ins for what an SGLang oracle runner does not load (torch, the device, the rest of SGLang):
a class whose every attribute, item and call is another stand-in, a module of them, and the import
hook that hands them out. Imported by the runners under a bare interpreter (`python3 -I -S`): the
standard library only."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import types
from typing import Any


class StubMeta(type):
    def __new__(mcs, name: str, bases: tuple[type, ...], ns: dict[str, Any], **kw: Any) -> Any:
        return super().__new__(mcs, name, bases, ns)  # msgspec.Struct(frozen=True, ...)

    def __init__(cls, name: str, bases: tuple[type, ...], ns: dict[str, Any], **kw: Any) -> None:
        super().__init__(name, bases, ns)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return stub_class(name)

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __add__(cls, other: Any) -> Any:  # a stubbed list of choices joined with real ones
        return other

    __radd__ = __add__

    def __iter__(cls) -> Any:
        return iter(())


class Stub(metaclass=StubMeta):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __bool__(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return stub_class(name)()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return Stub()


def stub_class(name: str) -> type:
    return StubMeta(name, (Stub,), {})


class StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = stub_class(name)
        setattr(self, name, value)
        return value


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stubs every module that is neither the standard library nor one of `real`."""

    def __init__(self, real: tuple[str, ...] = ()) -> None:
        self.real = real

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in self.real:
            return None
        return self.stub_spec(name)

    def stub_spec(self, name: str) -> Any:
        return importlib.util.spec_from_loader(name, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        module = StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass
