"""Which copy reaches the device's bandwidth: torch ``copy_`` or an SM copy kernel, by size
and inside / outside a CUDA graph. Prints one line per (method, dtype, size, graph)."""

import statistics

import torch
import triton
import triton.language as tl


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


def timed(fn, graph: bool, reps: int = 4, samples: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps):
                fn()
        run = g.replay
    else:
        def run():
            for _ in range(reps):
                fn()
    for _ in range(3):
        run()
    out = []
    for _ in range(samples):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / 1e3 / reps)
    return statistics.median(out)


def methods(src: torch.Tensor, dst: torch.Tensor) -> dict:
    n = src.numel()
    return {"copy_": lambda: dst.copy_(src),
            "triton": lambda: _copy[(triton.cdiv(n, 4096),)](src, dst, n, BLOCK=4096)}


def main() -> None:
    for dtype in (torch.float32, torch.bfloat16):
        for nbytes in (64 << 20, 256 << 20, 1 << 30):
            src = torch.rand(nbytes // 4, device="cuda").view(dtype)
            dst = torch.empty_like(src)
            for name, fn in methods(src, dst).items():
                for graph in (False, True):
                    s = timed(fn, graph)
                    print(f"{name:7s} {dtype!s:15s} {nbytes >> 20:5d} MiB graph={graph!s:5s} "
                          f"{2 * nbytes / s / 1e9:7.0f} GB/s")
            del src, dst


if __name__ == "__main__":
    main()
