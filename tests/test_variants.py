"""No recompilation across T: one compiled variant per (geometry, dtype, tile) class.

What is counted: for every kernel launch of a sweep over T, the key Triton's JIT caches a
compiled kernel under -- the argument specialisation its own binder computes (each
argument's type, 16-divisibility and value-1 specialisation, the constants) plus the
compile options. A geometry and dtype fixed, the launch plan still picks its tiles per T
(they are compile-time constants), so the sweep may legitimately compile one variant per
tile class; the test asserts that no class has more than one key, i.e. that nothing else
that changes with T reaches the key.
"""

import pytest
import torch
from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from triton.runtime.jit import JITFunction, create_function_from_signature

from qkbench.case import Case, Geometry, make_inputs
from qkbench.kernels import launch, qk_norm_rope, qk_norm_rope_split, rms_norm, rope
from qkbench.kernels.fused import qk_norm_rope_kernel

from conftest import gpu_only

SWEEP = [1, 2, 3, 5, 8, 15, 16, 17, 31, 32, 33, 48, 64, 100]


def binder(kernel, specialize_all: bool = False):
    """Triton's own argument binder for ``kernel`` (interpreted or not), for an sm_90 target.

    ``specialize_all`` drops the kernel's ``do_not_specialize``, to show what it prevents.
    """
    kwargs = {} if specialize_all else {"do_not_specialize": kernel.do_not_specialize
                                         if hasattr(kernel, "do_not_specialize")
                                         else kernel.kwargs["do_not_specialize"]}
    jit = JITFunction(kernel.fn, **kwargs)
    return create_function_from_signature(jit.signature, jit.params,
                                          make_backend(GPUTarget("cuda", 90, 32)))


def variants(launches, specialize_all: bool = False) -> dict[tuple, set[str]]:
    """Per tile class -- the kernel and which of the call's tensors it reads (so the
    geometry: split normalises q and k with one kernel), the values of its
    ``tl.constexpr`` parameters and the compile options -- the distinct JIT cache keys of
    ``launches``."""
    binders, declared, classes = {}, {}, {}
    for kernel_launch, ptrs in launches:
        kernel, options = kernel_launch.kernel, kernel_launch.options
        args = (*ptrs, *kernel_launch.tail)
        if kernel not in binders:
            binders[kernel] = binder(kernel, specialize_all)
            declared[kernel] = [p.is_constexpr for p in JITFunction(kernel.fn).params]
        _, specialization, opts = binders[kernel](*args, **options)
        constants = tuple(arg for arg, is_constexpr in zip(args, declared[kernel], strict=True)
                          if is_constexpr)
        tile_class = (kernel.fn.__name__, kernel_launch.slots, constants, repr(opts))
        classes.setdefault(tile_class, set()).add(repr((specialization, opts)))
    return classes


def sweep(op, geometry: Geometry, device: str) -> None:
    for tokens in SWEEP:
        inputs = make_inputs(Case(geometry, tokens, max_position=128), 0, device)
        inputs.call(op, inplace=geometry.inplace)


OPS = [qk_norm_rope, qk_norm_rope_split]
GEOMETRIES = [Geometry("neox", 3, 1, 32, inplace=False),
              Geometry("gptj-partial-mrope", 2, 1, 64, rotary_dim=16, style="gptj",
                       mrope_section=(2, 3, 3))]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: g.name)
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.__name__)
def test_one_compiled_variant_per_tile_class_across_a_sweep_of_t(op, geometry, device):
    with launch.recording() as launches:
        sweep(op, geometry, device)
    classes = variants(launches)
    assert len(launches) >= len(SWEEP)
    assert all(len(keys) == 1 for keys in classes.values()), {
        c: len(k) for c, k in classes.items()}
    # The count can see a specialisation on T: without do_not_specialize, T = 1, 16, 32,
    # 48 and 64 would each compile a variant of their own within one tile class.
    assert sum(map(len, variants(launches, specialize_all=True).values())) > len(classes)


def test_rms_norm_and_rope_alone_compile_one_variant_per_tile_class(device):
    with launch.recording() as launches:
        for tokens in SWEEP:
            inputs = make_inputs(Case(Geometry("g", 2, 1, 32), tokens, max_position=128), 0,
                                 device)
            rms_norm(inputs.q, inputs.q_weight)
            rope(inputs.q.clone(), inputs.k.clone(), inputs.positions, inputs.cos_sin_cache)
    assert all(len(keys) == 1 for keys in variants(launches).values())


@gpu_only
def test_the_gpu_compiles_one_variant_per_tile_class():
    # A head_dim no other test uses, so that every variant it needs is compiled here.
    geometry = Geometry("odd", 5, 3, 96, rotary_dim=32, inplace=False)
    compiled_kernels = qk_norm_rope_kernel.device_caches[torch.cuda.current_device()][0]
    before = len(compiled_kernels)
    with launch.recording() as launches:
        sweep(qk_norm_rope, geometry, "cuda")
    compiled = len(compiled_kernels) - before
    assert compiled == len(variants(launches)), (compiled, len(variants(launches)))
