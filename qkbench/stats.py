"""The method's statistics: pure functions over numbers (SPEC section 4).

Ratios are ``x / baseline - 1``: negative means the candidate takes less time.
"""

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import median

import numpy as np
from scipy import stats as sps

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0


def null_ratio(a: Sequence[float], a_again: Sequence[float]) -> float:
    """The null arm's disagreement: ``median(A') / median(A) - 1``."""
    return median(a_again) / median(a) - 1.0


def baseline_time(a: Sequence[float], a_again: Sequence[float]) -> float:
    """The baseline from both identical arms: the median of their pooled samples."""
    return median([*a, *a_again])


def delta_ratio(b: Sequence[float], a: Sequence[float], a_again: Sequence[float]) -> float:
    """The candidate's effect in one pass: ``median(B) / baseline - 1``."""
    return median(b) / baseline_time(a, a_again) - 1.0


def kept(null: float, threshold: float) -> bool:
    """The drop rule: a pass whose two identical arms disagree past the threshold is dropped."""
    return abs(null) <= threshold


def bootstrap_median_ci(values: Sequence[float], confidence: float = 0.95
                        ) -> tuple[float, float] | None:
    """A percentile-bootstrap interval of the median; None below two distinct values."""
    if len(values) < 2 or len(set(values)) < 2:
        return None
    res = sps.bootstrap((np.asarray(values),), np.median, confidence_level=confidence,
                        n_resamples=BOOTSTRAP_RESAMPLES, method="percentile",
                        random_state=np.random.default_rng(BOOTSTRAP_SEED))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


@dataclass(frozen=True)
class Effect:
    """One cell's summary over its kept passes."""

    kept: int
    total: int
    median: float | None
    best: float | None
    worst: float | None
    ci_low: float | None
    ci_high: float | None
    width: float | None  # the worst kept |null|: the instrument's resolution here
    width_median: float | None
    verdict: str

    def as_dict(self) -> dict:
        return asdict(self)


def verdict(median_delta: float, width: float) -> str:
    """faster / slower when the median effect lies outside the instrument width, else
    unresolved."""
    if median_delta < -width:
        return "faster"
    if median_delta > width:
        return "slower"
    return "unresolved"


def effect(nulls: Sequence[float], deltas: Sequence[float], threshold: float) -> Effect:
    """Summarise one cell from its per-pass null and delta ratios."""
    keep = [(n, d) for n, d in zip(nulls, deltas, strict=True) if kept(n, threshold)]
    if not keep:
        return Effect(0, len(nulls), None, None, None, None, None, None, None, "no kept passes")
    widths = [abs(n) for n, _ in keep]
    ds = [d for _, d in keep]
    ci = bootstrap_median_ci(ds)
    width = max(widths)
    return Effect(len(keep), len(nulls), median(ds), min(ds), max(ds),
                  ci[0] if ci else None, ci[1] if ci else None, width, median(widths),
                  verdict(median(ds), width))


def band_summary(effects: Sequence[Effect]) -> dict:
    """A band: its cells, the median / best / worst of their medians, and faster k/n."""
    medians = [e.median for e in effects if e.median is not None]
    return {"cells": len(effects),
            "median": median(medians) if medians else None,
            "best": min(medians) if medians else None,
            "worst": max(medians) if medians else None,
            "faster": sum(e.verdict == "faster" for e in effects),
            "resolved_cells": len(medians)}


def crossover(cells: Sequence[tuple[int, Effect]]) -> dict:
    """Where the candidate stops being resolvably faster on one geometry.

    ``cells`` are (tokens, effect); returns the last token count of the faster run that
    starts at the smallest width, and the first one after it (None if it never stops).
    """
    last, stop = None, None
    for tokens, e in sorted(cells, key=lambda c: c[0]):
        if e.verdict != "faster":
            stop = tokens
            break
        last = tokens
    return {"faster_through": last, "stops_at": stop}


def dispatch_bound(by_geometry: dict[str, Sequence[tuple[int, Effect]]], margin: float
                   ) -> int | None:
    """The largest width up to which, on every geometry, each cell's gain exceeds
    ``margin`` times its instrument width; None if the smallest width already fails."""
    bound = None
    for cells in by_geometry.values():
        last = None
        for tokens, e in sorted(cells, key=lambda c: c[0]):
            if e.median is None or -e.median <= margin * e.width:
                break
            last = tokens
        if last is None:
            return None
        bound = last if bound is None else min(bound, last)
    return bound
