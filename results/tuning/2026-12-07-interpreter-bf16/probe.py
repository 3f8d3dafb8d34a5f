"""How Triton's interpreter rounds float32 to a 16-bit float: one kernel stores 4096 random
float32 values converted to bfloat16 (with and without fp_downcast_rounding="rtne") and to
float16, compared with torch's round-to-nearest-even and with truncation.

    TRITON_INTERPRET=1 python probe.py
"""

import torch
import triton
import triton.language as tl


@triton.jit
def to_bf16(x_ptr, y_ptr, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(y_ptr + o, tl.load(x_ptr + o).to(tl.bfloat16))


@triton.jit
def to_bf16_rtne(x_ptr, y_ptr, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(y_ptr + o, tl.load(x_ptr + o).to(tl.bfloat16, fp_downcast_rounding="rtne"))


@triton.jit
def to_fp16(x_ptr, y_ptr, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(y_ptr + o, tl.load(x_ptr + o).to(tl.float16))


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16)


x = torch.randn(4096, generator=torch.Generator().manual_seed(0))
truncated = (x.view(torch.int32) & ~0xFFFF).view(torch.float32).to(torch.bfloat16)
print(f"triton {triton.__version__}, torch {torch.__version__}")
for name, kernel, dtype in (("bf16", to_bf16, torch.bfloat16),
                            ("bf16 rtne", to_bf16_rtne, torch.bfloat16),
                            ("fp16", to_fp16, torch.float16)):
    y = torch.empty(4096, dtype=dtype)
    kernel[(1,)](x, y, BLOCK=4096)
    nearest = (bits(y) != bits(x.to(dtype))).sum().item()
    line = f"{name}: {nearest} of 4096 differ from torch's round-to-nearest-even"
    if dtype == torch.bfloat16:
        line += f", {(bits(y) != bits(truncated)).sum().item()} from truncation"
    print(line)
