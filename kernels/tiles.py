"""Triton building blocks shared by the rms_norm, rope and fused kernels.

Every kernel works on a tile of ``[BT, BH, W]``: ``BT`` tokens by ``BH`` heads of one
tensor, ``W`` channels of each row in their natural order. The split and the fused routes
are bit-identical because they run exactly these functions on the same values:

* ``norm_rows`` normalises whole rows: the sum of squares is an explicit pairwise tree over
  the row in its natural channel order, each level adding adjacent pairs. A two-element sum
  is commutative, so no thread layout the compiler picks can change the result.
* ``rotate_rows`` rotates rows that hold the normalised values already rounded to the
  storage dtype; the fused kernel feeds it the rows it has just normalised, the split
  route's rope kernel the rows ``rms_norm`` wrote.
* The kernels are compiled without floating-point contraction (``enable_fp_fusion=False``,
  see ``COMPILE_OPTIONS``), so each multiply and add rounds on its own in both routes.

Addresses: token and head indices are int64 from the start, so ``t * stride_t`` and
``h * stride_h`` never wrap (a head-strided view can put ``h * stride_h`` past 2**31).
Positions outside ``[0, max_pos)`` never address the cos/sin table: the table loads are
masked and the rotary channels of such a position are written as NaN.
"""

import triton
import triton.language as tl

# Launch keyword arguments every kernel of this package is compiled with.
COMPILE_OPTIONS = {"enable_fp_fusion": False}


