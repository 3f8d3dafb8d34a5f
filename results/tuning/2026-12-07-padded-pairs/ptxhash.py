"""A hash of the PTX of every case of ``scripts/kernel_ir.py`` but the odd rotary ones (debug
lines and labels stripped): run at two commits, equal hashes mean equal code."""

import hashlib
import re
import sys

sys.path.insert(0, "scripts")
import kernel_ir

SKIP = (".loc", ".file", "//", "$L__tmp")
for label, kernel, args, warps in kernel_ir.CASES:
    if "Phi-3" in label:
        continue
    ptx = kernel_ir.compile_for_sm90(kernel, args, warps).asm["ptx"]
    ptx = "\n".join(line for line in ptx.splitlines() if not line.strip().startswith(SKIP))
    ptx = re.sub(r"\.section\s+\.debug.*", "", ptx, flags=re.S)
    print(hashlib.sha256(ptx.encode()).hexdigest()[:16], label)
