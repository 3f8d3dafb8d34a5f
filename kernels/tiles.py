"""Triton building blocks shared by the rms_norm, rope and fused kernels.

Every kernel works on a tile of ``[BT, BH, width]``: ``BT`` tokens by ``BH`` heads of one
tensor, with the channels last. The split and the fused routes are bit-identical because
they run exactly these functions on the same values:

* The sum of squares is an explicit pairwise tree over the row in its natural channel
  order, each level adding adjacent pairs. A two-element sum is commutative, so no thread
  layout the compiler picks can change the result. With full rotary and halves of a power
  of two the fused kernel rebuilds that tree from the rotary halves it loads; with partial
  rotary, or halves padded to a power of two, it sums the whole row as ``rms_norm`` does
  (for partial rotary where ``Settings.whole_pass_tile`` says so; off, it rebuilds the
  tree from the halves and the pass-through channels loaded apart).
* The kernels are compiled without floating-point contraction (``enable_fp_fusion=False``,
  see ``COMPILE_OPTIONS``), so each multiply and add rounds on its own in both routes.

Safety: a position outside ``[0, max_pos)`` never addresses the table (the row is formed
from position 0 and the loads are masked) and its token's rotary channels come out NaN, in
both routes alike; every token and head offset is computed in 64 bits.
"""

import triton
import triton.language as tl

# Launch keyword arguments every kernel of this package is compiled with.
COMPILE_OPTIONS = {"enable_fp_fusion": False}


