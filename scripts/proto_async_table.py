"""A prototype, not a route: the fused kernel with its table rows fetched asynchronously
into shared memory (Gluon, compute capability 8.0+), to test whether the table's dependent
round trips (position, then row) are what the fused kernel pays over a copy of its rows.

The kernel follows ``kernels.fused`` for neox rotary over the whole head, plain weights,
bf16 rows and an fp32 table, on the launch the fused route plans (its tiles, chunks and
warps). It calls the fused kernel's own functions of ``kernels.tiles`` (the tile order,
the pairwise tree, the norm, the rotation), so its bits equal the split route's. Three
variants (``variant``):

* ``sync``: the table row loaded once per token in the rows' layout sliced over the heads
  (each thread its own channels once, broadcast over its heads in registers), where the
  shipped kernel loads it once per head;
* ``async``: the same row copied into shared memory (``cp.async``) as soon as the position
  is known, and read from there after the norm: no register waits on it meanwhile;
* ``async-rows``: the rows copied into shared memory too, in a commit group ahead of the
  table's, so that ptxas issues the table's copy before the rows are waited for (alone, it
  moves it after the row loads).

``python scripts/bench_l2_policy.py --arms async-table`` times them beside the fused
kernel with its null arm (docs/kernel-notes.md, 2026-12-05, a seventh session).
"""

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

from qkbench.kernels import plan
from qkbench.kernels.fused import fused_tiles
from qkbench.kernels.tiles import (
    inv_rms,
    nan_unless,
    norm_weight,
    normalize,
    pairs_sumsq,
    qk_tile,
    rotate,
)

VARIANTS = {"sync": 0, "async": 1, "async-rows": 2}
# Persistent variants: programs a multiprocessor.
PERSISTENT = {"persistent-2": 2, "persistent-4": 4}


