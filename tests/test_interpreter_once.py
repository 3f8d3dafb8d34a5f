"""The suite's patch of Triton's interpreter (tests/site/interpreter_once.py): a launch
patches the language once, the kernels' bits do not change, and the processes the tests
start get it too."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from qkbench.case import Case, Geometry, make_inputs
from qkbench.kernels import qk_norm_rope, qk_norm_rope_split

from conftest import interpreter_only
from helpers import assert_bit_identical, out_of_place

pytestmark = interpreter_only

SITE = str(Path(__file__).parent / "site")
# Full and partial rotary, both styles, a weight offset: every helper the kernels call,
# Triton's own (tl.zeros) among them.
GEOMETRIES = [
    Geometry("neox", 4, 2, 64, inplace=False),
    Geometry("gptj-partial", 3, 1, 128, rotary_dim=32, style="gptj", weight_mode="offset",
             inplace=False),
]
TOKENS = 3

OUTPUTS = """
import sys
import torch
import triton.runtime.interpreter as interpreter
from qkbench.case import Case, Geometry, make_inputs
from qkbench.kernels import qk_norm_rope, qk_norm_rope_split
from helpers import out_of_place
outs = [out_of_place(op, make_inputs(Case(g, {tokens}), 0, "cpu"))
        for g in {geometries!r} for op in (qk_norm_rope, qk_norm_rope_split)]
assert not getattr(interpreter._patch_lang, "patched_once", False)
torch.save(outs, sys.argv[1])
"""


def unpatched_outputs(path: Path) -> list:
    """The outputs computed in a process whose interpreter runs as Triton ships it."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != SITE))
    code = OUTPUTS.format(tokens=TOKENS, geometries=GEOMETRIES)
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, env=env,
                   cwd=Path(__file__).parent)  # for helpers
    return torch.load(path)


def test_the_kernels_compute_the_same_bits_with_the_patch_as_without(tmp_path):
    patched = [out_of_place(op, make_inputs(Case(g, TOKENS), 0, "cpu"))
               for g in GEOMETRIES for op in (qk_norm_rope, qk_norm_rope_split)]
    unpatched = unpatched_outputs(tmp_path / "unpatched.pt")
    for mine, theirs in zip(patched, unpatched, strict=True):
        for a, b in zip(mine, theirs, strict=True):
            assert_bit_identical(a, b, "patched against unpatched")
    # The comparison sees one bit: the lowest of one element.
    flipped = patched[0][0].clone()
    flipped.view(torch.int16).view(-1)[5] ^= 1
    with pytest.raises(AssertionError):
        assert_bit_identical(flipped, unpatched[0][0])


def patches_in_one_call(monkeypatch, tokens: int) -> int:
    """How many attributes of the language one fused call patches."""
    import triton.runtime.interpreter as interpreter

    patches = []
    set_attr = interpreter._LangPatchScope.set_attr

    def counted(scope, obj, name, value):
        patches.append(name)
        set_attr(scope, obj, name, value)

    inputs = make_inputs(Case(GEOMETRIES[1], tokens), 0, "cpu")
    monkeypatch.setattr(interpreter._LangPatchScope, "set_attr", counted)
    out_of_place(qk_norm_rope, inputs)
    monkeypatch.undo()
    return len(patches)


def test_a_launch_patches_the_language_a_fixed_number_of_times_whatever_its_programs(
        monkeypatch):
    out_of_place(qk_norm_rope, make_inputs(Case(GEOMETRIES[1], 1), 0, "cpu"))  # compiled
    # 4 programs, then 32: unpatched, every helper call of every program patches again.
    one, many = patches_in_one_call(monkeypatch, 1), patches_in_one_call(monkeypatch, 64)
    assert 0 < one == many


def test_a_process_the_tests_start_interprets_with_the_patch():
    code = ("import os; os.environ['TRITON_INTERPRET'] = '1'\n"
            "import qkbench.kernels, triton.runtime.interpreter as i\n"
            "print(getattr(i._patch_lang, 'patched_once', False))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "True"
