"""Compile the kernels for sm_90 without a GPU and count what their code does per program.

    python scripts/kernel_ir.py

For the fused, rms_norm and rope kernels at the tiles the plan picks for a few goal
shapes: layout conversions left in the Triton GPU IR, shared memory, barriers, warp
shuffles, global loads and stores (and how many are 16-byte vectors), and registers per
thread (from the cubin). A static view to go with the timings: a conversion through
shared memory costs a store, a barrier and a load on the critical path of every program.
Needs Triton's bundled ptxas and cuobjdump (the CUDA backend), not a device.
"""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # compile, do not interpret

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.compiler import compile as triton_compile

from qkbench.kernels.fused import qk_norm_rope_kernel
from qkbench.kernels.plan import next_pow2
from qkbench.kernels.rms_norm import rms_norm_kernel
from qkbench.kernels.rope import rope_kernel

TARGET = GPUTarget("cuda", 90, 32)
CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def compile_for_sm90(kernel, args: dict, num_warps: int):
    """Compile ``kernel`` as Triton's JIT would specialise it for ``args`` (pointers given
    as type strings such as ``"*bf16"`` and taken as 16-byte aligned; None for None)."""
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
    return triton_compile(ASTSource(kernel, signature, constants, attrs), target=TARGET,
                          options={"num_warps": num_warps, "enable_fp_fusion": False})


def counts(compiled) -> dict:
    ttgir, ptx = compiled.asm["ttgir"], compiled.asm["ptx"]
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        usage = subprocess.run([str(CUOBJDUMP), "--dump-resource-usage", f.name],
                               capture_output=True, text=True).stdout
    regs = re.search(r"REG:(\d+)", usage)
    return {
        "convert_layout": ttgir.count("ttg.convert_layout"),
        "shared_bytes": compiled.metadata.shared,
        "barriers": len(re.findall(r"\bbar\.sync|\bbarrier\.sync", ptx)),
        "shuffles": len(re.findall(r"shfl\.sync", ptx)),
        "loads": len(re.findall(r"ld\.global", ptx)),
        "loads_16B": len(re.findall(r"ld\.global[.\w]*\.v4\.b32", ptx)),
        "stores": len(re.findall(r"st\.global", ptx)),
        "stores_16B": len(re.findall(r"st\.global[.\w]*\.v4\.b32", ptx)),
        "registers": int(regs.group(1)) if regs else None,
    }


def fused_args(hq: int, hk: int, d: int, r: int, tile_q, tile_k, neox=True, offset=False):
    return dict(q_ptr="*bf16", k_ptr="*bf16", qo_ptr="*bf16", ko_ptr="*bf16",
                qw_ptr="*bf16", kw_ptr="*bf16", cs_ptr="*fp32", pos_ptr="*i64",
                axis_ptr=None, T=100, HQ=hq, HK=hk, eps=1e-6, max_pos=4096,
                stride_qt=hq * d, stride_qh=d, stride_kt=hk * d, stride_kh=d,
                stride_qot=hq * d, stride_qoh=d, stride_kot=hk * d, stride_koh=d,
                stride_cs=r, stride_pos_axis=100, stride_pos_t=1, q_programs=7,
                q_head_blocks=3, k_head_blocks=3, D=d, DB=next_pow2(d), R2=r // 2,
                NEOX=neox, OFFSET=offset, MROPE=False, PDL=False,
                BTQ=tile_q[0], BHQ=tile_q[1], BTK=tile_k[0], BHK=tile_k[1])


def norm_args(h: int, d: int, tile):
    return dict(x_ptr="*bf16", y_ptr="*bf16", w_ptr="*bf16", T=100, H=h, eps=1e-6,
                stride_xt=h * d, stride_xh=d, stride_yt=h * d, stride_yh=d, n_head_blocks=3,
                D=d, DB=next_pow2(d), OFFSET=False, BT=tile[0], BH=tile[1])


def rope_args(hq: int, hk: int, d: int, r: int, tile_q, tile_k):
    return dict(q_ptr="*bf16", k_ptr="*bf16", qo_ptr="*bf16", ko_ptr="*bf16",
                cs_ptr="*fp32", pos_ptr="*i64", axis_ptr=None, T=100, HQ=hq, HK=hk,
                max_pos=4096, stride_qt=hq * d, stride_qh=d, stride_kt=hk * d, stride_kh=d,
                stride_qot=hq * d, stride_qoh=d, stride_kot=hk * d, stride_koh=d,
                stride_cs=r, stride_pos_axis=100, stride_pos_t=1, q_programs=7,
                q_head_blocks=3, k_head_blocks=3, D=d, W=r, R2=r // 2, NEOX=True,
                MROPE=False, BTQ=tile_q[0], BHQ=tile_q[1], BTK=tile_k[0], BHK=tile_k[1])


# (label, kernel, arguments, warps): the tiles the default plan picks on an H200.
CASES = [
    ("fused (32,8)x128 T=1", qk_norm_rope_kernel,
     fused_args(32, 8, 128, 128, (1, 2), (1, 2)), 1),
    ("fused (32,8)x128 T=64", qk_norm_rope_kernel,
     fused_args(32, 8, 128, 128, (1, 4), (1, 4)), 1),
    ("fused (32,8)x128 T>=2048", qk_norm_rope_kernel,
     fused_args(32, 8, 128, 128, (1, 32), (4, 8)), 4),
    ("fused (32,8)x128 gptj T>=2048", qk_norm_rope_kernel,
     fused_args(32, 8, 128, 128, (1, 32), (4, 8), neox=False), 4),
    ("fused (16,2)x256/r64 T=1", qk_norm_rope_kernel,
     fused_args(16, 2, 256, 64, (1, 1), (1, 1), offset=True), 1),
    ("fused (16,2)x256/r64 T>=2048", qk_norm_rope_kernel,
     fused_args(16, 2, 256, 64, (1, 16), (8, 2), offset=True), 4),
    ("rms_norm 32x128 T>=2048", rms_norm_kernel, norm_args(32, 128, (1, 32)), 4),
    ("rope (32,8)x128 T>=2048", rope_kernel, rope_args(32, 8, 128, 128, (1, 32), (4, 8)), 4),
]


def main() -> None:
    rows = [(label, counts(compile_for_sm90(kernel, args, warps)))
            for label, kernel, args, warps in CASES]
    keys = list(rows[0][1])
    print("| kernel, tiles | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for label, c in rows:
        print(f"| {label} | " + " | ".join(str(c[k]) for k in keys) + " |")


if __name__ == "__main__":
    sys.exit(main())
