"""A prototype, not a route: the fused kernel with its rows moved by the Tensor Memory
Accelerator (TMA, compute capability 9.0+), to test whether bulk copies through shared
memory move this kernel's rows closer to the copy bandwidth than its vector loads do.

The kernel follows ``kernels.fused`` for neox rotary over the whole head, on the launch the
fused route plans (its tiles, chunks and warps), reads the table as ``tiles.cos_sin`` does
and calls the fused kernel's own functions of ``kernels.tiles`` (the tile order, the
pairwise tree, the norm, the rotation), so its bits equal the split route's. Each tile's
two rotary halves are read by one TMA box each, ``[BT, BH, D / 2]`` of a host-built
descriptor over ``[T, H, D]``, both issued on one barrier before the table is loaded (the
rows past T or H are filled with zeros and never stored). Written in Gluon: Triton's
descriptor loads wait for each box before the next is issued, and splitting one box of
both halves took 24-33 layout conversions (sm_90, Triton 3.6). Three variants (``variant``):

* ``tma``: the halves stored by TMA too (through shared memory; the clipping is the mask);
* ``tma-loads``: TMA loads, the fused kernel's own vector stores;
* ``tma-async-table``: as ``tma-loads``, with each token's table row copied into shared
  memory (``cp.async``) beside the rows' boxes, so that no register waits on it (the
  other two hold the table's tiles across the wait: 80-95 registers).

``python scripts/bench_l2_policy.py --arms tma`` times them beside the fused kernel with
its null arm; ``python scripts/proto_tma.py`` compiles them for sm_90 here (no device) and
counts what their code does per program (``kernel_ir.counts``).
"""

import torch
from proto_async_table import copy_layout, flattened, row_layout
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from qkbench.kernels import plan
from qkbench.kernels.fused import fused_tiles
from qkbench.kernels.tiles import (
    COMPILE_OPTIONS,
    inv_rms,
    nan_unless,
    norm_weight,
    normalize,
    pairs_sumsq,
    qk_tile,
    rotate,
)

# variant -> (TMA_STORE, TABLE_ASYNC)
VARIANTS = {"tma": (1, 0), "tma-loads": (0, 0), "tma-async-table": (0, 1)}


