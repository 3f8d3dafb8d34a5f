"""Time the fused kernel's plan settings against its default in one interleaved schedule,
with a null arm: what a sequential bench cannot tell apart from the L2 the variant before
left behind.

    python scripts/bench_l2_policy.py [--out DIR] [--rounds 24] [--tokens 8192 ...]

Per shape, each arm is a CUDA graph of 32 launches on buffers of its own: the default plan
twice (``default`` and ``default-again``: identical code, the null arm), and the plan
settings in ``ARMS``. Each round visits the arms in an order rotated by one, taking
``--visit`` samples of each. Reports per arm the median per-call us and its ratio to
``default``; a variant's ratio means something only where it lies outside the null arm's.
Bits are checked against the split route first; exits 1 if any arm differs.

``--device cpu --quick`` runs the same code on a tiny shape under Triton's interpreter,
with the L2 taken as one byte so that the rules past the L2 apply (figures meaningless).
"""

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_kernels import Shape, call, identical, launcher

ARMS = {  # name -> kernels.plan.Settings fields
    "default": {}, "default-again": {},
    # Version 3.4's tiles: past the L2, k tiles as large as within it.
    "k-tiles-3.4": {"k_token_ratio_past_l2": 0},
    # Past the L2, k tiles of at most one or four times a q tile's tokens.
    "k-ratio-1": {"k_token_ratio_past_l2": 1}, "k-ratio-4": {"k_token_ratio_past_l2": 4},
    # 3.5's k tiles at every T, the L2 taken as one byte.
    "k-tiles-always": {"l2_bytes": 1},
}
TOKENS = (512, 2048, 4096, 8192, 16384, 32768, 65536)


def shapes(quick: bool, tokens: list[int]) -> list[Shape]:
    from qkbench.case import Geometry

    if quick:
        return [Shape(Geometry("tiny", 4, 1, 64), 40)]
    geometries = [Geometry("qwen3-32x8", 32, 8, 128), Geometry("qwen3-16x2", 16, 2, 128)]
    return [Shape(g, t, 40960) for g in geometries for t in tokens]


def measure_shape(backend, shape: Shape, arms: dict, rounds: int, visit: int,
                  inner: int) -> dict:
    from qkbench.case import Case, make_inputs
    from qkbench.kernels import plan, qk_norm_rope, qk_norm_rope_split

    g = shape.geometry
    inputs = make_inputs(Case(g, shape.tokens, max_position=shape.max_position), 0,
                         backend.device)
    split_out = call(qk_norm_rope_split, inputs, g.inplace)
    graphs, bits = [], {}
    for label, settings in arms.items():
        with plan.use(**settings):
            bits[label] = identical(call(qk_norm_rope, inputs, g.inplace), split_out)
            launch = launcher(qk_norm_rope, inputs, g.inplace)
            launch()
            graphs.append(backend.prepare([launch], inner, label))
    sequence = [(i + r) % len(arms) for r in range(rounds) for i in range(len(arms))
                for _ in range(visit)]
    seconds = backend.run(graphs, sequence, []).seconds
    labels = list(arms)
    us = {label: [] for label in labels}
    for arm, s in zip(sequence, seconds, strict=True):
        us[labels[arm]].append(s * 1e6)
    base = statistics.median(us["default"])
    return {"shape": shape.name, "bits_equal_split": bits, "us": us,
            "summary": {label: {"median_us": statistics.median(v),
                                "ratio_to_default": statistics.median(v) / base}
                        for label, v in us.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--visit", type=int, default=5)
    parser.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from qkbench.backends import backend_for

    backend = backend_for(device)
    arms = {k: {"l2_bytes": 1, **v} if args.quick else v for k, v in ARMS.items()}
    out = Path(args.out) / "bench_l2_policy.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    result, ok = {"rounds": args.rounds, "visit": args.visit, "arms": arms, "shapes": []}, True
    for shape in shapes(args.quick, args.tokens):
        entry = measure_shape(backend, shape, arms, args.rounds, args.visit,
                              2 if args.quick else 32)
        result["shapes"].append(entry)
        out.write_text(json.dumps(result, indent=1))
        same = all(entry["bits_equal_split"].values())
        ok &= same
        print(f"{shape.name:22s} " + "  ".join(
            f"{k} {v['median_us']:.2f} ({v['ratio_to_default'] - 1:+.1%})"
            for k, v in entry["summary"].items()) + ("" if same else "  BITS DIFFER"),
            flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
