"""The fused kernel under ptxas's register cap (``plan.Settings.max_registers``, the L2
bench's ``registers`` arms) compiled for sm_90 (no device): registers, spills and the
counts of ``scripts/kernel_ir.py`` at the goal cells' tiles. From the repository's root:

    python results/tuning/2026-12-06-registers/kernel_ir_registers.py
"""

import sys

sys.path.insert(0, "scripts")
import kernel_ir

CAPS = {"default": {}, "regs-48": {"maxnreg": 48}, "regs-40": {"maxnreg": 40}}
CELLS = [("(32,8) T=8192", 8192, 32, 8, 128, 128), ("DiT", 3973, 24, 24, 128, 128),
         ("(16,2) T=8192", 8192, 16, 2, 128, 128)]

for arm, options in CAPS.items():
    for cell in CELLS:
        name, kernel, args, warps = kernel_ir.fused_case(*cell)
        counts = kernel_ir.counts(kernel_ir.compile_for_sm90(kernel, args, warps, **options))
        print(arm, name, counts)
