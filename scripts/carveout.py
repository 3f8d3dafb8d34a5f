"""The L1 / shared-memory split a kernel asks the driver for (its carveout).

A kernel with no preference keeps the split the last kernel chose wherever it fits in it
(``cuCtxSetCacheConfig``'s documentation: without a preference, launches "prefer to not
change the cache configuration unless required"). So one of ours, which takes at most
512 bytes of shared memory, runs after a GEMM in the GEMM's small L1.

Asking for all L1 (a carveout of 0) has a cost of its own. Every program needs its shared
memory plus what the driver reserves per block (1 KiB on sm_80 and later), so the smallest
split holds fewer programs than the multiprocessor's thread and block limits allow.
``occupancy_carveout`` is the smallest carveout that still holds them all. The driver
rounds a carveout up to the next split it supports (the CUDA programming guide).
"""

import ctypes
from functools import cache

# cuFuncSetAttribute's CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT (cuda.h).
_CARVEOUT_ATTRIBUTE = 9
# cuDeviceGetAttribute's CU_DEVICE_ATTRIBUTE_* (cuda.h) behind ``device_limits``.
_DEVICE_ATTRIBUTES = {"threads": 39, "shared": 81, "blocks": 106, "reserved": 111}
# A preference that asks for ``occupancy_carveout`` rather than a fixed share.
OCCUPANCY = "occupancy"
Preference = int | str


@cache
def _libcuda() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


def set_carveout(compiled, percent: int) -> None:
    """Ask the driver to run ``compiled`` (a Triton CompiledKernel on a CUDA device) with
    ``percent`` of each multiprocessor's unified L1 / shared memory as shared memory (0:
    all L1; -1: the driver's default)."""
    if not -1 <= percent <= 100:
        raise ValueError(f"a shared-memory carveout is -1 or 0 to 100 per cent, got {percent}")
    rc = _libcuda().cuFuncSetAttribute(ctypes.c_void_p(compiled.function),
                                       ctypes.c_int(_CARVEOUT_ATTRIBUTE), ctypes.c_int(percent))
    if rc != 0:
        raise RuntimeError(f"cuFuncSetAttribute(preferred shared-memory carveout {percent}) "
                           f"failed: CUresult {rc}")


@cache
def device_limits(device: int) -> dict[str, int]:
    """A CUDA device's resident threads, shared-memory bytes and blocks per multiprocessor,
    and the shared-memory bytes the driver reserves per block."""
    limits = {}
    for name, attribute in _DEVICE_ATTRIBUTES.items():
        value = ctypes.c_int()
        rc = _libcuda().cuDeviceGetAttribute(ctypes.byref(value), ctypes.c_int(attribute),
                                             ctypes.c_int(device))
        if rc != 0:
            raise RuntimeError(f"cuDeviceGetAttribute({attribute}) failed: CUresult {rc}")
        limits[name] = value.value
    return limits


def occupancy_carveout(shared: int, warps: int, limits: dict[str, int]) -> int:
    """The smallest carveout (per cent, rounded up) whose shared memory holds as many
    programs of ``warps`` warps and ``shared`` bytes each as the thread and block limits
    allow (registers aside, so it may hold more than run)."""
    programs = min(limits["blocks"], limits["threads"] // (32 * warps))
    need = programs * (shared + limits["reserved"])
    return min(100, -(-100 * need // limits["shared"]))


def apply(compiled, preference: Preference, warps: int, device: int) -> int:
    """Set ``preference`` (a share in per cent, or ``OCCUPANCY``) on ``compiled``, a kernel
    of ``warps`` warps compiled for CUDA device ``device``; returns the share set."""
    if preference == OCCUPANCY:
        percent = occupancy_carveout(compiled.metadata.shared, warps, device_limits(device))
    elif isinstance(preference, int) and not isinstance(preference, bool):
        percent = preference
    else:
        raise ValueError(f"a carveout preference is a share in per cent or {OCCUPANCY!r}, "
                         f"got {preference!r}")
    set_carveout(compiled, percent)
    return percent
