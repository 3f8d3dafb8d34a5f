"""Arm orders, sample plans and placement randomisation (SPEC section 4)."""

from dataclasses import dataclass
from itertools import permutations

import numpy as np
import torch

ARMS = ("A", "B", "A'")  # baseline, candidate, the baseline again (the null arm)
ORDERS = tuple(permutations(ARMS))  # all six, rotated through across passes
# Upper bound of the seeded random padding allocated before each arm's buffers.
MAX_PADDING_BYTES = 8 << 20
# Per-arm buffers start at a seeded random multiple of this inside a span of up to 2 MiB
# (and at most their own size, so that many small cold-cache buffers stay cheap), so that
# even a buffer the allocator places on an aligned segment of its own moves between passes.
PLACEMENT_ALIGN = 512
PLACEMENT_SPAN = 2 << 20


def order_of(slot: int) -> tuple[str, ...]:
    """The arm order of a pass slot: slots rotate through the six permutations."""
    return ORDERS[slot % len(ORDERS)]


@dataclass(frozen=True)
class SamplePlan:
    """Which arm each sample belongs to, in the order taken, and what becomes of it.

    ``timed[i]`` is False for warm-up samples: the first ``warmup`` rounds, and every
    round that follows a host synchronisation (the GPU sat idle, so its first samples
    start cold). ``sync_after`` lists the positions after which the host synchronises.
    """

    arms: tuple[int, ...]
    timed: tuple[bool, ...]
    sync_after: tuple[int, ...]


def sample_plan(arms: int, warmup: int, samples: int, schedule: str, chunk: int,
                sync_carries: bool = True, starts_after_sync: bool = True) -> SamplePlan:
    """The plan of one comparison: every arm gets ``samples`` timed samples.

    ``interleaved``: rounds of one sample of each arm in turn (A B A' A B A' ...), so slow
    drifts and warm-up land on every arm alike; ``blocked``: all rounds of one arm, then
    the next (a round is one sample). The host synchronises after every ``chunk`` rounds,
    and the round after a synchronisation is discarded, whichever arm it holds.
    The first round follows a synchronisation too: the backend's own, after it prepares
    the arms (graph capture, priming).

    Rules of earlier versions, which ``audit`` reads archives by, differ only without a
    warm-up: ``starts_after_sync`` False (until 2026-12-05, a seventh session) timed the
    first round; ``sync_carries`` False as well (before 2026-12-05) timed a blocked arm's
    first round after a synchronisation.
    """
    if schedule == "interleaved":
        streams = [tuple(range(arms))]
    elif schedule == "blocked":
        streams = [(a,) for a in range(arms)]
    else:
        raise ValueError(f"unknown schedule {schedule!r}")
    if chunk < 2:
        raise ValueError(f"chunk must be >= 2 rounds, got {chunk}")
    seq: list[int] = []
    timed: list[bool] = []
    syncs: list[int] = []
    rounds, after_sync = 0, starts_after_sync
    for stream in streams:
        # after_sync carries over: a blocked arm's first round may follow a synchronisation.
        got, r, after_sync = 0, 0, after_sync and (sync_carries or not seq)
        while got < samples:
            is_timed = r >= warmup and not after_sync
            seq += stream
            timed += [is_timed] * len(stream)
            got += is_timed
            r += 1
            rounds += 1
            after_sync = rounds % chunk == 0
            if after_sync:
                syncs.append(len(seq) - 1)
    if not syncs or syncs[-1] != len(seq) - 1:
        syncs.append(len(seq) - 1)
    return SamplePlan(tuple(seq), tuple(timed), tuple(syncs))


def split_by_arm(seconds: list[float], plan: SamplePlan, arms: int
                 ) -> list[tuple[list[float], list[float]]]:
    """Each arm's (warm-up, timed) samples, each in the order they were taken."""
    out: list[tuple[list[float], list[float]]] = [([], []) for _ in range(arms)]
    for arm, is_timed, s in zip(plan.arms, plan.timed, seconds, strict=True):
        out[arm][is_timed].append(s)
    return out


def placement_seed(base_seed: int, pass_index: int, case_index: int) -> int:
    return int(np.random.default_rng([base_seed, pass_index, case_index]).integers(2**31))


class Placement:
    """Seeded placement of one comparison's per-arm buffers (SPEC 4, "Placement").

    The arms are allocated in a random order of their own, independent of the sampling
    order; before each arm a random-size padding allocation moves everything after it;
    each buffer starts at a random 512-byte multiple inside its own allocation (up to
    2 MiB in), so large buffers move too. ``record()`` is what the archive keeps.
    """

    def __init__(self, seed: int, labels: tuple[str, ...], device: torch.device):
        self.rng = np.random.default_rng(seed)
        self.device = device
        self.order = [labels[i] for i in self.rng.permutation(len(labels))]
        self.padding: dict[str, int] = {}
        self.offsets: dict[str, list[int]] = {}
        self._held: list[torch.Tensor] = []
        self._label: str | None = None

    def pad(self, label: str) -> None:
        """The padding before ``label``'s buffers; its buffers are placed next."""
        size = int(self.rng.integers(1, MAX_PADDING_BYTES))
        self._held.append(torch.empty(size, dtype=torch.uint8, device=self.device))
        self.padding[label] = size
        self.offsets[label] = []
        self._label = label

    def empty_like(self, like: torch.Tensor) -> torch.Tensor:
        """A contiguous tensor shaped like ``like``, placed at a random offset."""
        nbytes = like.numel() * like.element_size()
        slots = max(1, min(PLACEMENT_SPAN, nbytes) // PLACEMENT_ALIGN)
        offset = int(self.rng.integers(0, slots)) * PLACEMENT_ALIGN
        raw = torch.empty(nbytes + offset, dtype=torch.uint8, device=self.device)
        out = raw[offset:].view(like.dtype).view(like.shape)
        self.offsets[self._label].append(out.data_ptr() % PLACEMENT_SPAN)
        return out

    def record(self) -> dict:
        return {"allocation_order": self.order, "padding_bytes": self.padding,
                "offsets_mod_2mib": self.offsets}
