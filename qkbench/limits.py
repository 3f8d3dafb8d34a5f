"""What the device allows: its copy bandwidth, the launch floor inside a graph, and what one
launch that only moves the op's rows reaches at the op's own size."""

import statistics
from collections.abc import Callable

import torch
import triton
import triton.language as tl

from qkbench.backends import Backend

# Per buffer: over four times an H200's or H100's L2, and under the size where a copy_
# captured in a CUDA graph stops running at DRAM speed: on the H200 a 1 GiB copy_ moved
# 2695 GB/s in a graph and 4168 outside it, a 256 MiB one 4116 in a graph
# (scripts/probe_copy.py, results/tuning/2026-12-03-h200-copy.txt).
COPY_BYTES = {"cuda": 256 << 20, "cpu": 64 << 20}


@triton.jit
def _empty_kernel(x_ptr):
    pass


@triton.jit
def _row_kernel(pos_ptr, table_ptr, out_ptr, AT_POSITION: tl.constexpr, R: tl.constexpr):
    """Copy one table row of ``R`` elements to ``out``: row 0, or the row that
    ``pos_ptr[0]`` names (a load that waits for the load before it)."""
    row = tl.load(pos_ptr) if AT_POSITION else 0
    i = tl.arange(0, R)
    tl.store(out_ptr + i, tl.load(table_ptr + row * R + i))


@triton.jit
def _rows_copy_kernel(q_ptr, k_ptr, qo_ptr, ko_ptr, NQ, NK, q_programs,
                      BLOCK: tl.constexpr):
    """Copy ``NQ`` elements of q and ``NK`` of k, ``BLOCK`` a program, q's programs first."""
    pid = tl.program_id(0)
    i = tl.arange(0, BLOCK)
    if pid < q_programs:
        offs = pid.to(tl.int64) * BLOCK + i
        tl.store(qo_ptr + offs, tl.load(q_ptr + offs, mask=offs < NQ), mask=offs < NQ)
    else:
        offs = (pid - q_programs).to(tl.int64) * BLOCK + i
        tl.store(ko_ptr + offs, tl.load(k_ptr + offs, mask=offs < NK), mask=offs < NK)