@gluon.jit
def _tma_tile(xd, od, o_ptr, w_ptr, cs_ptr, pos_ptr, tb, hb, T, H, eps, max_pos,
              stride_ot, stride_oh, stride_cs, stride_pos_t, D: gl.constexpr,
              R2: gl.constexpr, BT: gl.constexpr, BH: gl.constexpr, L3: gl.constexpr,
              CL: gl.constexpr, TMA_STORE: gl.constexpr, TABLE_ASYNC: gl.constexpr):
    dtype: gl.constexpr = o_ptr.dtype.element_ty
    LT: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, L3))
    LH: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(2, L3))
    LR: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(1, L3))

    # Both halves' boxes on one barrier, issued before anything else is waited for.
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    fence_async_shared()
    s1 = gl.allocate_shared_memory(dtype, [BT, BH, R2], xd.layout)
    s2 = gl.allocate_shared_memory(dtype, [BT, BH, R2], xd.layout)
    mbarrier.expect(bar, 2 * xd.block_type.nbytes)
    tma.async_copy_global_to_shared(xd, [tb * BT, hb * BH, 0], bar, s1)
    tma.async_copy_global_to_shared(xd, [tb * BT, hb * BH, R2], bar, s2)

    t = tb * BT + gl.arange(0, BT, layout=LT)
    pos = gl.load(pos_ptr + t.to(gl.int64) * stride_pos_t, mask=t < T, other=0).to(gl.int64)
    valid = (pos >= 0) & (pos < max_pos) & (t < T)
    i = gl.arange(0, R2, layout=LR)
    i3 = gl.expand_dims(gl.expand_dims(i, 0), 1)
    h = hb * BH + gl.arange(0, BH, layout=LH)
    h3 = gl.expand_dims(gl.expand_dims(h, 0), 2)
    v3 = gl.expand_dims(gl.expand_dims(valid, 1), 2)
    if TABLE_ASYNC:
        # The table rows copied into shared memory once per token, holding no register
        # while the rows are in flight.
        tab = gl.allocate_shared_memory(gl.float32, [BT, 2 * R2],
                                        gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
        tc = tb * BT + gl.arange(0, BT, layout=gl.SliceLayout(1, CL))
        pc = gl.load(pos_ptr + tc.to(gl.int64) * stride_pos_t, mask=tc < T,
                     other=0).to(gl.int64)
        vc = (pc >= 0) & (pc < max_pos) & (tc < T)
        col = gl.arange(0, 2 * R2, layout=gl.SliceLayout(0, CL))
        src = (cs_ptr + gl.expand_dims(gl.where(vc, pc, 0) * stride_cs, 1)
               + gl.expand_dims(col, 0))
        cp.async_copy_global_to_shared(tab, src, mask=gl.expand_dims(vc, 1))
        cp.commit_group()
    else:
        # The table row in the rows' layout, every head's lanes reading their token's row
        # (as ``tiles.cos_sin`` does).
        row = (cs_ptr
               + gl.expand_dims(gl.expand_dims(gl.where(valid, pos, 0) * stride_cs, 1), 2)
               + i3 + h3.to(gl.int64) * 0)
        m3 = v3 & (h3 >= 0)
        c = gl.load(row, mask=m3, other=0.0).to(gl.float32)
        s = gl.load(row + R2, mask=m3, other=0.0).to(gl.float32)
    w1 = gl.expand_dims(gl.expand_dims(norm_weight(w_ptr, i, i < D, False), 0), 1)
    w2 = gl.expand_dims(gl.expand_dims(norm_weight(w_ptr, R2 + i, R2 + i < D, False), 0), 1)

    mbarrier.wait(bar, 0)
    mbarrier.invalidate(bar)
    if TABLE_ASYNC:
        cp.wait_group(0)
        gl.thread_barrier()
        c = gl.expand_dims(tab.slice(0, R2, dim=1).load(gl.SliceLayout(1, L3)), 1)
        s = gl.expand_dims(tab.slice(R2, R2, dim=1).load(gl.SliceLayout(1, L3)), 1)
    x1 = s1.load(L3).to(gl.float32)
    x2 = s2.load(L3).to(gl.float32)
    sumsq = pairs_sumsq(x1, x2, R2, True, BT, BH)
    rstd = gl.convert_layout(inv_rms(sumsq, D, eps), gl.SliceLayout(2, L3))
    o1, o2 = rotate(normalize(x1, rstd, w1, dtype), normalize(x2, rstd, w2, dtype),
                    nan_unless(v3, c), nan_unless(v3, s))
    if TMA_STORE:
        # The halves go back through the buffers they came in by (the clipping is the mask).
        gl.thread_barrier()
        s1.store(o1.to(dtype))
        s2.store(o2.to(dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(od, [tb * BT, hb * BH, 0], s1)
        tma.async_copy_shared_to_global(od, [tb * BT, hb * BH, R2], s2)
        tma.store_wait(0)
    else:
        t3 = gl.expand_dims(gl.expand_dims(t, 1), 2)
        o_row = o_ptr + t3.to(gl.int64) * stride_ot + h3.to(gl.int64) * stride_oh
        mask = (t3 < T) & (h3 < H)
        gl.store(o_row + i3, o1.to(dtype), mask=mask)
        gl.store(o_row + R2 + i3, o2.to(dtype), mask=mask)


@gluon.jit(do_not_specialize=["T", "max_pos", "q_programs"])
def tma_kernel(qd, kd, qod, kod, qo_ptr, ko_ptr, qw_ptr, kw_ptr, cs_ptr, pos_ptr,
               T, HQ, HK, eps, max_pos, stride_qot, stride_qoh, stride_kot, stride_koh,
               stride_cs, stride_pos_t, q_programs, q_head_blocks: gl.constexpr,
               k_head_blocks: gl.constexpr, D: gl.constexpr, BTQ: gl.constexpr,
               BHQ: gl.constexpr, BTK: gl.constexpr, BHK: gl.constexpr, QC: gl.constexpr,
               KC: gl.constexpr, L3Q: gl.constexpr, L3K: gl.constexpr, CLQ: gl.constexpr,
               CLK: gl.constexpr, TMA_STORE: gl.constexpr, TABLE_ASYNC: gl.constexpr):
    R2: gl.constexpr = D // 2
    is_q, tb, hb = qk_tile(gl.program_id(0), q_programs, QC, KC, q_head_blocks,
                           k_head_blocks)
    if is_q:
        _tma_tile(qd, qod, qo_ptr, qw_ptr, cs_ptr, pos_ptr, tb, hb, T, HQ, eps, max_pos,
                  stride_qot, stride_qoh, stride_cs, stride_pos_t, D, R2, BTQ, BHQ, L3Q,
                  CLQ, TMA_STORE, TABLE_ASYNC)
    else:
        _tma_tile(kd, kod, ko_ptr, kw_ptr, cs_ptr, pos_ptr, tb, hb, T, HK, eps, max_pos,
                  stride_kot, stride_koh, stride_cs, stride_pos_t, D, R2, BTK, BHK, L3K,
                  CLK, TMA_STORE, TABLE_ASYNC)


SWIZZLE = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=3)


def _descriptor(x: torch.Tensor, block_t: int, block_h: int) -> TensorDescriptor:
    """A descriptor over ``x: [T, H, D]`` whose box is one rotary half of a tile."""
    return TensorDescriptor(x, list(x.shape), list(x.stride()),
                            [block_t, block_h, x.shape[-1] // 2], SWIZZLE)


def qk_norm_rope_tma(q, k, q_weight, k_weight, positions, cos_sin_cache, *, eps=1e-6,
                     rotary_dim=None, style="neox", weight_mode="plain", inplace=True,
                     q_out=None, k_out=None, mrope_section=None, variant="tma", **unused):
    """The fused op for the prototype's cases, on the fused route's launch plan."""
    D = q.shape[-1]
    if (style != "neox" or weight_mode != "plain" or rotary_dim not in (None, D)
            or q.element_size() != 2 or mrope_section is not None or q.stride(-1) != 1
            or k.stride(-1) != 1 or set(unused) - {"mrope_layout"}):
        raise ValueError("the prototype takes 16-bit rows of unit channel stride, neox "
                         "rotary over the whole head and plain weights only")
    outs, (q, k, qo, ko), positions = flattened(q, k, positions, inplace, q_out, k_out)
    T, HQ, _ = q.shape
    HK = k.shape[1]
    (pq, pk), _ = fused_tiles(T, HQ, HK, D, D, q.device, q.element_size())
    programs, qc, kc = plan.qk_grid(T, pq, pk)
    warps = max(pq.num_warps, pk.num_warps)
    tma_kernel[(programs,)](
        _descriptor(q, pq.block_t, pq.block_h), _descriptor(k, pk.block_t, pk.block_h),
        _descriptor(qo, pq.block_t, pq.block_h), _descriptor(ko, pk.block_t, pk.block_h),
        qo, ko, q_weight, k_weight, cos_sin_cache, positions,
        T, HQ, HK, eps, cos_sin_cache.shape[0], qo.stride(0), qo.stride(1), ko.stride(0),
        ko.stride(1), cos_sin_cache.stride(0), positions.stride(0), pq.programs,
        pq.head_blocks, pk.head_blocks, D, pq.block_t, pq.block_h, pk.block_t, pk.block_h,
        qc, kc, row_layout(pq.block_h, D // 2, warps), row_layout(pk.block_h, D // 2, warps),
        copy_layout(pq.block_t, D // 2, warps), copy_layout(pk.block_t, D // 2, warps),
        *VARIANTS[variant], num_warps=warps, **COMPILE_OPTIONS)
    return outs


def sm90_case(tokens: int, heads_q: int, heads_k: int, variant: str):
    """The prototype compiled for sm_90 at a (32,8)-style shape of D = 128, with the fused
    route's tiles (``kernel_ir.compile_for_sm90``, which answers the plan's device queries
    as an H200), and its arguments."""
    import kernel_ir
    from triton.experimental.gluon._runtime import GluonASTSource

    device = torch.device("cuda")
    (pq, pk), _ = fused_tiles(tokens, heads_q, heads_k, 128, 128, device)
    _, qc, kc = plan.qk_grid(tokens, pq, pk)
    warps = max(pq.num_warps, pk.num_warps)

    def desc(p) -> str:
        return f"tensordesc<bf16[{p.block_t},{p.block_h},64],{SWIZZLE!r}>"

    hq, hk = heads_q * 128, heads_k * 128
    args = {"qd": desc(pq), "kd": desc(pk), "qod": desc(pq), "kod": desc(pk),
            **dict.fromkeys(("qo_ptr", "ko_ptr", "qw_ptr", "kw_ptr"), "*bf16"),
            "cs_ptr": "*fp32", "pos_ptr": "*i64", "T": tokens, "HQ": heads_q, "HK": heads_k,
            "eps": 1e-6, "max_pos": 40960, "stride_qot": hq, "stride_qoh": 128,
            "stride_kot": hk, "stride_koh": 128, "stride_cs": 128, "stride_pos_t": 1,
            "q_programs": pq.programs, "q_head_blocks": pq.head_blocks,
            "k_head_blocks": pk.head_blocks, "D": 128, "BTQ": pq.block_t, "BHQ": pq.block_h,
            "BTK": pk.block_t, "BHK": pk.block_h, "QC": qc, "KC": kc,
            "L3Q": row_layout(pq.block_h, 64, warps), "L3K": row_layout(pk.block_h, 64, warps),
            "CLQ": copy_layout(pq.block_t, 64, warps), "CLK": copy_layout(pk.block_t, 64, warps),
            **dict(zip(("TMA_STORE", "TABLE_ASYNC"), VARIANTS[variant], strict=True))}
    return kernel_ir.compile_for_sm90(tma_kernel, args, warps, source=GluonASTSource), args


def main() -> None:
    import kernel_ir

    for shape in ((8192, 32, 8), (8192, 16, 2), (3973, 24, 24)):
        for variant in VARIANTS:
            compiled, _ = sm90_case(*shape, variant)
            print(shape, variant, kernel_ir.counts(compiled))


if __name__ == "__main__":
    main()
