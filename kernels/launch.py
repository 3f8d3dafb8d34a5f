"""How a validated call reaches the device cheaply.

What a call needs besides its tensors -- the validation's verdict, the tile plans, every
stride, grid and compile-time constant -- depends only on the arguments' shapes, strides,
dtypes and devices and on the options, so the public ops resolve it once per such key
(``resolve``) and keep it in a small dict. A repeated call then costs the key, one dict
lookup, its output allocation, and one launch per kernel.

A launch goes through Triton's ``kernel[grid](...)`` the first time, which compiles or
finds the kernel; later launches call the compiled kernel's handle directly, skipping
Triton's argument binding and cache-key work (``DIRECT``). That is safe because every
argument Triton specialises on is fixed by the key (shapes, strides, dtypes, the
constants) except the tensors' 16-byte alignment, which is checked per call: a launch
whose tensors are not all 16-byte aligned goes through Triton's own dispatch.

The handle is given the tensors' addresses, read once for the alignment check, and the
current stream: given a tensor, Triton's launcher would call its ``data_ptr`` and ask the
driver whether the address is a device pointer, for every pointer of every launch, and
look the device and stream up again. The validation behind the key has already checked
that every tensor lives on the device the call runs on.
"""

from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager

import torch

# Launch through the compiled kernel's handle after the first launch (False: always through
# Triton's JIT dispatch, e.g. to measure what the handle saves).
DIRECT = True
# Entries kept before the cache is cleared: a caller sees few distinct shapes, and a
# clear costs only the next call of each shape its validation again.
CACHE_SIZE = 4096

_cache: dict[Hashable, object] = {}
# Lists that the launches made inside ``recording`` blocks are appended to.
_recorders: list[list] = []


def clear() -> None:
    """Forget every resolved call (after the tile-plan settings change)."""
    _cache.clear()


def resolve(key: Hashable | None, build: Callable[[], object]) -> object:
    """The entry cached under ``key``, built (and so validated) by ``build`` on a miss; a
    key that is None or unhashable (an option of a wrong type) is never cached."""
    try:
        entry = _cache.get(key)
    except TypeError:
        return build()
    if entry is None:
        entry = build()
        if key is not None:
            if len(_cache) >= CACHE_SIZE:
                _cache.clear()
            _cache[key] = entry
    return entry


@contextmanager
def recording() -> Iterator[list[tuple["KernelLaunch", list[torch.Tensor]]]]:
    """Collect every launch made inside the block with the tensors it read, to record its
    settings or to time it bare (``KernelLaunch.bare``)."""
    launches: list = []
    _recorders.append(launches)
    try:
        yield launches
    finally:
        _recorders.remove(launches)


def nonempty(*launches: "KernelLaunch") -> tuple["KernelLaunch", ...]:
    """The launches that have programs to run (a launch of an empty grid is an error)."""
    return tuple(kernel_launch for kernel_launch in launches if kernel_launch.grid[0])


class KernelLaunch:
    """One launch of a ``@triton.jit`` kernel with every argument but the tensors resolved.

    The kernel's parameters are its per-call tensors first (taken from the call's tensor
    tuple at ``slots``), then ``tail``: every other argument, constants included, in order.
    """

    __slots__ = ("grid", "kernel", "options", "runners", "slots", "tail")

    def __init__(self, kernel, grid: tuple[int, ...], slots: Sequence[int], tail: Sequence,
                 options: dict):
        self.kernel = kernel
        self.grid = grid
        self.slots = tuple(slots)
        self.tail = tuple(tail)
        self.options = options
        # The compiled kernel's launcher per current CUDA device, once Triton compiled it.
        self.runners: dict[int, Callable] = {}

    def __call__(self, tensors: Sequence[torch.Tensor]) -> None:
        ptrs = [tensors[i] for i in self.slots]
        if _recorders:
            _recorders[-1].append((self, ptrs))
        device = -1
        if DIRECT and ptrs[0].is_cuda:
            addresses = [p.data_ptr() for p in ptrs]
            bits = 0
            for address in addresses:
                bits |= address
            device = -1 if bits & 15 else torch.cuda.current_device()
            runner = self.runners.get(device)
            if runner is not None:
                runner(*addresses, *self.tail, stream=torch._C._cuda_getCurrentRawStream(device))
                return
        compiled = self.kernel[self.grid](*ptrs, *self.tail, **self.options)
        # Triton returns the compiled kernel it launched (None under the interpreter); it
        # was specialised for aligned pointers only when every pointer was aligned.
        if device >= 0 and hasattr(compiled, "function"):
            # The compiled kernel's launcher indexes all three grid dimensions.
            self.runners[device] = compiled[(*self.grid, 1, 1)[:3]]

    def bare(self, ptrs: Sequence[torch.Tensor], how: str) -> Callable[[], None]:
        """This launch on ``ptrs`` with nothing around it: through Triton's JIT dispatch
        (``"jit"``), or through the compiled kernel's handle (it must have been launched on
        these tensors' device once) given the tensors (``"handle"``) or, as a call makes
        it, their addresses and the stream (``"addresses"``)."""
        if how == "jit":
            kernel, args = self.kernel[self.grid], (*ptrs, *self.tail)
            return lambda: kernel(*args, **self.options)
        device = torch.cuda.current_device()
        runner = self.runners[device]
        if how == "handle":
            args = (*ptrs, *self.tail)
            return lambda: runner(*args)
        args = (*(p.data_ptr() for p in ptrs), *self.tail)
        stream = torch._C._cuda_getCurrentRawStream(device)
        return lambda: runner(*args, stream=stream)

    def settings(self) -> dict:
        """The grid, the compile options and every scalar and constant argument, by name."""
        names = self.kernel.arg_names[len(self.slots):]
        return {"kernel": self.kernel.fn.__name__, "grid": list(self.grid),
                **self.options,
                "args": {n: v for n, v in zip(names, self.tail, strict=True)
                         if v is None or isinstance(v, (bool, int, float))}}
