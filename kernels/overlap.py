"""Whether a call's tensors share memory: a tensor a kernel writes must share no byte with
another of the call's tensors, or a route would read what it (or the other route) has
already written, and the two routes would part silently.

A call proves it per call from its tensors' addresses alone: each tensor's byte range
(``Footprint``, fixed by the cache key's shapes, strides and dtypes) is compared with the
others'. Ranges that meet (the q and k views of one packed qkv buffer interleave token by
token, yet share nothing) are settled exactly by ``layouts_overlap`` and the verdict kept
per address difference, which a packed buffer's views keep from call to call.
"""

from collections.abc import Sequence
from math import prod

import torch

# A tensor's memory: its shape, its strides (in elements) and its element's bytes.
Layout = tuple[tuple[int, ...], tuple[int, ...], int]
# Strided byte runs: the dims outside the innermost contiguous run, as (stride, size) in
# bytes by increasing stride, and that run's length in bytes.
Runs = tuple[tuple[tuple[int, int], ...], int]
# Past this many runs a pair is not enumerated, and counts as overlapping.
MAX_RUNS = 1 << 22
# Verdicts kept per footprint before they are forgotten (a caller's views of one buffer
# keep their distance: a handful is the common case).
VERDICTS = 64


def layout_of(x: torch.Tensor) -> Layout:
    return tuple(x.shape), tuple(x.stride()), x.element_size()


def same_elements(a: Layout, b: Layout) -> bool:
    """Whether two layouts at one address hold the same elements in the same places: their
    shapes and element sizes equal, and the strides of every dim of more than one element
    (a dim of one element never steps, whatever stride a view op left it)."""
    return (a[0] == b[0] and a[2] == b[2]
            and all(sa == sb for n, sa, sb in zip(a[0], a[1], b[1], strict=True) if n > 1))


def extent(layout: Layout) -> int:
    """The bytes from a tensor's first element to the end of its last (0 if it is empty)."""
    shape, strides, size = layout
    if 0 in shape:
        return 0
    return (sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) + 1) * size


def runs_of(layout: Layout) -> Runs:
    shape, strides, size = layout
    # A dim of one element or of stride 0 adds no byte; a dim whose stride is the run so far
    # continues it.
    dims = sorted((s * size, n) for n, s in zip(shape, strides, strict=True) if n > 1 and s)
    run = size
    while dims and dims[0][0] == run:
        run *= dims.pop(0)[1]
    return tuple(dims), run


def span(runs: Runs) -> int:
    """The bytes from the first run's start to the end of the last."""
    dims, run = runs
    return sum((n - 1) * s for s, n in dims) + run


def runs_meet(a: Runs, b: Runs, delta: int) -> bool:
    """Whether runs ``a`` at byte 0 and runs ``b`` at byte ``delta`` share a byte."""
    (a_dims, a_run), (b_dims, b_run) = a, b
    if not a_dims and not b_dims:
        return -b_run < delta < a_run
    if a_dims and b_dims and a_dims[-1][0] == b_dims[-1][0]:
        # Both repeat an inner pattern at one stride S, each pattern within S bytes: a's
        # copy i (i*S + p) meets b's copy j (delta + j*S + p') only where i - j is q, b's
        # pattern then r bytes on, or q + 1, r - S bytes on (delta = q*S + r).
        (stride, a_n), (_, b_n) = a_dims[-1], b_dims[-1]
        a_in, b_in = (a_dims[:-1], a_run), (b_dims[:-1], b_run)
        if span(a_in) <= stride and span(b_in) <= stride:
            q, r = divmod(delta, stride)
            return any(-b_n < m < a_n and runs_meet(a_in, b_in, shift)
                       for m, shift in ((q, r), (q + 1, r - stride)))
    if prod(n for _, n in a_dims) > MAX_RUNS or prod(n for _, n in b_dims) > MAX_RUNS:
        return True
    a_starts, b_starts = starts(a_dims), starts(b_dims).add_(delta).sort().values
    # b's runs starting before each of a's ends, and the farthest any of them reaches.
    before = torch.searchsorted(b_starts, a_starts + a_run) - 1
    reach = torch.cummax(b_starts + b_run, 0).values
    return bool(((before >= 0) & (reach[before.clamp(min=0)] > a_starts)).any())


