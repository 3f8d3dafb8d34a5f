"""The fused route: RMSNorm of every q and k head row, then RoPE, in one launch.

Each row is read once from memory and written once. The rotary pairs are loaded as tiles
of their own, each half padded to a power of two with masked lanes. The norm's sum of
squares runs the pairwise tree ``rms_norm`` runs over the whole row: with full rotary and a
power-of-two half it is rebuilt from the pair tiles; otherwise the row is also loaded whole
(its rotary span a second time, from L1) and summed in that very tree (with partial rotary
where ``plan.Settings.whole_pass_tile`` says so; off, the tree is rebuilt from the pair
tiles and a pass-through tile). So the result is bit-identical to the split route
(``split.qk_norm_rope_split``).
"""

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from . import calls, plan
from .checks import RopeCall, check_flag, check_qk_norm_rope
from .launch import KernelLaunch, nonempty
from .plan import TilePlan, next_pow2, pair_width, plan_pair, qk_grid
from .tiles import (
    COMPILE_OPTIONS,
    cos_sin,
    inv_rms,
    load_pairs,
    nan_unless,
    norm_weight,
    normalize,
    normalize_fp32,
    pair_offsets,
    pairs_sumsq,
    pairwise_sum,
    prefetch_table,
    qk_tile,
    rotate,
    store_pairs,
    tile_coords,
    to_fp32,
    token_head_base,
)


@triton.jit
def _tile_rows(x_ptr, o_ptr, token_block, head_block, T, H, stride_xt, stride_xh, stride_ot,
               stride_oh, PDL: tl.constexpr, BT: tl.constexpr, BH: tl.constexpr):
    """A tile's tokens, its input and output row bases and its row mask; with ``PDL == 2``
    the wait for the previous kernel first."""
    t, h = tile_coords(token_block, head_block, BT, BH)
    x_row, mask = token_head_base(x_ptr, t, h, stride_xt, stride_xh, T, H)
    o_row, _ = token_head_base(o_ptr, t, h, stride_ot, stride_oh, T, H)
    if PDL == 2:
        # Many waves: wait before anything is loaded, so that no register is held across the
        # wait (the table's, at PDL == 1: 95 registers instead of 64 at (32,8) x 128's large
        # tiles), and let the next launch start as the programs exit.
        tl.extra.cuda.gdc_wait()
    return t, x_row, o_row, mask


