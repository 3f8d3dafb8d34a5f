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
current stream of their device: given a tensor, Triton's launcher would call its
``data_ptr`` and ask the driver whether the address is a device pointer, for every pointer
of every launch, and look the device and stream up again. The validation behind the key has
already checked that every tensor lives on q's device; a launch runs there, whichever device
is current (with q's made current around it where another is: Triton's dispatch and its
launcher both launch in the current device's context).

Under Triton 3.6 the handle is its C launcher itself (``direct_runner``): Triton's runner
builds launch metadata on every launch and its launcher calls the (empty) launch hooks
from C, each with every argument passed again. While a launch hook is set (a profiler),
and under any other Triton version, launches go through Triton's runner.
"""

from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from functools import reduce
from operator import itemgetter, or_

import torch
import triton

_data_ptr = torch.Tensor.data_ptr
# A CPU-only build of torch has neither (and no tensor on a CUDA device to launch on).
_current_device = getattr(torch._C, "_cuda_getDevice", None)
_current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
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


# The Triton versions whose CompiledKernel runner and CudaLauncher ``direct_runner`` was
# written against (3.9's launcher takes other arguments).
DIRECT_LAUNCHER_VERSIONS = ("3.6.",)

# (stream, addresses) -> None: one launch of a compiled kernel on the given tensors' addresses.
Runner = Callable[[int, Sequence[int]], None]


def triton_runner(compiled, grid: tuple[int, int, int], tail: tuple) -> Runner:
    """A launch through Triton's own runner of the compiled kernel."""
    run = compiled[grid]
    return lambda stream, addresses: run(*addresses, *tail, stream=stream)


def direct_runner(compiled, grid: tuple[int, int, int], tail: tuple) -> Runner:
    """A launch through the compiled kernel's C launcher, as Triton 3.6's runner and
    ``CudaLauncher`` make it with no launch hook set and no scratch memory (else, or under
    another Triton version, through Triton's runner)."""
    slow = triton_runner(compiled, grid, tail)
    run = compiled.run
    if (not triton.__version__.startswith(DIRECT_LAUNCHER_VERSIONS)
            or run.global_scratch_size or run.profile_scratch_size):
        return slow
    hooks = triton.knobs.runtime
    c_launch, (x, y, z) = run.launch, grid
    head = (compiled.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
            compiled.packed_metadata, None, None, None)

    def runner(stream: int, addresses: Sequence[int]) -> None:
        if hooks.launch_enter_hook.calls or hooks.launch_exit_hook.calls:
            slow(stream, addresses)
        else:
            c_launch(x, y, z, stream, *head, *addresses, *tail)

    return runner


@contextmanager
def recording() -> Iterator[list[tuple["KernelLaunch", tuple[torch.Tensor, ...]]]]:
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

    __slots__ = ("compiled", "grid", "kernel", "options", "pick", "runners", "slots", "tail")

    def __init__(self, kernel, grid: tuple[int, ...], slots: Sequence[int], tail: Sequence,
                 options: dict):
        self.kernel = kernel
        self.grid = grid
        self.slots = tuple(slots)
        if len(self.slots) < 2:
            raise ValueError("a launch reads at least two tensors (its input and output)")
        # The launch's tensors out of the call's tuple, as a tuple (two or more slots).
        self.pick = itemgetter(*self.slots)
        self.tail = tuple(tail)
        self.options = options
        # Per CUDA device, once Triton compiled the kernel for it: the compiled kernel and
        # its launch (``direct_runner``).
        self.compiled: dict[int, object] = {}
        self.runners: dict[int, Runner] = {}

    def __call__(self, tensors: Sequence[torch.Tensor]) -> None:
        ptrs = self.pick(tensors)
        if _recorders:
            _recorders[-1].append((self, ptrs))
        # The tensors' device (every one is on q's), whatever device is current.
        device = ptrs[0].get_device()
        aligned = False
        if DIRECT and device >= 0:
            addresses = list(map(_data_ptr, ptrs))
            aligned = not reduce(or_, addresses) & 15
            runner = self.runners.get(device) if aligned else None
            if runner is not None:
                # The launcher launches in the current device's context (and torch's default
                # stream is the current context's): the tensors' device is made current.
                # torch.cuda.current_device without its lazy-init check: a tensor on a CUDA
                # device means CUDA is initialised.
                # No context manager where it is current already (most calls): it would
                # cost every call.
                if device == _current_device():
                    runner(_current_stream(device), addresses)
                else:
                    with torch.cuda.device(device):
                        runner(_current_stream(device), addresses)
                return
        # Triton's own dispatch compiles for and launches on the current device.
        with torch.cuda.device(device) if device >= 0 else nullcontext():
            compiled = self.kernel[self.grid](*ptrs, *self.tail, **self.options)
        # Triton returns the compiled kernel it launched (None under the interpreter); it
        # was specialised for aligned pointers only when every pointer was aligned.
        if aligned and hasattr(compiled, "function"):
            self.compiled[device] = compiled
            self.runners[device] = direct_runner(compiled, self.grid3, self.tail)

    @property
    def grid3(self) -> tuple[int, int, int]:
        """The grid in all three dimensions, as a compiled kernel's launcher indexes it."""
        return (*self.grid, 1, 1)[:3]

    def bare(self, ptrs: Sequence[torch.Tensor], how: str) -> Callable[[], None]:
        """This launch on ``ptrs`` with nothing around it: through Triton's JIT dispatch
        (``"jit"``); through the compiled kernel's runner (it must have been launched on
        these tensors' device once) given the tensors (``"handle"``) or their addresses
        and the stream (``"addresses"``); or, as a call makes it, through ``runners``
        (``"launcher"``: ``direct_runner``)."""
        if how == "jit":
            kernel, args = self.kernel[self.grid], (*ptrs, *self.tail)
            return lambda: kernel(*args, **self.options)
        device = ptrs[0].get_device()
        addresses, stream = [p.data_ptr() for p in ptrs], _current_stream(device)
        if how == "launcher":
            runner = self.runners[device]
            return lambda: runner(stream, addresses)
        run = self.compiled[device][self.grid3]
        if how == "handle":
            args = (*ptrs, *self.tail)
            return lambda: run(*args)
        args = (*addresses, *self.tail)
        return lambda: run(*args, stream=stream)

    def settings(self) -> dict:
        """The grid, the compile options and every scalar and constant argument, by name."""
        names = self.kernel.arg_names[len(self.slots):]
        return {"kernel": self.kernel.fn.__name__, "grid": list(self.grid),
                **self.options,
                "args": {n: v for n, v in zip(names, self.tail, strict=True)
                         if v is None or isinstance(v, (bool, int, float))}}
