"""Compile the kernels for sm_90 without a GPU and count what their code does per program.

    python scripts/kernel_ir.py

For the fused, rms_norm and rope kernels at the tiles the plan picks for a few goal
shapes: layout conversions left in the Triton GPU IR, shared memory, barriers, warp
shuffles, integer divisions by a run-time value, global loads and stores (and how many
are 16-byte vectors), the global loads the SASS issues before its first float
instruction, and registers per thread (from the cubin). A static view to go with
the timings: a conversion through shared memory costs a store, a barrier and a load on the
critical path of every program; a load that ptxas sinks past the first arithmetic (to save
registers) makes the program wait on memory twice.
Needs Triton's bundled ptxas and cuobjdump (the CUDA backend), not a device.
"""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # compile, do not interpret

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.compiler import compile as triton_compile

from qkbench.kernels import plan
from qkbench.kernels.fused import fused_tiles, qk_norm_rope_kernel
from qkbench.kernels.plan import next_pow2, pair_width
from qkbench.kernels.rms_norm import norm_plan, rms_norm_kernel
from qkbench.kernels.rope import pass_width, rope_kernel, rope_plans
from qkbench.kernels.tiles import COMPILE_OPTIONS
from qkbench.limits import _rows_copy_kernel, rows_copy_warps

TARGET = GPUTarget("cuda", 90, 32)
CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def compile_for_sm90(kernel, args: dict, num_warps: int, source=ASTSource, **options):
    """Compile ``kernel`` as Triton's JIT would specialise it for ``args`` (pointers given
    as type strings such as ``"*bf16"`` and taken as 16-byte aligned; None for None), with
    ``options`` (e.g. ``num_stages``) beside the shipped compile options. ``source``: the
    AST source class (Gluon's for a Gluon kernel)."""
    dns = set(kernel.do_not_specialize)
    signature, constants, attrs = {}, {}, {}
    for i, name in enumerate(kernel.arg_names):
        v = args[name]
        if i in kernel.constexprs or v is None:
            signature[name], constants[name] = "constexpr", v
        elif isinstance(v, str):
            signature[name], attrs[(i,)] = v, [["tt.divisibility", 16]]
        elif isinstance(v, float):
            signature[name] = "fp32"
        elif v == 1 and name not in dns and i not in dns:
            signature[name], constants[name] = "constexpr", 1
        else:
            signature[name] = "i32" if -(2**31) <= v < 2**31 else "i64"
            if v % 16 == 0 and name not in dns and i not in dns:
                attrs[(i,)] = [["tt.divisibility", 16]]
    return triton_compile(source(kernel, signature, constants, attrs), target=TARGET,
                          options={"num_warps": num_warps, **COMPILE_OPTIONS, **options})


def cuobjdump(compiled, option: str) -> str:
    """``cuobjdump option`` of the compiled kernel's cubin."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        return subprocess.run([str(CUOBJDUMP), option, f.name], capture_output=True,
                              text=True).stdout


def ir_counts(compiled) -> dict:
    """The counts read from the Triton GPU IR and the PTX (no cubin tool run)."""
    ttgir, ptx = compiled.asm["ttgir"], compiled.asm["ptx"]
    return {
        "convert_layout": ttgir.count("ttg.convert_layout"),
        "shared_bytes": compiled.metadata.shared,
        "barriers": len(re.findall(r"\bbar\.sync|\bbarrier\.sync", ptx)),
        "shuffles": len(re.findall(r"shfl\.sync", ptx)),
        # Integer divisions and remainders by a run-time value (by a constant, LLVM emits a
        # multiply and a shift): some 20 dependent instructions and a reciprocal each.
        "divisions": len(re.findall(r"\b(?:div|rem)\.[su](?:32|64)\b", ptx)),
        "loads": len(re.findall(r"ld\.global", ptx)),
        "loads_16B": len(re.findall(r"ld\.global[.\w]*\.v4\.b32", ptx)),
        "stores": len(re.findall(r"st\.global", ptx)),
        "stores_16B": len(re.findall(r"st\.global[.\w]*\.v4\.b32", ptx)),
    }


def counts(compiled) -> dict:
    """``ir_counts`` and, from the cubin's SASS and resource usage, the loads before the
    first float instruction, the registers per thread and the spills (local-memory stores
    and loads: ptxas's, under a register cap)."""
    regs = re.search(r"REG:(\d+)", cuobjdump(compiled, "--dump-resource-usage"))
    sass = [line for line in cuobjdump(compiled, "-sass").splitlines()
            if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)]
    first_math = next((i for i, line in enumerate(sass)
                       if re.search(r"\b(?:FMUL|FADD|FFMA)\b", line)), len(sass))
    return {
        **ir_counts(compiled),
        "loads_before_math": sum("LDG" in line for line in sass[:first_math]),
        "registers": int(regs.group(1)) if regs else None,
        "spills": sum(bool(re.search(r"\b(?:STL|LDL)\b", line)) for line in sass),
    }


