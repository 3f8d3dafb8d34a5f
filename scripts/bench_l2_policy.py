"""Time the fused kernel's plan settings and position patterns against its default in one
interleaved schedule, with a null arm and a probe of what each leaves in L2 for the next kernel.

    python scripts/bench_l2_policy.py [--out DIR] [--rounds 16]

Per shape, each arm is a CUDA graph of 32 launches on buffers of its own: the default plan
twice (``default`` and ``default-again``: identical code, the null arm), and the plan
settings in ``ARMS``. Each round visits the arms in an order rotated by one, taking
``--visit`` samples of the arm and then one of the probe: a graph of four ``copy_`` of a
buffer small enough to stay in L2, so that the probe's time after an arm says how much
of L2 that arm left to the next kernel. Reports per arm the median per-call us, its ratio
to ``default``, and the probe's median after it. Bits are checked against the split route.
"""

import argparse
import json
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_kernels import Shape, call, identical, launcher

ARMS = {  # name -> (plan settings, positions: "uniform" as drawn, or a pattern)
    "default": ({}, "uniform"), "default-again": ({}, "uniform"),
    # One sequence's prefill: positions 0, 1, ..., T - 1 (modulo the table).
    "sequential": ({}, "sequential"),
    # A batch of 8 sequences of T / 8 tokens, each from position 0.
    "batch8": ({}, "batch8"),
}
PROBE_BYTES = {"cuda": 12 << 20, "cpu": 1 << 20}


def shapes(quick: bool) -> list[Shape]:
    from qkbench.case import Geometry

    if quick:
        return [Shape(Geometry("tiny", 2, 1, 64), 3)]
    text = dict(weight_mode="offset", inplace=False)
    geometries = [Geometry("qwen3-32x8", 32, 8, 128), Geometry("qwen3-16x2", 16, 2, 128),
                  Geometry("qwen3.5-16x2", 16, 2, 256, 64, **text),
                  Geometry("qwen3.5-24x4", 24, 4, 256, 64, **text)]
    out = [Shape(Geometry("dit-24x24", 24, 24, 128, batch=1, inplace=False), 3973)]
    return out + [Shape(g, t, 40960) for t in (32768, 8192, 2048) for g in geometries]


def positions(drawn: torch.Tensor, pattern: str, max_position: int) -> torch.Tensor:
    """The positions of an arm: ``drawn`` (uniform over the table), or in a pattern."""
    if pattern == "uniform":
        return drawn
    t = torch.arange(drawn.numel(), device=drawn.device, dtype=drawn.dtype)
    if pattern == "batch8":
        t = t % max(1, drawn.numel() // 8)
    return (t % max_position).view(drawn.shape)


def measure_shape(backend, shape: Shape, rounds: int, visit: int, inner: int) -> dict:
    from qkbench.case import Case, make_inputs
    from qkbench.kernels import plan, qk_norm_rope, qk_norm_rope_split

    g = shape.geometry
    inputs = make_inputs(Case(g, shape.tokens, max_position=shape.max_position), 0,
                         backend.device)
    graphs, bits = [], {}
    for label, (settings, pattern) in ARMS.items():
        arm_inputs = replace(inputs, positions=positions(inputs.positions, pattern,
                                                          shape.max_position))
        split_out = call(qk_norm_rope_split, arm_inputs, g.inplace)
        with plan.use(**settings):
            bits[label] = identical(call(qk_norm_rope, arm_inputs, g.inplace), split_out)
            launch = launcher(qk_norm_rope, arm_inputs, g.inplace)
            launch()
            graphs.append(backend.prepare([launch], inner, label))
    src = torch.rand(PROBE_BYTES[backend.device.type] // 4, device=backend.device)
    dst = torch.empty_like(src)
    probe = lambda: dst.copy_(src)  # noqa: E731
    probe()
    graphs.append(backend.prepare([probe], 4, "probe"))
    n, sequence = len(ARMS), []
    for r in range(rounds):
        for i in range(n):
            sequence += [(i + r) % n] * visit + [n]
    seconds = backend.run(graphs, sequence, []).seconds
    us = {label: [] for label in ARMS}
    probe_after = {label: [] for label in ARMS}
    for pos, (arm, s) in enumerate(zip(sequence, seconds, strict=True)):
        if arm < n:
            us[list(ARMS)[arm]].append(s * 1e6)
        else:
            probe_after[list(ARMS)[sequence[pos - 1]]].append(s * 1e6)
    base = statistics.median(us["default"])
    return {"shape": shape.name, "bits_equal_split": bits, "us": us,
            "probe_us_after": probe_after,
            "summary": {label: {"median_us": statistics.median(v),
                                "ratio_to_default": statistics.median(v) / base,
                                "probe_median_us": statistics.median(probe_after[label])}
                        for label, v in us.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--visit", type=int, default=5)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from qkbench.backends import backend_for

    backend = backend_for(device)
    out = Path(args.out) / "bench_l2_policy.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    result, ok = {"rounds": args.rounds, "visit": args.visit, "arms": ARMS, "shapes": []}, True
    for shape in shapes(args.quick):
        entry = measure_shape(backend, shape, args.rounds, args.visit,
                              2 if args.quick else 32)
        result["shapes"].append(entry)
        out.write_text(json.dumps(result, indent=1))
        ok &= all(entry["bits_equal_split"].values())
        print(f"{shape.name:22s} " + "  ".join(
            f"{k} {v['median_us']:.2f} ({v['ratio_to_default'] - 1:+.1%}, probe "
            f"{v['probe_median_us']:.2f})" for k, v in entry["summary"].items())
            + ("" if all(entry["bits_equal_split"].values()) else "  BITS DIFFER"),
            flush=True)
        if device.type == "cuda":
            del entry
            torch.cuda.empty_cache()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
