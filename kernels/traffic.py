"""The byte model of each route: device-memory bytes one call moves, for GB/s figures.

Both take the op's arguments (extra options are ignored). Rows count at their storage
size, the cos/sin table once per token and rotary channel, and nothing for caches.
"""

from math import prod

import torch


def _terms(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
           positions: torch.Tensor, cos_sin_cache: torch.Tensor,
           rotary_dim: int | None) -> tuple[int, int, int]:
    """(bytes of all q/k rows, bytes of their rotary channels, weights + table + positions)."""
    tokens = prod(q.shape[:-2])
    heads = q.shape[-2] + k.shape[-2]
    rotary = rotary_dim or q.shape[-1]
    size = q.element_size()
    fixed = (q_weight.numel() * q_weight.element_size()
             + k_weight.numel() * k_weight.element_size()
             + tokens * rotary * cos_sin_cache.element_size()
             + positions.numel() * positions.element_size())
    return tokens * heads * q.shape[-1] * size, tokens * heads * rotary * size, fixed


def fused_bytes(q, k, q_weight, k_weight, positions, cos_sin_cache, *,
                rotary_dim: int | None = None, **_options) -> int:
    """One fused launch: every row read and written once -- the operation's minimum."""
    rows, _, fixed = _terms(q, k, q_weight, k_weight, positions, cos_sin_cache, rotary_dim)
    return 2 * rows + fixed


def split_bytes(q, k, q_weight, k_weight, positions, cos_sin_cache, *,
                rotary_dim: int | None = None, **_options) -> int:
    """The three split launches: the norms' full round trip, then rope's on the rotary part."""
    rows, rotary, fixed = _terms(q, k, q_weight, k_weight, positions, cos_sin_cache, rotary_dim)
    return 2 * rows + 2 * rotary + fixed
