"""Timing backends: how one sample of one arm is taken.

A backend prepares an arm (a list of zero-argument launches, cycled ``inner_reps`` times
per sample) and then times a *sequence* of samples, each naming the arm it belongs to,
in exactly the order given, synchronising with the host after the positions given. The
schedule (interleaved or blocked, which samples are warm-up) is the plan's business, not
the backend's, so every backend runs every schedule the same way.

* ``CudaBackend``: the ``inner_reps`` launches are captured in one CUDA graph; a sample
  is one replay between two CUDA events; per-call time = replay time / ``inner_reps``.
* ``CpuBackend``: the same with a host clock around ``inner_reps`` direct calls.
"""

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from qkbench import telemetry

Launch = Callable[[], None]


@dataclass
class Timed:
    """Per-call seconds of each sample in sequence order, and telemetry taken meanwhile."""

    seconds: list[float]
    telemetry: list[dict] = field(default_factory=list)


class Backend(ABC):
    name: str
    device: torch.device
    # The last-level cache a cold-cache case must sweep past; None where it is not modelled.
    l2_bytes: int | None = None

    @abstractmethod
    def prepare(self, launches: Sequence[Launch], inner_reps: int, label: str) -> object:
        """Make one arm ready to sample; the launches must have run once already.

        ``label`` names the arm (its role, e.g. ``A'``, or a reference such as ``copy``).
        """

    @abstractmethod
    def run(self, arms: Sequence[object], sequence: Sequence[int],
            sync_after: Sequence[int]) -> Timed:
        """Take one sample of ``arms[i]`` for every ``i`` of ``sequence``, in order, and
        wait for the device (reading telemetry) after each position in ``sync_after``."""

    @abstractmethod
    def synchronize(self) -> None:
        """Wait for the device."""


def _cycle(launches: Sequence[Launch], inner_reps: int) -> None:
    for i in range(inner_reps):
        launches[i % len(launches)]()


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    inner_reps: int
    # The graph replays raw pointers: keep the launches (and the buffers they hold) alive.
    launches: Sequence[Launch]


class CudaBackend(Backend):
    name = "cuda"

    def __init__(self, device: torch.device):
        self.device = device
        self.monitor = telemetry.Monitor(device.index or 0)
        self.l2_bytes = torch.cuda.get_device_properties(device.index or 0).L2_cache_size

    def prepare(self, launches: Sequence[Launch], inner_reps: int, label: str) -> _Graph:
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _cycle(launches, inner_reps)
        torch.cuda.synchronize(self.device)
        return _Graph(graph, inner_reps, launches)

    def run(self, arms: Sequence[_Graph], sequence: Sequence[int],
            sync_after: Sequence[int]) -> Timed:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in sequence]
        syncs = set(sync_after)
        readings = [self.monitor.read(0)]
        for n, (arm, (start, end)) in enumerate(zip(sequence, events, strict=True)):
            start.record()
            arms[arm].graph.replay()
            end.record()
            if n in syncs:
                # Keeps the host near the device, so each reading belongs to its samples.
                end.synchronize()
                readings.append(self.monitor.read(n + 1))
        end.synchronize()
        seconds = [s.elapsed_time(e) * 1e-3 / arms[a].inner_reps
                   for a, (s, e) in zip(sequence, events, strict=True)]
        return Timed(seconds, [r for r in readings if r is not None])

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)


@dataclass
class _Calls:
    launches: Sequence[Launch]
    inner_reps: int


class CpuBackend(Backend):
    name = "cpu"
    device = torch.device("cpu")

    def prepare(self, launches: Sequence[Launch], inner_reps: int, label: str) -> _Calls:
        return _Calls(launches, inner_reps)

    def run(self, arms: Sequence[_Calls], sequence: Sequence[int],
            sync_after: Sequence[int]) -> Timed:
        seconds = []
        for arm in sequence:
            calls = arms[arm]
            t0 = time.perf_counter()
            _cycle(calls.launches, calls.inner_reps)
            seconds.append((time.perf_counter() - t0) / calls.inner_reps)
        return Timed(seconds)

    def synchronize(self) -> None:
        """Nothing runs asynchronously on the CPU."""


def backend_for(device: torch.device) -> Backend:
    return CudaBackend(device) if device.type == "cuda" else CpuBackend()
