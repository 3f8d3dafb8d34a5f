"""Routes: the named ways to compute the operation, each built into zero-argument launches.

A route is any callable with ``qk_norm_rope``'s signature. Building it for a case
preallocates its outputs, once per input set, so that the harness times only launches.
"""

import importlib
import importlib.util
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cache, partial
from itertools import count

import torch
import torch.nn.functional as F

from qkbench import refs
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
    # A planted effect (calibration): one extra call of the op every this many launches,
    # +1/extra_every of the route's own work.
    extra_every: int | None = None

    def launches(self, input_sets: Sequence[Inputs], inplace: bool,
                 empty_like: Callable[[torch.Tensor], torch.Tensor] = torch.empty_like
                 ) -> list[Launch]:
        """One launch per input set, outputs allocated now by ``empty_like`` (in the
        caller's order). Each launch's ``work`` attribute is its mean number of op calls."""
        calls = count()
        return [self._launch(inputs, inplace, empty_like, calls) for inputs in input_sets]

    def _launch(self, inputs: Inputs, inplace: bool, empty_like: Callable,
                calls: Iterator[int]) -> Launch:
        outs = {} if inplace else {"q_out": empty_like(inputs.q), "k_out": empty_like(inputs.k)}
        # Never a position read-back while timing (the default of today's kernels; an older
        # commit's, "triton@<sha12>" see refs, checked them outside graph capture).
        extra = ({"check_positions": False}
                 if (self.exact_group or "").partition("@")[0] == "triton" else {})
        every = self.extra_every

        def launch() -> None:
            inputs.call(self.op, inplace=inplace, **outs, **extra)
            if every and next(calls) % every == 0:
                inputs.call(self.op, inplace=inplace, **outs, **extra)

        launch.work = 1.0 + (1.0 / every if every else 0.0)
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


def plain_qk_norm_rope(q, k, q_weight, k_weight, positions, cos_sin_cache, q_out, k_out,
                       lane_axes, *, eps: float = 1e-6, rotary_dim: int | None = None,
                       style: str = "neox", weight_mode: str = "plain") -> None:
    """The operation as a user would write it in torch: ``F.rms_norm`` over each head row
    (in fp32, rounded to the storage dtype), then a rotate-half RoPE in fp32 with the
    cos/sin rows gathered by position, written into ``q_out, k_out`` (which may be
    ``q, k``). ``lane_axes``: None, or for MRoPE the position axis of each rotary lane.

    Written so that ``torch.compile`` can produce each output in one pass: every rotary
    channel is ``x * cos + turned(x) * sin`` over the whole span, and the rotated and
    pass-through channels are written into their slices of the output, not concatenated
    into an intermediate first (which compiled to separate fp32 buffers and copy passes)."""
    D = q.shape[-1]
    rotary = rotary_dim or D
    half = rotary // 2
    table = cos_sin_cache.float()
    if lane_axes is None:
        rows = table[positions.reshape(-1).long()]  # [T, rotary]
    else:
        # Each rotary lane reads the table row of its own axis's position.
        per_axis = table[positions.reshape(3, -1).long()]  # [3, T, rotary]
        lanes = torch.arange(half, device=q.device)
        rows = torch.cat((per_axis[lane_axes, :, lanes].T,
                          per_axis[lane_axes, :, half + lanes].T), -1)
    lead = q.shape[:-2]
    cos, sin = rows[:, :half], rows[:, half:]
    if style == "neox":  # each channel's own angle: the halves' angles repeated
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    cos, sin = cos.reshape(*lead, 1, -1), sin.reshape(*lead, 1, -1)
    for x, weight, out in ((q, q_weight, q_out), (k, k_weight, k_out)):
        w = weight.float() + 1 if weight_mode == "offset" else weight.float()
        normed = F.rms_norm(x.float(), (D,), w, eps).to(x.dtype).float()
        rot = normed[..., :rotary]
        if style == "neox":
            turned = torch.cat((-rot[..., half:], rot[..., :half]), -1)
            out[..., :rotary].copy_(rot * cos + turned * sin)
        else:
            x1, x2 = rot[..., 0::2], rot[..., 1::2]
            out[..., :rotary].copy_(torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin),
                                                -1).flatten(-2))
        if rotary < D:
            out[..., rotary:].copy_(normed[..., rotary:])


# torch.compile specialises per shape (dynamic=False, as a decode graph would); a sweep
# compiles one graph per case, past dynamo's default limit of 8 per function.
RECOMPILE_LIMIT = 1024


@cache
def _compiled_plain() -> Callable:
    return torch.compile(plain_qk_norm_rope, dynamic=False)