def rows_copy_launch(q: torch.Tensor, k: torch.Tensor, q_out: torch.Tensor,
                     k_out: torch.Tensor, block: int, warps: int | None = None
                     ) -> Callable[[], None]:
    """One launch that reads every element of the contiguous ``q`` and ``k`` and writes it
    to ``q_out`` and ``k_out`` (``q`` and ``k`` themselves for an in-place op's traffic):
    the op's rows moved once, with none of its work, ``block`` elements a program, in
    ``warps`` warps (``rows_copy_warps`` unless given)."""
    tensors = (q, k, q_out, k_out)
    if not all(t.is_contiguous() for t in tensors):
        raise ValueError("rows_copy_launch needs contiguous tensors")
    if any(o.shape != x.shape or o.dtype != x.dtype or o.device != x.device
           for x, o in ((q, q_out), (k, k_out))):
        raise ValueError("rows_copy_launch: each output must have its input's shape, dtype "
                         "and device")
    if block < 1 or block & (block - 1):
        raise ValueError(f"rows_copy_launch: block must be a power of two, got {block}")
    if warps is not None and warps not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"rows_copy_launch: warps must be a power of two from 1 to 32, got "
                         f"{warps}")
    q_programs = -(-q.numel() // block)
    grid = (q_programs + -(-k.numel() // block),)
    num_warps = warps or rows_copy_warps(block)
    return lambda: _rows_copy_kernel[grid](q, k, q_out, k_out, q.numel(), k.numel(),
                                           q_programs, block, num_warps=num_warps)


def rows_copy_warps(block: int) -> int:
    """The warps of a rows' copy program of ``block`` elements: one per 1024, as the op's
    kernels (``kernels.plan.Settings.elems_per_warp``), 1 to 8."""
    return max(1, min(8, block // 1024))


def rows_copy_copies_all(q: torch.Tensor, k: torch.Tensor, block: int,
                         warps: int | None = None) -> bool:
    """Whether ``rows_copy_launch`` at ``block`` (and ``warps``) copies every element of
    ``q`` and ``k``, checked into NaN-filled outputs (copied in place, a row could not
    show it)."""
    check = [torch.full_like(x, float("nan")) for x in (q, k)]
    rows_copy_launch(q, k, *check, block, warps)()
    return all(torch.equal(a, b) for a, b in zip((q, k), check, strict=True))


def per_call_seconds(backend: Backend, launch, inner_reps: int, samples: int,
                     label: str = "limit") -> list[float]:
    """Time one launch on its own: warmed, prepared, sampled ``samples`` times."""
    launch()
    arm = backend.prepare([launch], inner_reps, label)
    return backend.run([arm], [0] * samples, [samples - 1]).seconds


def copy_bandwidth(backend: Backend, samples: int = 20) -> dict:
    """Device-to-device ``copy_`` of a large buffer: bytes read plus written per second."""
    n = COPY_BYTES[backend.device.type]
    # fp32 elements: torch's byte-wise copy of a uint8 buffer ran at 2.43 TB/s on an H100
    # where a bf16 copy of the same size moved 2.98 (results/h100, 2026-12-02).
    src = torch.rand(n // 4, dtype=torch.float32, device=backend.device)
    dst = torch.empty_like(src)
    seconds = per_call_seconds(backend, lambda: dst.copy_(src), 4, samples, "copy")
    best = statistics.median(seconds)
    return {"bytes": 2 * n, "median_s": best, "gbps": 2 * n / best / 1e9,
            "samples": seconds}


def empty_launch(device: torch.device, programs: int = 1, pdl: bool = False
                 ) -> Callable[[], None]:
    """A launch of Triton's empty kernel in ``programs`` programs, its buffer allocated;
    with Programmatic Dependent Launch if ``pdl`` (a variant of its own, CUDA only)."""
    x = torch.empty(1, device=device)
    options = {"launch_pdl": True} if pdl and device.type == "cuda" else {}
    return lambda: _empty_kernel[(programs,)](x, **options)


def launch_floor(backend: Backend, inner_reps: int, samples: int = 100) -> dict:
    """Per-call time of an empty one-program and one-program-per-SM Triton kernel."""
    programs = {"one_program": 1}
    if backend.device.type == "cuda":
        index = backend.device.index or 0
        programs["one_per_sm"] = torch.cuda.get_device_properties(index).multi_processor_count
    out = {}
    for name, grid in programs.items():
        seconds = per_call_seconds(backend, empty_launch(backend.device, grid), inner_reps,
                                   samples, "floor")
        out[name] = {"programs": grid, "median_s": statistics.median(seconds),
                     "samples": seconds}
    return out


def row_floor(backend: Backend, inner_reps: int, samples: int = 100, rows: int = 4096,
              width: int = 128) -> dict:
    """Per-call time of a one-program kernel that copies one fp32 table row of ``width``:
    row 0 (``fixed_row``), and the row a position read first names
    (``position_then_row``). Launch included, the second is the chain of dependent loads
    (a position, then its row) and a store that every launch of the op without PDL
    contains; each probe records whether it copied the row it names."""
    pos = torch.tensor([rows - 1], dtype=torch.int64, device=backend.device)
    table = torch.rand(rows, width, dtype=torch.float32, device=backend.device)
    out = torch.empty(width, dtype=torch.float32, device=backend.device)
    result = {}
    for name, at_position in (("fixed_row", False), ("position_then_row", True)):
        seconds = per_call_seconds(
            backend, lambda at=at_position: _row_kernel[(1,)](pos, table, out, at, width,
                                                               num_warps=1),
            inner_reps, samples, "row floor")
        expected = table[rows - 1] if at_position else table[0]
        result[name] = {"median_s": statistics.median(seconds), "samples": seconds,
                        "row_copied": bool(torch.equal(out, expected))}
    return result


# Elements a program of the rows' copy moves: the fused kernel's q programs hold 4096.
ROWS_COPY_BLOCKS = (512, 1024, 2048, 4096, 8192, 16384)


def rows_copy(backend: Backend, q: torch.Tensor, k: torch.Tensor, inplace: bool,
              inner_reps: int, samples: int, blocks: tuple[int, ...] = ROWS_COPY_BLOCKS
              ) -> dict:
    """Per program size in ``blocks``: the per-call time of ``rows_copy_launch`` on
    contiguous buffers of ``q``'s and ``k``'s sizes and dtype, in place or into outputs as
    the op runs, and whether it copied every element (checked into NaN-filled outputs)."""
    src = [torch.randn(x.numel(), device=backend.device).to(x.dtype) for x in (q, k)]
    dst = src if inplace else [torch.empty_like(x) for x in src]
    result = {}
    for block in blocks:
        copied = rows_copy_copies_all(*src, block)
        seconds = per_call_seconds(backend, rows_copy_launch(*src, *dst, block), inner_reps,
                                   samples, "rows copy")
        result[block] = {"median_s": statistics.median(seconds), "samples": seconds,
                         "bytes": 2 * sum(x.numel() * x.element_size() for x in src),
                         "copied": copied}
    return result


def measure(backend: Backend, inner_reps: int,
            prime: Callable[[], None] | None = None) -> dict:
    """The copy bandwidth, then the launch floor, after ``prime`` where given (what puts
    the device in the launch state the run's arms were timed in)."""
    copy = copy_bandwidth(backend)
    if prime:
        prime()
    return {"copy": copy, "launch_floor": launch_floor(backend, inner_reps)}