@triton.jit
def _fused_tile(
    x_ptr, o_ptr, w_ptr, cs_ptr, pos_ptr, axis_ptr, token_block, head_block,
    T, H, eps, max_pos, stride_xt, stride_xh, stride_ot, stride_oh,
    stride_cs, stride_pos_axis, stride_pos_t,
    D: tl.constexpr, DB: tl.constexpr, R2: tl.constexpr, R2B: tl.constexpr,
    NEOX: tl.constexpr, OFFSET: tl.constexpr, MROPE: tl.constexpr, PDL: tl.constexpr,
    WHOLE_SET: tl.constexpr, PTX: tl.constexpr, BT: tl.constexpr, BH: tl.constexpr,
):
    R: tl.constexpr = 2 * R2
    # Whether the whole row is loaded and summed: with partial rotary where set, and for a
    # rotary half that is no power of two, whose padded pair tiles hold no subtree of the
    # row's.
    WHOLE: tl.constexpr = (WHOLE_SET and R < D) or R2B != R2
    dtype = o_ptr.dtype.element_ty
    t, x_row, o_row, mask = _tile_rows(x_ptr, o_ptr, token_block, head_block, T, H, stride_xt,
                                       stride_xh, stride_ot, stride_oh, PDL, BT, BH)

    # The table rows hang on a dependent load of the positions, so they come first here;
    # ptxas still issues their loads after the reduction (results/tuning/
    # 2026-12-04-kernel-ir-load-order.txt), and each way tried of forcing them earlier was
    # slower (docs/kernel-notes.md: volatile loads in a fixed order, the table early).
    pairs = tl.arange(0, R2B) < R2  # the lanes that hold a pair
    c, s, valid = cos_sin(cs_ptr, pos_ptr, axis_ptr, t, T, max_pos, stride_cs,
                          stride_pos_axis, stride_pos_t, tl.arange(0, R2B), pairs, R2,
                          R2B != R2, MROPE, BH)  # [BT, BH|1, R2B]
    i1, i2 = pair_offsets(R2, R2B, NEOX)
    w1 = norm_weight(w_ptr, i1, pairs, OFFSET)
    w2 = norm_weight(w_ptr, i2, pairs, OFFSET)
    if R < D:
        dp = tl.arange(0, DB)
        wp = norm_weight(w_ptr, dp, (dp < D) if WHOLE else ((dp >= R) & (dp < D)), OFFSET)
    if PDL == 1:
        # Only the rows may come from the kernel launched just before this one: wait for it
        # here, and let the next kernel start its own prologue meanwhile.
        tl.extra.cuda.gdc_wait()
    x1, x2 = load_pairs(x_row, mask, R2, R2B, NEOX, BT, BH)  # [BT, BH, R2B] each
    x1, x2 = to_fp32(x1, PTX), to_fp32(x2, PTX)
    if R < D or WHOLE:
        # [BT, BH, DB]: the whole row, or only its pass-through channels (zero elsewhere).
        d = tl.arange(0, DB)[None, None, :]
        pass_mask = mask & (d >= R) & (d < D)
        load_mask = (mask & (d < D)) if WHOLE else pass_mask
        xp = tl.load(x_row + d, mask=load_mask, other=0.0).to(tl.float32)
    if PDL == 1:
        tl.extra.cuda.gdc_launch_dependents()
    if WHOLE:
        # The tree over rows of shape [BT * BH, 1, DB]: the same sums, but its levels share no
        # shape with the pair tiles. Under Triton 3.9 levels of [BT, BH, R2B] took the pair
        # tiles into their layouts: some 1,800 spilled accesses a program at D = 256 /
        # rotary 64 and at the padded pairs. Under 3.6 the PTX of every shipped tile is the
        # same either way (docs/kernel-notes.md, the twenty-fourth session).
        rows = tl.reshape(xp * xp, (BT * BH, 1, DB))
        sumsq = tl.reshape(pairwise_sum(rows, DB, 1, BT * BH, 1), (BT, BH))
    else:
        sumsq = pairs_sumsq(x1, x2, R2, NEOX, BT, BH)  # [BT, BH]: the tree over [0, R)
    if R < D and not WHOLE:
        # The pass-through channels sit at their natural places in a [0, DB) tile whose
        # rotary span is zero, so the tree's first log2(R) levels leave block 0 at +0 and
        # the rotary span's own sum drops into that slot exactly.
        blocks = pairwise_sum(xp * xp, DB, DB // R, BT, BH)  # [BT, BH, DB // R]
        first = tl.arange(0, DB // R)[None, None, :] == 0
        blocks = blocks + tl.where(first, sumsq[:, :, None], 0.0)
        sumsq = tl.reshape(pairwise_sum(blocks, DB // R, 1, BT, BH), (BT, BH))
    rstd = inv_rms(sumsq, D, eps)

    # An out-of-range position's NaN enters its rotary channels through the rstd of their
    # row (with MROPE, per lane, through the table's lanes): a select per row, not per
    # channel (the per-channel selects were a sixth of the ALU pipe's work at D = 128).
    # Selected as [BT, BH], in rstd's own layout: Triton loads the positions again for it
    # (from L1) rather than hold them, and the DiT tiles take 60 registers, not 71.
    if MROPE:
        c, s, rstd_rotary = nan_unless(valid, c), nan_unless(valid, s), rstd
    else:
        rstd_rotary = nan_unless(tl.reshape(valid, (BT, 1)), rstd)
    y1 = normalize_fp32(x1, rstd_rotary[:, :, None], w1, dtype, PTX)
    y2 = normalize_fp32(x2, rstd_rotary[:, :, None], w2, dtype, PTX)
    o1, o2 = rotate(y1, y2, c, s)
    store_pairs(o_row, mask, o1.to(dtype), o2.to(dtype), R2, R2B, NEOX, BT, BH)
    if R < D:
        tl.store(o_row + d, normalize(xp, rstd, wp, dtype), mask=pass_mask)


@triton.jit(do_not_specialize=["T", "max_pos", "stride_pos_axis", "q_programs",
                             "prefetch_ahead"])
def qk_norm_rope_kernel(
    q_ptr, k_ptr, qo_ptr, ko_ptr, qw_ptr, kw_ptr, cs_ptr, pos_ptr, axis_ptr,
    T, HQ, HK, eps, max_pos,
    stride_qt, stride_qh, stride_kt, stride_kh,
    stride_qot, stride_qoh, stride_kot, stride_koh,
    stride_cs, stride_pos_axis, stride_pos_t,
    q_programs, q_head_blocks: tl.constexpr, k_head_blocks: tl.constexpr, prefetch_ahead,
    D: tl.constexpr, DB: tl.constexpr, R2: tl.constexpr, R2B: tl.constexpr,
    NEOX: tl.constexpr, OFFSET: tl.constexpr, MROPE: tl.constexpr, PDL: tl.constexpr,
    WHOLE: tl.constexpr, BTQ: tl.constexpr, BHQ: tl.constexpr, BTK: tl.constexpr, BHK: tl.constexpr,
    QC: tl.constexpr, KC: tl.constexpr, PREFETCH_PERIOD: tl.constexpr,
    PREFETCH_TOKENS: tl.constexpr, PTX: tl.constexpr,
):
    pid = tl.program_id(0)
    is_q, tb, hb = qk_tile(pid, q_programs, QC, KC, q_head_blocks, k_head_blocks)
    if is_q:
        _fused_tile(q_ptr, qo_ptr, qw_ptr, cs_ptr, pos_ptr, axis_ptr, tb, hb,
                    T, HQ, eps, max_pos, stride_qt, stride_qh, stride_qot, stride_qoh,
                    stride_cs, stride_pos_axis, stride_pos_t,
                    D, DB, R2, R2B, NEOX, OFFSET, MROPE, PDL, WHOLE, PTX, BTQ, BHQ)
    else:
        _fused_tile(k_ptr, ko_ptr, kw_ptr, cs_ptr, pos_ptr, axis_ptr, tb, hb,
                    T, HK, eps, max_pos, stride_kt, stride_kh, stride_kot,
                    stride_koh, stride_cs, stride_pos_axis, stride_pos_t,
                    D, DB, R2, R2B, NEOX, OFFSET, MROPE, PDL, WHOLE, PTX, BTK, BHK)
    if PREFETCH_PERIOD:  # noqa: SIM102 (compile time: no modulo by 0 to compile)
        # The first program of every PREFETCH_TOKENS tokens' tiles, its own tile stored,
        # asks the L2 for the table rows of the tokens ``prefetch_ahead`` such blocks on:
        # their tiles then find their rows there instead of waiting on DRAM for them
        # after their reduction (where ptxas issues the table's loads).
        if pid % PREFETCH_PERIOD == 0:
            prefetch_table(cs_ptr, pos_ptr, pid // PREFETCH_PERIOD + prefetch_ahead, T,
                           max_pos, stride_cs, stride_pos_t, R2, R2B, PREFETCH_TOKENS,
                           PTX)


def fused_plans(tokens: int, heads_q: int, heads_k: int, head_dim: int, rotary_dim: int,
                device: torch.device, element_size: int = 2,
                pdl: bool = False) -> tuple[TilePlan, TilePlan]:
    """The q and k tile plans of the fused launch (``fused_tiles``)."""
    return fused_tiles(tokens, heads_q, heads_k, head_dim, rotary_dim, device, element_size,
                       pdl)[0]


def fused_tiles(tokens: int, heads_q: int, heads_k: int, head_dim: int, rotary_dim: int,
                device: torch.device, element_size: int = 2, pdl: bool = False
                ) -> tuple[tuple[TilePlan, TilePlan], int]:
    """The q and k tile plans of the fused launch (a row holds the pairs and, with partial
    rotary, a natural-width pass-through tile) and its PDL variant: 0 without PDL, else
    ``plan.pdl_variant`` of the tiles. Partial rotary takes its own program size but in
    variant 1, which keeps the larger programs; full rotary takes smaller programs where
    ``plan.few_programs`` says so; past the L2, k tiles of few tokens (``Settings``)."""
    s = plan.SETTINGS
    # A rotary half that is not a power of two is padded, and its rows are loaded whole as
    # partial rotary's are: it takes partial rotary's program size.
    partial = rotary_dim < head_dim or pair_width(rotary_dim) != rotary_dim
    width = pair_width(rotary_dim) + next_pow2(head_dim) * partial
    rows = tokens * (heads_q + heads_k) * head_dim * element_size
    k_ratio = s.k_token_ratio_past_l2 if plan.past_l2(rows, device) else 0

    def plans(elems: int | None = None, per_warp: int | None = None,
              spread: bool = True) -> tuple[TilePlan, TilePlan]:
        return plan_pair(tokens, heads_q, heads_k, width, element_size, device, elems,
                         k_ratio, per_warp, spread)

    if partial:
        own = plans(s.partial_elems_per_program)
    elif plan.few_programs(plans(spread=False), device, pdl):
        own = plans(s.few_elems_per_program, s.few_elems_per_warp)
    else:
        own = plans()
    variant = plan.pdl_variant(*own, device) if pdl else 0
    if partial and variant == 1:
        return plans(), variant
    return own, variant


def check_pdl(pdl: object, device: torch.device) -> bool:
    """Whether to launch with Programmatic Dependent Launch (Hopper and later; under the
    interpreter nothing runs concurrently, so there it is accepted and has no effect)."""
    check_flag("pdl", pdl)
    if pdl and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] < 9:
        raise ValueError(f"pdl=True needs a device of compute capability 9.0 or later; "
                         f"{device} is {torch.cuda.get_device_capability(device)}")
    return pdl and device.type == "cuda"


def fused_launch(call: RopeCall, eps: float, offset: bool, pdl_variant: int,
                 plans: tuple[TilePlan, TilePlan]) -> KernelLaunch:
    """The fused kernel's launch for a validated call, with PDL where ``pdl_variant`` is
    not 0 (``fused_tiles``)."""
    T, HQ, D = call.q.shape
    HK = call.k.shape[1]
    plan_q, plan_k = plans
    q, k, qo, ko, pos = call.q, call.k, call.q_out, call.k_out, call.positions
    programs, q_chunk, k_chunk = qk_grid(T, plan_q, plan_k)
    period, ahead = plan.table_prefetch(
        T, (HQ + HK) * D * q.element_size(),
        call.rotary_dim * call.cos_sin_cache.element_size(), q_chunk, k_chunk,
        max(plan_q.block_t, plan_k.block_t), q.device, call.axis_map is None)
    return KernelLaunch(
        qk_norm_rope_kernel, (programs,),
        (calls.Q, calls.K, calls.Q_OUT, calls.K_OUT, calls.Q_WEIGHT, calls.K_WEIGHT,
         calls.CACHE, calls.POSITIONS),
        (call.axis_map, T, HQ, HK, eps, call.max_pos,
         q.stride(0), q.stride(1), k.stride(0), k.stride(1),
         qo.stride(0), qo.stride(1), ko.stride(0), ko.stride(1),
         call.cos_sin_cache.stride(0), pos.stride(0), pos.stride(1),
         plan_q.programs, plan_q.head_blocks, plan_k.head_blocks, ahead,
         D, next_pow2(D), call.rotary_dim // 2, pair_width(call.rotary_dim) // 2, call.neox,
         offset, call.axis_map is not None,
         pdl_variant, plan.SETTINGS.whole_pass_tile,
         plan_q.block_t, plan_q.block_h, plan_k.block_t, plan_k.block_h, q_chunk, k_chunk,
         # Inline PTX (the prefetch, the packed rounding): CUDA only, not ROCm nor the
         # interpreter.
         period, plan.PREFETCH_TOKENS, q.is_cuda and torch.version.hip is None),
        # launch_pdl only when asked for: a Triton older than 3.3 rejects the option.
        {"num_warps": max(plan_q.num_warps, plan_k.num_warps), **COMPILE_OPTIONS,
         **({"launch_pdl": True} if pdl_variant else {})},
    )


def qk_norm_rope(
    q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
    positions: torch.Tensor, cos_sin_cache: torch.Tensor, *, eps: float = 1e-6,
    rotary_dim: int | None = None, style: str = "neox", weight_mode: str = "plain",
    mrope_section: Sequence[int] | None = None, mrope_layout: str = "sectioned",
    inplace: bool = True, q_out: torch.Tensor | None = None,
    k_out: torch.Tensor | None = None, check_positions: bool = False, pdl: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm every q and k head row, then rotate it: one launch (the fused route).

    ``q: [..., Hq, D]``, ``k: [..., Hk, D]``, ``q_weight, k_weight: [D]``; the rotation
    arguments, and the rule that no output is another argument, are those of ``rope`` (an
    out-of-range position writes NaN into its rotary channels). The normalised value is
    rounded to the storage dtype before it is rotated, so the result is bit-identical to
    ``qk_norm_rope_split``. Returns ``(q_out, k_out)``:
    ``q, k`` themselves when ``inplace``.

    ``pdl=True`` launches with Programmatic Dependent Launch (compute capability 9.0+): a
    launch of at most 48 warps a multiprocessor (decode widths) reads the positions, the
    table and the weights, then waits for the kernel launched before it, and only then reads
    q and k; a larger one waits before it reads anything (``plan.pdl_variant``). Use it
    only where that previous kernel does not write the positions, the table or the
    weights.
    """
    tensors = (q, k, q_out, k_out, q_weight, k_weight, cos_sin_cache, positions)
    options = (eps, rotary_dim, style, weight_mode, calls.section_key(mrope_section),
               mrope_layout, inplace, pdl)

    def build() -> calls.Resolved:
        call, norm_eps, offset = check_qk_norm_rope(
            q, k, q_weight, k_weight, positions, cos_sin_cache, eps=eps, rotary_dim=rotary_dim,
            style=style, weight_mode=weight_mode, mrope_section=mrope_section,
            mrope_layout=mrope_layout, inplace=inplace, q_out=q_out, k_out=k_out)
        use_pdl = check_pdl(pdl, q.device)
        T, HQ, D = call.q.shape
        plans, variant = fused_tiles(T, HQ, call.k.shape[1], D, call.rotary_dim, q.device,
                                     q.element_size(), use_pdl)
        launches = nonempty(fused_launch(call, norm_eps, offset, variant, plans))
        return calls.Resolved.of(launches, call, inplace, tensors)

    return calls.call("fused", tensors, options, build, check_positions)
