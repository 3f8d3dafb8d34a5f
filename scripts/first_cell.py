"""How much faster a process's first measured cell reads than the same cell measured later.

    python scripts/first_cell.py [ARCHIVE ...]   (default: every run archive under results/)

Every pass records the process that ran it (``pid``) and its cells in the order measured.
A cell measured first by its process (the first cell of the first pass a pid ran) is set
beside the same cell measured later by any process, per route: the median over passes of
each arm's median per-call time. Archives whose every pass starts a process
(``isolation = "process"``) measure their first cell first every time, so they show no
such pair. Reads archives only; prints one row per cell that has both.
"""

import argparse
import statistics
import sys
from pathlib import Path

from qkbench.archive import read
from qkbench.errors import ArchiveError

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


def first_cell_rows(archive: dict) -> list[dict]:
    """Per cell measured first by some process and later by others: route times both ways."""
    seen_pids: set[int] = set()
    first: dict[str, list[dict]] = {}
    later: dict[str, list[dict]] = {}
    for record in archive.get("passes", []):
        fresh = record.get("pid") not in seen_pids
        seen_pids.add(record.get("pid"))
        for position, case in enumerate(record.get("cases", [])):
            times = arm_times(case)
            if times:
                (first if fresh and position == 0 else later).setdefault(
                    case["key"], []).append(times)
    rows = []
    for key in first.keys() & later.keys():
        routes = sorted(set.intersection(*(set(t) for t in first[key] + later[key])))
        rows.append({"cell": key, "first": len(first[key]), "later": len(later[key]),
                     "routes": {r: (statistics.median(t[r] for t in first[key]),
                                    statistics.median(t[r] for t in later[key]))
                                for r in routes}})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archives", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = args.archives or sorted(p for p in (ROOT / "results").rglob("*.json*")
                                    if p.name.endswith((".json", ".json.gz")))
    print("| archive | isolation | cell | passes first / later | route: us first -> later "
          "(change) |")
    print("|---|---|---|---|---|")
    for path in paths:
        try:
            archive = read(path)
        except ArchiveError:
            if args.archives:
                raise
            continue  # results/ also holds benches' JSON, which are not run archives
        isolation = archive.get("settings", {}).get("isolation")
        for row in first_cell_rows(archive):
            routes = ", ".join(f"{r}: {a:.3f} -> {b:.3f} ({b / a - 1:+.1%})"
                               for r, (a, b) in row["routes"].items())
            name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            print(f"| {name} | {isolation} | {row['cell']} | {row['first']} / {row['later']} "
                  f"| {routes} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