@gluon.jit
def _tile(x_ptr, o_ptr, w_ptr, cs_ptr, pos_ptr, tb, hb, T, H, eps, max_pos,
          stride_xt, stride_xh, stride_ot, stride_oh, stride_cs, stride_pos_t,
          D: gl.constexpr, R2: gl.constexpr, BT: gl.constexpr, BH: gl.constexpr,
          L3: gl.constexpr, CL: gl.constexpr, ASYNC: gl.constexpr):
    dtype: gl.constexpr = o_ptr.dtype.element_ty
    LC: gl.constexpr = gl.SliceLayout(1, L3)  # [BT, R2]: a token's channels
    LT: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, L3))
    LH: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(2, L3))
    LR: gl.constexpr = gl.SliceLayout(0, LC)

    # The position, and the table row's copy or load, first.
    t = tb * BT + gl.arange(0, BT, layout=LT)
    pos = gl.load(pos_ptr + t.to(gl.int64) * stride_pos_t, mask=t < T, other=0).to(gl.int64)
    valid = (pos >= 0) & (pos < max_pos) & (t < T)
    if not ASYNC:
        tl_ = tb * BT + gl.arange(0, BT, layout=gl.SliceLayout(1, LC))
        pl = gl.load(pos_ptr + tl_.to(gl.int64) * stride_pos_t, mask=tl_ < T,
                     other=0).to(gl.int64)
        vl = (pl >= 0) & (pl < max_pos) & (tl_ < T)
        ic = gl.arange(0, R2, layout=LR)
        row = cs_ptr + gl.expand_dims(gl.where(vl, pl, 0) * stride_cs, 1) + gl.expand_dims(ic, 0)
        c = gl.load(row, mask=gl.expand_dims(vl, 1), other=0.0)
        s = gl.load(row + R2, mask=gl.expand_dims(vl, 1), other=0.0)

    h = hb * BH + gl.arange(0, BH, layout=LH)
    i = gl.arange(0, R2, layout=LR)
    t3 = gl.expand_dims(gl.expand_dims(t, 1), 2)
    h3 = gl.expand_dims(gl.expand_dims(h, 0), 2)
    i3 = gl.expand_dims(gl.expand_dims(i, 0), 1)
    mask = (t3 < T) & (h3 < H)
    x_row = x_ptr + t3.to(gl.int64) * stride_xt + h3.to(gl.int64) * stride_xh
    o_row = o_ptr + t3.to(gl.int64) * stride_ot + h3.to(gl.int64) * stride_oh
    w1 = gl.expand_dims(gl.expand_dims(norm_weight(w_ptr, i, i < D, False), 0), 1)
    w2 = gl.expand_dims(gl.expand_dims(norm_weight(w_ptr, R2 + i, R2 + i < D, False), 0), 1)
    if ASYNC == 2:
        # The rows copied too, in the rows' own layout (each thread reads back only what it
        # copied, so only the table needs a barrier), before the table's copy: ptxas keeps
        # the copies in their commit groups' order, so the table's copy is issued before
        # the rows are waited for (alone, it sinks it past the norm).
        rows: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0])
        s1 = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [BT, BH, R2], rows)
        s2 = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [BT, BH, R2], rows)
        cp.async_copy_global_to_shared(s1, x_row + i3, mask=mask)
        cp.async_copy_global_to_shared(s2, x_row + R2 + i3, mask=mask)
        cp.commit_group()
    if ASYNC:
        tab = gl.allocate_shared_memory(gl.float32, [BT, 2 * R2],
                                        gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
        # The copy's lanes take the one position load's values (no second load for
        # ptxas to sink past the norm, the copy with it).
        vc = gl.convert_layout(valid, gl.SliceLayout(1, CL))
        pc = gl.convert_layout(pos, gl.SliceLayout(1, CL))
        col = gl.arange(0, 2 * R2, layout=gl.SliceLayout(0, CL))
        src = (cs_ptr + gl.expand_dims(gl.where(vc, pc, 0) * stride_cs, 1)
               + gl.expand_dims(col, 0))
        cp.async_copy_global_to_shared(tab, src, mask=gl.expand_dims(vc, 1))
        cp.commit_group()
    if ASYNC == 2:
        cp.wait_group(1)
        x1 = s1.load(L3).to(gl.float32)
        x2 = s2.load(L3).to(gl.float32)
    else:
        x1 = gl.load(x_row + i3, mask=mask, other=0.0).to(gl.float32)
        x2 = gl.load(x_row + R2 + i3, mask=mask, other=0.0).to(gl.float32)

    sumsq = pairs_sumsq(x1, x2, R2, True, BT, BH)
    rstd = gl.convert_layout(inv_rms(sumsq, D, eps), gl.SliceLayout(2, L3))
    y1 = normalize(x1, rstd, w1, dtype)
    y2 = normalize(x2, rstd, w2, dtype)
    if ASYNC:
        cp.wait_group(0)
        gl.thread_barrier()
        c = tab.slice(0, R2, dim=1).load(LC)
        s = tab.slice(R2, R2, dim=1).load(LC)
    v3 = gl.expand_dims(gl.expand_dims(valid, 1), 2)
    o1, o2 = rotate(y1, y2, nan_unless(v3, gl.expand_dims(c, 1)),
                    nan_unless(v3, gl.expand_dims(s, 1)))
    gl.store(o_row + i3, o1.to(dtype), mask=mask)
    gl.store(o_row + R2 + i3, o2.to(dtype), mask=mask)


@gluon.jit(do_not_specialize=["T", "max_pos", "q_programs"])
def proto_kernel(q_ptr, k_ptr, qo_ptr, ko_ptr, qw_ptr, kw_ptr, cs_ptr, pos_ptr,
                 T, HQ, HK, eps, max_pos,
                 stride_qt, stride_qh, stride_kt, stride_kh,
                 stride_qot, stride_qoh, stride_kot, stride_koh, stride_cs, stride_pos_t,
                 q_programs, QHB: gl.constexpr, KHB: gl.constexpr,
                 D: gl.constexpr, R2: gl.constexpr,
                 BTQ: gl.constexpr, BHQ: gl.constexpr, BTK: gl.constexpr, BHK: gl.constexpr,
                 QC: gl.constexpr, KC: gl.constexpr,
                 L3Q: gl.constexpr, L3K: gl.constexpr, CLQ: gl.constexpr, CLK: gl.constexpr,
                 ASYNC: gl.constexpr):
    is_q, tb, hb = qk_tile(gl.program_id(0), q_programs, QC, KC, QHB, KHB)
    if is_q:
        _tile(q_ptr, qo_ptr, qw_ptr, cs_ptr, pos_ptr, tb, hb, T, HQ, eps, max_pos,
              stride_qt, stride_qh, stride_qot, stride_qoh, stride_cs, stride_pos_t,
              D, R2, BTQ, BHQ, L3Q, CLQ, ASYNC)
    else:
        _tile(k_ptr, ko_ptr, kw_ptr, cs_ptr, pos_ptr, tb, hb, T, HK, eps, max_pos,
              stride_kt, stride_kh, stride_kot, stride_koh, stride_cs, stride_pos_t,
              D, R2, BTK, BHK, L3K, CLK, ASYNC)


def row_layout(bh: int, r2: int, warps: int, elem_bytes: int = 2) -> gl.BlockedLayout:
    """``[block_t, bh, r2]`` pairs: 16-byte vectors along the channels, then threads over the
    heads and tokens, warps over the heads first."""
    vec = min(r2, 16 // elem_bytes)
    along = min(32, r2 // vec)
    heads = min(32 // along, bh)
    wh = max(1, min(warps, bh // heads))
    return gl.BlockedLayout([1, 1, vec], [32 // along // heads, heads, along],
                            [warps // wh, wh, 1], [2, 1, 0])


def copy_layout(bt: int, r2: int, warps: int) -> gl.BlockedLayout:
    """``[bt, 2 * r2]`` fp32 table elements over every thread once (where there are as
    many elements as threads or more)."""
    w0 = min(bt, warps)
    w1 = warps // w0
    per = max(1, 2 * r2 // (32 * w1))
    return gl.BlockedLayout([1, per], [1, 32], [w0, w1], [1, 0])


def flattened(q, k, positions, inplace, q_out, k_out):
    """The op's outputs as given, and its rows (q, k and the outputs) as ``[T, H, D]`` and
    its positions as ``[T]``: the prototypes' kernels take the tokens on one axis."""
    outs = (q, k) if inplace else (q_out, k_out)
    rows = tuple(x.view(-1, *x.shape[-2:]) for x in (q, k, *outs))
    return outs, rows, positions.reshape(-1)


def qk_norm_rope_async(q, k, q_weight, k_weight, positions, cos_sin_cache, *, eps=1e-6,
                       rotary_dim=None, style="neox", weight_mode="plain", inplace=True,
                       q_out=None, k_out=None, mrope_section=None, variant="async",
                       **unused):
    """The fused op for the prototype's cases, on the fused route's launch plan."""
    D = q.shape[-1]
    if (style != "neox" or weight_mode != "plain" or rotary_dim not in (None, D)
            or q.dtype != torch.bfloat16 or cos_sin_cache.dtype != torch.float32
            or not q.is_contiguous() or not k.is_contiguous() or mrope_section is not None
            or set(unused) - {"mrope_layout"}):
        raise ValueError("the prototype takes contiguous bf16 rows, neox rotary over the "
                         "whole head, plain weights and an fp32 table only")
    outs, (q, k, qo, ko), positions = flattened(q, k, positions, inplace, q_out, k_out)
    T, HQ, _ = q.shape
    HK = k.shape[1]
    if variant in PERSISTENT:
        args = persistent_args(HQ, HK, D)
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count
        programs = min(-(-T // args["BT"]), sms * PERSISTENT[variant])
        persistent_kernel[(programs,)](
            q, k, qo, ko, q_weight, k_weight, cos_sin_cache, positions,
            T, eps, cos_sin_cache.shape[0], q.stride(0), q.stride(1), k.stride(0), k.stride(1),
            qo.stride(0), qo.stride(1), ko.stride(0), ko.stride(1), cos_sin_cache.stride(0),
            positions.stride(0), **args, num_warps=4, enable_fp_fusion=False)
        return outs
    (pq, pk), _ = fused_tiles(T, HQ, HK, D, D, q.device, q.element_size())
    programs, qc, kc = plan.qk_grid(T, pq, pk)
    warps = max(pq.num_warps, pk.num_warps)
    r2 = D // 2
    proto_kernel[(programs,)](
        q, k, qo, ko, q_weight, k_weight, cos_sin_cache, positions,
        T, HQ, HK, eps, cos_sin_cache.shape[0],
        q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        qo.stride(0), qo.stride(1), ko.stride(0), ko.stride(1),
        cos_sin_cache.stride(0), positions.stride(0),
        pq.programs, pq.head_blocks, pk.head_blocks, D, r2,
        pq.block_t, pq.block_h, pk.block_t, pk.block_h, qc, kc,
        row_layout(pq.block_h, r2, warps),
        row_layout(pk.block_h, r2, warps),
        copy_layout(pq.block_t, r2, warps), copy_layout(pk.block_t, r2, warps),
        VARIANTS[variant], num_warps=warps, enable_fp_fusion=False)
    return outs


def _pointers(**ints) -> dict:
    """The kernels' pointer and scalar arguments as ``kernel_ir.compile_for_sm90`` takes
    them: bf16 rows and weights, an fp32 table, int64 positions, and ``ints``."""
    return {**dict.fromkeys(("q_ptr", "k_ptr", "qo_ptr", "ko_ptr", "qw_ptr", "kw_ptr"),
                            "*bf16"), "cs_ptr": "*fp32", "pos_ptr": "*i64", "eps": 1e-6,
            "max_pos": 40960, "stride_cs": 128, "stride_pos_t": 1, **ints}


def _strides(heads_q: int, heads_k: int) -> dict:
    hq, hk = heads_q * 128, heads_k * 128
    return dict(stride_qt=hq, stride_qh=128, stride_kt=hk, stride_kh=128, stride_qot=hq,
                stride_qoh=128, stride_kot=hk, stride_koh=128)


def sm90_case(tokens: int, heads_q: int, heads_k: int, variant: str):
    """``(kernel, args, warps)`` of a variant at D = 128 on the fused route's plan, for
    ``kernel_ir.compile_for_sm90`` (which answers the plan's device queries as an H200)."""
    device = torch.device("cuda", 0)
    if variant in PERSISTENT:
        return persistent_kernel, _pointers(T=tokens, **_strides(heads_q, heads_k),
                                            **persistent_args(heads_q, heads_k, 128)), 4
    (pq, pk), _ = fused_tiles(tokens, heads_q, heads_k, 128, 128, device)
    _, qc, kc = plan.qk_grid(tokens, pq, pk)
    warps = max(pq.num_warps, pk.num_warps)
    return proto_kernel, _pointers(
        T=tokens, HQ=heads_q, HK=heads_k, **_strides(heads_q, heads_k),
        q_programs=pq.programs, QHB=pq.head_blocks, KHB=pk.head_blocks, D=128, R2=64,
        BTQ=pq.block_t, BHQ=pq.block_h, BTK=pk.block_t, BHK=pk.block_h, QC=qc, KC=kc,
        L3Q=row_layout(pq.block_h, 64, warps),
        L3K=row_layout(pk.block_h, 64, warps),
        CLQ=copy_layout(pq.block_t, 64, warps), CLK=copy_layout(pk.block_t, 64, warps),
        ASYNC=VARIANTS[variant]), warps


def main() -> None:
    """Print the variants' sm_90 code counts beside the shipped kernel's, and where the
    async variants issue their loads, copies and waits (results/tuning/
    2026-12-05-kernel-ir-async-table.txt; Triton's bundled ptxas, no device)."""
    import re

    import kernel_ir
    from triton.experimental.gluon._runtime import GluonASTSource

    def compiled(variant: str, *shape):
        kernel, args, warps = sm90_case(*shape, variant)
        return kernel_ir.compile_for_sm90(kernel, args, warps, source=GluonASTSource), args

    shapes = [(8192, 32, 8), (8192, 16, 2), (3973, 24, 24)]
    print(f"Triton {triton.__version__}, sm_90, compiled without a device (the plan as on "
          "an H200)\n")
    rows = []
    for shape in shapes:
        label, kernel, args, warps = kernel_ir.fused_case("shipped", *shape, 128, 128)
        rows.append((f"{shape} shipped {label.split(': ')[1]}",
                     kernel_ir.counts(kernel_ir.compile_for_sm90(kernel, args, warps))))
        rows += [(f"{shape} gluon-{v}", kernel_ir.counts(compiled(v, *shape)[0]))
                 for v in VARIANTS]
    keys = list(rows[0][1])
    print("| kernel | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for label, c in rows:
        print(f"| {label} | " + " | ".join(str(c[k]) for k in keys) + " |")
    for v in ("async", "async-rows"):
        print(f"\nSASS order, (8192, 32, 8) gluon-{v}, the q tile's path (global loads, "
              "copies, waits, barriers, rsqrt, stores):")
        for line in kernel_ir.cuobjdump(compiled(v, 8192, 32, 8)[0], "-sass").splitlines():
            m = re.search(r"/\*([0-9a-f]{4})\*/\s+(.*?);", line)
            if m and re.search(r"LDG|LDGSTS|DEPBAR|BAR\.SYNC|MUFU\.RSQ|STG|EXIT", m[2]):
                print("  ", m[1], m[2][:80])
                if "EXIT" in m[2] and "@" not in m[2]:
                    break
    print("\nThe persistent kernel (2 stages in shared memory; registers as ptxas allots "
          "them):\n")
    print("| kernel | item (tokens) / head blocks | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 2) + "|")
    for shape in shapes:
        c, args = compiled("persistent-2", *shape)
        print(f"| {shape} persistent | {args['BT']} / q {args['BHQ']}, k {args['BHK']} | "
              + " | ".join(str(kernel_ir.counts(c)[k]) for k in keys) + " |")


# -- Persistent programs, one item (BT tokens, every q and k head) ahead in shared memory --


@gluon.jit
def _issue(x_ptr, buf, item, T, H: gl.constexpr, stride_t, stride_h, D: gl.constexpr,
           BT: gl.constexpr, HP: gl.constexpr, CR: gl.constexpr):
    """Copy the rows of ``item``'s tokens into ``buf: [BT, HP, D]`` (heads past H and
    tokens past T zero-filled)."""
    t = item * BT + gl.arange(0, BT, layout=gl.SliceLayout(1, gl.SliceLayout(2, CR)))
    h = gl.arange(0, HP, layout=gl.SliceLayout(0, gl.SliceLayout(2, CR)))
    d = gl.arange(0, D, layout=gl.SliceLayout(0, gl.SliceLayout(1, CR)))
    t3 = gl.expand_dims(gl.expand_dims(t, 1), 2)
    h3 = gl.expand_dims(gl.expand_dims(h, 0), 2)
    d3 = gl.expand_dims(gl.expand_dims(d, 0), 1)
    src = x_ptr + t3.to(gl.int64) * stride_t + h3.to(gl.int64) * stride_h + d3
    cp.async_copy_global_to_shared(buf, src, mask=(t3 < T) & (h3 < H))


@gluon.jit
def _issue_table(cs_ptr, pos_ptr, buf, item, T, max_pos, stride_cs, stride_pos_t,
                 R2: gl.constexpr, BT: gl.constexpr, CL: gl.constexpr):
    t = item * BT + gl.arange(0, BT, layout=gl.SliceLayout(1, CL))
    pos = gl.load(pos_ptr + t.to(gl.int64) * stride_pos_t, mask=t < T, other=0).to(gl.int64)
    valid = (pos >= 0) & (pos < max_pos) & (t < T)
    col = gl.arange(0, 2 * R2, layout=gl.SliceLayout(0, CL))
    src = cs_ptr + gl.expand_dims(gl.where(valid, pos, 0) * stride_cs, 1) + gl.expand_dims(col, 0)
    cp.async_copy_global_to_shared(buf, src, mask=gl.expand_dims(valid, 1))


@gluon.jit
def _finish(rows, tab, o_ptr, w_ptr, pos_ptr, item, T, H: gl.constexpr, eps, max_pos,
            stride_ot, stride_oh, stride_pos_t, D: gl.constexpr, R2: gl.constexpr, BT: gl.constexpr,
            BH: gl.constexpr, L3: gl.constexpr):
    """Normalise and rotate the rows of ``item`` held in ``rows: [BT, HP, D]``, in head
    blocks of ``BH``, and store them."""
    dtype: gl.constexpr = o_ptr.dtype.element_ty
    LC: gl.constexpr = gl.SliceLayout(1, L3)
    LT: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, L3))
    LR: gl.constexpr = gl.SliceLayout(0, LC)
    t = item * BT + gl.arange(0, BT, layout=LT)
    pos = gl.load(pos_ptr + t.to(gl.int64) * stride_pos_t, mask=t < T, other=0).to(gl.int64)
    v3 = gl.expand_dims(gl.expand_dims((pos >= 0) & (pos < max_pos) & (t < T), 1), 2)
    c = gl.expand_dims(tab.slice(0, R2, dim=1).load(LC), 1)
    s = gl.expand_dims(tab.slice(R2, R2, dim=1).load(LC), 1)
    i = gl.arange(0, R2, layout=LR)
    i3 = gl.expand_dims(gl.expand_dims(i, 0), 1)
    w1 = gl.expand_dims(gl.expand_dims(norm_weight(w_ptr, i, i < D, False), 0), 1)
    w2 = gl.expand_dims(gl.expand_dims(norm_weight(w_ptr, R2 + i, R2 + i < D, False), 0), 1)
    t3 = gl.expand_dims(gl.expand_dims(t, 1), 2)
    for hb in gl.static_range((H + BH - 1) // BH):
        h = hb * BH + gl.arange(0, BH, layout=gl.SliceLayout(0, gl.SliceLayout(2, L3)))
        h3 = gl.expand_dims(gl.expand_dims(h, 0), 2)
        if hb:
            # Keeps ptxas from reading every block's rows ahead (128-163 registers).
            gl.thread_barrier()
        block = rows.slice(hb * BH, BH, dim=1)
        x1 = block.slice(0, R2, dim=2).load(L3).to(gl.float32)
        x2 = block.slice(R2, R2, dim=2).load(L3).to(gl.float32)
        sumsq = pairs_sumsq(x1, x2, R2, True, BT, BH)
        rstd = gl.convert_layout(inv_rms(sumsq, D, eps), gl.SliceLayout(2, L3))
        o1, o2 = rotate(normalize(x1, rstd, w1, dtype), normalize(x2, rstd, w2, dtype),
                        nan_unless(v3, c), nan_unless(v3, s))
        o_row = o_ptr + t3.to(gl.int64) * stride_ot + h3.to(gl.int64) * stride_oh
        mask = (t3 < T) & (h3 < H)
        gl.store(o_row + i3, o1.to(dtype), mask=mask)
        gl.store(o_row + R2 + i3, o2.to(dtype), mask=mask)


@gluon.jit(do_not_specialize=["T", "max_pos"])
def persistent_kernel(q_ptr, k_ptr, qo_ptr, ko_ptr, qw_ptr, kw_ptr, cs_ptr, pos_ptr,
                      T, eps, max_pos, stride_qt, stride_qh, stride_kt, stride_kh,
                      stride_qot, stride_qoh, stride_kot, stride_koh, stride_cs, stride_pos_t,
                      HQ: gl.constexpr, HK: gl.constexpr, D: gl.constexpr, BT: gl.constexpr,
                      HQP: gl.constexpr, HKP: gl.constexpr, BHQ: gl.constexpr,
                      BHK: gl.constexpr, CRQ: gl.constexpr, CRK: gl.constexpr,
                      CL: gl.constexpr, L3Q: gl.constexpr, L3K: gl.constexpr):
    R2: gl.constexpr = D // 2
    dtype: gl.constexpr = q_ptr.dtype.element_ty
    # Two stages of each (the layout is a stage's): the item computed, and the next one.
    rows: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0])
    sq = gl.allocate_shared_memory(dtype, [2, BT, HQP, D], rows)
    sk = gl.allocate_shared_memory(dtype, [2, BT, HKP, D], rows)
    st = gl.allocate_shared_memory(gl.float32, [2, BT, 2 * R2],
                                   gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    pid = gl.program_id(0)
    programs = gl.num_programs(0)
    count = gl.cdiv(gl.cdiv(T, BT) - pid, programs)
    _issue(q_ptr, sq.index(0), pid, T, HQ, stride_qt, stride_qh, D, BT, HQP, CRQ)
    _issue(k_ptr, sk.index(0), pid, T, HK, stride_kt, stride_kh, D, BT, HKP, CRK)
    _issue_table(cs_ptr, pos_ptr, st.index(0), pid, T, max_pos, stride_cs, stride_pos_t, R2,
                 BT, CL)
    cp.commit_group()
    for n in range(count):
        item = pid + n * programs
        nxt = item + programs
        ahead = (n + 1) % 2
        _issue(q_ptr, sq.index(ahead), nxt, T, HQ, stride_qt, stride_qh, D, BT, HQP, CRQ)
        _issue(k_ptr, sk.index(ahead), nxt, T, HK, stride_kt, stride_kh, D, BT, HKP, CRK)
        _issue_table(cs_ptr, pos_ptr, st.index(ahead), nxt, T, max_pos, stride_cs,
                     stride_pos_t, R2, BT, CL)
        cp.commit_group()
        cp.wait_group(1)
        gl.thread_barrier()
        stage = n % 2
        _finish(sq.index(stage), st.index(stage), qo_ptr, qw_ptr, pos_ptr, item, T, HQ, eps,
                max_pos, stride_qot, stride_qoh, stride_pos_t, D, R2, BT, BHQ, L3Q)
        _finish(sk.index(stage), st.index(stage), ko_ptr, kw_ptr, pos_ptr, item, T, HK, eps,
                max_pos, stride_kot, stride_koh, stride_pos_t, D, R2, BT, BHK, L3K)
        gl.thread_barrier()
    cp.wait_group(0)


def tile_layout(bt: int, bh: int, r2: int, warps: int) -> gl.BlockedLayout:
    """``[bt, bh, r2]`` bf16 pairs over every thread once: vectors of up to 16 bytes along
    the channels, then threads over the heads and tokens, warps over the heads first."""
    vec = max(1, min(8, bt * bh * r2 // (32 * warps)))
    along = min(32, r2 // vec)
    heads = min(32 // along, bh)
    tokens = 32 // along // heads
    wh = max(1, min(warps, bh // heads))
    assert tokens * (warps // wh) <= bt, "the tile is smaller than the threads"
    return gl.BlockedLayout([1, 1, vec], [tokens, heads, along], [warps // wh, wh, 1],
                            [2, 1, 0])


def persistent_args(HQ: int, HK: int, D: int, warps: int = 4) -> dict:
    """The persistent kernel's compile-time arguments: items of the fewest tokens BT whose
    head blocks (at most 32 rows a block, dividing the heads) give every thread a 16-byte
    vector of each half row."""
    from qkbench.kernels.plan import next_pow2

    def block(h: int, bt: int) -> int:
        b = 1
        while b * 2 <= 32 // bt and h % (b * 2) == 0:
            b *= 2
        return b

    bt = 1
    while bt < 32 and bt * min(block(HQ, bt), block(HK, bt)) * D // 2 < 8 * 32 * warps:
        bt *= 2
    bhq, bhk = block(HQ, bt), block(HK, bt)
    hqp, hkp = next_pow2(HQ), next_pow2(HK)
    return dict(HQ=HQ, HK=HK, D=D, BT=bt, HQP=hqp, HKP=hkp, BHQ=bhq, BHK=bhk,
                CRQ=tile_layout(bt, hqp, D, warps), CRK=tile_layout(bt, hkp, D, warps),
                CL=copy_layout(bt, D // 2, warps), L3Q=tile_layout(bt, bhq, D // 2, warps),
                L3K=tile_layout(bt, bhk, D // 2, warps))


if __name__ == "__main__":
    main()
