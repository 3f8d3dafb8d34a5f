import hashlib, re, sys
sys.path.insert(0, "scripts")
import kernel_ir
for label, kernel, args, warps in kernel_ir.CASES:
    if "Phi-3" in label: continue
    c = kernel_ir.compile_for_sm90(kernel, args, warps)
    ptx = "\n".join(l for l in c.asm["ptx"].splitlines() if not l.strip().startswith((".loc", ".file", "//", "$L__tmp")))
    ptx = re.sub(r"\.section\s+\.debug.*", "", ptx, flags=re.S)
    print(hashlib.sha256(ptx.encode()).hexdigest()[:16], label)