H200_SMS = 132


def on_h200(device) -> int:
    """``plan.min_programs`` as on an H200, so that the tiles are the ones it would pick."""
    return max(1, int(plan.SETTINGS.min_programs_per_sm * H200_SMS))


plan.min_programs = sys.modules["qkbench.kernels.rms_norm"].min_programs = on_h200
plan._sm_count = lambda index: H200_SMS
H200_L2_BYTES = 60 << 20
plan.past_l2 = lambda nbytes, device: nbytes > H200_L2_BYTES


def chunks(t: int, plan_q, plan_k) -> dict:
    """The launch's q-then-k order arguments (``plan.qk_grid``)."""
    _, q_chunk, k_chunk = plan.qk_grid(t, plan_q, plan_k)
    return {"q_programs": plan_q.programs, "QC": q_chunk, "KC": k_chunk}


def fused_case(label: str, t: int, hq: int, hk: int, d: int, r: int, neox=True,
               offset=False, whole=True, pdl=False, mrope=False, prefetch=False):
    """``prefetch``: the table prefetch as ``plan.table_prefetch`` sets it (else compiled
    out)."""
    # The plan's device queries are answered as on an H200 (above): none reaches a device.
    device = torch.device("cuda", 0)
    (plan_q, plan_k), variant = fused_tiles(t, hq, hk, d, r, device, pdl=pdl)
    grid = chunks(t, plan_q, plan_k)
    period, ahead = plan.table_prefetch(
        t, (hq + hk) * d * 2, r * 4, grid["QC"], grid["KC"], max(plan_q.block_t, plan_k.block_t),
        device, not mrope) if prefetch else (0, 0)
    args = dict(q_ptr="*bf16", k_ptr="*bf16", qo_ptr="*bf16", ko_ptr="*bf16",
                qw_ptr="*bf16", kw_ptr="*bf16", cs_ptr="*fp32", pos_ptr="*i64",
                axis_ptr="*i32" if mrope else None, T=t, HQ=hq, HK=hk, eps=1e-6, max_pos=4096,
                stride_qt=hq * d, stride_qh=d, stride_kt=hk * d, stride_kh=d,
                stride_qot=hq * d, stride_qoh=d, stride_kot=hk * d, stride_koh=d,
                stride_cs=r, stride_pos_axis=t, stride_pos_t=1, **grid,
                q_head_blocks=plan_q.head_blocks, k_head_blocks=plan_k.head_blocks,
                D=d, DB=next_pow2(d), R2=r // 2, R2B=pair_width(r) // 2, NEOX=neox,
                OFFSET=offset, MROPE=mrope,
                PDL=variant, WHOLE=whole,
                BTQ=plan_q.block_t,
                BHQ=plan_q.block_h, BTK=plan_k.block_t,
                BHK=plan_k.block_h, PREFETCH_PERIOD=period, prefetch_ahead=ahead,
                PREFETCH_TOKENS=plan.PREFETCH_TOKENS, PTX=True)
    tiles = f"({plan_q.block_t},{plan_q.block_h})/({plan_k.block_t},{plan_k.block_h})"
    warps = max(plan_q.num_warps, plan_k.num_warps)
    return f"{label}: {tiles}, {warps} warps", qk_norm_rope_kernel, args, warps


