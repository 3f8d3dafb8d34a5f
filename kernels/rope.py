"""Rotary position embedding of q and k in one launch: the third launch of the split route."""

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from . import calls, plan
from .checks import RopeCall, check_rope
from .launch import KernelLaunch, nonempty
from .plan import TilePlan, next_pow2, pair_width, plan_pair, qk_grid
from .tiles import (
    COMPILE_OPTIONS,
    cos_sin,
    load_pairs,
    nan_unless,
    qk_tile,
    rotate,
    store_pairs,
    tile_coords,
    token_head_base,
)


@triton.jit
def _rope_tile(
    x_ptr, o_ptr, cs_ptr, pos_ptr, axis_ptr, token_block, head_block,
    T, H, max_pos, stride_xt, stride_xh, stride_ot, stride_oh,
    stride_cs, stride_pos_axis, stride_pos_t,
    D: tl.constexpr, PB: tl.constexpr, R2: tl.constexpr, R2B: tl.constexpr,
    NEOX: tl.constexpr, MROPE: tl.constexpr, BT: tl.constexpr, BH: tl.constexpr,
):
    t, h = tile_coords(token_block, head_block, BT, BH)
    x_row, mask = token_head_base(x_ptr, t, h, stride_xt, stride_xh, T, H)
    o_row, _ = token_head_base(o_ptr, t, h, stride_ot, stride_oh, T, H)
    # The table rows first in the source, as they wait on a dependent load of the
    # positions (ptxas orders the loads as it sees fit).
    i = tl.arange(0, R2B)
    c, s, valid = cos_sin(cs_ptr, pos_ptr, axis_ptr, t, T, max_pos, stride_cs,
                          stride_pos_axis, stride_pos_t, i, i < R2, R2, R2B != R2, MROPE,
                          BH)  # [BT, BH|1, R2B]
    x1, x2 = load_pairs(x_row, mask, R2, R2B, NEOX, BT, BH)  # [BT, BH, R2B] each
    o1, o2 = rotate(x1, x2, nan_unless(valid, c), nan_unless(valid, s))
    dtype = o_ptr.dtype.element_ty
    store_pairs(o_row, mask, o1.to(dtype), o2.to(dtype), R2, R2B, NEOX, BT, BH)
    if PB > 0:
        # Out of place, the channels past rotary_dim travel unrotated.
        d = (2 * R2 + tl.arange(0, PB))[None, None, :]
        m = mask & (d < D)
        tl.store(o_row + d, tl.load(x_row + d, mask=m), mask=m)


@triton.jit(do_not_specialize=["T", "max_pos", "stride_pos_axis", "q_programs"])
def rope_kernel(
    q_ptr, k_ptr, qo_ptr, ko_ptr, cs_ptr, pos_ptr, axis_ptr,
    T, HQ, HK, max_pos,
    stride_qt, stride_qh, stride_kt, stride_kh,
    stride_qot, stride_qoh, stride_kot, stride_koh,
    stride_cs, stride_pos_axis, stride_pos_t,
    q_programs, q_head_blocks: tl.constexpr, k_head_blocks: tl.constexpr,
    D: tl.constexpr, PB: tl.constexpr, R2: tl.constexpr, R2B: tl.constexpr,
    NEOX: tl.constexpr, MROPE: tl.constexpr,
    BTQ: tl.constexpr, BHQ: tl.constexpr, BTK: tl.constexpr, BHK: tl.constexpr,
    QC: tl.constexpr, KC: tl.constexpr,
):
    is_q, tb, hb = qk_tile(tl.program_id(0), q_programs, QC, KC, q_head_blocks, k_head_blocks)
    if is_q:
        _rope_tile(q_ptr, qo_ptr, cs_ptr, pos_ptr, axis_ptr, tb, hb,
                   T, HQ, max_pos, stride_qt, stride_qh, stride_qot, stride_qoh,
                   stride_cs, stride_pos_axis, stride_pos_t,
                   D, PB, R2, R2B, NEOX, MROPE, BTQ, BHQ)
    else:
        _rope_tile(k_ptr, ko_ptr, cs_ptr, pos_ptr, axis_ptr, tb, hb,
                   T, HK, max_pos, stride_kt, stride_kh, stride_kot, stride_koh,
                   stride_cs, stride_pos_axis, stride_pos_t,
                   D, PB, R2, R2B, NEOX, MROPE, BTK, BHK)


def pass_width(head_dim: int, rotary_dim: int, inplace: bool) -> int:
    """The padded width of the pass-through tile a rope program copies: out of place with
    partial rotary the channels past rotary_dim travel unrotated; else none (0)."""
    return 0 if inplace or rotary_dim == head_dim else next_pow2(head_dim - rotary_dim)


def rope_width(head_dim: int, rotary_dim: int, inplace: bool) -> int:
    """Channels a rope program holds per row: the rotary pairs and the pass-through tile."""
    return pair_width(rotary_dim) + pass_width(head_dim, rotary_dim, inplace)


