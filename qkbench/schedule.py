"""Arm orders, sample schedules and placement randomisation (SPEC section 4)."""

from itertools import permutations

import numpy as np
import torch

ARMS = ("A", "B", "A'")  # baseline, candidate, the baseline again (the null arm)
ORDERS = tuple(permutations(ARMS))  # all six, rotated through across passes
# Upper bound of the random padding allocated before a case's buffers.
MAX_PADDING_BYTES = 4 << 20


def order_of(pass_index: int) -> tuple[str, ...]:
    """The arm order of a pass: passes rotate through the six permutations."""
    return ORDERS[pass_index % len(ORDERS)]


def sequence(arms: int, rounds: int, schedule: str) -> list[int]:
    """Which arm each sample belongs to, in the order they are taken.

    ``interleaved``: one sample of each arm in turn (A B A' A B A' ...), so slow drifts
    and warm-up land on every arm alike; ``blocked``: all of one arm, then the next.
    """
    if schedule == "interleaved":
        return [a for _ in range(rounds) for a in range(arms)]
    if schedule == "blocked":
        return [a for a in range(arms) for _ in range(rounds)]
    raise ValueError(f"unknown schedule {schedule!r}")


def split_by_arm(seconds: list[float], seq: list[int], arms: int) -> list[list[float]]:
    """Each arm's samples, in the order they were taken."""
    out: list[list[float]] = [[] for _ in range(arms)]
    for arm, s in zip(seq, seconds, strict=True):
        out[arm].append(s)
    return out


def placement_seed(base_seed: int, pass_index: int, case_index: int) -> int:
    return int(np.random.default_rng([base_seed, pass_index, case_index]).integers(2**31))


def pad_allocation(seed: int, device: torch.device) -> torch.Tensor:
    """A seeded random-size allocation, so that the buffers after it move from pass to pass."""
    size = int(np.random.default_rng(seed).integers(1, MAX_PADDING_BYTES))
    return torch.empty(size, dtype=torch.uint8, device=device)
