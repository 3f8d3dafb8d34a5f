"""Which position axis each rotary lane reads under the MRoPE layouts.

A lane is one rotary pair ``i`` in ``[0, rotary_dim / 2)``; the map sends it to axis 0
(time), 1 (height) or 2 (width). The kernels and the torch reference read the same map.
"""

from collections.abc import Sequence
from functools import lru_cache

import torch

LAYOUTS = ("sectioned", "interleaved", "glm-interleaved")


def axis_map(section: Sequence[int], layout: str) -> list[int]:
    """The axis of every rotary lane; ``section`` gives each axis's lane count."""
    s0, s1, s2 = section
    lanes = s0 + s1 + s2
    if layout == "sectioned":
        return [0] * s0 + [1] * s1 + [2] * s2
    if layout == "interleaved":
        # Qwen3-VL: lanes cycle T, H, W while H and W still have lanes to give.
        return [
            1 if i % 3 == 1 and i < 3 * s1 else 2 if i % 3 == 2 and i < 3 * s2 else 0
            for i in range(lanes)
        ]
    if layout == "glm-interleaved":
        # GLM: lanes cycle T, H, W, skipping an axis once its section is used up.
        counts = [0, 0, 0]
        lanes_axes = []
        for i in range(lanes):
            axis = i % 3
            while counts[axis] >= section[axis]:
                axis = (axis + 1) % 3
            counts[axis] += 1
            lanes_axes.append(axis)
        return lanes_axes
    raise ValueError(f"mrope_layout must be one of {LAYOUTS}, got {layout!r}")


@lru_cache(maxsize=64)
def axis_map_tensor(section: tuple[int, int, int], layout: str,
                    device: torch.device) -> torch.Tensor:
    """``axis_map`` as an int32 tensor on ``device``, built once per key.

    Built on first use: call the op once before capturing it in a CUDA graph.
    """
    return torch.tensor(axis_map(section, layout), dtype=torch.int32, device=device)
