"""The split route: rms_norm(q), rms_norm(k), rope(q, k) -- three launches."""

from collections.abc import Sequence

import torch

from . import calls
from .checks import check_qk_norm_rope
from .launch import nonempty
from .plan import TilePlan
from .rms_norm import norm_launch, norm_plan
from .rope import rope_launch, rope_plans


def qk_norm_rope_split(
    q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
    positions: torch.Tensor, cos_sin_cache: torch.Tensor, *, eps: float = 1e-6,
    rotary_dim: int | None = None, style: str = "neox", weight_mode: str = "plain",
    mrope_section: Sequence[int] | None = None, mrope_layout: str = "sectioned",
    inplace: bool = True, q_out: torch.Tensor | None = None,
    k_out: torch.Tensor | None = None, check_positions: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same operation and signature as ``qk_norm_rope`` (less ``pdl``), as three
    launches.

    q and k are normalised into their outputs (``q, k`` themselves when ``inplace``),
    then both outputs are rotated in place by one ``rope`` launch.
    """
    tensors = (q, k, q_out, k_out, q_weight, k_weight, cos_sin_cache, positions)
    options = (eps, rotary_dim, style, weight_mode, calls.section_key(mrope_section),
               mrope_layout, inplace)

    def build() -> calls.Resolved:
        call, norm_eps, offset = check_qk_norm_rope(
            q, k, q_weight, k_weight, positions, cos_sin_cache, eps=eps, rotary_dim=rotary_dim,
            style=style, weight_mode=weight_mode, mrope_section=mrope_section,
            mrope_layout=mrope_layout, inplace=inplace, q_out=q_out, k_out=k_out)
        T, HQ, D = call.q.shape
        plans = split_plans(T, HQ, call.k.shape[1], D, call.rotary_dim, q.device,
                            q.element_size())
        launches = nonempty(
            norm_launch(call.q, call.q_out, norm_eps, offset,
                        (calls.Q, calls.Q_OUT, calls.Q_WEIGHT), plans[0]),
            norm_launch(call.k, call.k_out, norm_eps, offset,
                        (calls.K, calls.K_OUT, calls.K_WEIGHT), plans[1]),
            rope_launch(call, call.q_out, call.k_out, call.q_out, call.k_out, True,
                        (calls.Q_OUT, calls.K_OUT, calls.Q_OUT, calls.K_OUT, calls.CACHE,
                         calls.POSITIONS), (plans[2], plans[3])),
        )
        return calls.Resolved.of(launches, call, inplace, tensors)

    return calls.call("split", tensors, options, build, check_positions)


def split_plans(tokens: int, heads_q: int, heads_k: int, head_dim: int, rotary_dim: int,
                device: torch.device, element_size: int = 2) -> list[TilePlan]:
    """The tile plans of the three launches: norm q, norm k, then rope's q and k."""
    return [norm_plan(tokens, heads_q, head_dim, device, element_size),
            norm_plan(tokens, heads_k, head_dim, device, element_size),
            *rope_plans(tokens, heads_q, heads_k, head_dim, rotary_dim, True, device,
                        element_size)]
