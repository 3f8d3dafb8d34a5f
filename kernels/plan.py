"""The launch heuristic: how many tokens and heads one program holds, and how many warps.

A deterministic rule instead of autotuning, so that a CUDA graph can be captured on the
first call and the chosen configuration can be recorded beside every measurement.
"""

from dataclasses import asdict, dataclass
from functools import cache

import torch

# Elements (padded channels x rows) one program holds; about 32 per thread at 4 warps.
ELEMS_PER_PROGRAM = 4096
# Programs per multiprocessor below which rows are spread thinner, so that decode widths
# keep the whole chip busy instead of leaving it idle behind a few large tiles.
MIN_PROGRAMS_PER_SM = 4
# Largest share of padded (masked) heads a head block may carry.
MAX_HEAD_PADDING = 1.125
ELEMS_PER_WARP = 1024


@dataclass(frozen=True)
class TilePlan:
    """How one tensor's ``[T, H, width]`` rows are cut into programs."""

    block_t: int
    block_h: int
    head_blocks: int
    programs: int
    num_warps: int

    def as_dict(self) -> dict:
        return asdict(self)


def next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _head_block(heads: int, cap: int) -> int:
    bh = min(next_pow2(heads), cap)
    while bh > 1 and -(-heads // bh) * bh > heads * MAX_HEAD_PADDING:
        bh //= 2
    return bh


def plan_tiles(tokens: int, heads: int, width: int, min_programs: int) -> TilePlan:
    """Tile ``tokens x heads`` rows of ``width`` padded channels into programs."""
    rows_cap = 1 << max(0, (ELEMS_PER_PROGRAM // width).bit_length() - 1)
    bh = _head_block(heads, rows_cap)
    bt = max(1, min(rows_cap // bh, next_pow2(tokens)))

    def programs(bt: int, bh: int) -> int:
        return -(-tokens // bt) * -(-heads // bh)

    while programs(bt, bh) < min_programs and bt > 1:
        bt //= 2
    while programs(bt, bh) < min_programs and bh > 1:
        bh //= 2
    warps = max(1, min(8, next_pow2(bt * bh * width // ELEMS_PER_WARP)))
    return TilePlan(bt, bh, -(-heads // bh), programs(bt, bh), warps)


@cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def min_programs(device: torch.device) -> int:
    """The program count below which a launch on ``device`` spreads its rows thinner.

    On the CPU interpreter every program costs milliseconds, so it spreads nothing.
    """
    if device.type != "cuda":
        return 1
    return MIN_PROGRAMS_PER_SM * _sm_count(device.index or 0)


def plan_pair(tokens: int, heads_q: int, heads_k: int, width: int,
              device: torch.device) -> tuple[TilePlan, TilePlan]:
    """Plans for the q and the k rows of one launch, sharing the chip by their row counts."""
    total = min_programs(device)
    share_q = -(-total * heads_q // (heads_q + heads_k))
    return (plan_tiles(tokens, heads_q, width, share_q),
            plan_tiles(tokens, heads_k, width, max(1, total - share_q)))
