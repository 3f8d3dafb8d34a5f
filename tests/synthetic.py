"""A timing backend whose clock is a model, so the method can be tested against known truths.

``SyntheticBackend`` never runs a launch: each sample's time is computed from the arm's
label, the work its launches declare and its place in the sequence,

    base[label] * work
                * (1 + first_bias if the arm is sampled first and its label is biased)
                * (1 + drift * position / len(sequence))
                * (1 + null_bias[pass] if the label is A')
                * (1 + baseline_effects[k mod n] if the label is A or A', in the k-th
                   comparison of a pass)
                * (1 + after_sync if the previous sample ended with a host synchronisation)
                * (1 + noise * N(0, 1)),

where ``work`` is the mean ``work`` attribute of the arm's launches (1 for a plain route,
1 + 1/N for a route with a planted extra call every N launches), and B's base is
``base * (1 + effect)``, or ``base * (1 + case_effects[k])`` for the k-th comparison timed
in a pass (a per-case effect: with one candidate and no replacement passes, k is the
case's index in the protocol, geometries outer, tokens inner). The noise is seeded, so
every run of a test sees the same numbers. The pass index comes
from the runner's ``pass_started`` event: sweep with ``events=backend.events()``.
"""

import json
from collections.abc import Sequence

import numpy as np
import torch

from qkbench import runner
from qkbench.backends import Backend, Timed
from qkbench.protocol import Protocol, parse
from qkbench.runner import Events

BASE_SECONDS = 1e-5
# The references the harness times besides the arms: same-bytes copy, launch floor.
REFERENCE_SECONDS = {"copy": 5e-6, "floor": 1e-6, "limit": 1e-6}
# The routes a tiny protocol compares unless told: the plain-torch reference against itself
# under a second name. The clock plants every effect, so the routes only need to compute the
# op and pass verification; the reference does that in about a millisecond, where each
# kernel launch takes a tenth of a second under the interpreter. A test of what the kernel
# routes bring (a dispatch table, PDL) names them.
ROUTES = ("eager", "eager~twin")


def tiny_protocol(name: str = "tiny", tokens: Sequence[int] = (1, 3), *,
                  routes: Sequence[str] = ROUTES, geometry: str = "", tables: str = "",
                  **timing) -> str:
    """The TOML text of a protocol this clock sweeps in seconds: ``routes`` (the baseline
    first) on one geometry "tiny" (2 q heads, 1 k head, head_dim 64), six in-process passes
    of 30 samples. ``timing`` sets timing keys, ``geometry`` adds lines to the geometry,
    ``tables`` appends tables (bands)."""
    settings = {"passes": 6, "warmup": 2, "samples": 30, "inner_reps": 1,
                "isolation": "inprocess", **timing}
    lines = [f'name = "{name}"', f"routes = {json.dumps(list(routes))}",
             f"tokens = {list(tokens)}", "max_position = 64", "", "[timing]",
             *(f"{key} = {json.dumps(value)}" for key, value in settings.items()), "",
             "[[geometry]]", 'name = "tiny"', "heads_q = 2", "heads_k = 1", "head_dim = 64",
             geometry, tables]
    return "\n".join(lines) + "\n"


def synthetic_sweep(protocol: "str | Protocol", path, backend: "SyntheticBackend | None" = None,
                    **clock) -> dict:
    """Sweep ``protocol`` (its text, or parsed) in process on this clock (``backend``, or a
    new one with ``clock``), archived at ``path``; returns the archive."""
    backend = backend or SyntheticBackend(**clock)
    protocol = parse(protocol) if isinstance(protocol, str) else protocol
    return runner.sweep(protocol, torch.device("cpu"), path, backend=backend,
                        events=backend.events())


