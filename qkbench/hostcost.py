"""Host cost of an eager call: microseconds of host time per call, beside a bare launch.

A serving stack that calls the op outside a CUDA graph pays its host time on every layer;
at decode widths that is far more than the kernel's. ``measure`` times ``calls`` calls in
a row, synchronised once at the end, for:

* ``bare_jit``: the fused kernel launched through Triton's JIT dispatch with its
  arguments prebuilt -- what any Triton kernel costs to launch;
* ``bare_handle``: the same launch through the compiled kernel's handle, given the
  tensors (CUDA only);
* ``bare_addresses``: the handle given the tensors' addresses and the stream (CUDA
  only);
* ``bare_launcher``: the launch ``qk_norm_rope`` makes with those addresses and the
  stream, through the compiled kernel's C launcher under Triton 3.6, else through its
  runner (the floor; CUDA only);
* ``fused``: ``qk_norm_rope`` with its validation (the default: no position check);
* ``fused_check_positions``: the same with ``check_positions=True`` (reads back);
* ``fused_jit_dispatch``: ``qk_norm_rope`` launching through Triton's JIT dispatch;
* ``split``: ``qk_norm_rope_split`` (three launches).

On the CPU the kernels run in Triton's interpreter: the figures only exercise the code.
"""

import time
from collections.abc import Callable

import torch

from qkbench.case import Case, Geometry, make_inputs
from qkbench.kernels import launch, qk_norm_rope, qk_norm_rope_split

DEFAULT_GEOMETRY = Geometry("qwen3-32x8", 32, 8, 128)


def _per_call_us(fn: Callable[[], object], calls: int, device: torch.device) -> float:
    fn()  # compiled, validated and cached before the clock starts
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls * 1e6


def measure(device: torch.device, calls: int, tokens: int = 1,
            geometry: Geometry = DEFAULT_GEOMETRY) -> dict:
    """Per-call host microseconds of each way to make the call (see the module doc)."""
    inputs = make_inputs(Case(geometry, tokens), 0, device)
    outs = {} if geometry.inplace else {"q_out": torch.empty_like(inputs.q),
                                        "k_out": torch.empty_like(inputs.k)}

    def op(route, **options):
        # The arguments are built once, as a caller holding its tensors passes them.
        args = inputs.arguments(inplace=geometry.inplace, **outs, **options)
        return lambda: route(**args)

    fused = op(qk_norm_rope)
    fused()
    with launch.recording() as recorded:
        fused()
    (kernel_launch, ptrs), = recorded
    cuda = device.type == "cuda"
    rows = {"bare_jit": kernel_launch.bare(ptrs, "jit"),
            "bare_handle": kernel_launch.bare(ptrs, "handle") if cuda else None,
            "bare_addresses": kernel_launch.bare(ptrs, "addresses") if cuda else None,
            "bare_launcher": kernel_launch.bare(ptrs, "launcher") if cuda else None,
            "fused": fused,
            "fused_check_positions": op(qk_norm_rope, check_positions=True),
            "fused_jit_dispatch": None,
            "split": op(qk_norm_rope_split)}
    us = {name: None if fn is None else _per_call_us(fn, calls, device)
          for name, fn in rows.items()}
    direct, launch.DIRECT = launch.DIRECT, False
    try:
        us["fused_jit_dispatch"] = _per_call_us(fused, calls, device)
    finally:
        launch.DIRECT = direct
    return {"device": str(device), "geometry": geometry.label, "tokens": tokens,
            "inplace": geometry.inplace, "calls": calls, "direct_launch": launch.DIRECT,
            "us_per_call": us}
