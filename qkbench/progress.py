"""What a sweep says as it goes where no progress bar can be drawn (a CI log, a pipe)."""

from qkbench import stats


def pass_drops(result: dict, threshold: float) -> tuple[int, int]:
    """``(dropped, total)`` (case, comparison) pairs of one finished pass: dropped where
    the null arm's ``|median(A') / median(A) - 1|`` exceeds ``threshold`` (the drop rule,
    applied to this pass alone; the summary decides what a retry replaces)."""
    dropped = total = 0
    for case in result.get("cases", []):
        for comp in case.get("comparisons", []):
            if comp.get("status") != "ok":
                continue
            arms = {a["label"]: a["samples"] for a in comp["arms"]}
            total += 1
            dropped += not stats.kept(stats.null_ratio(arms["A"], arms["A'"]), threshold)
    return dropped, total


def pass_line(result: dict, total_passes: int, elapsed_s: float, dropped: int,
              measured: int) -> str:
    """One plain line for a finished pass: its number, arm order, status, elapsed time,
    and the drops so far in the run."""
    order = " ".join(result.get("order", [])) or "-"
    status = "" if result["status"] == "ok" else f" {result['status'].upper()}"
    which = (f"pass {result['index'] + 1}/{total_passes}" if result.get("replaces") is None
             else f"replacement pass {result['index'] + 1} (slot {result['replaces'] + 1}, "
                  f"{len(result.get('case_keys') or [])} case(s))")
    return (f"{which}{status}: order {order}; "
            f"elapsed {_duration(elapsed_s)}; drops so far {dropped} of {measured} "
            "(pass, case)")


def _duration(seconds: float) -> str:
    minutes, s = divmod(round(seconds), 60)
    return f"{minutes}m{s:02d}s" if minutes else f"{seconds:.1f}s"
