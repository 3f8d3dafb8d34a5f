"""Split each arm's launch time into a fixed cost and a rate, from L2-bench runs
(``scripts/bench_l2_policy.py``'s ``bench_l2_policy.json``) at several token counts.

    python scripts/fixed_cost.py results/tuning/2026-12-05-h100-copies/copies-*.json

Per geometry and arm, the median time of each token count is fitted against the time its
bytes take at the run's copy bandwidth (least squares, ``scipy.stats.linregress``):
``us = fixed + bytes_us / rate``. The rate is a share of the copy bandwidth; the fixed cost
is what a launch pays beyond it (the ramp and the tail). Runs given together must come
from one card; a token count measured in more than one run takes the first run's figure.
Token counts whose rows stay in the L2 (``--skip``) bend the line and are best left out.
"""

import argparse
import json
import statistics
from pathlib import Path

from scipy import stats


def points(runs: list[dict], skip: set[str]) -> dict[tuple[str, str], dict[int, tuple]]:
    """``(geometry, arm) -> {tokens: (bytes_us, median_us)}`` over every run."""
    found: dict[tuple[str, str], dict[int, tuple]] = {}
    for run in runs:
        for shape in run["shapes"]:
            if shape["shape"] in skip:
                continue
            geometry, tokens = shape["shape"].rsplit("/T", 1)
            for arm, samples in shape["us"].items():
                bytes_us = shape["bytes"][arm] / run["copy_gbps"] / 1e3
                found.setdefault((geometry, arm), {}).setdefault(
                    int(tokens), (bytes_us, statistics.median(samples)))
    return found


def fits(found: dict[tuple[str, str], dict[int, tuple]]) -> list[dict]:
    """One line per (geometry, arm) with at least two token counts: its fixed cost in us,
    its rate as a share of copy, and the worst residual as a share of the time."""
    rows = []
    for (geometry, arm), by_tokens in found.items():
        if len(by_tokens) < 2:
            continue
        x, y = zip(*(by_tokens[t] for t in sorted(by_tokens)), strict=True)
        line = stats.linregress(x, y)
        worst = max(abs(b - (line.intercept + line.slope * a)) / b for a, b in zip(x, y,
                                                                                  strict=True))
        rows.append({"geometry": geometry, "arm": arm, "tokens": sorted(by_tokens),
                     "fixed_us": line.intercept, "rate": 1 / line.slope, "worst": worst})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| geometry | arm | T | fixed us | rate, share of copy | worst residual |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['geometry']} | {r['arm']} | {', '.join(map(str, r['tokens']))} | "
              f"{r['fixed_us']:.2f} | {r['rate'] * 100:.1f} % | {r['worst'] * 100:.2f} % |"
              for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="bench_l2_policy.json files")
    parser.add_argument("--skip", nargs="*", default=[],
                        help="shapes to leave out, as the bench names them (GEOMETRY/TN)")
    args = parser.parse_args(argv)
    runs = [json.loads(path.read_text()) for path in args.runs]
    unknown = set(args.skip) - {shape["shape"] for run in runs for shape in run["shapes"]}
    if unknown:
        parser.error(f"--skip {', '.join(sorted(unknown))}: no such shape in the runs given")
    print(table(fits(points(runs, set(args.skip)))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
