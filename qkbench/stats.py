"""The method's statistics: pure functions over numbers (SPEC section 4).

Ratios are ``x / baseline - 1``: negative means the candidate takes less time.
"""

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from math import exp, log, sqrt
from statistics import fmean, median


def null_ratio(a: Sequence[float], a_again: Sequence[float]) -> float:
    """The null arm's disagreement: ``median(A') / median(A) - 1``."""
    return median(a_again) / median(a) - 1.0


def baseline_time(a: Sequence[float], a_again: Sequence[float]) -> float:
    """The baseline from both identical arms: the geometric mean of their medians."""
    return sqrt(median(a) * median(a_again))


def delta_ratio(b: Sequence[float], a: Sequence[float], a_again: Sequence[float]) -> float:
    """The candidate's effect in one pass: ``median(B) / baseline - 1``."""
    return median(b) / baseline_time(a, a_again) - 1.0


def disagreement(null: float) -> float:
    """How far the two identical arms of a pass stand apart, whichever ran slower:
    ``max(A, A') / min(A, A') - 1``. ``|null|`` understates it where A ran slower (A
    struck 5 % slower reads null -4.76 %, while B struck the same reads delta +5 %)."""
    return null if null >= 0 else -null / (1.0 + null)


def width_values(kept_nulls: Sequence[float],
                 measured_nulls: Sequence[float] | None = None) -> list[float]:
    """What a width is the worst of: the ``disagreement`` of every pass that measured the
    cells (``measured_nulls``, the dropped ones too) where given, else the kept passes'
    ``|null|`` (archives of schema 3 and before). Kept passes alone understate the
    instrument's noise wherever it strikes one arm of a pass: the drop rule keeps exactly
    the passes where that arm was B, and replacement passes measure until it was, so B's
    deltas carry the disturbance that the kept nulls no longer show (the dropped passes
    still do)."""
    if measured_nulls is None:
        return [abs(x) for x in kept_nulls]
    return [disagreement(x) for x in measured_nulls]


def kept(null: float, threshold: float) -> bool:
    """The drop rule: a pass whose two identical arms disagree past the threshold is dropped."""
    return abs(null) <= threshold


def mean_log_ratio(ratios: Sequence[float]) -> float:
    """``exp(mean(log(1 + r))) - 1``: over a balanced set, slot effects cancel exactly."""
    return exp(fmean(log(1.0 + r) for r in ratios)) - 1.0


def coverage(n: int) -> float:
    """The exact distribution-free coverage of [min, max] of ``n`` values as an interval
    for their population median: ``1 - 2^(1 - n)`` (0 below two values)."""
    return 1.0 - 2.0 ** (1 - n) if n >= 2 else 0.0


def slot_effect(slot_medians: Sequence[Sequence[float]]) -> float | None:
    """How much slower the first-sampled arm runs than the later ones, all arms pooled.

    ``slot_medians`` holds, per pass, each arm's median in sampling order. Over passes
    that hold every order equally often each arm sits in each slot equally often, so the
    arms' own differences cancel and only the slots' remain.
    """
    if not slot_medians:
        return None
    logs = [log(m[0]) - fmean(log(x) for x in m[1:]) for m in slot_medians]
    return exp(fmean(logs)) - 1.0


@dataclass(frozen=True)
class Effect:
    """One cell's summary over its balanced kept set (one kept pass per order slot)."""

    kept: int
    total: int
    estimate: float | None  # the mean log ratio over the balanced set
    median: float | None
    best: float | None
    worst: float | None
    coverage: float | None  # of [best, worst] as an interval for the median delta
    width: float | None  # the worst ``width_values``: the instrument's resolution here
    width_median: float | None
    verdict: str
    unstable_orders: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {**asdict(self), "unstable_orders": list(self.unstable_orders)}


def verdict(deltas: Sequence[float], width: float, complete: bool) -> str:
    """faster / slower only when the kept set holds every order slot (``complete``), has
    at least two passes, and every kept delta lies beyond the width on the same side;
    unresolved otherwise."""
    if not complete or len(deltas) < 2:
        return "unresolved"
    if all(d < -width for d in deltas):
        return "faster"
    if all(d > width for d in deltas):
        return "slower"
    return "unresolved"


def effect(nulls: Sequence[float], deltas: Sequence[float], total: int,
           state: str | None = None, unstable_orders: Sequence[str] = (),
           measured_nulls: Sequence[float] | None = None) -> Effect:
    """Summarise one cell from the null and delta ratios of its balanced kept set: one
    kept pass for each of its ``total`` order slots.

    The width is the worst of ``width_values(nulls, measured_nulls)``.

    ``state`` names why a cell has no such set (``unstable``: a slot's retries all
    failed, named in ``unstable_orders``; ``pending``; ``unmeasured``; ``invalid route``):
    it then gets neither an estimate nor a verdict.
    """
    n = len(deltas)
    if state is None and 0 < n != total:
        raise ValueError(f"a balanced kept set holds one pass per slot: {n} of {total}")
    if state is not None or n == 0:
        return Effect(n, total, None, None, None, None, None, None, None,
                      state or "unmeasured", tuple(unstable_orders))
    widths = width_values(nulls, measured_nulls)
    width = max(widths)
    return Effect(n, total, mean_log_ratio(deltas), median(deltas), min(deltas), max(deltas),
                  coverage(n), width, median(widths), verdict(deltas, width, True))


def band_summary(effects: Sequence[Effect]) -> dict:
    """A band: its cells, the median / best / worst of their estimates, and faster k/n."""
    estimates = [e.estimate for e in effects if e.estimate is not None]
    return {"cells": len(effects),
            "median": median(estimates) if estimates else None,
            "best": min(estimates) if estimates else None,
            "worst": max(estimates) if estimates else None,
            "faster": sum(e.verdict == "faster" for e in effects),
            "unstable": sum(e.verdict == "unstable" for e in effects),
            "resolved_cells": len(estimates)}


def crossover(cells: Sequence[tuple[int, Effect]]) -> dict:
    """Where the candidate stops being resolvably faster on one geometry.

    ``cells`` are (tokens, effect); returns the last token count of the faster run that
    starts at the smallest width and the first one after it. A cell with no verdict
    (unstable, unmeasured) ends the run like a loss. With no stop in range the crossover
    is censored at the largest width measured.
    """
    last, stop = None, None
    for tokens, e in sorted(cells, key=lambda c: c[0]):
        if e.verdict != "faster":
            stop = tokens
            break
        last = tokens
    return {"faster_through": last, "stops_at": stop,
            "censored": stop is None and last is not None}


def dispatch_bound(by_geometry: dict[str, Sequence[tuple[int, Effect]]], margin: float
                   ) -> dict:
    """The largest width up to which, on every geometry, each cell is resolved faster with
    a gain beyond ``margin`` times its instrument width.

    ``bound`` is None if the smallest width already fails; ``censored`` is True when no
    geometry stopped within the measured range (the bound is then the range's end, not a
    measured crossover). A cell without an estimate ends its geometry's run.
    """
    bound, censored = None, bool(by_geometry)
    for cells in by_geometry.values():
        ordered = sorted(cells, key=lambda c: c[0])
        last = None
        for tokens, e in ordered:
            if e.verdict != "faster" or e.estimate is None or -e.estimate <= margin * e.width:
                break
            last = tokens
        if last is None:
            return {"bound": None, "censored": False}
        censored = censored and last == ordered[-1][0]
        bound = last if bound is None else min(bound, last)
    return {"bound": bound, "censored": censored}
