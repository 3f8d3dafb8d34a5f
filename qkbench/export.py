"""Exports of an archive's raw samples for analysis elsewhere (pandas, R): one row a sample."""

import csv
from collections.abc import Iterator
from typing import TextIO

CSV_COLUMNS = ("pass", "case", "comparison", "arm", "route", "sample", "seconds")


def sample_rows(archive: dict) -> Iterator[tuple]:
    """Every timed sample of the archive (warm-ups excluded), in archive order: pass index,
    case key, comparison (``baseline->candidate``), arm label, route, sample index, seconds."""
    for p in archive["passes"]:
        for case in p.get("cases", []):
            for comp in case.get("comparisons", []):
                name = f"{comp['baseline']}->{comp['candidate']}"
                for arm in comp.get("arms", []):
                    for i, seconds in enumerate(arm["samples"]):
                        yield p["index"], case["key"], name, arm["label"], arm["route"], i, seconds


def sample_count(archive: dict) -> int:
    """How many timed samples the archive holds."""
    return sum(len(arm["samples"]) for p in archive["passes"] for case in p.get("cases", [])
               for comp in case.get("comparisons", []) for arm in comp.get("arms", []))


def write_csv(archive: dict, stream: TextIO) -> int:
    """Write the header row and one row per timed sample; returns the number of samples."""
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    n = 0
    for row in sample_rows(archive):  # floats as their shortest repr
        writer.writerow(row)
        n += 1
    return n
