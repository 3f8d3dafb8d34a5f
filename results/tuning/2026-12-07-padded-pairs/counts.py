"""Static counts (``scripts/kernel_ir.py``: sm_90, no device) of the fused launches that
the padded pair tiles and the row tree over ``[BT * BH, 1, DB]`` touch, for the kernels in
the folder given (default: the installed package's), under whichever Triton runs this.

    python counts.py [KERNELS_DIR]   # e.g. a worktree's kernels/ at 4b68606
"""

import importlib.util
import sys

if len(sys.argv) > 1:  # the kernels of another tree, as qkbench.kernels
    import qkbench

    spec = importlib.util.spec_from_file_location(
        "qkbench.kernels", f"{sys.argv[1]}/__init__.py", submodule_search_locations=[sys.argv[1]])
    module = importlib.util.module_from_spec(spec)
    sys.modules["qkbench.kernels"] = qkbench.kernels = module
    spec.loader.exec_module(module)

sys.path.insert(0, "scripts")
import kernel_ir
import triton

KEYS = ("convert_layout", "barriers", "loads", "loads_16B", "stores", "registers", "spills")
CASES = [
    *(c for c in kernel_ir.CASES
      if c[0].startswith("fused") and ("r64" in c[0] or "Phi" in c[0])),
    kernel_ir.fused_case("fused StableLM (32,32)x80/r20 T=8192", 8192, 32, 32, 80, 20),
    kernel_ir.fused_case("fused (32,8)x96/r24 gptj T=8192", 8192, 32, 8, 96, 24, neox=False),
    kernel_ir.fused_case("fused Phi-3 (32,32)x96 T=1", 1, 32, 32, 96, 96),
]
source = sys.argv[1] if len(sys.argv) > 1 else "the package"
print(f"Triton {triton.__version__}, kernels from {source}")
print("| launch, tiles | " + " | ".join(KEYS) + " |")
print("|---" * (len(KEYS) + 1) + "|")
for label, kernel, args, warps in CASES:
    c = kernel_ir.counts(kernel_ir.compile_for_sm90(kernel, args, warps))
    print(f"| {label} | " + " | ".join(str(c[k]) for k in KEYS) + " |")