def compiled_op(q, k, q_weight, k_weight, positions, cos_sin_cache, *, inplace: bool = True,
                q_out=None, k_out=None, mrope_section=None, mrope_layout: str = "sectioned",
                **options):
    """``torch.compile`` of ``plain_qk_norm_rope``: the baseline a user gets without custom
    kernels (compiled on first call per shape, before capture; not bit-exact)."""
    from qkbench.kernels.mrope import axis_map_tensor

    lane_axes = None if mrope_section is None else axis_map_tensor(
        tuple(mrope_section), mrope_layout, q.device)
    if inplace:
        q_out, k_out = q, k
    else:
        q_out = torch.empty_like(q) if q_out is None else q_out
        k_out = torch.empty_like(k) if k_out is None else k_out
    with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
        _compiled_plain()(q, k, q_weight, k_weight, positions, cos_sin_cache, q_out, k_out,
                          lane_axes, **options)
    return q_out, k_out


def _builtin() -> dict[str, Route]:
    from qkbench.kernels import qk_norm_rope, qk_norm_rope_split, traffic

    return {
        "split": Route("split", qk_norm_rope_split, "triton", traffic.split_bytes),
        "fused": Route("fused", qk_norm_rope, "triton", traffic.fused_bytes),
        # Programmatic Dependent Launch: its prologue overlaps the previous launch's tail,
        # which in a graph of back-to-back launches of one kernel overlaps more than in a
        # model's layer (where the previous kernel is, say, the qkv projection).
        "fused-pdl": Route("fused-pdl", partial(qk_norm_rope, pdl=True), "triton",
                           traffic.fused_bytes),
        "eager": Route("eager", eager_op),
        "compiled": Route("compiled", compiled_op),
    }


BUILTIN = ("split", "fused", "fused-pdl", "eager", "compiled")


TWIN = "~twin"
PLANTED = "+1/"


def twin(name: str) -> str:
    """The name under which a route runs against itself (an A/A comparison)."""
    return f"{name}{TWIN}"


def planted(name: str, every: int) -> str:
    """The name of a route with a planted effect: one extra call every ``every`` launches."""
    return f"{name}{PLANTED}{every}"


def planted_every(name: str) -> int | None:
    """N of a route named ``NAME+1/N`` (a planted effect, also under its twin's name), None
    for any other name."""
    base, sep, every = name.removesuffix(TWIN).rpartition(PLANTED)
    if not (sep and base):
        return None
    if not (every.isascii() and every.isdigit()) or int(every) < 1:
        raise RouteError(f"route {name!r}: N in '+1/N' must be an integer >= 1")
    if planted_every(base) is not None:  # a second plant would replace the first's
        raise RouteError(f"route {name!r}: a route takes one planted effect '+1/N', and "
                         f"{base!r} has one already")
    return int(every)


def shipped(name: str) -> bool:
    """Whether the route named ``name`` is one of this package's own (a built-in, or a
    kernel route at a commit), under its twin's name or with a planted effect too."""
    base = name.removesuffix(TWIN)
    base = base.rpartition(PLANTED)[0] or base
    return base in BUILTIN or refs.is_ref_route(base)


def _origin(module: str) -> str:
    """The file a module is loaded from, for an error message (else its name)."""
    try:
        spec = importlib.util.find_spec(module)
    except (Exception, SystemExit):
        spec = None
    return spec.origin if spec is not None and spec.origin else module


def resolve(name: str) -> Route:
    """A built-in route by name, a peer kernel as ``peer:NAME`` (see ``peers``), a user
    route given as ``module:callable``, or any of them as ``NAME~twin`` (the same route
    under a second name) or ``NAME+1/N`` (the route with one extra call of itself every N
    launches: a planted effect of known size); and a shipped kernel route at a commit as
    ``fused@<sha12>`` (exported by ``qkbench gate --against``: see ``refs``)."""
    builtin = _builtin()
    if name in builtin:
        return builtin[name]
    if name.endswith(TWIN):
        return replace(resolve(name.removesuffix(TWIN)), name=name)
    every = planted_every(name)
    if every is not None:
        return replace(resolve(name.rpartition(PLANTED)[0]), name=name, extra_every=every)
    if refs.is_ref_route(name):  # a kernel route at a commit: fused@<sha12> (qkbench gate)
        return refs.route(name)
    if name.startswith("peer:"):
        from qkbench import peers

        return peers.resolve(name)
    module, sep, attr = name.partition(":")
    if not sep or not module or not attr:
        raise RouteError(f"unknown route {name!r}: use one of {', '.join(BUILTIN)}, "
                         "'peer:NAME' or 'module:callable'")
    try:
        loaded = importlib.import_module(module)
    except ImportError as e:
        raise RouteError(f"route {name!r} cannot be loaded: {e}") from None
    except (Exception, SystemExit) as e:  # the user's module failed while importing
        raise RouteError(f"route {name!r} cannot be loaded: importing {_origin(module)} "
                         f"raised {type(e).__name__}: {e}") from None
    try:
        op = getattr(loaded, attr)
    except AttributeError as e:
        raise RouteError(f"route {name!r} cannot be loaded: {e}") from None
    if not callable(op):
        raise RouteError(f"route {name!r} is not callable")
    return Route(name, op, getattr(op, "qkbench_exact_group", None),
                 getattr(op, "qkbench_traffic", None))