class SyntheticBackend(Backend):
    name = "synthetic"
    device = torch.device("cpu")

    def __init__(self, *, effect: float = 0.0, first_bias: float = 0.0,
                 first_biased: Sequence[str] = ("A", "B", "A'"), drift: float = 0.0,
                 null_bias: dict[int | tuple[int, int], float] | None = None,
                 order_null_bias: dict[tuple[str, ...], float] | None = None,
                 noise: float = 1e-4, after_sync: float = 0.0,
                 card: dict[int, dict] | None = None, base: float = BASE_SECONDS,
                 case_effects: Sequence[float] | None = None,
                 baseline_effects: Sequence[float] = (), one_arm: float = 0.0,
                 seed: int = 0):
        """``effect``: B's true time is ``base * (1 + effect)``. ``first_bias``: the arm
        sampled first in a pass is that much slower, if its label is in ``first_biased``.
        ``drift``: the clock slows linearly by that share over a sequence. ``null_bias``:
        pass index -> how much slower A' is than A in that pass (a planted null
        disagreement), or (pass index, k) -> the same for the k-th comparison timed in
        that pass alone; ``order_null_bias``: the same for every pass of an arm order.
        ``card``: pass index -> what the card reports (telemetry) after the first
        synchronisation of each comparison in that pass, e.g. a lower SM clock or a
        throttle reason; otherwise a steady 1980 MHz. ``after_sync``: how much slower a
        sample is right after a host synchronisation. ``noise``: relative standard
        deviation of each sample. ``case_effects``: B's true effect for the k-th comparison
        timed in each pass, in place of ``effect`` (see the module's docstring).
        ``baseline_effects``: how much slower A and A' run in the k-th comparison of each
        case, k counted modulo its length (one entry per candidate: a candidate that
        changes how fast the baseline runs beside it). ``one_arm``: in every comparison one
        of the three arms, drawn whatever its label (as a seeded placement would pick the
        arm whose buffers land badly), is that much slower throughout."""
        self.seconds = {"A": base, "A'": base, "B": base * (1 + effect), **REFERENCE_SECONDS}
        self.first_bias = first_bias
        self.first_biased = frozenset(first_biased)
        self.drift = drift
        self.null_bias = dict(null_bias or {})
        self.order_null_bias = dict(order_null_bias or {})
        self.card = dict(card or {})
        self.noise = noise
        self.after_sync = after_sync
        self.case_effects = None if case_effects is None else list(case_effects)
        self.baseline_effects = list(baseline_effects)
        self.one_arm = one_arm
        self.seed = seed
        self.pass_index: int | None = None
        self.calls = 0

    def events(self) -> Events:
        """The runner events that tell this backend which pass it is timing."""
        return Events(pass_started=self._pass_started)

    def _pass_started(self, index: int, total: int) -> None:
        self.pass_index = index
        self.comparisons = 0

    def prepare(self, launches, inner_reps: int, label: str) -> tuple[str, float]:
        return label, sum(getattr(f, "work", 1.0) for f in launches) / len(launches)

    def run(self, arms: Sequence[tuple[str, float]], sequence: Sequence[int],
            sync_after: Sequence[int]) -> Timed:
        if (self.null_bias or self.case_effects is not None) and self.pass_index is None:
            raise RuntimeError("null_bias and case_effects need the pass index: sweep with "
                               "events=backend.events()")
        rng = np.random.default_rng([self.seed, self.calls])
        self.calls += 1
        first = sequence[0]
        order = tuple(label for label, _ in arms)
        planted = self.order_null_bias.get(order, 0.0) + self.null_bias.get(self.pass_index, 0.0)
        seconds_of = self.seconds
        if len(arms) == 3:
            planted += self.null_bias.get((self.pass_index, self.comparisons), 0.0)
            if self.case_effects is not None:
                b = self.seconds["A"] * (1 + self.case_effects[self.comparisons])
                seconds_of = {**self.seconds, "B": b}
            if self.baseline_effects:
                a = self.seconds["A"] * (1 + self.baseline_effects[
                    self.comparisons % len(self.baseline_effects)])
                seconds_of = {**seconds_of, "A": a, "A'": a}
            self.comparisons += 1
        struck = rng.integers(len(arms)) if self.one_arm and len(arms) == 3 else None
        seconds = []
        synced = {p + 1 for p in sync_after}
        for position, arm in enumerate(sequence):
            label, work = arms[arm]
            t = seconds_of.get(label, BASE_SECONDS) * work
            if arm == first and label in self.first_biased:
                t *= 1 + self.first_bias
            if label == "A'":
                t *= 1 + planted
            if arm == struck:
                t *= 1 + self.one_arm
            t *= 1 + self.drift * position / len(sequence)
            if position in synced:
                t *= 1 + self.after_sync
            seconds.append(t * (1 + self.noise * rng.standard_normal()))
        return Timed(seconds, self._telemetry(sync_after) if len(arms) == 3 else [])

    def _telemetry(self, sync_after: Sequence[int]) -> list[dict]:
        steady = {"sm_clock_mhz": 1980, "mem_clock_mhz": 3201, "temperature_c": 40,
                  "power_w": 300.0, "throttle_mask": 0, "throttle": []}
        changed = {**steady, **self.card.get(self.pass_index, {})}
        return [{**(steady if i == 0 else changed), "after_sample": n}
                for i, n in enumerate([0, *(p + 1 for p in sync_after)])]

    def synchronize(self) -> None:
        """Nothing to wait for."""