@triton.jit
def tile_coords(pid, n_head_blocks, BT: tl.constexpr, BH: tl.constexpr):
    """The first token (a scalar) and the token and head indices ``[BT]``, ``[BH]`` of the
    tile this program handles, all int64."""
    pid = pid.to(tl.int64)
    t0 = (pid // n_head_blocks) * BT
    return t0, t0 + tl.arange(0, BT), (pid % n_head_blocks) * BH + tl.arange(0, BH)


@triton.jit
def row_base(ptr, t, h, stride_t, stride_h):
    """Row base pointers ``[BT, BH, 1]`` for tokens ``t`` and heads ``h`` (int64 offsets)."""
    return ptr + (t * stride_t)[:, None, None] + (h * stride_h)[None, :, None]


@triton.jit
def row_mask(t, h, T, H):
    """``[BT, BH, 1]``: the rows that exist (tiles overhang the last tokens and heads)."""
    return (t < T)[:, None, None] & (h < H)[None, :, None]


@triton.jit
def channels(W: tl.constexpr):
    """Channel indices ``[1, 1, W]``."""
    return tl.arange(0, W)[None, None, :]


@triton.jit
def pairwise_sum(x, N: tl.constexpr, BT: tl.constexpr, BH: tl.constexpr):
    """The sum over the last axis of ``x: [BT, BH, N]`` by adjacent pairs: ``[BT, BH]``.

    ``N`` is a power of two; each level halves the axis by adding elements ``2i, 2i + 1``.
    """
    for level in tl.static_range(N.bit_length() - 1):
        x = tl.sum(tl.reshape(x, (BT, BH, N // (2 << level), 2)), axis=3)
    return tl.reshape(x, (BT, BH))


@triton.jit
def tile_load(ptr, mask, other, BT: tl.constexpr, BH: tl.constexpr, W: tl.constexpr):
    """Load ``ptr`` broadcast to the whole ``[BT, BH, W]`` tile.

    A value shared by the tile's rows (a weight, a cosine) is loaded once per row from the
    cache rather than once per program: loaded in its own ``[1, 1, W]`` shape it would
    take a layout of its own and cost a layout conversion (shuffles, or shared memory and
    barriers) on its way into the row arithmetic.
    """
    return tl.load(tl.broadcast_to(ptr, (BT, BH, W)), mask=tl.broadcast_to(mask, (BT, BH, W)),
                   other=other)


@triton.jit
def load_weight(w_ptr, d, mask, OFFSET: tl.constexpr, BT: tl.constexpr, BH: tl.constexpr,
                W: tl.constexpr):
    """The norm weight at channels ``d: [1, 1, W]`` in fp32, as a ``[BT, BH, W]`` tile;
    ``OFFSET`` applies the ``1 + w`` convention."""
    w = tile_load(w_ptr + d, mask, 0.0, BT, BH, W).to(tl.float32)
    if OFFSET:
        w = w + 1.0
    return w


@triton.jit
def inv_rms(x, D: tl.constexpr, eps, BT: tl.constexpr, BH: tl.constexpr, DB: tl.constexpr):
    """``rsqrt(mean(x^2) + eps)`` per row of ``x: [BT, BH, DB]`` (fp32, zeros past ``D``)."""
    return tl.math.rsqrt(pairwise_sum(x * x, DB, BT, BH) / D + eps)


@triton.jit
def normalize(x, rstd, w, dtype: tl.constexpr):
    """``x * rstd * w`` rounded to the storage dtype: the value the rotation consumes."""
    return (x * rstd[:, :, None] * w).to(dtype)


@triton.jit
def neox_partner(d, R2: tl.constexpr):
    """The channel that channel ``d < 2 * R2`` is paired with under neox (``i, i + R2``)."""
    return tl.where(d < R2, d + R2, d - R2)


@triton.jit
def token_positions(pos_ptr, t0, T, stride_pos_t, BT: tl.constexpr):
    """The positions of tokens ``t0 .. t0 + BT - 1`` as ``[BT, 1, 1]`` int64 (0 past ``T``).

    Each is read as a scalar: a scalar takes whatever layout its use needs, where a tile
    of positions would get a layout of its own (Triton 3.6 orders an index tile's threads
    by token) and cost a conversion of every tile computed from it.
    """
    i = tl.arange(0, BT)[:, None, None]
    pos = tl.zeros((BT, 1, 1), dtype=tl.int64)
    for j in tl.static_range(BT):
        p = tl.load(pos_ptr + (t0 + j) * stride_pos_t, mask=t0 + j < T, other=0)
        pos = tl.where(i == j, p.to(tl.int64), pos)
    return pos


@triton.jit
def table_row(cs_ptr, pos, max_pos, stride_cs, lane, mask, R2: tl.constexpr,
              BT: tl.constexpr, BH: tl.constexpr, W: tl.constexpr):
    """The fp32 cosine and sine ``[BT, BH, W]`` of lane ``lane: [1, 1, W]`` at positions
    ``pos: [BT, 1, 1]``, and where the position was in ``[0, max_pos)``.

    A position outside the table is never used as an address: its loads are masked.
    """
    valid = (pos >= 0) & (pos < max_pos)
    row = cs_ptr + tl.where(valid, pos, 0) * stride_cs + lane
    c = tile_load(row, mask & valid, 0.0, BT, BH, W).to(tl.float32)
    s = tile_load(row + R2, mask & valid, 0.0, BT, BH, W).to(tl.float32)
    return c, s, valid


@triton.jit
def cos_sin(cs_ptr, pos_ptr, axis_ptr, t0, T, max_pos, stride_cs, stride_pos_axis,
            stride_pos_t, lane, rotates, R2: tl.constexpr, MROPE: tl.constexpr,
            BT: tl.constexpr, BH: tl.constexpr, W: tl.constexpr):
    """The fp32 cosine and sine ``[BT, BH, W]`` of rotary lane ``lane: [1, 1, W]`` for
    tokens ``t0 .. t0 + BT - 1``, and where the position was in ``[0, max_pos)``;
    ``rotates`` masks the columns that rotate at all.

    With ``MROPE`` each lane reads the position of its own axis (``axis_ptr`` holds the
    lane-to-axis map): the table rows of all three axes are read whole (contiguous
    vectors) and each lane picks its own, where a per-lane gather would scatter the loads.
    """
    mask = ((t0 + tl.arange(0, BT))[:, None, None] < T) & rotates
    pos = token_positions(pos_ptr, t0, T, stride_pos_t, BT)
    c, s, valid = table_row(cs_ptr, pos, max_pos, stride_cs, lane, mask, R2, BT, BH, W)
    if MROPE:
        axis = tile_load(axis_ptr + lane, rotates, 0, BT, BH, W)
        for a in tl.static_range(1, 3):
            pos_a = token_positions(pos_ptr + a * stride_pos_axis, t0, T, stride_pos_t, BT)
            c_a, s_a, valid_a = table_row(cs_ptr, pos_a, max_pos, stride_cs, lane, mask, R2,
                                          BT, BH, W)
            mine = axis == a
            c = tl.where(mine, c_a, c)
            s = tl.where(mine, s_a, s)
            valid = tl.where(mine, valid_a, valid)
    return c, s, valid


@triton.jit
def table_rows(cs_ptr, pos_ptr, axis_ptr, t0, T, max_pos, stride_cs, stride_pos_axis,
               stride_pos_t, W: tl.constexpr, R2: tl.constexpr, NEOX: tl.constexpr,
               MROPE: tl.constexpr, BT: tl.constexpr, BH: tl.constexpr):
    """The cosines, sines and position validity a ``[BT, BH, W]`` row tile rotates with.

    neox: one column per channel (``[BT, BH, W]``, the sine negated on each pair's first
    member); gptj: one column per adjacent pair (``[BT, BH, W // 2]``).
    """
    if NEOX:
        d = channels(W)
        first = d < R2
        # Channels i and i + R2 rotate by lane i; ``d % R2`` keeps the offsets visibly
        # contiguous, so that the compiler vectorises and lays out the loads like the rows.
        c, s, valid = cos_sin(cs_ptr, pos_ptr, axis_ptr, t0, T, max_pos, stride_cs,
                              stride_pos_axis, stride_pos_t, d % R2, d < 2 * R2, R2, MROPE,
                              BT, BH, W)
        # Negating a product is exact: y * c + partner * -s is x1 * c - x2 * s bit for bit.
        s = tl.where(first, -s, s)
    else:
        i = channels(W // 2)
        c, s, valid = cos_sin(cs_ptr, pos_ptr, axis_ptr, t0, T, max_pos, stride_cs,
                              stride_pos_axis, stride_pos_t, i, i < R2, R2, MROPE,
                              BT, BH, W // 2)
    return c, s, valid


@triton.jit
def rotate_rows(y, y_partner, c, s, valid, W: tl.constexpr, R2: tl.constexpr,
                NEOX: tl.constexpr, BT: tl.constexpr, BH: tl.constexpr):
    """Rotate the first ``2 * R2`` channels of rows ``y: [BT, BH, W]`` (storage dtype) by
    ``table_rows``; the rest pass through. Rotates in fp32, returns the storage dtype, and
    writes NaN into the rotary channels of a token whose position was out of range.

    neox: ``y_partner`` holds, at each rotary channel, the value of the channel it pairs
    with (loaded from ``neox_partner``). gptj pairs are adjacent: they are split in
    registers and ``y_partner`` is unused.
    """
    if NEOX:
        d = channels(W)
        o = y.to(tl.float32) * c + y_partner.to(tl.float32) * s
        out = tl.where(d < 2 * R2, tl.where(valid, o, float("nan")), y.to(tl.float32))
    else:
        i = channels(W // 2)
        rotates = i < R2
        x1, x2 = tl.split(tl.reshape(y, (BT, BH, W // 2, 2)))
        x1 = x1.to(tl.float32)
        x2 = x2.to(tl.float32)
        o1 = tl.where(rotates, tl.where(valid, x1 * c - x2 * s, float("nan")), x1)
        o2 = tl.where(rotates, tl.where(valid, x2 * c + x1 * s, float("nan")), x2)
        out = tl.reshape(tl.join(o1, o2), (BT, BH, W))
    return out.to(y.dtype)
