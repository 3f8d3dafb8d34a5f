"""The larger-programs arms compiled for sm_90 (no device): tiles, warps and the counts of
``scripts/kernel_ir.py``, beside the default. From the repository's root:

    python results/tuning/2026-12-06-h100-larger-programs/kernel_ir_larger.py
"""

import sys

sys.path.insert(0, "scripts")
import kernel_ir

from qkbench.kernels import plan

ARMS = {"default": {},
        "e8192-w8": {"elems_per_program": 8192, "few_programs_per_sm": 0},
        "e8192-w4": {"elems_per_program": 8192, "elems_per_warp": 2048,
                     "few_programs_per_sm": 0}}
CELLS = [("(32,8) T=8192", 8192, 32, 8, 128, 128), ("DiT", 3973, 24, 24, 128, 128),
         ("(16,2) T=8192", 8192, 16, 2, 128, 128)]

for arm, settings in ARMS.items():
    with plan.use(**settings):
        for cell in CELLS:
            name, kernel, args, warps = kernel_ir.fused_case(*cell)
            counts = kernel_ir.counts(kernel_ir.compile_for_sm90(kernel, args, warps))
            print(arm, name, counts)
