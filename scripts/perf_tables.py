"""Render the README's performance tables from run archives: one table per archive, one row
per cell, every route of the run side by side.

    python scripts/perf_tables.py results/h200/2026-12-03-issue11/*.json.gz

Each route's column is its time per call in us; the fused route's also its share of the
copy bandwidth and its resolved delta against the baseline with the cell's width (by the
rule of the archive's schema, ``summary.width_rule``). A cell whose comparison has no
verdict shows the verdict instead of a time (the report never prints times it could not
resolve). Where the comparisons timed the
launch floor beside their arms, each comparison's floor has a column of its own: a PDL
arm changes the state its comparison runs in.
"""

import argparse
from pathlib import Path

from qkbench import audit, summary
from qkbench.errors import QkbenchError
from qkbench.protocol import launch_state_of


def _resolved(case: dict) -> bool:
    return case["effect"]["verdict"] in ("faster", "slower")


def _us(case: dict) -> str:
    return f"{case['time_us']['candidate']:.2f}" if _resolved(case) else case["effect"]["verdict"]


def _delta(case: dict) -> str:
    e = case["effect"]
    return f"{e['estimate'] * 100:+.1f} % (±{e['width'] * 100:.2f})" if _resolved(case) else "-"


def _share(case: dict) -> str:
    share = case.get("bandwidth", {}).get("candidate", {}).get("share_of_copy")
    return "-" if share is None or not _resolved(case) else f"{share * 100:.1f} %"


def _floor(case: dict) -> str:
    floor = case.get("time_us", {}).get("floor")
    return "-" if floor is None else f"{floor:.2f}"


def table(path: Path) -> str:
    run = audit.read_checked(path)
    result = summary.current(run)
    timing = run["protocol"]["resolved"]["timing"]
    settings = run["settings"]
    limits = result["limits"]
    comps = {c["candidate"]: {k["key"]: k for k in c["cases"]} for c in result["comparisons"]}
    base = settings["baseline"]
    first = next(iter(comps.values()))
    lines = [
        f"**{run['protocol']['resolved']['name']}** (`{path}`): commit "
        f"{run['environment']['code']['commit'][:7]}, {timing['cache']} cache, "
        f"isolation {settings['isolation']}, launch state {launch_state_of(run)}, "
        f"{settings['passes']} passes of "
        f"{timing['samples']} samples x {timing['inner_reps']} launches; copy "
        f"{limits['copy_gbps']:.0f} GB/s, launch floor "
        f"{limits['launch_floor_us']['one_program']:.2f} us",
        "",
    ]
    floors = any("floor" in c.get("time_us", {}) for cases in comps.values()
                 for c in cases.values())
    head = ["geometry", "T", f"{base} us"]
    for name in comps:
        head.append(f"{name} us")
        if name.startswith("fused"):
            head += [f"{name} % of copy", f"{name} vs {base}"]
        if floors:
            head.append(f"floor us beside {name}")
    lines += ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for key, case in first.items():
        baseline = next((c[key]["time_us"]["baseline"] for c in comps.values()
                         if _resolved(c[key])), None)
        row = [case["geometry"], str(case["tokens"]),
               "-" if baseline is None else f"{baseline:.2f}"]
        for name, cases in comps.items():
            row.append(_us(cases[key]))
            if name.startswith("fused"):
                row += [_share(cases[key]), _delta(cases[key])]
            if floors:
                row.append(_floor(cases[key]))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archives", nargs="+", type=Path, help="run archives (.json, .json.gz)")
    try:
        print("\n\n".join(table(p) for p in parser.parse_args().archives))
    except QkbenchError as e:
        parser.exit(1, f"error: {e}\n")


if __name__ == "__main__":
    main()
