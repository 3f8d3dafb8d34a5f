"""Read the fused kernel beside plain copies of its rows at the large-T goal cells with
Nsight Compute: where a launch loses time against the copy of its own bytes.

    python scripts/ncu_goal_cells.py --out DIR [--cache all|none]  # runs itself under ncu
    python scripts/ncu_goal_cells.py --launch [--device cpu --quick]  # the launches alone

Per cell (DiT, (32,8) x 128 and (16,2) x 128 at T = 8192), three launches, each compiled
and run once before the profiled range: the fused kernel as the shipped plan tiles it, and
the launch that only copies the op's rows (``qkbench.limits.rows_copy_launch``) in programs
of 4096 and of 2048 elements. ncu leaves the clocks alone; ``--cache all`` flushes every
cache before each launch (the cold protocol's state), ``none`` leaves them as the launch
before left them.

What it reads, per launch: its duration, the DRAM bytes it moved against the op's byte
model, DRAM throughput, L2 hit rate, how much of the launch the multiprocessors were busy
(``sm__cycles_active.avg`` over the elapsed cycles: the ramp and the tail show there),
achieved occupancy and waves, and the five largest warp stall reasons as shares of them
all. Writes ``DIR/goal-cells-CACHE.ncu-rep``, ``.launches.json`` (each launch's label and
the op's bytes), ``.csv`` (ncu's raw page) and ``.json`` (the summary), and prints one block
per launch; ``--read DIR/goal-cells-CACHE`` summarises those files again.
"""

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_kernels import Shape, add_device_options, device_of, dit_shape, launcher, shipped
from carveout_sequence import find_ncu, ncu_csv, profiled

ARMS = ("fused", "rows-copy-4096", "rows-copy-2048")
# Raw metrics read beside the sections' own (each a standard Nsight Compute metric).
METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
           "sm__cycles_active.avg", "sm__cycles_elapsed.avg")
SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "LaunchStats", "Occupancy",
            "WarpStateStats")
# Columns of the raw page printed per launch, by the first name of each that ncu reports.
SHOWN = {
    "us": ("gpu__time_duration.sum",),
    "dram throughput %": ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
                          "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
    "L2 hit %": ("lts__t_sector_hit_rate.pct",),
    "achieved occupancy %": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "waves": ("launch__waves_per_multiprocessor",),
    "registers": ("launch__registers_per_thread",),
}
# Stall reasons: the WarpStateStats section's per-issue ratios.
STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"
# Of those, the one that is no stall: the warp issued.
NOT_STALLS = ("selected",)


def cells(quick: bool) -> list[Shape]:
    from qkbench.case import Geometry

    if quick:
        return [Shape(Geometry("tiny", 2, 1, 64), 40)]
    prefill = {g.name: g for g in shipped("prefill").geometries}
    long_table = shipped("prefill").max_position
    return [dit_shape(), Shape(prefill["qwen3-32x8"], 8192, long_table),
            Shape(prefill["qwen3-16x2"], 8192, long_table)]


def launches(device: torch.device, quick: bool) -> list[tuple[str, int, Callable[[], object]]]:
    """Each cell's arms as ``(label, the op's bytes, launch)``, each launched once
    (compiled, warm). The op's bytes: q and k read and written once, the table rows, the
    positions and the weights (``traffic.fused_bytes``), the copies' yardstick too."""
    from qkbench import limits
    from qkbench.case import Case, make_inputs
    from qkbench.kernels import qk_norm_rope, traffic

    steps = []
    for shape in cells(quick):
        g = shape.geometry
        inputs = make_inputs(Case(g, shape.tokens, max_position=shape.max_position), 0,
                             device)
        model = inputs.call(traffic.fused_bytes)
        src = [x.contiguous().clone() for x in (inputs.q, inputs.k)]
        dst = src if g.inplace else [torch.empty_like(x) for x in src]
        arms = (launcher(qk_norm_rope, inputs, g.inplace),
                limits.rows_copy_launch(*src, *dst, 4096),
                limits.rows_copy_launch(*src, *dst, 2048))
        steps += [(f"{shape.name} {arm}", model, launch)
                  for arm, launch in zip(ARMS, arms, strict=True)]
    for _, _, launch in steps:
        launch()
    return steps


def run_launches(device: torch.device, quick: bool, record: Path | None = None) -> None:
    """The launches, the profiler on around them; their labels and the op's bytes into
    ``record`` as JSON."""
    steps = launches(device, quick)
    if record is not None:
        record.write_text(json.dumps([[label, model] for label, model, _ in steps]))
    with profiled(device):
        for _, _, launch in steps:
            launch()


# ncu's units, as the scale to bytes or to microseconds (it scales each column to its values).
SCALES = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
          "nsecond": 1e-3, "ns": 1e-3, "usecond": 1, "us": 1, "msecond": 1e3, "ms": 1e3,
          "second": 1e6, "s": 1e6}


