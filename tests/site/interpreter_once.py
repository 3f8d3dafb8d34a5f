"""Triton's interpreter, without its redundant re-patching, for the test suite only.

Every call of a ``@triton.jit`` helper inside an interpreted kernel re-patches the whole of
``triton.language`` (``_patch_lang``: an ``inspect.getmembers`` walk and a fresh wrapper per
builtin), though the kernel's launch already patched those same modules and restores them
when it ends. Our kernels call helpers per tile, so this is a third of their interpreted
time (results/tuning/2026-12-06-cpu-suite/synthetic-sweep-profile.txt). Here a launch
patches each language module once: a helper whose modules the launch has already patched
skips it; one that brings another (``triton.language.standard``'s ``core``) patches it as
before. Each package's builtins are found by one walk, the first, and patched from that
list at every launch. A Triton type's numpy dtype is looked up once, not rebuilt from a
table at every call. What the kernels compute is unchanged; the bit-exact tests hold
either way.

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
INTERNALS = ("_LangPatchScope", "_patch_builtin", "_patch_attr", "_get_np_dtype")  # patch()'s


def patch(interp: ModuleType) -> bool:
    """Makes each launch patch a language module once, from the builtins found in the first
    walk of it; False where Triton has changed."""
    executor = getattr(interp, "GridExecutor", None)
    patch_lang = getattr(interp, "_patch_lang", None)
    if (executor is None or "__call__" not in vars(executor) or patch_lang is None
            or not all(hasattr(interp, name) for name in INTERNALS)):
        return False
    if getattr(patch_lang, "patched_once", False):
        return True
    import triton.language as tl

    run, patch_attr = executor.__call__, interp._patch_attr
    patched: set[int] = set()  # the language modules this launch has patched
    langs_of: dict = {}  # a function's language modules, by function
    builtins_of: dict[int, list] = {}  # a package's builtins, as its first walk found them
    get_np_dtype = interp._get_np_dtype  # builds its table of 19 types at every call
    np_dtypes: dict = {}  # its answers, by scalar type (a block type is not hashable)

    def patch_lang_once(fn):
        langs = langs_of.get(fn)
        if langs is None:
            langs = langs_of[fn] = frozenset(
                id(v) for v in fn.__globals__.values()
                if inspect.ismodule(v) and v in (tl, tl.core))
        if patched and langs <= patched:
            return interp._LangPatchScope()  # nothing to restore
        patched.update(langs)
        return patch_lang(fn)

    def patch_builtin(pkg, builder, scope):
        found = builtins_of.get(id(pkg))
        if found is None:
            found = [(name, member) for name, member in inspect.getmembers(pkg)
                     if tl.core.is_builtin(member)]
            if found:  # a walk of a package already patched finds none: walk it again
                builtins_of[id(pkg)] = found
        for name, member in found:
            patch_attr(pkg, name, member, builder, scope)

    def np_dtype(tt_dtype):
        scalar = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
        if isinstance(scalar, tl.pointer_type):
            return get_np_dtype(scalar)
        found = np_dtypes.get(scalar)
        if found is None:
            found = np_dtypes[scalar] = get_np_dtype(scalar)
        return found

    def run_launch(self, *args, **kwargs):
        try:
            return run(self, *args, **kwargs)
        finally:
            patched.clear()  # a helper called outside a launch patches as Triton's would

    patch_lang_once.patched_once = True
    interp._patch_lang = patch_lang_once
    interp._patch_builtin = patch_builtin
    interp._get_np_dtype = np_dtype
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
