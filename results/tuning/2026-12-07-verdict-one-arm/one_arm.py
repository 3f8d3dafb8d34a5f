"""Identical code (and a true -3 % gain) under a disturbance that strikes one arm of every
comparison, whichever it is, summarised by both width rules.

    TRITON_INTERPRET=1 python one_arm.py [SEEDS]

Each sweep: the tiny protocol (6 passes of 30 samples, 6 cells), the real runner and summary,
``tests/synthetic.SyntheticBackend(one_arm=0.05, noise=1e-3)``. The same archive is read as
schema 4 (width over every measured pass) and as schema 3 (width over kept passes alone).
"""

import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))

from qkbench.summary import summarize

from synthetic import synthetic_sweep, tiny_protocol

seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
print(f"{seeds} sweeps of 6 cells per setting; one arm of each comparison 5 % slower")
for retries in (2, 10):
    for effect in (0.0, -0.03):
        counts = {3: Counter(), 4: Counter()}
        for seed in range(seeds):
            with tempfile.TemporaryDirectory() as folder:
                text = tiny_protocol("one-arm", tokens=[1, 2, 3, 4, 5, 6], retries=retries)
                archive = synthetic_sweep(text, Path(folder) / "run.json", effect=effect,
                                          one_arm=0.05, noise=1e-3, seed=100 + seed)
            for schema in (3, 4):
                (comp,) = summarize({**archive, "schema_version": schema})["comparisons"]
                counts[schema].update(c["effect"]["verdict"] for c in comp["cases"])
        for schema, rule in ((3, "kept passes' width (schema 3)"),
                             (4, "every measured pass's width (schema 4)")):
            print(f"true effect {effect:+.0%}, retries {retries}, {rule}: "
                  + ", ".join(f"{v} {n}" for v, n in sorted(counts[schema].items())),
                  flush=True)
