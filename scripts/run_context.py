"""How a cell's times depend on what the process ran before it, read from run archives.

    python scripts/run_context.py [ARCHIVE ...]   (default: every run archive under results/)

Two tables, from the raw samples alone:

* **First cell of a process.** Every pass records the process that ran it (``pid``) and
  its cells in the order measured. A cell measured first by its process (the first cell of
  the first pass a pid ran) is set beside the same cell measured later by any process, per
  route: the median over passes of each route's arm medians. Archives whose every pass
  starts a process measure their first cell first every time, so they show no such pair.
* **The baseline by comparison** (``qkbench.neighbours``). A protocol with several
  candidates times the baseline in each comparison, beside a different candidate:
  identical code, the same cell and pass. Per candidate, the baseline arms there against
  the first candidate's comparison (the change, median and range over the (pass, cell)
  pairs), decode widths apart.
"""

import argparse
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

from qkbench.archive import read
from qkbench.errors import ArchiveError
from qkbench.neighbours import SMALL_TOKENS, baseline_beside, baseline_ratios

ROOT = Path(__file__).resolve().parent.parent


def arm_times(case: dict) -> dict[str, float]:
    """Median per-call us of each route in a case record, over its arms (A and A' pooled),
    and of the case's same-bytes copy (``copy_``)."""
    times: dict[str, list[float]] = {}
    for comparison in case.get("comparisons", []):
        if comparison.get("status") != "ok":
            continue
        for arm in comparison["arms"]:
            times.setdefault(arm["route"], []).append(statistics.median(arm["samples"]) * 1e6)
    if case.get("copy", {}).get("samples"):
        # The case's same-bytes ``copy_`` of q and k (torch's kernel, not Triton's).
        times["copy_"] = [statistics.median(case["copy"]["samples"]) * 1e6]
    return {route: statistics.median(v) for route, v in times.items()}


def cells_in_order(archive: dict) -> Iterator[tuple[bool, dict]]:
    """Every case record of the archive's passes in the order measured, with whether it is
    a process's first cell (the first cell of the first pass its ``pid`` ran)."""
    seen_pids: set[int] = set()
    for record in archive.get("passes", []):
        fresh = record.get("pid") not in seen_pids
        seen_pids.add(record.get("pid"))
        for position, case in enumerate(record.get("cases", [])):
            yield fresh and position == 0, case


def first_cell_rows(archive: dict) -> list[dict]:
    """Per cell measured first by some process and later by others: route times both ways."""
    first: dict[str, list[dict]] = {}
    later: dict[str, list[dict]] = {}
    for is_first, case in cells_in_order(archive):
        times = arm_times(case)
        if times:
            (first if is_first else later).setdefault(case["key"], []).append(times)
    rows = []
    for key in (k for k in first if k in later):  # in the order first measured
        routes = sorted(set.intersection(*(set(t) for t in first[key] + later[key])))
        rows.append({"cell": key, "first": len(first[key]), "later": len(later[key]),
                     "routes": {r: (statistics.median(t[r] for t in first[key]),
                                    statistics.median(t[r] for t in later[key]))
                                for r in routes}})
    return rows


def level_pairs(archive: dict, within: float = 0.02) -> dict[str, list[int]]:
    """At decode widths (T <= ``SMALL_TOKENS``), per later candidate: how many (pass, cell)
    pairs timed the baseline beside it and beside the first candidate, how many of those
    read within ``within`` of each other, and how many of these are a process's first
    cell."""
    candidates = archive["protocol"]["resolved"]["routes"][1:]
    counts: dict[str, list[int]] = {}
    for is_first, case in cells_in_order(archive):
        if case["case"]["tokens"] > SMALL_TOKENS:
            continue
        for candidate, ratio in baseline_ratios(case, candidates).items():
            count = counts.setdefault(candidate, [0, 0, 0])
            count[0] += 1
            if abs(ratio) <= within:
                count[1] += 1
                count[2] += is_first
    return counts


def archives(paths: list[Path]) -> list[tuple[Path, dict]]:
    """The run archives at ``paths``, or every one under results/ (other JSON skipped)."""
    if paths:
        return [(p, read(p)) for p in paths]
    found = []
    for path in sorted(p for p in (ROOT / "results").rglob("*.json*")
                       if p.name.endswith((".json", ".json.gz"))):
        try:
            found.append((path, read(path)))
        except ArchiveError:
            continue  # results/ also holds benches' JSON, which are not run archives
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archives", nargs="*", type=Path)
    args = parser.parse_args(argv)
    found = archives(args.archives)

    def name(path: Path) -> Path:
        return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path

    print("First cell of a process\n")
    print("| archive | isolation | cell | passes first / later | route: us first -> later "
          "(change) |")
    print("|---|---|---|---|---|")
    for path, archive in found:
        for row in first_cell_rows(archive):
            routes = ", ".join(f"{r}: {a:.3f} -> {b:.3f} ({b / a - 1:+.1%})"
                               for r, (a, b) in row["routes"].items())
            print(f"| {name(path)} | {archive['settings']['isolation']} | {row['cell']} | "
                  f"{row['first']} / {row['later']} | {routes} |")
    print("\nThe baseline by comparison (against the first candidate's comparison)\n")
    print("| archive | candidate | T | pairs | baseline arms: median change (range) |")
    print("|---|---|---|---|---|")
    for path, archive in found:
        for row in baseline_beside(archive):
            band = f"<= {SMALL_TOKENS}" if row["small"] else f"> {SMALL_TOKENS}"
            print(f"| {name(path)} | {row['candidate']} | {band} | {row['pairs']} | "
                  f"{row['median']:+.1%} ({row['lowest']:+.1%} to {row['highest']:+.1%}) |")
    totals: dict[str, list[int]] = {}
    for _, archive in found:
        for candidate, count in level_pairs(archive).items():
            totals[candidate] = [a + b for a, b in zip(totals.get(candidate, [0, 0, 0]), count,
                                                       strict=True)]
    print()
    for candidate, (total, level, first) in totals.items():
        print(f"At T <= {SMALL_TOKENS}, beside {candidate}: of {total} (pass, cell) pairs, "
              f"{level} read the baseline within 2 % of beside the first candidate; {first} of "
              "those are a process's first cell.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
