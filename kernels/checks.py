"""Input validation shared by the launchers: every error names the argument and the rule.

Nothing here launches a kernel; the checks turn the public arguments into the flat
``[T, H, D]`` views and strides the launchers pass on.
"""

import os
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from math import prod
from numbers import Integral, Real

import torch

from .mrope import LAYOUTS, axis_map, axis_map_tensor

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
STYLES = ("neox", "gptj")
WEIGHT_MODES = ("plain", "offset")
MAX_HEAD_DIM = 512


# Triton chose its interpreter or its compiler for each kernel as it decorated it, when the
# kernels were imported: what TRITON_INTERPRET said then holds, whatever it says later.
_INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def interpreting() -> bool:
    """True when Triton runs these kernels on the CPU interpreter (``TRITON_INTERPRET=1``
    when they were imported)."""
    return _INTERPRETING


def check_tensor(name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.layout != torch.strided or x.is_nested:
        kind = "nested" if x.is_nested else str(x.layout).removeprefix("torch.")
        raise TypeError(f"{name} must be a dense (strided) tensor, got a {kind} one")
    return x


def check_device(name: str, x: torch.Tensor, device: torch.device, like: str = "q") -> None:
    """``like``: the argument whose device every other must share."""
    if x.device != device:
        raise ValueError(f"{name} is on {x.device}, expected {device} (the device of {like})")


def check_launchable(name: str, x: torch.Tensor) -> None:
    if x.device.type != "cuda" and not (x.device.type == "cpu" and interpreting()):
        raise ValueError(
            f"{name} is on {x.device}: the Triton kernels run on a CUDA device, or on the "
            "CPU only under the interpreter (set TRITON_INTERPRET=1 before importing)"
        )


def check_head_dim(name: str, D: int) -> None:
    if D % 2 or not 2 <= D <= MAX_HEAD_DIM:
        raise ValueError(f"{name} must be even and in [2, {MAX_HEAD_DIM}], got {D}")


def as_rows(name: str, x: object, dtype: torch.dtype | None = None, like: str = "q"
            ) -> torch.Tensor:
    """``x: [..., H, D]`` as a ``[T, H, D]`` view (no copy), the token dims merged; of
    ``dtype`` where given (``like``'s)."""
    x = check_tensor(name, x)
    if x.dtype not in DTYPES:
        raise TypeError(f"{name}.dtype must be one of bfloat16, float16, float32; got {x.dtype}")
    if dtype is not None and x.dtype != dtype:
        raise TypeError(f"{name}.dtype ({x.dtype}) must equal {like}.dtype ({dtype})")
    if x.dim() < 3:
        raise ValueError(f"{name} must be [..., H, D] with at least one token dim, "
                         f"got shape {tuple(x.shape)}")
    H, D = x.shape[-2:]
    if H == 0:
        raise ValueError(f"{name} must have at least one head, got shape {tuple(x.shape)}")
    check_head_dim(f"{name}.shape[-1]", D)
    if x.stride(-1) != 1 and x.numel() > 0:
        raise ValueError(f"{name}.stride(-1) must be 1 (channels contiguous), got {x.stride(-1)}")
    try:
        return x.view(prod(x.shape[:-2]), H, D)
    except RuntimeError:
        raise ValueError(
            f"{name}'s token dims {tuple(x.shape[:-2])} with strides {tuple(x.stride()[:-2])} "
            "cannot be merged into one token stride without a copy"
        ) from None


def check_weight(name: str, w: object, D: int, device: torch.device, like: str = "q"
                 ) -> torch.Tensor:
    w = check_tensor(name, w)
    if w.dtype not in DTYPES:
        raise TypeError(f"{name}.dtype must be one of bfloat16, float16, float32; got {w.dtype}")
    if w.shape != (D,):
        raise ValueError(f"{name}.shape {tuple(w.shape)} must be ({D},), the head_dim")
    if w.stride(0) != 1:
        raise ValueError(f"{name} must be contiguous, got stride {w.stride(0)}")
    check_device(name, w, device, like)
    return w


def check_choice(name: str, value: object, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")


# The largest finite float32: the kernels add eps in float32.
FLOAT32_MAX = 3.4028234663852886e38


def check_eps(eps: object) -> float:
    if isinstance(eps, bool) or not isinstance(eps, Real):
        raise TypeError(f"eps must be a float, got {type(eps).__name__}")
    try:
        value = float(eps)
    except OverflowError:
        value = float("inf")
    if not 0.0 <= value <= FLOAT32_MAX:
        raise ValueError(f"eps must be >= 0 and finite in float32 (at most {FLOAT32_MAX:.4g}), "
                         f"got {eps}")
    return value


def check_int(name: str, value: object) -> int:
    """An integer argument as an int (a numpy integer too; never a bool)."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return int(value)


def check_no_grad(names: Sequence[str], tensors: Sequence) -> None:
    """Refuse, while autograd records, a tensor that requires grad: the kernels compute no
    gradient, so autograd would silently see none (and an in-place write would go under
    what it saved)."""
    if torch.is_grad_enabled():
        for name, x in zip(names, tensors, strict=True):  # a plain loop: runs every call
            if x is not None and x.requires_grad:
                raise ValueError(f"{name} requires grad: the kernels are for inference and "
                                 "compute no gradient; call them under torch.no_grad() or "
                                 f"torch.inference_mode(), or pass {name}.detach()")


def out_rows(name: str, out: object, like: torch.Tensor, like_name: str) -> torch.Tensor:
    """The ``[T, H, D]`` view of an output buffer that must match the shape and dtype of
    ``like`` (the argument ``like_name``), and, being written, must not repeat its memory."""
    out = check_tensor(name, out)
    if out.shape != like.shape:
        raise ValueError(f"{name}.shape {tuple(out.shape)} must equal {like_name}.shape "
                         f"{tuple(like.shape)}")
    check_device(name, out, like.device, like_name)
    rows = as_rows(name, out, like.dtype, like_name)
    check_own_memory(name, rows)
    return rows


@dataclass(frozen=True)
class RopeCall:
    """The resolved arguments of one rotation of q and k (flat views, ints, flags)."""

    q: torch.Tensor
    k: torch.Tensor
    q_out: torch.Tensor
    k_out: torch.Tensor
    positions: torch.Tensor  # [axes, T]; one axis unless MRoPE
    cos_sin_cache: torch.Tensor
    axis_map: torch.Tensor | None
    rotary_dim: int
    neox: bool
    # The rows of MRoPE positions some lane reads (an axis of no lanes is never read);
    # None: every row.
    position_axes: tuple[int, ...] | None = None

    @property
    def max_pos(self) -> int:
        return self.cos_sin_cache.shape[0]


def _positions(positions: object, lead: tuple[int, ...], device: torch.device,
               mrope: bool) -> torch.Tensor:
    positions = check_tensor("positions", positions)
    if positions.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"positions.dtype must be int32 or int64, got {positions.dtype}")
    check_device("positions", positions, device)
    T = prod(lead)
    shapes = [(3, *lead), (3, T)] if mrope else [lead, (T,)]
    if tuple(positions.shape) not in shapes:
        want = " or ".join(str(list(s)) for s in dict.fromkeys(shapes))
        what = "MRoPE positions (mrope_section is set)" if mrope else "positions"
        raise ValueError(f"{what} must have shape {want}, got {list(positions.shape)}")
    try:
        return positions.view(3 if mrope else 1, T)
    except RuntimeError:
        raise ValueError(f"positions' token dims with strides {positions.stride()} cannot be "
                         "merged into one token stride without a copy") from None


def check_position_range(positions: torch.Tensor, max_pos: int,
                         axes: tuple[int, ...] | None = None) -> None:
    """Raise unless every position the kernels read (MRoPE: the rows ``axes``) lies in
    ``[0, max_pos)``: reads them back to the host, so it synchronises with the device, and
    it refuses inside CUDA graph capture."""
    if positions.is_cuda and torch.cuda.is_current_stream_capturing():
        raise ValueError("check_positions=True reads the positions back to the host, which "
                         "CUDA graph capture forbids; pass check_positions=False")
    if axes is not None:
        positions = positions[list(axes)]
    if positions.numel() == 0:
        return
    lo, hi = (int(v) for v in torch.aminmax(positions))
    if lo < 0 or hi >= max_pos:
        raise ValueError(f"positions must lie in [0, {max_pos}) (the rows of cos_sin_cache), "
                         f"found values in [{lo}, {hi}]")


def check_own_memory(name: str, rows: torch.Tensor) -> None:
    """Refuse a tensor to be written whose ``[T, H, D]`` view reaches one element by two
    indices: an expanded view (stride 0) or rows overlapping each other (e.g. ``unfold``),
    whose elements several programs would write. Each dim's stride must clear the span of
    the dims of smaller stride (a layout that interleaves its dims without overlapping is
    refused too: the kernels' tiles take nested strides). An empty one writes nothing."""
    if rows.numel() == 0:
        return
    dims = sorted((stride, size, dim) for dim, (size, stride)
                  in enumerate(zip(rows.shape, rows.stride(), strict=True)) if size > 1)
    span = 0  # the largest offset the dims so far reach
    for stride, size, dim in dims:
        where = ("tokens", "heads", "channels")[dim]
        if stride == 0:
            raise ValueError(f"{name} is written but repeats its memory along {where} "
                             "(stride 0, an expanded view); pass a tensor with memory of "
                             "its own")
        if stride <= span:
            raise ValueError(f"{name} is written but its {where} overlap in memory (shape "
                             f"{tuple(rows.shape)}, strides {tuple(rows.stride())}); pass a "
                             "tensor with memory of its own")
        span += (size - 1) * stride


def check_flag(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    # numpy's bool is no subclass of bool, but holds one (as its ints are taken as ints).
    kind = type(value)
    if kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_"):
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {kind.__name__}")


def check_rotary_dim(rotary_dim: object, D: int, style: str) -> int:
    """The rotary width the kernels can take for ``head_dim=D`` (``None`` means all of it)."""
    given = rotary_dim is not None
    rotary_dim = check_int("rotary_dim", rotary_dim) if given else D
    if rotary_dim % 2 or not 2 <= rotary_dim <= D:
        raise ValueError(f"rotary_dim ({rotary_dim}) must be even and in [2, head_dim={D}]")
    if style == "gptj" and rotary_dim < 4:
        raise ValueError(f"rotary_dim ({rotary_dim}) must be >= 4 for gptj pairs")
    return rotary_dim


def check_mrope_section(mrope_section: Sequence[int], rotary_dim: int) -> tuple[int, ...]:
    if isinstance(mrope_section, (AbstractSet, Mapping)):  # no order to read lanes in
        raise TypeError(f"mrope_section must be an ordered sequence of 3 ints, got "
                        f"{type(mrope_section).__name__}")
    try:
        section = tuple(mrope_section)
    except TypeError:
        raise TypeError(f"mrope_section must be a sequence of 3 ints, got "
                        f"{type(mrope_section).__name__}") from None
    if len(section) != 3 or not all(isinstance(s, Integral) and not isinstance(s, bool)
                                    and s >= 0 for s in section):
        raise ValueError(f"mrope_section must be 3 non-negative ints, got "
                         f"{[s if type(s) in (int, float) else repr(s) for s in section]}")
    section = tuple(map(int, section))
    if sum(section) != rotary_dim // 2:
        raise ValueError(f"mrope_section {list(section)} sums to {sum(section)}, "
                         f"expected rotary_dim / 2 = {rotary_dim // 2}")
    return section


def check_rope(q: object, k: object, positions: object, cos_sin_cache: object, *,
               rotary_dim: int | None, style: str, mrope_section: Sequence[int] | None,
               mrope_layout: str, inplace: bool, q_out: object, k_out: object) -> RopeCall:
    """Validate the rotation arguments shared by ``rope`` and both fused-op routes."""
    q_rows = as_rows("q", q)
    k_rows = as_rows("k", k, q_rows.dtype)
    if q.shape[:-2] != k.shape[:-2]:
        raise ValueError(f"q's token dims {tuple(q.shape[:-2])} must equal k's "
                         f"{tuple(k.shape[:-2])}")
    D = q.shape[-1]
    if k.shape[-1] != D:
        raise ValueError(f"k.shape[-1] ({k.shape[-1]}) must equal q.shape[-1] ({D})")
    device = q.device
    check_launchable("q", q)
    check_device("k", k, device)
    check_choice("style", style, STYLES)
    check_choice("mrope_layout", mrope_layout, LAYOUTS)
    check_flag("inplace", inplace)

    rotary_dim = check_rotary_dim(rotary_dim, D, style)

    cache = check_tensor("cos_sin_cache", cos_sin_cache)
    if cache.dim() != 2 or cache.shape[1] != rotary_dim:
        raise ValueError(f"cos_sin_cache must be [max_pos, rotary_dim={rotary_dim}], "
                         f"got shape {list(cache.shape)}")
    if cache.dtype not in (torch.float32, q_rows.dtype):
        raise TypeError(f"cos_sin_cache.dtype must be float32 or q.dtype ({q_rows.dtype}), "
                        f"got {cache.dtype}")
    if cache.stride(1) != 1:
        raise ValueError(f"cos_sin_cache.stride(1) must be 1, got {cache.stride(1)}")
    check_device("cos_sin_cache", cache, device)

    amap, axes = None, None
    if mrope_section is not None:
        section = check_mrope_section(mrope_section, rotary_dim)
        amap = axis_map_tensor(section, mrope_layout, device)
        axes = tuple(sorted(set(axis_map(section, mrope_layout))))
    pos = _positions(positions, tuple(q.shape[:-2]), device, amap is not None)

    if inplace:
        for name, out in (("q_out", q_out), ("k_out", k_out)):
            if out is not None:
                raise ValueError(f"{name} must be None when inplace=True")
        q_res, k_res = q, k
        qo_rows, ko_rows = q_rows, k_rows
        check_own_memory("q", q_rows)
        check_own_memory("k", k_rows)
    else:
        q_res = torch.empty_like(q) if q_out is None else q_out
        k_res = torch.empty_like(k) if k_out is None else k_out
        qo_rows = out_rows("q_out", q_res, q, "q")
        ko_rows = out_rows("k_out", k_res, k, "k")
    return RopeCall(q_rows, k_rows, qo_rows, ko_rows, pos, cache, amap, rotary_dim,
                    style == "neox", axes)


def check_norm(q_weight: object, k_weight: object, D: int, device: torch.device, eps: object,
               weight_mode: str) -> tuple[float, bool]:
    """Validate the norm arguments of the fused op; returns ``(eps, offset)``."""
    check_weight("q_weight", q_weight, D, device)
    check_weight("k_weight", k_weight, D, device)
    check_choice("weight_mode", weight_mode, WEIGHT_MODES)
    return check_eps(eps), weight_mode == "offset"


def check_qk_norm_rope(q: object, k: object, q_weight: object, k_weight: object,
                       positions: object, cos_sin_cache: object, *, eps: object,
                       rotary_dim: int | None, style: str, weight_mode: str,
                       mrope_section: Sequence[int] | None, mrope_layout: str, inplace: bool,
                       q_out: object, k_out: object) -> tuple[RopeCall, float, bool]:
    """Validate the whole op's arguments (both routes); returns ``(call, eps, offset)``."""
    call = check_rope(q, k, positions, cos_sin_cache, rotary_dim=rotary_dim, style=style,
                      mrope_section=mrope_section, mrope_layout=mrope_layout, inplace=inplace,
                      q_out=q_out, k_out=k_out)
    norm_eps, offset = check_norm(q_weight, k_weight, q.shape[-1], q.device, eps, weight_mode)
    return call, norm_eps, offset