def rows_copy_case(block: int):
    """``qkbench.limits.rows_copy_launch`` at (32,8) x 128, T = 8192, ``block`` a program."""
    nq, nk = 8192 * 32 * 128, 8192 * 8 * 128
    args = dict(q_ptr="*bf16", k_ptr="*bf16", qo_ptr="*bf16", ko_ptr="*bf16", NQ=nq, NK=nk,
                q_programs=nq // block, BLOCK=block)
    warps = rows_copy_warps(block)
    return f"rows copy, {block} a program: {warps} warps", _rows_copy_kernel, args, warps


def norm_case(label: str, t: int, h: int, d: int):
    p = norm_plan(t, h, d, None)
    args = dict(x_ptr="*bf16", y_ptr="*bf16", w_ptr="*bf16", T=t, H=h, eps=1e-6,
                stride_xt=h * d, stride_xh=d, stride_yt=h * d, stride_yh=d,
                n_head_blocks=p.head_blocks, D=d, DB=next_pow2(d), OFFSET=False,
                BT=p.block_t, BH=p.block_h)
    return f"{label}: ({p.block_t},{p.block_h}), {p.num_warps} warps", rms_norm_kernel, \
        args, p.num_warps


def rope_case(label: str, t: int, hq: int, hk: int, d: int, r: int, inplace=True):
    plan_q, plan_k = rope_plans(t, hq, hk, d, r, inplace, None)
    args = dict(q_ptr="*bf16", k_ptr="*bf16", qo_ptr="*bf16", ko_ptr="*bf16",
                cs_ptr="*fp32", pos_ptr="*i64", axis_ptr=None, T=t, HQ=hq, HK=hk,
                max_pos=4096, stride_qt=hq * d, stride_qh=d, stride_kt=hk * d, stride_kh=d,
                stride_qot=hq * d, stride_qoh=d, stride_kot=hk * d, stride_koh=d,
                stride_cs=r, stride_pos_axis=t, stride_pos_t=1, **chunks(t, plan_q, plan_k),
                q_head_blocks=plan_q.head_blocks, k_head_blocks=plan_k.head_blocks, D=d,
                PB=pass_width(d, r, inplace), R2=r // 2, R2B=pair_width(r) // 2, NEOX=True,
                MROPE=False,
                BTQ=plan_q.block_t, BHQ=plan_q.block_h, BTK=plan_k.block_t, BHK=plan_k.block_h)
    tiles = f"({plan_q.block_t},{plan_q.block_h})/({plan_k.block_t},{plan_k.block_h})"
    warps = max(plan_q.num_warps, plan_k.num_warps)
    return f"{label}: {tiles}, {warps} warps", rope_kernel, args, warps


# (label, kernel, arguments, warps) at the tiles the default plan picks on an H200.
CASES = [
    fused_case("fused (32,8)x128 T=1", 1, 32, 8, 128, 128),
    fused_case("fused (32,8)x128 T=64", 64, 32, 8, 128, 128),
    fused_case("fused (32,8)x128 T=8192", 8192, 32, 8, 128, 128),
    fused_case("fused (32,8)x128 gptj T=8192", 8192, 32, 8, 128, 128, neox=False),
    fused_case("fused (16,2)x128 T=8192", 8192, 16, 2, 128, 128),
    fused_case("fused (16,2)x128 T=32768", 32768, 16, 2, 128, 128),
    fused_case("fused (16,2)x128 T=32768 prefetch", 32768, 16, 2, 128, 128, prefetch=True),
    fused_case("fused (16,2)x256/r64 T=1", 1, 16, 2, 256, 64, offset=True),
    fused_case("fused (16,2)x256/r64 T=8192", 8192, 16, 2, 256, 64, offset=True),
    fused_case("fused (24,4)x256/r64 T=8192", 8192, 24, 4, 256, 64, offset=True),
    fused_case("fused (16,2)x256/r64 T=8192 tree rebuilt", 8192, 16, 2, 256, 64,
               offset=True, whole=False),
    fused_case("fused (32,8)x128 T=8 pdl", 8, 32, 8, 128, 128, pdl=True),
    fused_case("fused (24,4)x256/r64 T=1024", 1024, 24, 4, 256, 64, offset=True),
    fused_case("fused (24,4)x256/r64 T=1024 pdl", 1024, 24, 4, 256, 64, offset=True, pdl=True),
    fused_case("fused (32,8)x128 T=8 mrope", 8, 32, 8, 128, 128, mrope=True),
    fused_case("fused DiT 24x24 T=3973", 3973, 24, 24, 128, 128),
    fused_case("fused Phi-3 (32,32)x96 T=8192", 8192, 32, 32, 96, 96),
    norm_case("rms_norm 32x128 T=8192", 8192, 32, 128),
    norm_case("rms_norm DiT 24x128 T=3973", 3973, 24, 128),
    rope_case("rope (32,8)x128 T=8192", 8192, 32, 8, 128, 128),
    rope_case("rope (16,2)x256/r64 T=8192 out of place", 8192, 16, 2, 256, 64, inplace=False),
    rope_case("rope Phi-3 (32,32)x96 T=8192", 8192, 32, 32, 96, 96),
    *(rows_copy_case(block) for block in (512, 1024, 2048, 4096)),
]


def table(rows: list[tuple[str, dict]]) -> str:
    """A Markdown table of ``(label, counts)`` rows, one column per count."""
    keys = list(rows[0][1])
    return "\n".join([
        "| kernel, tiles | " + " | ".join(keys) + " |",
        "|---" * (len(keys) + 1) + "|",
        *(f"| {label} | " + " | ".join(str(c[k]) for k in keys) + " |" for label, c in rows),
    ])


def main() -> None:
    print(table([(label, counts(compile_for_sm90(kernel, args, warps)))
                 for label, kernel, args, warps in CASES]))


if __name__ == "__main__":
    sys.exit(main())
