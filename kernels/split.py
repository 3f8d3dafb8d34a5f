"""The split route: rms_norm(q), rms_norm(k), rope(q, k) -- three launches."""

from collections.abc import Sequence

import torch

from .checks import RopeCall, check_norm, check_rope
from .plan import TilePlan
from .rms_norm import launch_rms_norm, norm_plan
from .rope import launch_rope, rope_plans


def qk_norm_rope_split(
    q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
    positions: torch.Tensor, cos_sin_cache: torch.Tensor, *, eps: float = 1e-6,
    rotary_dim: int | None = None, style: str = "neox", weight_mode: str = "plain",
    mrope_section: Sequence[int] | None = None, mrope_layout: str = "sectioned",
    inplace: bool = True, q_out: torch.Tensor | None = None,
    k_out: torch.Tensor | None = None, check_positions: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same operation and signature as ``qk_norm_rope``, as three launches.

    q and k are normalised into their outputs (``q, k`` themselves when ``inplace``),
    then both outputs are rotated in place by one ``rope`` launch.
    """
    call = check_rope(q, k, positions, cos_sin_cache, rotary_dim=rotary_dim, style=style,
                      mrope_section=mrope_section, mrope_layout=mrope_layout, inplace=inplace,
                      q_out=q_out, k_out=k_out, check_positions=check_positions)
    eps, offset = check_norm(q_weight, k_weight, q.shape[-1], q.device, eps, weight_mode)
    launch_split(call, q_weight, k_weight, eps, offset)
    return call.q_result, call.k_result


def split_plans(tokens: int, heads_q: int, heads_k: int, head_dim: int, rotary_dim: int,
                device: torch.device) -> list[TilePlan]:
    """The tile plans of the three launches: norm q, norm k, then rope's q and k."""
    return [norm_plan(tokens, heads_q, head_dim, device),
            norm_plan(tokens, heads_k, head_dim, device),
            *rope_plans(tokens, heads_q, heads_k, head_dim, rotary_dim, False, device)]


def launch_split(call: RopeCall, q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float,
                 offset: bool) -> list[TilePlan]:
    """The three launches on a validated call; returns their tile plans in order."""
    plans = [launch_rms_norm(call.q, call.q_out, q_weight, eps, offset),
             launch_rms_norm(call.k, call.k_out, k_weight, eps, offset)]
    plans += launch_rope(call, call.q_out, call.k_out, call.q_out, call.k_out)
    return plans
