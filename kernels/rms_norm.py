"""RMSNorm of every head row: the first and second launches of the split route."""

import torch
import triton
import triton.language as tl

from . import calls, plan
from .checks import (
    WEIGHT_MODES,
    as_rows,
    check_choice,
    check_eps,
    check_launchable,
    check_no_grad,
    check_weight,
    out_rows,
)
from .launch import KernelLaunch, nonempty
from .overlap import Footprint
from .plan import TilePlan, min_programs, next_pow2, plan_tiles
from .tiles import (
    COMPILE_OPTIONS,
    inv_rms,
    norm_weight,
    normalize,
    pairwise_sum,
    tile_coords,
    token_head_base,
)

# The call's tensors, as its cache key and its checks take them, and their slots.
NAMES = ("x", "weight", "out")
X, WEIGHT, OUT = range(len(NAMES))


@triton.jit(do_not_specialize=["T"])
def rms_norm_kernel(
    x_ptr, y_ptr, w_ptr,
    T, H, eps,
    stride_xt, stride_xh, stride_yt, stride_yh,
    n_head_blocks: tl.constexpr,
    D: tl.constexpr, DB: tl.constexpr, OFFSET: tl.constexpr,
    BT: tl.constexpr, BH: tl.constexpr,
):
    pid = tl.program_id(0)
    # A constant divisor: a multiply and a shift (``qk_tile``).
    t, h = tile_coords(pid // n_head_blocks, pid % n_head_blocks, BT, BH)
    x_row, row_mask = token_head_base(x_ptr, t, h, stride_xt, stride_xh, T, H)
    y_row, _ = token_head_base(y_ptr, t, h, stride_yt, stride_yh, T, H)
    d = tl.arange(0, DB)
    mask = row_mask & (d < D)[None, None, :]
    x = tl.load(x_row + d[None, None, :], mask=mask, other=0.0).to(tl.float32)  # [BT, BH, DB]
    w = norm_weight(w_ptr, d, d < D, OFFSET)
    rstd = inv_rms(tl.reshape(pairwise_sum(x * x, DB, 1, BT, BH), (BT, BH)), D, eps)
    tl.store(y_row + d[None, None, :], normalize(x, rstd, w, y_ptr.dtype.element_ty), mask=mask)


def norm_plan(tokens: int, heads: int, head_dim: int, device: torch.device,
              element_size: int = 2) -> TilePlan:
    """The tile plan of an rms_norm launch."""
    s = plan.SETTINGS
    return plan_tiles(tokens, heads, next_pow2(head_dim), element_size, min_programs(device),
                      s.norm_elems_per_program, s.norm_elems_per_warp)


def norm_launch(x: torch.Tensor, y: torch.Tensor, eps: float, offset: bool,
                slots: tuple[int, int, int], plan: TilePlan) -> KernelLaunch:
    """The launch normalising the validated ``[T, H, D]`` view ``x`` into ``y``; ``slots``
    name the call tuple's x, y and weight."""
    T, H, D = x.shape
    return KernelLaunch(
        rms_norm_kernel, (plan.programs,), slots,
        (T, H, eps, x.stride(0), x.stride(1), y.stride(0), y.stride(1), plan.head_blocks,
         D, next_pow2(D), offset, plan.block_t, plan.block_h),
        {"num_warps": plan.num_warps, **COMPILE_OPTIONS},
    )


def rms_norm(x: torch.Tensor, weight: torch.Tensor, *, eps: float = 1e-6,
             weight_mode: str = "plain", out: torch.Tensor | None = None) -> torch.Tensor:
    """RMS-normalise every head row of ``x``.

    ``x: [..., H, D]`` (any token/head strides, unit stride on D), ``weight: [D]``.
    ``y = x * rsqrt(mean(x^2) + eps) * w`` (``weight_mode="plain"``) or ``* (1 + w)``
    (``"offset"``), computed in fp32 and rounded to ``x.dtype``. Writes into ``out``
    (``out=x`` normalises in place) or a new tensor, and returns it.
    """

    tensors = (x, weight, out)

    def build() -> tuple[tuple[KernelLaunch, ...], Footprint]:
        rows = as_rows("x", x)
        check_launchable("x", x)
        check_weight("weight", weight, x.shape[-1], x.device, "x")
        check_choice("weight_mode", weight_mode, WEIGHT_MODES)
        norm_eps = check_eps(eps)
        y = out_rows("out", torch.empty_like(x) if out is None else out, x, "x")
        T, H, D = rows.shape
        plan = norm_plan(T, H, D, x.device, x.element_size())
        launches = nonempty(norm_launch(rows, y, norm_eps, weight_mode == "offset", (0, 1, 2),
                                        plan))
        return launches, Footprint(tensors, () if out is None else ((OUT, X),))

    launches, footprint = calls.resolve("rms_norm", tensors, (eps, weight_mode), build)
    check_no_grad(NAMES, tensors)
    footprint.check(NAMES, tensors)
    if out is None:
        out = torch.empty_like(x)
    else:
        calls.mark_written(("out", out))
    for kernel_launch in launches:
        kernel_launch((x, out, weight))
    return out
