"""Import shims so vLLM 0.33.0's v1 KV-cache core imports on a CPU-only box without its
serving stack.

`vllm.v1.request` imports `vllm.v1.structured_output`, whose package imports `vllm.parser`
(tool-call and reasoning parsers: FastAPI, OpenTelemetry, xgrammar's native library). None of
that runs for a request without structured output, so those modules are replaced by permissive
dummies: every attribute is a callable, subclassable placeholder. Nothing on the KV cache
manager's or block pool's code paths touches them. Call `install()` before importing `vllm`.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

STUBBED = ("xgrammar", "vllm.parser")


class _Dummy:
    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # decorator use
        return _Dummy()

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Dummy()

    def __getitem__(self, item):
        return _Dummy()

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __or__(self, other):
        return _Dummy()

    __ror__ = __or__

    def __mro_entries__(self, bases):
        return (object,)


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Dummy()


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        mod = _StubModule(spec.name)
        mod.__path__ = []
        mod.__version__ = "0.0.0"
        return mod

    def exec_module(self, module):
        return None


class _StubFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if any(fullname == p or fullname.startswith(p + ".") for p in STUBBED):
            return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        return None


_installed = False


def install():
    global _installed
    if not _installed:
        sys.meta_path.insert(0, _StubFinder())
        _installed = True
