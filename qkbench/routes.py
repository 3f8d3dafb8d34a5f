"""Routes: the named ways to compute the operation, each built into zero-argument launches.

A route is any callable with ``qk_norm_rope``'s signature. Building it for a case
preallocates its outputs, once per input set, so that the harness times only launches.
"""

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import torch

from qkbench.case import Inputs
from qkbench.errors import RouteError

Launch = Callable[[], None]


class NotSupported(Exception):
    """Raised by a route that cannot compute a case (a peer kernel without that option):
    verification records the reason, the case is reported "n/s" and never timed."""


@dataclass(frozen=True)
class Route:
    name: str
    op: Callable
    # Routes of one exact group must agree bit for bit; every route must meet the oracle.
    exact_group: str | None = None
    # The byte model of one call; None counts the operation's minimum (the fused bytes).
    traffic: Callable | None = None

    def launches(self, input_sets: Sequence[Inputs], inplace: bool) -> list[Launch]:
        """One launch per input set, outputs allocated now (in the caller's order)."""
        return [self._launch(inputs, inplace) for inputs in input_sets]

    def _launch(self, inputs: Inputs, inplace: bool) -> Launch:
        outs = {} if inplace else {"q_out": torch.empty_like(inputs.q),
                                   "k_out": torch.empty_like(inputs.k)}
        # Positions were checked once by verification; a graph capture cannot read them.
        extra = {"check_positions": False} if self.exact_group == "triton" else {}

        def launch() -> None:
            inputs.call(self.op, inplace=inplace, **outs, **extra)

        return launch

    def bytes_moved(self, inputs: Inputs) -> int:
        from qkbench.kernels import traffic

        return inputs.call(self.traffic or traffic.fused_bytes)


def _deliver(results, q, k, inplace: bool, q_out, k_out):
    """Copy a functional result into the op's outputs: q, k in place, else q_out, k_out."""
    dsts = (q, k) if inplace else (
        q_out if q_out is not None else torch.empty_like(q),
        k_out if k_out is not None else torch.empty_like(k))
    for dst, src in zip(dsts, results, strict=True):
        dst.copy_(src)
    return dsts


def eager_op(q, k, q_weight, k_weight, positions, cos_sin_cache, *, inplace: bool = True,
             q_out=None, k_out=None, **options):
    """The plain-torch reference with the op's output contract."""
    from qkbench.kernels import reference

    results = reference.qk_norm_rope_reference(q, k, q_weight, k_weight, positions,
                                               cos_sin_cache, **options)
    return _deliver(results, q, k, inplace, q_out, k_out)


@cache
def _compiled_reference() -> Callable:
    from qkbench.kernels import reference

    return torch.compile(reference.qk_norm_rope_reference, dynamic=False)


def compiled_op(q, k, q_weight, k_weight, positions, cos_sin_cache, *, inplace: bool = True,
                q_out=None, k_out=None, **options):
    """``torch.compile`` of the eager reference (compiled on first call, before capture)."""
    results = _compiled_reference()(q, k, q_weight, k_weight, positions, cos_sin_cache,
                                    **options)
    return _deliver(results, q, k, inplace, q_out, k_out)


def _builtin() -> dict[str, Route]:
    from qkbench.kernels import qk_norm_rope, qk_norm_rope_split, traffic

    return {
        "split": Route("split", qk_norm_rope_split, "triton", traffic.split_bytes),
        "fused": Route("fused", qk_norm_rope, "triton", traffic.fused_bytes),
        "eager": Route("eager", eager_op),
        "compiled": Route("compiled", compiled_op),
    }


BUILTIN = ("split", "fused", "eager", "compiled")


def resolve(name: str) -> Route:
    """A built-in route by name, a peer kernel as ``peer:NAME`` (see ``peers``), or a user
    route given as ``module:callable``."""
    builtin = _builtin()
    if name in builtin:
        return builtin[name]
    if name.startswith("peer:"):
        from qkbench import peers

        return peers.resolve(name)
    module, sep, attr = name.partition(":")
    if not sep or not module or not attr:
        raise RouteError(f"unknown route {name!r}: use one of {', '.join(BUILTIN)}, "
                         "'peer:NAME' or 'module:callable'")
    try:
        op = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise RouteError(f"route {name!r} cannot be loaded: {e}") from None
    if not callable(op):
        raise RouteError(f"route {name!r} is not callable")
    return Route(name, op, getattr(op, "qkbench_exact_group", None),
                 getattr(op, "qkbench_traffic", None))
