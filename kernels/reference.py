"""Plain-torch definitions of the operation, and an FP64 oracle.

``qk_norm_rope_reference`` rounds where the kernels round (the normalised value to the
storage dtype, then the rotated one) and is the harness's ``eager`` route. The oracle
computes the same mathematics in float64 with no intermediate rounding. Both are the
composition of one norm and one rotation, so every route shares one definition.
"""

from collections.abc import Sequence

import torch

from .checks import STYLES, WEIGHT_MODES, check_choice, check_int
from .mrope import axis_map_tensor


def _rotary_dim(x: torch.Tensor, cos_sin_cache: torch.Tensor, rotary_dim: int | None,
                style: str) -> int:
    """The rotary width, refused where the kernels' contract has none to give (a silent
    default would define a different operation); any even width, unlike the kernels'."""
    check_choice("style", style, STYLES)
    D = x.shape[-1]
    width = D if rotary_dim is None else check_int("rotary_dim", rotary_dim)
    if width % 2 or not 2 <= width <= D:
        raise ValueError(f"rotary_dim ({rotary_dim}) must be an even int in [2, head_dim={D}]")
    if cos_sin_cache.dim() != 2 or cos_sin_cache.shape[1] != width:
        raise ValueError(f"cos_sin_cache must be [max_pos, rotary_dim={width}], got "
                         f"{list(cos_sin_cache.shape)}")
    return width


def _weight(weight: torch.Tensor, weight_mode: str, dtype: torch.dtype) -> torch.Tensor:
    check_choice("weight_mode", weight_mode, WEIGHT_MODES)
    w = weight.to(dtype)
    return w + 1 if weight_mode == "offset" else w


def _lane_cos_sin(positions: torch.Tensor, cos_sin_cache: torch.Tensor, lead: torch.Size,
                  rotary_dim: int, mrope_section: Sequence[int] | None, mrope_layout: str,
                  dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-lane cos and sin ``[*lead, 1, rotary_dim / 2]``: lane ``i`` of each token; NaN
    where its position is outside the table, as the kernels write."""
    half = rotary_dim // 2
    if mrope_section is None:
        pos = positions.reshape(-1, 1).expand(-1, half)
    else:
        # Cached per device, so that a warmed call captures in a CUDA graph (no host copy).
        axes = axis_map_tensor(tuple(mrope_section), mrope_layout, positions.device)
        pos = positions.reshape(3, -1)[axes.long()].T  # [T, half]
    lanes = torch.arange(half, device=positions.device)
    table = cos_sin_cache.to(dtype)
    pos = pos.long()
    valid = (pos >= 0) & (pos < table.shape[0])
    if not table.shape[0]:  # no row to read even for the masked lanes
        table = torch.full((1, table.shape[1]), torch.nan, dtype=dtype, device=table.device)
    row = torch.where(valid, pos, 0)
    cos, sin = (torch.where(valid, table[row, offset + lanes], torch.nan)
                for offset in (0, half))
    return cos.reshape(*lead, 1, half), sin.reshape(*lead, 1, half)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int,
            style: str) -> torch.Tensor:
    """Rotate the first ``rotary_dim`` channels of ``x`` (already in the compute dtype)."""
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    if style == "neox":
        x1, x2 = rot.chunk(2, dim=-1)
    else:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    o1, o2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    out = torch.cat((o1, o2), -1) if style == "neox" else torch.stack((o1, o2), -1).flatten(-2)
    return torch.cat((out, rest), -1)


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, *, eps: float = 1e-6,
                       weight_mode: str = "plain") -> torch.Tensor:
    """RMSNorm per head row in fp32, rounded to ``x.dtype``."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd * _weight(weight, weight_mode, torch.float32)).to(x.dtype)


def rope_reference(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
                   cos_sin_cache: torch.Tensor, *, rotary_dim: int | None = None,
                   style: str = "neox", mrope_section: Sequence[int] | None = None,
                   mrope_layout: str = "sectioned") -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q and k in fp32, rounded to their dtype; returns new tensors."""
    rotary_dim = _rotary_dim(q, cos_sin_cache, rotary_dim, style)
    cos, sin = _lane_cos_sin(positions, cos_sin_cache, q.shape[:-2], rotary_dim, mrope_section,
                             mrope_layout, torch.float32)
    return tuple(_rotate(x.float(), cos, sin, rotary_dim, style).to(x.dtype) for x in (q, k))


def qk_norm_rope_reference(
    q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
    positions: torch.Tensor, cos_sin_cache: torch.Tensor, *, eps: float = 1e-6,
    rotary_dim: int | None = None, style: str = "neox", weight_mode: str = "plain",
    mrope_section: Sequence[int] | None = None, mrope_layout: str = "sectioned",
) -> tuple[torch.Tensor, torch.Tensor]:
    """rms_norm(q), rms_norm(k), rope(q, k) in plain torch with the kernels' rounding."""
    qn = rms_norm_reference(q, q_weight, eps=eps, weight_mode=weight_mode)
    kn = rms_norm_reference(k, k_weight, eps=eps, weight_mode=weight_mode)
    return rope_reference(qn, kn, positions, cos_sin_cache, rotary_dim=rotary_dim, style=style,
                          mrope_section=mrope_section, mrope_layout=mrope_layout)


def qk_norm_rope_oracle(
    q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
    positions: torch.Tensor, cos_sin_cache: torch.Tensor, *, eps: float = 1e-6,
    rotary_dim: int | None = None, style: str = "neox", weight_mode: str = "plain",
    mrope_section: Sequence[int] | None = None, mrope_layout: str = "sectioned",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The operation in float64 with no intermediate rounding; returns float64 tensors."""
    rotary_dim = _rotary_dim(q, cos_sin_cache, rotary_dim, style)
    cos, sin = _lane_cos_sin(positions, cos_sin_cache, q.shape[:-2], rotary_dim, mrope_section,
                             mrope_layout, torch.float64)
    outs = []
    for x, w in ((q, q_weight), (k, k_weight)):
        xd = x.double()
        rstd = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps)
        outs.append(_rotate(xd * rstd * _weight(w, weight_mode, torch.float64), cos, sin,
                            rotary_dim, style))
    return outs[0], outs[1]
