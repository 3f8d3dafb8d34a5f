"""RMSNorm of every head row: the first and second launches of the split route."""

import torch
import triton
import triton.language as tl

from .checks import (
    WEIGHT_MODES,
    as_rows,
    check_choice,
    check_eps,
    check_launchable,
    check_weight,
    out_rows,
)
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


@triton.jit
def rms_norm_kernel(
    x_ptr, y_ptr, w_ptr,
    T, H, eps,
    stride_xt, stride_xh, stride_yt, stride_yh,
    n_head_blocks,
    D: tl.constexpr, DB: tl.constexpr, OFFSET: tl.constexpr,
    BT: tl.constexpr, BH: tl.constexpr,
):
    t, h = tile_coords(tl.program_id(0), n_head_blocks, BT, BH)
    x_row, row_mask = token_head_base(x_ptr, t, h, stride_xt, stride_xh, T, H)
    y_row, _ = token_head_base(y_ptr, t, h, stride_yt, stride_yh, T, H)
    d = tl.arange(0, DB)
    mask = row_mask & (d < D)[None, None, :]
    x = tl.load(x_row + d[None, None, :], mask=mask, other=0.0).to(tl.float32)  # [BT, BH, DB]
    w = norm_weight(w_ptr, d, d < D, OFFSET)
    rstd = inv_rms(tl.reshape(pairwise_sum(x * x, DB, 1, BT, BH), (BT, BH)), D, eps)
    tl.store(y_row + d[None, None, :], normalize(x, rstd, w, y_ptr.dtype.element_ty), mask=mask)


def norm_plan(tokens: int, heads: int, head_dim: int, device: torch.device) -> TilePlan:
    """The tile plan of an rms_norm launch."""
    return plan_tiles(tokens, heads, next_pow2(head_dim), min_programs(device))


def launch_rms_norm(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, eps: float,
                    offset: bool) -> TilePlan:
    """Launch on validated ``[T, H, D]`` views; returns the tile plan it used."""
    T, H, D = x.shape
    DB = next_pow2(D)
    plan = norm_plan(T, H, D, x.device)
    if T and H:
        rms_norm_kernel[(plan.programs,)](
            x, y, weight, T, H, eps,
            x.stride(0), x.stride(1), y.stride(0), y.stride(1),
            plan.head_blocks,
            D=D, DB=DB, OFFSET=offset, BT=plan.block_t, BH=plan.block_h,
            num_warps=plan.num_warps, **COMPILE_OPTIONS,
        )
    return plan


def rms_norm(x: torch.Tensor, weight: torch.Tensor, *, eps: float = 1e-6,
             weight_mode: str = "plain", out: torch.Tensor | None = None) -> torch.Tensor:
    """RMS-normalise every head row of ``x``.

    ``x: [..., H, D]`` (any token/head strides, unit stride on D), ``weight: [D]``.
    ``y = x * rsqrt(mean(x^2) + eps) * w`` (``weight_mode="plain"``) or ``* (1 + w)``
    (``"offset"``), computed in fp32 and rounded to ``x.dtype``. Writes into ``out``
    (``out=x`` normalises in place) or a new tensor, and returns it.
    """
    rows = as_rows("x", x)
    check_launchable("x", x)
    check_weight("weight", weight, x.shape[-1], x.device)
    check_choice("weight_mode", weight_mode, WEIGHT_MODES)
    eps = check_eps(eps)
    if out is None:
        out = torch.empty_like(x)
    launch_rms_norm(rows, out_rows("out", out, x), weight, eps, weight_mode == "offset")
    return out