@triton.jit
def pairwise_sum(x, N: tl.constexpr, M: tl.constexpr, BT: tl.constexpr, BH: tl.constexpr):
    """Reduce the last axis of ``x: [BT, BH, N]`` to ``[BT, BH, M]`` by adjacent pairs.

    ``N`` and ``M`` are powers of two; ``M == 1`` gives the full pairwise sum.
    """
    for level in tl.static_range(N.bit_length() - M.bit_length()):
        x = tl.sum(tl.reshape(x, (BT, BH, N // (2 << level), 2)), axis=3)
    return x


@triton.jit
def inv_rms(sumsq, D: tl.constexpr, eps):
    """``rsqrt(mean(x^2) + eps)`` from a row's sum of squares, in fp32."""
    return tl.math.rsqrt(sumsq / D + eps)


@triton.jit
def norm_weight(w_ptr, offs, mask, OFFSET: tl.constexpr):
    """The norm weight at ``offs`` in fp32; ``OFFSET`` applies the ``1 + w`` convention."""
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if OFFSET:
        w = w + 1.0
    return w


@triton.jit
def normalize(x, rstd, w, dtype: tl.constexpr):
    """``x * rstd * w`` rounded to the storage dtype: the value the rotation consumes."""
    return (x * rstd[:, :, None] * w).to(dtype)


@triton.jit
def to_fp32(x, PTX: tl.constexpr):
    """``x`` as fp32: bf16 with ``PTX`` two at a time, a shift and a mask, where the compiler
    takes a byte permute, a shift and a shift for the pair."""
    if PTX and x.dtype == tl.bfloat16:
        return tl.inline_asm_elementwise(
            "{ shl.b32 $0, $2, 16; and.b32 $1, $2, 0xffff0000; }",
            "=r,=r,r", [x], dtype=tl.float32, is_pure=True, pack=2)
    return x.to(tl.float32)


@triton.jit
def normalize_fp32(x, scale, w, dtype: tl.constexpr, PTX: tl.constexpr):
    """``normalize`` of ``x`` by its rows' ``scale: [BT, BH, 1]`` (their rstd), read back
    as fp32 as the split route's rotation reads it. For bf16 with ``PTX`` (inline PTX
    allowed: CUDA, not the interpreter), two elements at a time by the packed conversion
    the stores use and two bit operations; the compiler's own round trip takes a
    conversion-unit instruction (an eighth of the FMA rate) per element. Both round to
    nearest even, so the bits are the same."""
    y = x * scale * w
    if PTX and dtype == tl.bfloat16:
        return tl.inline_asm_elementwise(
            "{ .reg .b32 t; cvt.rn.bf16x2.f32 t, $3, $2; shl.b32 $0, t, 16; "
            "and.b32 $1, t, 0xffff0000; }",
            "=r,=r,r,r", [y], dtype=tl.float32, is_pure=True, pack=2)
    return y.to(dtype).to(tl.float32)


@triton.jit
def rotate(x1, x2, c, s):
    """Rotate the pairs ``(x1, x2)`` by the angle whose cosine and sine are ``c, s``. A NaN
    in any of them makes both members NaN: that is how an out-of-range position's NaN
    reaches its rotary channels (``nan_unless``), in both routes by the same arithmetic."""
    x1 = x1.to(tl.float32)
    x2 = x2.to(tl.float32)
    return x1 * c - x2 * s, x2 * c + x1 * s


@triton.jit
def nan_unless(valid, x):
    """``x`` where ``valid``, else NaN."""
    return tl.where(valid, x, float("nan"))


@triton.jit
def token_head_base(ptr, t, h, stride_t, stride_h, T, H):
    """Row base pointers ``[BT, BH, 1]`` and the row mask for tokens ``t`` and heads ``h``."""
    base = (ptr + (t.to(tl.int64) * stride_t)[:, None, None]
            + (h.to(tl.int64) * stride_h)[None, :, None])
    mask = (t < T)[:, None, None] & (h < H)[None, :, None]
    return base, mask


@triton.jit
def pair_offsets(R2: tl.constexpr, R2B: tl.constexpr, NEOX: tl.constexpr):
    """Channel offsets ``[R2B]`` of the first and second member of each rotary pair (``R2``
    pairs, padded to ``R2B`` lanes)."""
    i = tl.arange(0, R2B)
    if NEOX:
        return i, i + R2
    return 2 * i, 2 * i + 1


@triton.jit
def pair_mask(mask, R2: tl.constexpr, R2B: tl.constexpr, WIDTH: tl.constexpr):
    """``mask`` limited to the lanes of a ``[..., WIDTH * R2B]`` pair tile that hold pairs
    (``WIDTH`` channels a pair: 1 in a neox half, 2 in a gptj span); ``mask`` itself where
    ``R2`` is a power of two, so that those tiles compile as they always did."""
    if R2B != R2:
        lane = tl.arange(0, WIDTH * R2B)[None, None, :]
        mask = mask & (lane < WIDTH * R2)
    return mask


@triton.jit
def load_pairs(base, mask, R2: tl.constexpr, R2B: tl.constexpr, NEOX: tl.constexpr,
               BT: tl.constexpr, BH: tl.constexpr):
    """The rotary pairs of each row as two ``[BT, BH, R2B]`` tiles, each channel read once
    (``R2`` pairs padded to ``R2B`` lanes, zero past them).

    neox loads the two contiguous halves; gptj loads the rotary span once and splits its
    interleaved pairs in registers.
    """
    if NEOX:
        i = tl.arange(0, R2B)[None, None, :]
        m = pair_mask(mask, R2, R2B, 1)
        x1 = tl.load(base + i, mask=m, other=0.0)
        x2 = tl.load(base + R2 + i, mask=m, other=0.0)
    else:
        j = tl.arange(0, 2 * R2B)[None, None, :]
        x = tl.load(base + j, mask=pair_mask(mask, R2, R2B, 2), other=0.0)
        x1, x2 = tl.split(tl.reshape(x, (BT, BH, R2B, 2)))
    return x1, x2


@triton.jit
def store_pairs(base, mask, o1, o2, R2: tl.constexpr, R2B: tl.constexpr, NEOX: tl.constexpr,
                BT: tl.constexpr, BH: tl.constexpr):
    """Store two ``[BT, BH, R2B]`` pair tiles where ``load_pairs`` read them."""
    if NEOX:
        i = tl.arange(0, R2B)[None, None, :]
        m = pair_mask(mask, R2, R2B, 1)
        tl.store(base + i, o1, mask=m)
        tl.store(base + R2 + i, o2, mask=m)
    else:
        j = tl.arange(0, 2 * R2B)[None, None, :]
        tl.store(base + j, tl.reshape(tl.join(o1, o2), (BT, BH, 2 * R2B)),
                 mask=pair_mask(mask, R2, R2B, 2))


@triton.jit
def pairs_sumsq(x1, x2, R2: tl.constexpr, NEOX: tl.constexpr, BT: tl.constexpr,
                BH: tl.constexpr):
    """The natural-order pairwise sum of squares of the rotary span ``[0, 2 * R2)`` (``R2``
    a power of two: else the kernels sum the whole row)."""
    x1 = x1.to(tl.float32)
    x2 = x2.to(tl.float32)
    if NEOX:
        # The halves are the two subtrees under the span's root.
        return tl.reshape(pairwise_sum(x1 * x1, R2, 1, BT, BH), (BT, BH)) + tl.reshape(
            pairwise_sum(x2 * x2, R2, 1, BT, BH), (BT, BH)
        )
    # Interleaved pairs are the tree's first level.
    return tl.reshape(pairwise_sum(x1 * x1 + x2 * x2, R2, 1, BT, BH), (BT, BH))


@triton.jit
def cos_sin(cs_ptr, pos_ptr, axis_ptr, t, T, max_pos, stride_cs, stride_pos_axis,
            stride_pos_t, i, lane, R2: tl.constexpr, LANES: tl.constexpr,
            MROPE: tl.constexpr, BH: tl.constexpr):
    """The fp32 cosine and sine tiles ``[BT, BH, W]`` for tokens ``t`` (the same row for
    every head) at the pair indices ``i: [W]`` (``[0, R2)``), and whether each lane's
    position lies in ``[0, max_pos)``. An invalid lane reads nothing, nor, with ``LANES``,
    one where ``lane: [W]`` is false (padding; without ``LANES`` it is not read, so a
    tile of every pair compiles as it always did).

    Without ``MROPE`` the table is loaded straight into the row tiles' shape: every head's
    lanes read their token's row again, from L1, so the tiles need no layout conversion
    through shared memory to meet the rows (at the (1,32)/(4,8) tiles of (32,8) x 128:
    no barrier instead of 7, and 64 registers instead of 72, scripts/kernel_ir.py).
    With ``MROPE`` each rotary lane reads the position of its own axis (``axis_ptr`` holds
    the lane-to-axis map), once per token, and the tiles are broadcast over the heads.
    """
    t_mask = t < T
    if MROPE:
        axis = tl.load(axis_ptr + i, mask=lane, other=0) if LANES else tl.load(axis_ptr + i)
        pos = tl.load(
            pos_ptr + axis[None, :].to(tl.int64) * stride_pos_axis
            + t[:, None].to(tl.int64) * stride_pos_t,
            mask=t_mask[:, None],
            other=0,
        ).to(tl.int64)  # [BT, W]
        valid = (pos >= 0) & (pos < max_pos)
        row = cs_ptr + tl.where(valid, pos, 0) * stride_cs + i[None, :]
        m = t_mask[:, None] & valid
        row, m, valid = row[:, None, :], m[:, None, :], valid[:, None, :]
    else:
        pos = tl.load(pos_ptr + t.to(tl.int64) * stride_pos_t, mask=t_mask,
                      other=0).to(tl.int64)
        valid = (pos >= 0) & (pos < max_pos)  # [BT]
        heads = tl.zeros((1, BH, 1), tl.int64)
        row = (cs_ptr + (tl.where(valid, pos, 0) * stride_cs)[:, None, None]
               + i[None, None, :] + heads)
        m = (t_mask & valid)[:, None, None] & (heads == 0)
        valid = valid[:, None, None]
    if LANES:
        m = m & lane[None, None, :]
    c = tl.load(row, mask=m, other=0.0).to(tl.float32)
    s = tl.load(row + R2, mask=m, other=0.0).to(tl.float32)
    return c, s, valid


@triton.jit
def prefetch_table(cs_ptr, pos_ptr, block, T, max_pos, stride_cs, stride_pos_t,
                   R2: tl.constexpr, R2B: tl.constexpr, TOKENS: tl.constexpr,
                   ASM: tl.constexpr):
    """Ask the L2 for the table rows of tokens ``[block * TOKENS, (block + 1) * TOKENS)``
    and go on without them: an inline PTX prefetch per 128-byte line (``ASM``; without it
    only the positions are read, as under the interpreter). A token past ``T`` or a
    position outside the table asks for row 0. One lane per line, each reading its
    token's position, so that no layout conversion (shared memory) is needed."""
    # Elements of one 128-byte (1024-bit) line; rows are taken to start on a line.
    LINE: tl.constexpr = 1024 // cs_ptr.dtype.element_ty.primitive_bitwidth
    # Lines a padded row spans (a power of two); a row of R2 pairs ends in line LAST.
    LINES: tl.constexpr = max(1, 2 * R2B // LINE)
    LAST: tl.constexpr = (2 * R2 - 1) // LINE
    lane = tl.arange(0, TOKENS * LINES)
    t = block * TOKENS + lane // LINES
    m = t < T
    pos = tl.load(pos_ptr + t.to(tl.int64) * stride_pos_t, mask=m, other=0).to(tl.int64)
    line = lane % LINES
    if LAST < LINES - 1:
        line = tl.minimum(line, LAST)
    address = (cs_ptr + tl.where(m & (pos >= 0) & (pos < max_pos), pos, 0) * stride_cs
               + line * LINE)
    if ASM:
        tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l",
                                  [address], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def qk_tile(pid, q_programs, QC: tl.constexpr, KC: tl.constexpr, QHB: tl.constexpr,
            KHB: tl.constexpr):
    """Whether program ``pid`` of a q-and-k launch runs a q tile, and that tile's token
    block and head block in its tensor (``QHB``, ``KHB`` head blocks a token block): every
    q tile then every k tile (``QC == 0``), or chunks of tokens, each ``QC`` q tiles then
    ``KC`` k tiles (``plan.qk_grid``). Every divisor is a constant, so each division
    compiles to a multiply and a shift; a division by a run-time value is some 20
    dependent instructions, a float reciprocal among them, before the program's first
    address (on the H200 it put about 0.1 us before every program's first load: versions
    3.4 and 3.8). The q and k quotients are both taken and one selected: where the two
    branches' code is the same, the compiler merges them, and a divisor chosen by the
    branch would be a run-time one again."""
    if QC:
        chunk = pid // (QC + KC)
        r = pid - chunk * (QC + KC)
        is_q = r < QC
        tile = tl.where(is_q, chunk * QC + r, chunk * KC + r - QC)
    else:
        is_q = pid < q_programs
        tile = tl.where(is_q, pid, pid - q_programs)
    token_block = tl.where(is_q, tile // QHB, tile // KHB)
    return is_q, token_block, tile - token_block * tl.where(is_q, QHB, KHB)


@triton.jit
def tile_coords(token_block, head_block, BT: tl.constexpr, BH: tl.constexpr):
    """Token and head indices ``[BT]``, ``[BH]`` of a tile."""
    return (token_block * BT + tl.arange(0, BT)), (head_block * BH + tl.arange(0, BH))