def number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def read_raw(text: str) -> tuple[list[dict[str, str]], dict[str, str]]:
    """Per profiled launch, in launch order, every column of ncu's ``--page raw`` CSV; and
    each column's unit (the row after the header, whose ID is empty)."""
    rows = ncu_csv(text, "raw")
    units = next((r for r in rows if not r["ID"]), {})
    launches = sorted((r for r in rows if number(r["ID"]) is not None), key=lambda r: int(r["ID"]))
    return launches, units


def scaled(row: dict[str, str], units: dict[str, str], column: str) -> float | None:
    """The column's value in bytes or microseconds where its unit is one of ``SCALES``,
    else as reported; None where the launch has no such number."""
    value = number(row.get(column, ""))
    return None if value is None else value * SCALES.get(units.get(column, ""), 1)


def summary(label: str, row: dict[str, str], units: dict[str, str], model_bytes: int) -> dict:
    """What ``SHOWN`` names, the DRAM bytes against the byte model, the share of the
    launch the multiprocessors were busy, and the five largest stall reasons, each as its
    share of every reason's stalled warps per issue (a kernel's own mix: the copies issue
    few instructions, so their ratios are larger throughout)."""
    out: dict = {"launch": label, "kernel": row.get("Kernel Name")}
    for name, columns in SHOWN.items():
        out[name] = next((scaled(row, units, c) for c in columns if c in row), None)
    moved = [scaled(row, units, m) for m in ("dram__bytes_read.sum", "dram__bytes_write.sum")]
    if None not in moved:
        out["dram bytes / model"] = sum(moved) / model_bytes
    active, elapsed = (number(row.get(m, ""))
                       for m in ("sm__cycles_active.avg", "sm__cycles_elapsed.avg"))
    if active is not None and elapsed:
        out["sm busy %"] = 100 * active / elapsed
    counted = ((stall_reason(c), number(v)) for c, v in row.items())
    stalls = {reason: x for reason, x in counted if reason is not None and x is not None}
    total = sum(stalls.values())
    largest = sorted(stalls.items(), key=lambda kv: -kv[1])[:5]
    out["stall %"] = {k: 100 * v / total for k, v in largest} if total else {}
    return out


def stall_reason(column: str) -> str | None:
    """The stall reason a raw-page column counts, None for any other column (the issuing
    warp's included)."""
    if not (column.startswith(STALL_PREFIX) and column.endswith(STALL_SUFFIX)):
        return None
    reason = column[len(STALL_PREFIX):-len(STALL_SUFFIX)]
    return None if reason in NOT_STALLS else reason


def read_report(report: Path) -> list[dict]:
    """Each launch's ``summary`` from a report's raw page (``REPORT.csv``) and the labels and
    bytes its launches recorded (``REPORT.launches.json``)."""
    rows, units = read_raw(report.with_suffix(".csv").read_text())
    made = json.loads(report.with_suffix(".launches.json").read_text())
    if len(rows) != len(made):
        raise SystemExit(f"ncu profiled {len(rows)} launches; {len(made)} were made")
    return [summary(label, row, units, model)
            for (label, model), row in zip(made, rows, strict=True)]


def write_and_print(report: Path) -> int:
    """``read_report``'s summaries written to ``REPORT.json`` and printed, a block a launch."""
    result = read_report(report)
    report.with_suffix(".json").write_text(json.dumps(result, indent=1))
    for entry in result:
        print(entry["launch"])
        print("   " + "  ".join(f"{k} {v:.3g}" for k, v in entry.items()
                                if isinstance(v, float)))
        print("   stall %: " + "  ".join(f"{k} {v:.0f}" for k, v in entry["stall %"].items()))
    return 0


def under_ncu(out: Path, cache: str) -> int:
    ncu = find_ncu()
    out.mkdir(parents=True, exist_ok=True)
    report = out / f"goal-cells-{cache}"
    sections = [a for s in SECTIONS for a in ("--section", s)]
    subprocess.run([ncu, "--clock-control", "none", "--cache-control", cache,
                    "--profile-from-start", "off", *sections, "--metrics", ",".join(METRICS),
                    "-k", "regex:qk_norm_rope|rows_copy", "-f", "-o", str(report),
                    sys.executable, __file__, "--launch", "--record",
                    str(report.with_suffix(".launches.json"))], check=True)
    text = subprocess.run([ncu, "--import", f"{report}.ncu-rep", "--csv", "--page", "raw"],
                          check=True, capture_output=True, text=True).stdout
    report.with_suffix(".csv").write_text(text)
    return write_and_print(report)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--cache", choices=("all", "none"), default="all")
    parser.add_argument("--launch", action="store_true",
                        help="run the launches alone (what ncu profiles)")
    parser.add_argument("--record", type=Path, default=None,
                        help="with --launch: write the launches' labels and bytes here")
    parser.add_argument("--read", type=Path, default=None, metavar="REPORT",
                        help="summarise a report made before (DIR/goal-cells-CACHE) again")
    add_device_options(parser)
    args = parser.parse_args(argv)
    if args.read:
        return write_and_print(args.read)
    device = device_of(args)
    if args.launch:
        run_launches(device, args.quick, args.record)
        return 0
    return under_ncu(Path(args.out), args.cache)


if __name__ == "__main__":
    sys.exit(main())
