"""Rotary position embedding of q and k in one launch: the third launch of the split route."""

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from .checks import RopeCall, check_rope
from .plan import TilePlan, next_pow2, plan_pair
from .tiles import (
    COMPILE_OPTIONS,
    cos_sin,
    load_pairs,
    rotate,
    store_pairs,
    tile_coords,
    token_head_base,
)


@triton.jit
def _rope_tile(
    x_ptr, o_ptr, cs_ptr, pos_ptr, axis_ptr, pid, n_head_blocks,
    T, H, stride_xt, stride_xh, stride_ot, stride_oh,
    stride_cs, stride_pos_axis, stride_pos_t,
    D: tl.constexpr, R2: tl.constexpr, PB: tl.constexpr, NEOX: tl.constexpr,
    MROPE: tl.constexpr, COPY_PASS: tl.constexpr, BT: tl.constexpr, BH: tl.constexpr,
):
    t, h = tile_coords(pid, n_head_blocks, BT, BH)
    x_row, mask = token_head_base(x_ptr, t, h, stride_xt, stride_xh, T, H)
    o_row, _ = token_head_base(o_ptr, t, h, stride_ot, stride_oh, T, H)
    # The table rows first: they wait on a dependent load of the positions.
    c, s = cos_sin(cs_ptr, pos_ptr, axis_ptr, t, T, stride_cs, stride_pos_axis, stride_pos_t,
                   R2, MROPE)  # [BT, 1, R2]
    x1, x2 = load_pairs(x_row, mask, R2, NEOX, BT, BH)  # [BT, BH, R2] each
    o1, o2 = rotate(x1, x2, c, s)
    dtype = o_ptr.dtype.element_ty
    store_pairs(o_row, mask, o1.to(dtype), o2.to(dtype), R2, NEOX, BT, BH)
    if COPY_PASS:
        # Out of place, the channels past rotary_dim travel unrotated.
        d = (2 * R2 + tl.arange(0, PB))[None, None, :]
        m = mask & (d < D)
        tl.store(o_row + d, tl.load(x_row + d, mask=m), mask=m)


@triton.jit
def rope_kernel(
    q_ptr, k_ptr, qo_ptr, ko_ptr, cs_ptr, pos_ptr, axis_ptr,
    T, HQ, HK,
    stride_qt, stride_qh, stride_kt, stride_kh,
    stride_qot, stride_qoh, stride_kot, stride_koh,
    stride_cs, stride_pos_axis, stride_pos_t,
    q_programs, q_head_blocks, k_head_blocks,
    D: tl.constexpr, R2: tl.constexpr, PB: tl.constexpr, NEOX: tl.constexpr,
    MROPE: tl.constexpr, COPY_PASS: tl.constexpr,
    BTQ: tl.constexpr, BHQ: tl.constexpr, BTK: tl.constexpr, BHK: tl.constexpr,
):
    pid = tl.program_id(0)
    if pid < q_programs:
        _rope_tile(q_ptr, qo_ptr, cs_ptr, pos_ptr, axis_ptr, pid, q_head_blocks,
                   T, HQ, stride_qt, stride_qh, stride_qot, stride_qoh,
                   stride_cs, stride_pos_axis, stride_pos_t,
                   D, R2, PB, NEOX, MROPE, COPY_PASS, BTQ, BHQ)
    else:
        _rope_tile(k_ptr, ko_ptr, cs_ptr, pos_ptr, axis_ptr, pid - q_programs, k_head_blocks,
                   T, HK, stride_kt, stride_kh, stride_kot, stride_koh,
                   stride_cs, stride_pos_axis, stride_pos_t,
                   D, R2, PB, NEOX, MROPE, COPY_PASS, BTK, BHK)


def rope_plans(tokens: int, heads_q: int, heads_k: int, head_dim: int, rotary_dim: int,
               copy_pass: bool, device: torch.device) -> tuple[TilePlan, TilePlan]:
    """The q and k tile plans of a rope launch (``copy_pass``: out of place, partial)."""
    width = rotary_dim + next_pow2(head_dim - rotary_dim) * copy_pass
    return plan_pair(tokens, heads_q, heads_k, width, device)


def launch_rope(call: RopeCall, q: torch.Tensor, k: torch.Tensor, q_out: torch.Tensor,
                k_out: torch.Tensor) -> tuple[TilePlan, TilePlan]:
    """Rotate the ``[T, H, D]`` views ``q, k`` into ``q_out, k_out`` (which may be them)."""
    T, HQ, D = q.shape
    HK = k.shape[1]
    R2 = call.rotary_dim // 2
    in_place = q.data_ptr() == q_out.data_ptr() and k.data_ptr() == k_out.data_ptr()
    copy_pass = call.rotary_dim < D and not in_place
    PB = next_pow2(D - call.rotary_dim) if copy_pass else 1
    plan_q, plan_k = rope_plans(T, HQ, HK, D, call.rotary_dim, copy_pass, q.device)
    if T:
        pos = call.positions
        rope_kernel[(plan_q.programs + plan_k.programs,)](
            q, k, q_out, k_out, call.cos_sin_cache, pos, call.axis_map,
            T, HQ, HK,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1),
            q_out.stride(0), q_out.stride(1), k_out.stride(0), k_out.stride(1),
            call.cos_sin_cache.stride(0), pos.stride(0), pos.stride(1),
            plan_q.programs, plan_q.head_blocks, plan_k.head_blocks,
            D=D, R2=R2, PB=PB, NEOX=call.neox, MROPE=call.axis_map is not None,
            COPY_PASS=copy_pass,
            BTQ=plan_q.block_t, BHQ=plan_q.block_h, BTK=plan_k.block_t, BHK=plan_k.block_h,
            num_warps=max(plan_q.num_warps, plan_k.num_warps), **COMPILE_OPTIONS,
        )
    return plan_q, plan_k


def rope(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor, *,
    rotary_dim: int | None = None, style: str = "neox",
    mrope_section: Sequence[int] | None = None, mrope_layout: str = "sectioned",
    inplace: bool = True, q_out: torch.Tensor | None = None,
    k_out: torch.Tensor | None = None, check_positions: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate the first ``rotary_dim`` channels of every q and k head row.

    ``q: [..., Hq, D]``, ``k: [..., Hk, D]`` (same token dims, unit stride on D),
    ``positions: [T]`` (or the token dims' shape) of int32/int64, ``[3, T]`` with
    ``mrope_section``; ``cos_sin_cache: [max_pos, rotary_dim]``, cosines in the first half
    of a row and sines in the second. ``style="neox"`` pairs channel ``i`` with
    ``i + rotary_dim / 2``, ``"gptj"`` pairs ``2i`` with ``2i + 1``. Rotates in fp32 and
    rounds to the storage dtype. Returns ``(q_out, k_out)``: ``q, k`` themselves when
    ``inplace``. ``check_positions`` (default: on unless a CUDA graph is being captured)
    raises on positions outside the table instead of reading out of bounds.
    """
    call = check_rope(q, k, positions, cos_sin_cache, rotary_dim=rotary_dim, style=style,
                      mrope_section=mrope_section, mrope_layout=mrope_layout, inplace=inplace,
                      q_out=q_out, k_out=k_out, check_positions=check_positions)
    launch_rope(call, call.q, call.k, call.q_out, call.k_out)
    return call.q_result, call.k_result