def starts(dims: Sequence[tuple[int, int]]) -> torch.Tensor:
    """The byte offsets at which the runs of ``dims`` start."""
    offsets = torch.zeros(1, dtype=torch.int64)
    for stride, n in dims:
        offsets = (offsets[:, None] + torch.arange(n, dtype=torch.int64) * stride).flatten()
    return offsets


def layouts_overlap(a: Layout, b: Layout, delta: int) -> bool:
    """Whether a tensor of layout ``a`` and one of layout ``b`` starting ``delta`` bytes
    after it share a byte. Exact, but for a pair of layouts too finely strided to enumerate
    (over ``MAX_RUNS`` runs, with no common outer stride), which counts as overlapping."""
    if not extent(a) or not extent(b):
        return False
    return runs_meet(runs_of(a), runs_of(b), delta)


class Footprint:
    """Where one cache key's tensors lie: what checks a call of that key, from its tensors'
    addresses, for a tensor written (``written``: its slot and the one slot it may be,
    element for element, or None) that shares memory with another of the call's tensors."""

    __slots__ = ("extents", "layouts", "pairs", "verdicts", "written")

    def __init__(self, tensors: Sequence[torch.Tensor | None],
                 written: Sequence[tuple[int, int | None]]):
        self.written = dict(written)
        self.layouts = tuple(None if x is None else layout_of(x) for x in tensors)
        self.extents = tuple(0 if x is None else extent(x) for x in self.layouts)
        outputs = [w for w, _ in written]
        # (written, other, whether they may be one tensor): each pair of written ones once,
        # and none with an empty tensor (no byte to share).
        self.pairs = tuple(
            (w, i, i == may_be and same_elements(self.layouts[i], self.layouts[w]))
            for w, may_be in written if self.extents[w]
            for i, e in enumerate(self.extents)
            if e and i != w and not (i in outputs and outputs.index(i) < outputs.index(w)))
        self.verdicts: dict[tuple[int, int, int], bool] = {}

    def check(self, names: Sequence[str], tensors: Sequence[torch.Tensor | None]) -> None:
        """Raise where a tensor written shares memory with another (``names``: the slots')."""
        if not self.pairs:
            return
        ptrs = [0 if x is None else x.data_ptr() for x in tensors]
        extents = self.extents
        for w, i, may_be in self.pairs:
            delta = ptrs[i] - ptrs[w]
            if -extents[i] < delta < extents[w] and not (may_be and not delta):
                key = (w, i, delta)
                shared = self.verdicts.get(key)
                if shared is None:
                    if len(self.verdicts) >= VERDICTS:
                        self.verdicts.clear()
                    shared = layouts_overlap(self.layouts[w], self.layouts[i], delta)
                    self.verdicts[key] = shared
                if shared:
                    raise ValueError(self.message(names, tensors, w, i))

    def message(self, names: Sequence[str], tensors: Sequence, w: int, i: int) -> str:
        may_be = self.written[w]
        allowed = (f" (only {names[may_be]} may be given as {names[w]})" if may_be is not None
                   else "")
        if tensors[w] is tensors[i]:
            if may_be is None and i in self.written:
                return f"{names[w]} and {names[i]} are the same tensor; each needs its own memory"
            return f"{names[w]} is {names[i]}: an output must not be another argument{allowed}"
        if i == may_be:
            return (f"{names[w]} shares memory with {names[i]} but is not {names[i]} element "
                    f"for element; pass {names[i]} itself as {names[w]}, or memory apart from it")
        return (f"{names[w]} shares memory with {names[i]} and is written, so the result would "
                "depend on the order of the kernels' reads and writes; pass tensors apart in "
                "memory")
