"""What one fused call patches and walks, at 4 programs (1 token) and 32 (64 tokens), with
Triton's interpreter as it ships (``stock``) or with the suite's patch (``patched``):
``python patches.py stock|patched`` from the repository's root."""

import inspect
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"  # before the kernels are imported
sys.path.insert(0, "tests")
sys.path.insert(0, "tests/site")

import interpreter_once
import triton.runtime.interpreter as interpreter

from qkbench.case import Case, Geometry, make_inputs
from qkbench.kernels import qk_norm_rope

from helpers import out_of_place

if sys.argv[1] == "patched":
    interpreter_once.install()
geometry = Geometry("gptj-partial", 3, 1, 128, rotary_dim=32, style="gptj",
                    weight_mode="offset", inplace=False)
out_of_place(qk_norm_rope, make_inputs(Case(geometry, 1), 0, "cpu"))  # the first walks
counts = {"patched attributes": 0, "member walks": 0}
set_attr, getmembers = interpreter._LangPatchScope.set_attr, inspect.getmembers


def counted_set_attr(scope, *args):
    counts["patched attributes"] += 1
    return set_attr(scope, *args)


def counted_getmembers(*args):
    counts["member walks"] += 1
    return getmembers(*args)


interpreter._LangPatchScope.set_attr = counted_set_attr
inspect.getmembers = counted_getmembers
for tokens in (1, 64):
    counts.update(dict.fromkeys(counts, 0))
    out_of_place(qk_norm_rope, make_inputs(Case(geometry, tokens), 0, "cpu"))
    print(sys.argv[1], f"T={tokens}:", counts)
