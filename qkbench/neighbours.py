"""How the baseline reads beside each candidate: an interaction the null arm cannot see.

In a pass the baseline is timed once per comparison (A and A' beside that comparison's
candidate B). Those are the same code on the same cell in the same process, so they should
read alike. If they do not, a candidate changes how fast the baseline runs beside it (on the
H200 the split route read 11-12 % faster at decode beside ``fused-pdl`` than beside
``fused``). The null arm cannot show that, since A and A' run beside the same B. Then the
candidates' deltas are taken against different baselines. Pure functions over a run
archive's raw samples.
"""

from statistics import median

# Cells of at most this many tokens are summarised apart from the larger ones: at decode
# widths a launch's fixed costs, which neighbours move most, are most of its time.
SMALL_TOKENS = 64


def _baseline_medians(case: dict) -> dict[str, float]:
    """Candidate -> the median of its comparison's A and A' sample medians, for the
    comparisons of a case record that were timed."""
    out = {}
    for comparison in case.get("comparisons", []):
        if comparison.get("status") == "ok":
            out[comparison["candidate"]] = median(
                median(arm["samples"]) for arm in comparison["arms"]
                if arm["label"] in ("A", "A'"))
    return out


def baseline_ratios(case: dict, candidates: list[str]) -> dict[str, float]:
    """Later candidate -> the baseline's time beside it over its time beside the first of
    ``candidates``, minus one, in a case record (empty where the first was not timed)."""
    beside = _baseline_medians(case)
    if candidates[0] not in beside:
        return {}
    return {c: beside[c] / beside[candidates[0]] - 1 for c in candidates[1:] if c in beside}


def baseline_beside(archive: dict) -> list[dict]:
    """Per later candidate and token band (``small``: T <= ``SMALL_TOKENS``), the baseline's
    time beside it over its time beside the first candidate, minus one: the median, lowest
    and highest over every (pass, cell) where both comparisons were timed."""
    candidates = archive["protocol"]["resolved"]["routes"][1:]
    changes: dict[tuple[str, bool], list[float]] = {}
    for record in archive["passes"]:
        for case in record.get("cases", []):
            small = case["case"]["tokens"] <= SMALL_TOKENS
            for candidate, ratio in baseline_ratios(case, candidates).items():
                changes.setdefault((candidate, small), []).append(ratio)
    return [{"candidate": candidate, "small": small, "pairs": len(v), "median": median(v),
             "lowest": min(v), "highest": max(v)}
            for (candidate, small), v in sorted(changes.items(), key=lambda kv: (
                candidates.index(kv[0][0]), not kv[0][1]))]
