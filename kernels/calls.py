"""The call path the rotating ops share (``qk_norm_rope``, its split route, ``rope``).

A call's tensors travel as one tuple in the order of ``SLOTS``; each kernel launch names
the slots it reads. Everything else is resolved once per key (``launch.resolve``).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch.autograd.graph import increment_version

from . import launch
from .checks import RopeCall, check_flag, check_no_grad, check_position_range, interpreting
from .launch import KernelLaunch
from .overlap import Footprint

# The call tuple: where each tensor of a call sits, for KernelLaunch.slots.
SLOTS = ("q", "k", "q_out", "k_out", "q_weight", "k_weight", "cos_sin_cache", "positions")
Q, K, Q_OUT, K_OUT, Q_WEIGHT, K_WEIGHT, CACHE, POSITIONS = range(len(SLOTS))
# Each output's slot and the one input slot it may be (out of place into q itself).
OUTPUTS = ((Q_OUT, Q), (K_OUT, K))

T = TypeVar("T")


def mark_written(*named: tuple[str, torch.Tensor]) -> None:
    """Count a write into the caller's tensors in their version counters, as torch's own
    in-place ops count theirs (autograd then refuses a backward through a value it saved
    before), and refuse, as they do, to write an inference tensor outside inference mode."""
    if not torch.is_inference_mode_enabled():
        for name, x in named:
            if x.is_inference():
                raise ValueError(f"{name} is an inference tensor, which is not written in "
                                 "place outside torch.inference_mode() (torch's in-place ops "
                                 "refuse it too); call under torch.inference_mode() or pass "
                                 "a clone")
    increment_version([x for _, x in named])


def written(inplace: bool, tensors: Sequence) -> tuple[tuple[int, int | None], ...]:
    """The slots a call writes, each with the one slot it may be (``Footprint``)."""
    if inplace:
        return (Q, None), (K, None)
    return tuple((out, may_be) for out, may_be in OUTPUTS if tensors[out] is not None)


@dataclass(frozen=True)
class Resolved:
    """A validated call of one shape: its launches and what the per-call work needs."""

    launches: tuple[KernelLaunch, ...]
    inplace: bool
    max_pos: int
    position_axes: tuple[int, ...] | None  # ``RopeCall.position_axes``
    footprint: Footprint

    @classmethod
    def of(cls, launches: tuple[KernelLaunch, ...], call: RopeCall, inplace: bool,
           tensors: Sequence) -> "Resolved":
        """The entry of a call validated as ``call`` on ``tensors``."""
        inplace = bool(inplace)
        return cls(launches, inplace, call.max_pos, call.position_axes,
                   Footprint(tensors, written(inplace, tensors)))

    def run(self, tensors: Sequence, check_positions: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Launch on a call's tensors (in ``SLOTS`` order), its outputs made where needed."""
        q, k, q_out, k_out, q_weight, k_weight, cos_sin_cache, positions = tensors
        check_no_grad(SLOTS, tensors)
        self.footprint.check(SLOTS, tensors)
        if check_positions:
            check_position_range(positions, self.max_pos, self.position_axes)
        if self.inplace:
            mark_written(("q", q), ("k", k))
            q_out, k_out = q, k
        elif q_out is not None or k_out is not None:
            mark_written(*((name, x) for name, x in (("q_out", q_out), ("k_out", k_out))
                           if x is not None))
        if q_out is None:
            q_out = torch.empty_like(q)
        if k_out is None:
            k_out = torch.empty_like(k)
        tensors = (q, k, q_out, k_out, q_weight, k_weight, cos_sin_cache, positions)
        for kernel_launch in self.launches:
            kernel_launch(tensors)
        return q_out, k_out


def call_key(op: str, tensors: Sequence[object], options: tuple) -> tuple | None:
    """The cache key of a call (``tensors[0]`` the tensor it runs on), or None where it
    cannot be formed: a call with a non-tensor (or a nested or sparse one) is validated
    afresh, and raises there."""
    # Every call builds it: appended per tensor, the options kept as one tuple, rather
    # than one flat tuple spliced from a comprehension.
    try:
        key = [op, options, tuple(map(type, options)), tensors[0].is_cuda or interpreting()]
        for x in tensors:
            key.append(None if x is None else (x.shape, x.stride(), x.dtype, x.device))
    except (AttributeError, RuntimeError):  # not a tensor, or one without strides
        return None
    return tuple(key)


def section_key(mrope_section: object) -> object:
    """``mrope_section`` in a hashable form that keeps each element's type, so that a
    section the validation refuses (``(4.0, 2, 2)``) never finds the entry of one it took
    (``(4, 2, 2)``, which compares equal). Anything but a list or tuple (or a subclass, such
    as a namedtuple) is its own key."""
    if isinstance(mrope_section, (list, tuple)):
        return tuple(mrope_section), tuple(map(type, mrope_section))
    return mrope_section


def resolve(op: str, tensors: Sequence[object], options: tuple, build: Callable[[], T]) -> T:
    """What ``build`` resolves (and validates) for these arguments, built on first sight.

    ``tensors[0]`` is the tensor the call runs on."""
    return launch.resolve(call_key(op, tensors, options), build)


def call(op: str, tensors: Sequence, options: tuple, build: Callable[[], Resolved],
         check_positions: object) -> tuple[torch.Tensor, torch.Tensor]:
    """One call of a rotating op: its tensors in ``SLOTS`` order, resolved by ``build``."""
    entry = resolve(op, tensors, options, build)
    return entry.run(tensors, check_flag("check_positions", check_positions))
