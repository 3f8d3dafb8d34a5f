import os, sys, time
sys.path.insert(0, "tests/site"); sys.path.insert(0, "tests")
import interpreter_once; interpreter_once.install()
os.environ["PYTHONPATH"] = "tests/site"
os.environ["TRITON_INTERPRET"] = "1"
import torch
from qkbench import runner
from qkbench.protocol import load
for iso in sys.argv[1:]:
    p = load("smoke").with_overrides(samples=3, warmup=0, drop_threshold=0.99, isolation=iso)
    t = time.perf_counter()
    run = runner.sweep(p, torch.device("cpu"), f"/tmp/pc-{iso}.json")
    print(iso, round(time.perf_counter() - t, 1), "s", len(run["passes"]), "passes")
