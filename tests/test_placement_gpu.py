"""Placement on a real GPU: per-arm buffers really move between passes (SPEC 4)."""

import torch

from qkbench import runner
from qkbench.protocol import parse

from conftest import gpu_only

PROTOCOL = """
name = "placement"
routes = ["split", "fused"]
tokens = [8192]

[timing]
passes = 6
warmup = 1
samples = 3
inner_reps = 1
isolation = "inprocess"

[[geometry]]
name = "qwen3-32x8"
heads_q = 32
heads_k = 8
head_dim = 128
inplace = false
"""


@gpu_only
def test_a_large_buffer_lands_at_other_offsets_in_other_passes(tmp_path):
    run = runner.sweep(parse(PROTOCOL), torch.device("cuda"), tmp_path / "run.json")
    # The candidate's q_out: 8192 x 32 x 128 bf16, 64 MiB, a segment of its own.
    offsets = [comp["placement"]["offsets_mod_2mib"]["B"][0] for p in run["passes"]
               for case in p["cases"] for comp in case["comparisons"]]
    assert len(set(offsets)) > 1, offsets
