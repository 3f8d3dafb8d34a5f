"""What the device allows: its copy bandwidth and the launch floor inside a graph."""

import statistics

import torch
import triton

from qkbench.backends import Backend

# Per buffer: over four times an H200's or H100's L2, and under the size where a copy_
# captured in a CUDA graph stops running at DRAM speed: on the H200 a 1 GiB copy_ moved
# 2695 GB/s in a graph and 4168 outside it, a 256 MiB one 4116 in a graph
# (scripts/probe_copy.py, results/tuning/2026-12-03-h200-copy.txt).
COPY_BYTES = {"cuda": 256 << 20, "cpu": 64 << 20}


@triton.jit
def _empty_kernel(x_ptr):
    pass


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


def launch_floor(backend: Backend, inner_reps: int, samples: int = 100) -> dict:
    """Per-call time of an empty one-program and one-program-per-SM Triton kernel."""
    x = torch.empty(1, device=backend.device)
    programs = {"one_program": 1}
    if backend.device.type == "cuda":
        index = backend.device.index or 0
        programs["one_per_sm"] = torch.cuda.get_device_properties(index).multi_processor_count
    out = {}
    for name, grid in programs.items():
        seconds = per_call_seconds(backend, lambda grid=grid: _empty_kernel[(grid,)](x),
                                   inner_reps, samples, "floor")
        out[name] = {"programs": grid, "median_s": statistics.median(seconds),
                     "samples": seconds}
    return out


def measure(backend: Backend, inner_reps: int) -> dict:
    return {"copy": copy_bandwidth(backend), "launch_floor": launch_floor(backend, inner_reps)}
