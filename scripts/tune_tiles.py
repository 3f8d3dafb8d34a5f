"""Sweep the launch heuristic's knobs on a GPU; writes JSON and prints the best per shape.

    python scripts/tune_tiles.py OUT.json

Not part of the measured method (no null arm): it only ranks tile settings to choose the
heuristic's defaults, which the harness then measures properly.
"""

import itertools
import json
import statistics
import sys

import torch

from qkbench.backends import CudaBackend
from qkbench.case import Case, Geometry, make_inputs
from qkbench.kernels import plan, qk_norm_rope, qk_norm_rope_split
from qkbench.limits import per_call_seconds

SHAPES = [
    (Geometry("qwen3-32x8", 32, 8, 128), [1, 8, 64, 512, 8192, 32768]),
    (Geometry("qwen3-8x1", 8, 1, 128), [1, 256]),
    (Geometry("text-16x2", 16, 2, 256, 64, weight_mode="offset", inplace=False),
     [1, 64, 1024, 8192]),
    (Geometry("text-24x4", 24, 4, 256, 64, weight_mode="offset", inplace=False), [8, 2048]),
]
# (elements per program, elements per warp, minimum programs per SM)
KNOBS = [(e, w, 2) for e, w in itertools.product([2048, 4096, 8192], [512, 1024])] + [
    (4096, 1024, 1), (4096, 1024, 4)]


def per_call(backend: CudaBackend, launch) -> float:
    return statistics.median(per_call_seconds(backend, launch, 32, 70)[10:])


def copy_launch(inputs):
    q, k = torch.empty_like(inputs.q), torch.empty_like(inputs.k)

    def launch():
        q.copy_(inputs.q)
        k.copy_(inputs.k)

    return launch


def op_launch(op, inputs, inplace: bool):
    out = {} if inplace else {"q_out": torch.empty_like(inputs.q),
                              "k_out": torch.empty_like(inputs.k)}
    return lambda: inputs.call(op, inplace=inplace, check_positions=False, **out)


def main(out_path: str) -> None:
    device = torch.device("cuda")
    backend = CudaBackend(device)
    rows = []
    for geometry, tokens in SHAPES:
        for t in tokens:
            inputs = make_inputs(Case(geometry, t), 0, device)
            copy_s = per_call(backend, copy_launch(inputs))
            for elems, per_warp, min_per_sm in KNOBS:
                plan.ELEMS_PER_PROGRAM, plan.ELEMS_PER_WARP = elems, per_warp
                plan.MIN_PROGRAMS_PER_SM = min_per_sm
                row = {"geometry": geometry.name, "tokens": t, "elems": elems,
                       "per_warp": per_warp, "min_per_sm": min_per_sm, "copy_s": copy_s}
                for name, op in (("fused", qk_norm_rope), ("split", qk_norm_rope_split)):
                    row[name] = per_call(backend, op_launch(op, inputs, geometry.inplace))
                rows.append(row)
            torch.cuda.empty_cache()
    with open(out_path, "w") as f:
        json.dump(rows, f)
    for key in sorted({(r["geometry"], r["tokens"]) for r in rows}):
        cell = [r for r in rows if (r["geometry"], r["tokens"]) == key]
        for route in ("fused", "split"):
            best = min(cell, key=lambda r: r[route])
            default = next(r for r in cell if (r["elems"], r["per_warp"], r["min_per_sm"])
                           == (4096, 1024, 2))
            print(f"{key[0]:>11} T={key[1]:<6} {route}: best {best[route]*1e6:8.2f} us "
                  f"(elems {best['elems']}, warp {best['per_warp']}, min/SM "
                  f"{best['min_per_sm']}) default {default[route]*1e6:8.2f} us "
                  f"copy {best['copy_s']*1e6:8.2f} us")


if __name__ == "__main__":
    main(sys.argv[1])
