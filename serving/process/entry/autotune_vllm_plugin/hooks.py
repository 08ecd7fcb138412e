"""Run a function on a module once it is imported: at once if it is, else right after the import
that loads it (a `sys.meta_path` finder that wraps the module's loader). A patch never imports
the module it patches, so a process that never uses it (the API server, the study's zygote)
pays nothing for it, and nothing is imported that could create a CUDA context early."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType

_waiting: dict[str, list[Callable[[ModuleType], None]]] = {}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def __getattr__(self, name: str):  # get_source, get_filename, is_package... as the loader it wraps
        return getattr(self.inner, name)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        for fn in _waiting.pop(module.__name__, []):
            fn(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _waiting:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


_FINDER = _Finder()


def when_imported(name: str, fn: Callable[[ModuleType], None]) -> None:
    module = sys.modules.get(name)
    if module is not None:
        fn(module)
        return
    _waiting.setdefault(name, []).append(fn)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
