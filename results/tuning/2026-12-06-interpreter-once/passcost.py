"""Six passes of smoke (both cells, 3 samples) timed per isolation given, with the suite's
interpreter patch: ``python passcost.py inprocess [process]`` from the repository's root."""

import os
import sys
import time

sys.path.insert(0, "tests/site")
os.environ["PYTHONPATH"] = "tests/site"  # the pass workers of ``process`` too
os.environ["TRITON_INTERPRET"] = "1"  # before the kernels are imported

import interpreter_once
import torch

from qkbench import runner
from qkbench.protocol import load

interpreter_once.install()
for isolation in sys.argv[1:]:
    protocol = load("smoke").with_overrides(samples=3, warmup=0, drop_threshold=0.99,
                                            isolation=isolation)
    start = time.perf_counter()
    run = runner.sweep(protocol, torch.device("cpu"), f"/tmp/pc-{isolation}.json")
    print(isolation, round(time.perf_counter() - start, 1), "s", len(run["passes"]), "passes")
