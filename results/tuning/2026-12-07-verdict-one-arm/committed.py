"""The committed schema 3 archives read by schema 4's width (every measured pass), and by the
rejected rule beside it (no verdict where over a quarter of a cell's passes were dropped):
how many verdicts each would change.

    python results/tuning/2026-12-07-verdict-one-arm/committed.py
"""

import gzip
import json
from collections import Counter
from pathlib import Path

from qkbench import archive
from qkbench.summary import summarize

JUDGED = ("faster", "slower")
counts = Counter()
for path in sorted(Path("results").rglob("*.json*")):
    if "logs" in path.parts or path.suffix not in (".json", ".gz"):
        continue
    with (gzip.open if path.suffix == ".gz" else open)(path, "rt") as f:
        head = json.load(f)
    if not (isinstance(head, dict) and head.get("kind") == archive.KIND
            and head.get("schema_version") == 3):
        continue
    run = archive.read(path)
    counts["archives"] += 1
    kept_rule, every_pass = (summarize({**run, "schema_version": v})["comparisons"]
                             for v in (3, 4))
    for old_comp, new_comp in zip(kept_rule, every_pass, strict=True):
        for old, new in zip(old_comp["cases"], new_comp["cases"], strict=True):
            counts["cells"] += 1
            was, now = old["effect"]["verdict"], new["effect"]["verdict"]
            counts["verdicts"] += was in JUDGED
            if was != now:
                counts["changed by schema 4's width"] += 1
                print(f"{path}: {old_comp['baseline']} -> {old_comp['candidate']} "
                      f"{old['key']}: {was} -> {now}, width {old['effect']['width']:.4f} -> "
                      f"{new['effect']['width']:.4f}")
            rows = new["passes"]
            if now in JUDGED and sum(not r["kept"] for r in rows) > len(rows) / 4:
                counts["withdrawn besides by the quarter-dropped rule"] += 1
print(dict(counts))
