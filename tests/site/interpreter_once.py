"""Triton's interpreter, without its redundant re-patching, for the test suite only.

Every call of a ``@triton.jit`` helper inside an interpreted kernel re-patches the whole of
``triton.language`` (``_patch_lang``: an ``inspect.getmembers`` walk and a fresh wrapper per
builtin), though the kernel's launch already patched those same modules and restores them
when it ends. Our kernels call helpers per tile, so this is a third of their interpreted
time (results/tuning/2026-12-06-cpu-suite/synthetic-sweep-profile.txt). Here a launch
patches each language module once: a helper whose modules the launch has already patched
skips the walk; one that brings another (``triton.language.standard``'s ``core``) patches
it as before. What the kernels compute is unchanged; the bit-exact tests hold either way.

Only what the tests load (``tests/conftest.py`` here, ``sitecustomize`` in the processes
they start); the shipped package never patches Triton. Where Triton's internals differ
from what this expects, nothing is patched and the interpreter runs as it comes.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import inspect
import sys
from types import ModuleType

INTERPRETER = "triton.runtime.interpreter"


def patch(interp: ModuleType) -> bool:
    """Makes each launch patch a language module once; False where Triton has changed."""
    executor = getattr(interp, "GridExecutor", None)
    patch_lang = getattr(interp, "_patch_lang", None)
    if (executor is None or "__call__" not in vars(executor) or patch_lang is None
            or not hasattr(interp, "_LangPatchScope")):
        return False
    run = executor.__call__
    if getattr(patch_lang, "patched_once", False):
        return True
    import triton.language as tl

    patched: set[int] = set()  # the language modules this launch has patched

    def patch_lang_once(fn):
        langs = {id(v) for v in fn.__globals__.values()
                 if inspect.ismodule(v) and v in (tl, tl.core)}
        if patched and langs <= patched:
            return interp._LangPatchScope()  # nothing to restore
        patched.update(langs)
        return patch_lang(fn)

    def run_launch(self, *args, **kwargs):
        patched.clear()
        try:
            return run(self, *args, **kwargs)
        finally:
            patched.clear()

    patch_lang_once.patched_once = True
    interp._patch_lang = patch_lang_once
    executor.__call__ = run_launch
    return True


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches the interpreter when a process first imports it (only when it interprets),
    so a process that never interprets pays nothing."""

    def find_spec(self, name, path, target=None):
        if name != INTERPRETER:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_patch(module):
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_then_patch
        return spec


def install() -> None:
    """Patches the interpreter now if it is loaded, else when it is first imported."""
    if INTERPRETER in sys.modules:
        patch(sys.modules[INTERPRETER])
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
