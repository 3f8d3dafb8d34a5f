"""The byte model of each route: device-memory bytes one call moves, for GB/s figures.

Both take the op's arguments (extra options are ignored). Rows count at their storage
size, the cos/sin table once per token and rotary channel, and nothing for caches.
"""

from math import prod

import torch


def _terms(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
           positions: torch.Tensor, cos_sin_cache: torch.Tensor,
           rotary_dim: int | None) -> dict[str, int]:
    """Bytes by what holds them: each tensor's rows whole and their rotary channels, each
    weight, and the table rows with the positions."""
    tokens = prod(q.shape[:-2])
    rotary = rotary_dim or q.shape[-1]

    def rows(x: torch.Tensor, width: int) -> int:
        return tokens * x.shape[-2] * width * x.element_size()

    return {"q": rows(q, q.shape[-1]), "k": rows(k, k.shape[-1]),
            "q_rotary": rows(q, rotary), "k_rotary": rows(k, rotary),
            "q_weight": q_weight.numel() * q_weight.element_size(),
            "k_weight": k_weight.numel() * k_weight.element_size(),
            "table": (tokens * rotary * cos_sin_cache.element_size()
                      + positions.numel() * positions.element_size())}


def fused_bytes(q, k, q_weight, k_weight, positions, cos_sin_cache, *,
                rotary_dim: int | None = None, **_options) -> int:
    """One fused launch: every row read and written once -- the operation's minimum."""
    b = _terms(q, k, q_weight, k_weight, positions, cos_sin_cache, rotary_dim)
    return 2 * (b["q"] + b["k"]) + b["q_weight"] + b["k_weight"] + b["table"]


def split_launch_bytes(q, k, q_weight, k_weight, positions, cos_sin_cache, *,
                       rotary_dim: int | None = None, **_options) -> dict[str, int]:
    """Each of the three split launches: a norm's rows read and written and its weight
    (``norm_q``, ``norm_k``), then ``rope`` in place on the rotary channels, with the table
    rows and positions."""
    b = _terms(q, k, q_weight, k_weight, positions, cos_sin_cache, rotary_dim)
    return {"norm_q": 2 * b["q"] + b["q_weight"], "norm_k": 2 * b["k"] + b["k_weight"],
            "rope": 2 * (b["q_rotary"] + b["k_rotary"]) + b["table"]}


def split_bytes(q, k, q_weight, k_weight, positions, cos_sin_cache, *,
                rotary_dim: int | None = None, **_options) -> int:
    """The three split launches: the norms' full round trip, then rope's on the rotary part."""
    return sum(split_launch_bytes(q, k, q_weight, k_weight, positions, cos_sin_cache,
                                  rotary_dim=rotary_dim).values())
