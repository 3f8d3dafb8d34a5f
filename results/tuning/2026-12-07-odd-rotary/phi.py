"""``scripts/kernel_ir.py``'s counts for the launches of rotary halves that are no power of
two: its Phi-3 cases, and GPT-NeoX, StableLM (the tree rebuilt), MRoPE and prefetch ones."""

import sys

sys.path.insert(0, "scripts")
import kernel_ir

extra = [
    kernel_ir.fused_case("fused (32,8)x96 r24 gptj T=8192", 8192, 32, 8, 96, 24, neox=False),
    kernel_ir.fused_case("fused (32,8)x80 r20 T=8192 tree rebuilt", 8192, 32, 8, 80, 20,
                         whole=False),
    kernel_ir.fused_case("fused (32,8)x96 mrope T=8", 8, 32, 8, 96, 96, mrope=True),
    kernel_ir.fused_case("fused (32,8)x96 prefetch T=32768", 32768, 32, 8, 96, 96,
                         prefetch=True),
]
for label, kernel, args, warps in [c for c in kernel_ir.CASES if "Phi-3" in c[0]] + extra:
    print(label, kernel_ir.counts(kernel_ir.compile_for_sm90(kernel, args, warps)))
