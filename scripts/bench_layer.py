"""Time the op where a model runs it, right after the layer's QKV projection: one
interleaved schedule with a null arm.

    python scripts/bench_layer.py [--out DIR] [--rounds 24] [--visit 5] [--shapes decode|large|all]

The protocols time launches of the op back to back. In a model the kernel before it is the
QKV projection, a cuBLAS GEMM, and that changes two things:
- The GEMM leaves each multiprocessor's L1 / shared-memory split where it chose it. A kernel
  that asks for no split keeps it (``scripts/carveout.py``), so ours then runs with the
  GEMM's small L1.
- A PDL launch overlaps its prologue with the GEMM's tail, not with a copy of itself.

Per shape, each arm is a CUDA graph of 32 repetitions of what follows, the arms visited in a
random order each round (seeded), so that each follows different arms:
- ``gemm``: the projection alone. It is ``x [T', Hq D] @ W [Hq D, (Hq + 2 Hk) D]`` in the
  inputs' dtype, with ``T' = min(T, --gemm-tokens)`` so that at large T it stays a
  neighbour and not most of the time.
- ``gemm+R``: the projection, then route R. R is ``fused``; ``fused-again`` (identical
  code: the null arm); ``fused-pdl``; ``split``.
- ``gemm+R-twin``, ``gemm+R-l1``, ``gemm+R-fit``: the same, but R's kernels are compiled
  again (``TWINS``). ``num_stages`` differs, so each twin is a CUfunction of its own; their
  PTX is checked equal to R's own. A ``-twin`` asks for no carveout: only the kernel's
  identity differs. An ``-l1`` asks for 0, all L1, which may also cost programs a
  multiprocessor (each takes the 1 KiB the driver reserves). A ``-fit`` asks for the least
  that keeps them (``carveout.occupancy_carveout``).
- ``fused``, ``fused-l1``, ``fused-fit``: back to back, as the protocols time it. ``fused``
  keeps the split of the arm visited before it, and is also reported by that arm.
- ``floor``: Triton's empty kernel, the launch floor of the schedule's launch state. The
  schedule runs in the state a PDL launch leaves (``Timing.launch_state``): one is made
  before it, as the ``fused-pdl`` arms would at their first visit.

Reports each arm's median per repetition. For each ``gemm+R`` arm it also reports R's
cost in the layer: the arm's median less ``gemm``'s. Every arm's output is checked against
the split route's bits first; exits 1 if any check fails, or if a shape raised (its error
is recorded and the next shape runs).

``--device cpu --quick`` runs the same code on a tiny shape under Triton's interpreter
(figures meaningless; no compiled kernels, so no carveout and no PTX to compare).
"""

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_kernels import Shape, add_device_options, call, device_of, identical, interleaved

# The routes timed after the projection: label -> (route, call options).
ROUTES = {"fused": ("fused", {}), "fused-again": ("fused", {}),
          "fused-pdl": ("fused", {"pdl": True}), "split": ("split", {})}
# The twins: suffix -> (num_stages, carveout preference: a share in per cent, "occupancy"
# for carveout.OCCUPANCY, or None). The kernels have no loops, so num_stages changes only
# which compiled kernel each is (the PTX check says so), one apiece.
TWINS = {"-twin": (1, None), "-l1": (2, 0), "-fit": (4, "occupancy")}
# The twins each route is timed in after the projection, and the fused variants also timed
# back to back.
ROUTE_TWINS = {"fused": ("-twin", "-l1", "-fit"), "fused-again": (),
               "fused-pdl": ("-l1", "-fit"), "split": ("-l1", "-fit")}
BACK_TO_BACK = ("", "-l1", "-fit")
# The projection's tokens at most: a neighbour of the op, not most of the time at large T.
GEMM_TOKENS = 256


def shapes(quick: bool, which: str) -> list[Shape]:
    from qkbench.case import Geometry

    if quick:
        return [Shape(Geometry("tiny", 2, 1, 64), 3)]
    qwen3 = Geometry("qwen3-32x8", 32, 8, 128)
    decode = [Shape(qwen3, t) for t in (1, 8, 64)]
    decode += [Shape(Geometry("qwen3-16x2", 16, 2, 128), 1),
               Shape(Geometry("qwen3.5-16x2", 16, 2, 256, 64, weight_mode="offset",
                              inplace=False), 1)]
    large = [Shape(Geometry("dit-24x24", 24, 24, 128, batch=1, inplace=False), 3973),
             Shape(qwen3, 8192, 40960)]
    return {"decode": decode, "large": large, "all": decode + large}[which]