def rope_plans(tokens: int, heads_q: int, heads_k: int, head_dim: int, rotary_dim: int,
               inplace: bool, device: torch.device,
               element_size: int = 2) -> tuple[TilePlan, TilePlan]:
    """The q and k tile plans of a rope launch."""
    s = plan.SETTINGS
    return plan_pair(tokens, heads_q, heads_k, rope_width(head_dim, rotary_dim, inplace),
                     element_size, device, s.rope_elems_per_program,
                     elems_per_warp=s.rope_elems_per_warp)


def rope_launch(call: RopeCall, q: torch.Tensor, k: torch.Tensor, q_out: torch.Tensor,
                k_out: torch.Tensor, inplace: bool, slots: Sequence[int],
                plans: tuple[TilePlan, TilePlan]) -> KernelLaunch:
    """The launch rotating the ``[T, H, D]`` views ``q, k`` into ``q_out, k_out``; ``slots``
    name the call tuple's q, k, q_out, k_out, table and positions."""
    T, HQ, D = q.shape
    HK = k.shape[1]
    plan_q, plan_k = plans
    pos = call.positions
    programs, q_chunk, k_chunk = qk_grid(T, plan_q, plan_k)
    return KernelLaunch(
        rope_kernel, (programs,), slots,
        (call.axis_map, T, HQ, HK, call.max_pos,
         q.stride(0), q.stride(1), k.stride(0), k.stride(1),
         q_out.stride(0), q_out.stride(1), k_out.stride(0), k_out.stride(1),
         call.cos_sin_cache.stride(0), pos.stride(0), pos.stride(1),
         plan_q.programs, plan_q.head_blocks, plan_k.head_blocks,
         D, pass_width(D, call.rotary_dim, inplace), call.rotary_dim // 2,
         pair_width(call.rotary_dim) // 2, call.neox,
         call.axis_map is not None,
         plan_q.block_t, plan_q.block_h, plan_k.block_t, plan_k.block_h, q_chunk, k_chunk),
        {"num_warps": max(plan_q.num_warps, plan_k.num_warps), **COMPILE_OPTIONS},
    )


def rope(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor, *,
    rotary_dim: int | None = None, style: str = "neox",
    mrope_section: Sequence[int] | None = None, mrope_layout: str = "sectioned",
    inplace: bool = True, q_out: torch.Tensor | None = None,
    k_out: torch.Tensor | None = None, check_positions: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate the first ``rotary_dim`` channels of every q and k head row.

    ``q: [..., Hq, D]``, ``k: [..., Hk, D]`` (same token dims, unit stride on D),
    ``positions: [T]`` (or the token dims' shape) of int32/int64, ``[3, T]`` with
    ``mrope_section``; ``cos_sin_cache: [max_pos, rotary_dim]``, cosines in the first half
    of a row and sines in the second. ``style="neox"`` pairs channel ``i`` with
    ``i + rotary_dim / 2``, ``"gptj"`` pairs ``2i`` with ``2i + 1``. Rotates in fp32 and
    rounds to the storage dtype. Returns ``(q_out, k_out)``: ``q, k`` themselves when
    ``inplace``. A tensor the call writes must share no memory with another of its tensors
    (but ``q_out`` may be ``q``, element for element, and ``k_out`` ``k``): such a call
    raises (``overlap.Footprint``).

    Positions are not checked by default, so that a call never waits for the device: a
    position outside ``[0, max_pos)`` (negative, past the table, any int64) reads nothing
    and writes NaN into that token's rotary channels (with MRoPE, into the channels whose
    axis position is out of range); the pass-through channels stay finite.
    ``check_positions=True`` instead raises on such positions, at the cost of reading them
    back to the host (a synchronisation; refused inside CUDA graph capture).
    """
    tensors = (q, k, q_out, k_out, None, None, cos_sin_cache, positions)
    options = (rotary_dim, style, calls.section_key(mrope_section), mrope_layout, inplace)

    def build() -> calls.Resolved:
        call = check_rope(q, k, positions, cos_sin_cache, rotary_dim=rotary_dim, style=style,
                          mrope_section=mrope_section, mrope_layout=mrope_layout,
                          inplace=inplace, q_out=q_out, k_out=k_out)
        T, HQ, D = call.q.shape
        plans = rope_plans(T, HQ, call.k.shape[1], D, call.rotary_dim, bool(inplace),
                           q.device, q.element_size())
        launches = nonempty(rope_launch(call, call.q, call.k, call.q_out, call.k_out,
                                        bool(inplace), (calls.Q, calls.K, calls.Q_OUT,
                                                        calls.K_OUT, calls.CACHE,
                                                        calls.POSITIONS), plans))
        return calls.Resolved.of(launches, call, inplace, tensors)

    return calls.call("rope", tensors, options, build, check_positions)
