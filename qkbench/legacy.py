"""Schema 1 archives (2026-12-02/03), summarised by the rules they were made with.

Frozen: ``audit`` checks a schema 1 archive's stored summary against these rules (the
pooled-median baseline, the drop rule alone, a percentile bootstrap over the kept
passes). Reports re-summarise such archives with the current rules (``summary.py``).
Nothing new is written with them.
"""

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import median

import numpy as np
from scipy import stats as sps

from qkbench.protocol import Band
from qkbench.stats import kept, null_ratio
from qkbench.summary import limits_summary, times_and_bandwidth

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0


def baseline_time(a: Sequence[float], a_again: Sequence[float]) -> float:
    """The baseline from both identical arms: the median of their pooled samples."""
    return median([*a, *a_again])


def delta_ratio(b: Sequence[float], a: Sequence[float], a_again: Sequence[float]) -> float:
    """The candidate's effect in one pass: ``median(B) / baseline - 1``."""
    return median(b) / baseline_time(a, a_again) - 1.0


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


def _cell(key: str, entries: list[tuple[int, dict, dict]], threshold: float,
          copy_gbps: float | None) -> dict:
    """One (comparison, case) cell from its per-pass (index, case result, comparison)."""
    rows, invalid = [], []
    for index, case_result, comp in entries:
        if comp["status"] != "ok":
            invalid.append({"pass": index, "routes": comp.get("invalid_routes", [])})
            continue
        arms = {a["label"]: a["samples"] for a in comp["arms"]}
        rows.append({
            "pass": index,
            "null": null_ratio(arms["A"], arms["A'"]),
            "delta": delta_ratio(arms["B"], arms["A"], arms["A'"]),
            "baseline_s": baseline_time(arms["A"], arms["A'"]),
            "candidate_s": median(arms["B"]),
            "copy_s": median(case_result["copy"]["samples"]),
        })
    for r in rows:
        r["kept"] = kept(r["null"], threshold)
    result = effect([r["null"] for r in rows], [r["delta"] for r in rows], threshold)
    _, first, comp = entries[0]
    kept_rows = [r for r in rows if r["kept"]] or rows
    cell = {"key": key, "geometry": first["case"]["geometry"]["name"],
            "tokens": first["case"]["tokens"], "effect": result.as_dict(), "passes": rows,
            "invalid_passes": invalid}
    if kept_rows:
        cell.update(times_and_bandwidth(kept_rows, first["bytes"],
                                        (comp["baseline"], comp["candidate"]), copy_gbps))
    return cell


def summarize(archive: dict) -> dict:
    """The summary of a schema 1 archive, by the schema 1 rules."""
    resolved = archive["protocol"]["resolved"]
    threshold = resolved["timing"]["drop_threshold"]
    bands = [Band(**{**b, "geometries": tuple(b["geometries"]) if b.get("geometries") else None})
             for b in resolved["bands"]]
    passes = [p for p in archive["passes"] if p["status"] == "ok"]
    limits = limits_summary(passes)
    copy_gbps = limits["copy_gbps"] if limits else None

    # (baseline, candidate) -> case key -> [(pass index, case result, comparison)]
    cells: dict[tuple[str, str], dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for p in passes:
        for case_result in p["cases"]:
            for comp in case_result.get("comparisons", []):
                pair = (comp["baseline"], comp["candidate"])
                cells[pair][case_result["key"]].append((p["index"], case_result, comp))

    comparisons = []
    for pair, by_key in cells.items():
        summary = [_cell(key, entries, threshold, copy_gbps) for key, entries in by_key.items()]
        effects = {c["key"]: Effect(**c["effect"]) for c in summary}
        by_geometry = defaultdict(list)
        for c in summary:
            by_geometry[c["geometry"]].append((c["tokens"], effects[c["key"]]))
        resolved_geoms = {g: [(t, e) for t, e in cs if e.median is not None]
                          for g, cs in by_geometry.items()}
        rows = [r for c in summary for r in c["passes"]]
        kept_nulls = [abs(r["null"]) for r in rows if r["kept"]]
        comparisons.append({
            "baseline": pair[0], "candidate": pair[1], "cases": summary,
            "bands": [{"name": b.name, **band_summary(
                [effects[c["key"]] for c in summary if b.holds(c["geometry"], c["tokens"])])}
                for b in bands],
            "crossover": {g: crossover(cs) for g, cs in by_geometry.items()},
            "dispatch_bound": dispatch_bound(resolved_geoms, resolved["dispatch_margin"])
            if all(resolved_geoms.values()) else None,
            "drops": {"dropped": sum(not r["kept"] for r in rows), "total": len(rows)},
            "width": {"worst": max(kept_nulls) if kept_nulls else None,
                      "median": median(kept_nulls) if kept_nulls else None},
        })
    return {"limits": limits, "comparisons": comparisons,
            "passes": {"ok": len(passes), "failed": sum(p["status"] != "ok"
                                                        for p in archive["passes"])}}