def projection(geometry, tokens: int, dtype: torch.dtype, device: torch.device):
    """A zero-argument launch of the layer's QKV projection for ``tokens`` tokens."""
    gen = torch.Generator(device=device).manual_seed(1)
    hidden = geometry.heads_q * geometry.head_dim
    width = (geometry.heads_q + 2 * geometry.heads_k) * geometry.head_dim
    x = torch.randn(tokens, hidden, generator=gen, device=device).to(dtype)
    w = (torch.randn(hidden, width, generator=gen, device=device) / hidden**0.5).to(dtype)
    y = torch.empty(tokens, width, dtype=dtype, device=device)
    return lambda: torch.mm(x, w, out=y)


def twin(kernel_launch, ptrs, stages: int):
    """A launch of ``kernel_launch``'s kernel on ``ptrs`` compiled apart, with ``stages``."""
    from qkbench.kernels import launch

    options = {**kernel_launch.options, "num_stages": stages}
    return launch.KernelLaunch(kernel_launch.kernel, kernel_launch.grid, range(len(ptrs)),
                               kernel_launch.tail, options)


def route_launch(inputs, inplace: bool, route: str, twin_of: str | None, **options) -> dict:
    """A zero-argument launch of ``route`` (or of its twin ``twin_of``, a key of ``TWINS``)
    on buffers of its own (``launch``), its outputs after one launch on fresh inputs
    (``out``), and for a twin whether its PTX equals the route's own kernels'
    (``ptx_equal``) and the carveouts set (``carveouts``; both None without compiled
    kernels)."""
    import carveout

    from qkbench.case import fresh_copy
    from qkbench.kernels import launch, qk_norm_rope, qk_norm_rope_split

    op = {"fused": qk_norm_rope, "split": qk_norm_rope_split}[route]
    q, k = fresh_copy(inputs.q), fresh_copy(inputs.k)
    outs = {} if inplace else {"q_out": torch.full_like(q, float("nan")),
                               "k_out": torch.full_like(k, float("nan"))}
    args = inputs.with_qk(q, k)

    def run_op():
        return args.call(op, inplace=inplace, **outs, **options)

    if twin_of is None:
        return {"launch": run_op, "out": tuple(x.clone() for x in run_op()),
                "ptx_equal": None, "carveouts": None}
    stages, preference = TWINS[twin_of]
    with launch.recording() as recorded:
        result = run_op()
    twins = [(twin(kernel_launch, ptrs, stages), kernel_launch, ptrs)
             for kernel_launch, ptrs in recorded]
    q.copy_(inputs.q)
    k.copy_(inputs.k)
    for x in outs.values():
        x.fill_(float("nan"))
    for kernel_twin, _, ptrs in twins:
        kernel_twin(ptrs)  # compiled, then launched on the fresh inputs
    device = torch.cuda.current_device() if q.is_cuda else -1
    ptx, carveouts = [], []
    for kernel_twin, kernel_launch, _ in twins:
        compiled = kernel_twin.compiled.get(device)
        if compiled is not None:
            if preference is not None:
                carveouts.append(carveout.apply(compiled, preference,
                                                kernel_launch.options["num_warps"], device))
            ptx.append(compiled.asm["ptx"] == kernel_launch.compiled[device].asm["ptx"])
    return {"launch": lambda: [kernel_twin(ptrs) for kernel_twin, _, ptrs in twins],
            "out": tuple(x.clone() for x in result), "ptx_equal": all(ptx) if ptx else None,
            "carveouts": carveouts or None}


def arm_launches(shape: Shape, backend, gemm_tokens: int) -> tuple[dict, dict]:
    """label -> zero-argument launch, and label -> check result, for every arm of a shape."""
    from qkbench.case import Case, make_inputs
    from qkbench.kernels import qk_norm_rope_split
    from qkbench.limits import empty_launch

    g = shape.geometry
    inputs = make_inputs(Case(g, shape.tokens, max_position=shape.max_position), 0,
                         backend.device)
    split_out = call(qk_norm_rope_split, inputs, g.inplace)
    gemm = projection(g, min(shape.tokens, gemm_tokens), inputs.q.dtype, backend.device)
    launches, checks = {"gemm": gemm, "floor": empty_launch(backend.device)}, {}

    def add(label: str, made: dict) -> None:
        checks[label] = {"bits_equal_split": identical(made["out"], split_out),
                         "ptx_equal": made["ptx_equal"], "carveouts": made["carveouts"]}
        launches[label] = made["launch"]

    def pair(first, second):
        return lambda: (first(), second())

    for name, (route, options) in ROUTES.items():
        for suffix in ("", *ROUTE_TWINS[name]):
            made = route_launch(inputs, g.inplace, route, suffix or None, **options)
            add(f"gemm+{name}{suffix}", {**made, "launch": pair(gemm, made["launch"])})
            if name == "fused" and suffix in BACK_TO_BACK:
                add(name + suffix, route_launch(inputs, g.inplace, route, suffix or None))
    return launches, checks


def passed(check: dict) -> bool:
    return check["bits_equal_split"] and check["ptx_equal"] is not False


def by_arm_before(labels: list[str], sequence: list[int], us: dict, label: str) -> dict:
    """The median of ``label``'s samples by the arm visited just before its visit."""
    index, grouped, before = labels.index(label), defaultdict(list), None
    samples = iter(us[label])
    for n, arm in enumerate(sequence):
        if arm == index:
            if n == 0 or sequence[n - 1] != index:
                before = labels[sequence[n - 1]] if n else "start"
            grouped[before].append(next(samples))
    return {arm: statistics.median(v) for arm, v in grouped.items()}


def measure_shape(backend, shape: Shape, rounds: int, visit: int, inner: int,
                  gemm_tokens: int) -> dict:
    from qkbench.limits import empty_launch

    launches, checks = arm_launches(shape, backend, gemm_tokens)
    labels = list(launches)
    graphs = []
    for label in labels:
        launches[label]()
        graphs.append(backend.prepare([launches[label]], inner, label))
    empty_launch(backend.device, pdl=True)()
    backend.synchronize()
    sequence, us = interleaved(backend, graphs, labels, rounds, visit, shuffle_seed=0)
    medians = {label: statistics.median(v) for label, v in us.items()}
    in_layer = {label.removeprefix("gemm+"): medians[label] - medians["gemm"]
                for label in labels if label.startswith("gemm+")}
    return {"shape": shape.name, "gemm_tokens": min(shape.tokens, gemm_tokens),
            "checks": checks, "sequence": sequence, "us": us, "median_us": medians,
            "in_layer_us": in_layer, "null_us": in_layer["fused-again"] - in_layer["fused"],
            "fused_by_arm_before": by_arm_before(labels, sequence, us, "fused")}


def line(entry: dict) -> str:
    if "error" in entry:
        return f"{entry['shape']:22s} FAILED: {entry['error']}"
    failed = [label for label, check in entry["checks"].items() if not passed(check)]
    return (f"{entry['shape']:22s} floor {entry['median_us']['floor']:.2f}; "
            f"gemm {entry['median_us']['gemm']:.2f}; in the layer "
            f"(null {entry['null_us']:+.3f}): "
            + "  ".join(f"{k} {v:.2f}" for k, v in entry["in_layer_us"].items())
            + "; back to back: " + "  ".join(f"{k} {entry['median_us'][k]:.2f}"
                                             for k in (f"fused{s}" for s in BACK_TO_BACK))
            + (f"  CHECK FAILED: {', '.join(failed)}" if failed else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--visit", type=int, default=5)
    parser.add_argument("--shapes", choices=("decode", "large", "all"), default="all",
                        help="decode widths, DiT and (32,8) x 128 at T = 8192, or both")
    parser.add_argument("--gemm-tokens", type=int, default=GEMM_TOKENS)
    add_device_options(parser)
    args = parser.parse_args(argv)
    device = device_of(args)
    from qkbench.backends import backend_for

    backend = backend_for(device)
    out = Path(args.out) / "bench_layer.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"rounds": args.rounds, "visit": args.visit, "twins": TWINS,
              "torch": torch.__version__, "shapes": []}
    ok = True
    for shape in shapes(args.quick, args.shapes):
        try:
            entry = measure_shape(backend, shape, args.rounds, args.visit,
                                  2 if args.quick else 32, args.gemm_tokens)
        except Exception as e:  # recorded: the next shape still runs
            entry = {"shape": shape.name, "error": f"{type(e).__name__}: {e}"}
        result["shapes"].append(entry)
        out.write_text(json.dumps(result, indent=1))
        ok &= "error" not in entry and all(passed(c) for c in entry["checks"].values())
        print(line(entry), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
