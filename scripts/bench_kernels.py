"""Check and time the kernels on a GPU, every variant at the issue's goal shapes, in one call.

    python scripts/bench_kernels.py [--out DIR] [--budget SECONDS] [--max-tokens N]

For every shape it first checks that each fused variant is bit-identical to the split route
and that the fused route meets the FP64 oracle, then times each variant inside a CUDA graph
of 32 launches (hot cache, the median of many replays), beside a same-bytes copy_ of q and
k, the device's copy bandwidth (a 256 MiB copy_) and an empty kernel's launch floor in the
same kind of graph, and two one-program kernels that copy a table row: a fixed row, and
the row a position read first names (the dependent loads every launch of the op without
PDL contains), and past decode widths one launch that only copies the op's rows, at several
program sizes (what its bytes allow at its own size). Variants: the split route; the fused
route with the default plan, with Programmatic Dependent Launch (decode widths), and with
other plan settings (``kernels.plan.Settings``). Then the host cost of an eager call
(``qkbench.hostcost``).

Writes ``bench_kernels.json`` into ``--out`` (default ``$OUT``, else ``.``) after every
shape, so a run cut off keeps what it finished, and prints a compact table last. Exits 1
if any check failed. Not the harness's method (no null arm): a ranking of variants and a
reading against the goals, to be confirmed by ``qkbench sweep``.

``--device cpu --quick`` runs the same code on tiny shapes under Triton's interpreter
(figures meaningless), as the tests do.
"""

import argparse
import json
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from qkbench.protocol import Protocol

GOALS_US = {  # (geometry, T) -> per-call us the fused route must not exceed
    ("qwen3-32x8", 1): 1.30, ("qwen3-16x2", 1): 1.30, ("qwen3.5-16x2", 1): 1.30,
    ("qwen3.5-24x4", 1): 1.30, ("qwen3-32x8", 8): 1.35, ("qwen3-16x2", 8): 1.35,
    ("qwen3.5-16x2", 8): 1.35, ("qwen3.5-24x4", 8): 1.35, ("qwen3-32x8", 64): 2.0,
}
GOALS_SHARE = {  # geometry -> share of copy the fused route must reach at T >= 8192
    "qwen3-32x8": 0.94, "qwen3-16x2": 0.92, "qwen3.5-16x2": 0.92, "qwen3.5-24x4": 0.92,
    "dit-24x24": 0.90,
}
# Plan settings tried beside the default (kernels.plan.Settings fields). A variant that sets
# the programs' size or spread turns off the rule for launches of few programs
# (``few_programs_per_sm``), which would otherwise swap its size for its own at some T.
OWN_SIZE = {"few_programs_per_sm": 0}
BOTH_VARIANTS = {  # tried at decode widths and at large T
    "warp512": {"elems_per_warp": 512, **OWN_SIZE},
    "rebuilt": {"whole_pass_tile": False},
    "q-then-k": {"interleave_qk_span_ratio": 0},  # every q tile, then every k tile (version 3.2)
    "chunks": {"interleave_qk_span_ratio": 64},  # q-then-k chunks of tokens at any tiles
}
DECODE_VARIANTS = {
    # one row per program where the chip asks for it
    "rows1": {"min_bytes_per_thread": 0, **OWN_SIZE},
    "spread1": {"min_programs_per_sm": 1, **OWN_SIZE},
    "spread1/4": {"min_programs_per_sm": 0.25, **OWN_SIZE},
    # Two rows per one-warp program at T = 64 (32,8), as (16,2) gets by default there.
    "spread8": {"min_programs_per_sm": 8, **OWN_SIZE},
    **BOTH_VARIANTS,
}
LARGE_VARIANTS = {
    "elems2048": {"elems_per_program": 2048, **OWN_SIZE},
    # Partial rotary with version 3.2's two-warp programs of 8 rows (the default before).
    "partial4096": {"partial_elems_per_program": 4096},
    "elems8192": {"elems_per_program": 8192, **OWN_SIZE},
    "warp2048": {"elems_per_warp": 2048, **OWN_SIZE},
    **BOTH_VARIANTS,
}
DECODE_MAX = 64  # widths up to this get PDL and the decode variants; above, the split
# route's three kernels are also timed alone against their own bytes


@dataclass
class Shape:
    geometry: object  # qkbench.case.Geometry
    tokens: int
    max_position: int = 8192

    @property
    def name(self) -> str:
        return f"{self.geometry.name}/T{self.tokens}"


@dataclass
class Run:
    out: Path
    device: torch.device
    samples: int
    budget_s: float
    inner_reps: int = 32
    started: float = field(default_factory=time.perf_counter)
    result: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)

    def over_budget(self) -> bool:
        return time.perf_counter() - self.started > self.budget_s

    def save(self) -> None:
        """Write the JSON atomically, so that a run cut off leaves a readable file."""
        self.result["failures"] = self.failures
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.result, indent=1, default=str))
        tmp.replace(self.out)


def shipped(name: str) -> "Protocol":
    """A shipped protocol, so that the benches time its geometries with its table."""
    from qkbench import protocol

    return protocol.load(name)


def dit_shape() -> Shape:
    """The dit protocol's one cell."""
    p = shipped("dit")
    return Shape(p.geometries[0], p.tokens[0], p.max_position)


def shapes(quick: bool) -> list[Shape]:
    from qkbench.case import Geometry

    if quick:
        return [Shape(Geometry("tiny", 2, 1, 64), 3),
                Shape(Geometry("tiny-partial", 2, 1, 128, 32, weight_mode="offset",
                               inplace=False), DECODE_MAX + 1)]
    prefill = shipped("prefill")
    # The goals first (decode, then bandwidth), so that a cut-off run keeps them.
    return [*(Shape(g, t) for t in (1, 8, 64) for g in prefill.geometries), dit_shape(),
            *(Shape(g, t, prefill.max_position) for t in (8192, 32768, 2048)
              for g in prefill.geometries)]


def add_device_options(parser: argparse.ArgumentParser) -> None:
    """``--device`` (default cuda) and ``--quick`` (tiny shapes, for the CPU tests)."""
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny shapes (CPU tests)")


def device_of(args: argparse.Namespace) -> torch.device:
    """The ``--device`` asked for; on the CPU the kernels will run in Triton's interpreter
    (which Triton reads when the kernels are first imported, so call this before that)."""
    device = torch.device(args.device)
    if device.type == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return device


def per_call_us(run: "Run", backend, launch) -> float:
    """Median per-call us of ``launch`` in a graph of ``run.inner_reps`` launches."""
    from qkbench.limits import per_call_seconds

    return statistics.median(per_call_seconds(backend, launch, run.inner_reps,
                                              run.samples)) * 1e6


def call(op, inputs, inplace: bool, **options):
    """One call of ``op`` on fresh copies of q and k: in place, or into NaN-filled outputs
    (so that an element left unwritten cannot pass for computed)."""
    from qkbench.case import fresh_copy

    q, k = fresh_copy(inputs.q), fresh_copy(inputs.k)
    if inplace:
        return inputs.with_qk(q, k).call(op, inplace=True, **options)
    outs = {"q_out": torch.full_like(q, float("nan")), "k_out": torch.full_like(k, float("nan"))}
    return inputs.with_qk(q, k).call(op, inplace=False, **outs, **options)


def launcher(op, inputs, inplace: bool, **options):
    """A zero-argument launch of ``op`` on buffers of its own, for graph capture."""
    from qkbench.case import fresh_copy

    q, k = fresh_copy(inputs.q), fresh_copy(inputs.k)
    args = inputs.with_qk(q, k)
    outs = {} if inplace else {"q_out": torch.empty_like(q), "k_out": torch.empty_like(k)}
    return lambda: args.call(op, inplace=inplace, **outs, **options)


def interleaved(backend, graphs: list, labels: list[str], rounds: int, visit: int,
                shuffle_seed: int | None = None) -> tuple[list[int], dict[str, list[float]]]:
    """Time prepared arms in one schedule: each round visits them in an order rotated by
    one (or, given ``shuffle_seed``, in a random order, so that each arm follows different
    arms), ``visit`` samples of each. Returns the schedule (arm indices) and each arm's
    per-call us in it."""
    n, shuffle = len(labels), random.Random(shuffle_seed)
    orders = [shuffle.sample(range(n), n) if shuffle_seed is not None
              else [(i + r) % n for i in range(n)] for r in range(rounds)]
    sequence = [arm for order in orders for arm in order for _ in range(visit)]
    us = {label: [] for label in labels}
    for arm, s in zip(sequence, backend.run(graphs, sequence, []).seconds, strict=True):
        us[labels[arm]].append(s * 1e6)
    return sequence, us


def identical(a: tuple, b: tuple) -> bool:
    from qkbench.accuracy import differing_share

    return all(differing_share(x, y) == 0.0 for x, y in zip(a, b, strict=True))


def measure_variant(run: Run, backend, entry: dict, label: str, op, inputs, inplace: bool,
                    split_out: tuple, settings: dict, **options) -> None:
    """Check one variant against the split route's output, then time it."""
    from qkbench.kernels import launch, plan

    if run.over_budget():
        entry["results"][label] = {"skipped": "over the time budget"}
        return
    try:
        with plan.use(**settings):
            with launch.recording() as recorded:
                out = call(op, inputs, inplace, **options)
            ok = identical(out, split_out)
            us = per_call_us(run, backend, launcher(op, inputs, inplace, **options))
        entry["results"][label] = {
            "us": us, "bits_equal_split": ok, "settings": settings, **options,
            "launches": [kernel_launch.settings() for kernel_launch, _ in recorded]}
        if not ok:
            run.failures.append(f"{entry['shape']} {label}: differs from split in its bits")
    except Exception as e:  # recorded and reported; the other variants still run
        entry["results"][label] = {"error": f"{type(e).__name__}: {e}"}
        run.failures.append(f"{entry['shape']} {label}: {type(e).__name__}: {e}")


def split_kernels(run: Run, backend, inputs) -> dict:
    """Each of the split route's three launches timed alone, with its own bytes
    (``traffic.split_launch_bytes``, which add up to ``split_bytes``)."""
    from qkbench.kernels import rms_norm, rope, traffic

    opts = inputs.options
    q_out, k_out = torch.empty_like(inputs.q), torch.empty_like(inputs.k)
    norm = {"eps": opts["eps"], "weight_mode": opts["weight_mode"]}
    launches = {
        "norm_q": lambda: rms_norm(inputs.q, inputs.q_weight, out=q_out, **norm),
        "norm_k": lambda: rms_norm(inputs.k, inputs.k_weight, out=k_out, **norm),
        "rope": lambda: rope(q_out, k_out, inputs.positions, inputs.cos_sin_cache,
                             rotary_dim=opts["rotary_dim"], style=opts["style"],
                             mrope_section=opts["mrope_section"],
                             mrope_layout=opts["mrope_layout"]),
    }
    nbytes = inputs.call(traffic.split_launch_bytes)
    return {name: {"us": per_call_us(run, backend, launch), "bytes": nbytes[name]}
            for name, launch in launches.items()}


def rows_copy(run: Run, backend, entry: dict, inputs, inplace: bool) -> dict:
    """The op's rows moved by one launch that does nothing else, at each program size
    (``qkbench.limits.rows_copy``); a copy that missed an element is a failure."""
    from qkbench import limits

    try:
        result = limits.rows_copy(backend, inputs.q, inputs.k, inplace, run.inner_reps,
                                  run.samples)
    except Exception as e:  # recorded and reported; the variants still run
        run.failures.append(f"{entry['shape']} rows copy: {type(e).__name__}: {e}")
        return {}
    if not all(r["copied"] for r in result.values()):
        run.failures.append(f"{entry['shape']}: the rows' copy missed an element")
    return {str(block): {"us": r["median_s"] * 1e6, "bytes": r["bytes"],
                         "copied": r["copied"]} for block, r in result.items()}


def measure_shape(run: Run, backend, shape: Shape) -> dict:
    from qkbench.accuracy import oracle_error, within_tolerance
    from qkbench.case import Case, make_inputs
    from qkbench.kernels import qk_norm_rope, qk_norm_rope_split, reference, traffic

    g = shape.geometry
    inputs = make_inputs(Case(g, shape.tokens, max_position=shape.max_position), 0,
                         run.device)
    entry = {"shape": shape.name, "geometry": g.name, "label": g.label,
             "tokens": shape.tokens, "inplace": g.inplace, "results": {},
             "bytes": {"fused": inputs.call(traffic.fused_bytes),
                       "split": inputs.call(traffic.split_bytes)}}
    split_out = call(qk_norm_rope_split, inputs, g.inplace)
    fused_out = call(qk_norm_rope, inputs, g.inplace)
    oracle = inputs.call(reference.qk_norm_rope_oracle)
    errors = [oracle_error(out, ref) for out, ref in zip(fused_out, oracle, strict=True)]
    entry["oracle"] = {"errors": errors,
                       "ok": all(within_tolerance(e, inputs.q.dtype) for e in errors)}
    if not entry["oracle"]["ok"]:
        run.failures.append(f"{shape.name}: fused misses the FP64 oracle: {errors}")
    del oracle, fused_out

    def copy_launch():
        q, k = torch.empty_like(inputs.q), torch.empty_like(inputs.k)
        return lambda: (q.copy_(inputs.q), k.copy_(inputs.k))

    entry["copy_qk_us"] = per_call_us(run, backend, copy_launch())
    split_us = per_call_us(run, backend, launcher(qk_norm_rope_split, inputs, g.inplace))
    entry["results"]["split"] = {"us": split_us}
    if shape.tokens > DECODE_MAX:
        entry["split_kernels"] = split_kernels(run, backend, inputs)
        if not run.over_budget():
            entry["rows_copy"] = rows_copy(run, backend, entry, inputs, g.inplace)
    measure_variant(run, backend, entry, "fused", qk_norm_rope, inputs, g.inplace, split_out,
                    {})
    decode = shape.tokens <= DECODE_MAX
    if decode:
        measure_variant(run, backend, entry, "fused+pdl", qk_norm_rope, inputs, g.inplace,
                        split_out, {}, pdl=True)
    for label, settings in (DECODE_VARIANTS if decode else LARGE_VARIANTS).items():
        measure_variant(run, backend, entry, f"fused:{label}", qk_norm_rope, inputs,
                        g.inplace, split_out, settings)
    return entry


def shares(entry: dict, copy_gbps: float) -> None:
    """Each timed variant's achieved bandwidth as a share of the copy bandwidth."""
    for label, r in entry["results"].items():
        if "us" in r:
            size = entry["bytes"]["split" if label == "split" else "fused"]
            r["share_of_copy"] = size / (r["us"] * 1e-6) / (copy_gbps * 1e9)
    for r in (*entry.get("split_kernels", {}).values(), *entry.get("rows_copy", {}).values()):
        r["share_of_copy"] = r["bytes"] / (r["us"] * 1e-6) / (copy_gbps * 1e9)


def goal(entry: dict) -> tuple[str, bool | None]:
    """The goal for this shape's fused route and whether the default plan meets it."""
    fused = entry["results"].get("fused", {})
    key = (entry["geometry"], entry["tokens"])
    if key in GOALS_US:
        return f"<= {GOALS_US[key]:.2f} us", ("us" in fused and fused["us"] <= GOALS_US[key])
    if entry["geometry"] in GOALS_SHARE and (entry["tokens"] >= 8192
                                             or entry["geometry"] == "dit-24x24"):
        want = GOALS_SHARE[entry["geometry"]]
        return f">= {want:.0%} copy", ("share_of_copy" in fused
                                       and fused["share_of_copy"] >= want)
    return "", None


def cell(results: dict, label: str, width: int = 15) -> str:
    """One variant's us (and share of copy where the column is wide enough)."""
    v = results.get(label, {})
    if "us" not in v:
        return f"{'err' if 'error' in v else '-':>{width}s}"
    if width < 15:
        return f"{v['us']:{width}.2f}"
    return f"{v['us']:7.2f} ({v.get('share_of_copy', 0):5.1%})"


def table(result: dict) -> str:
    limits = result.get("limits", {})
    lines = [f"device {result['env'].get('gpu', '?')}, torch {result['env']['torch']}, "
             f"triton {result['env']['triton']}; copy {limits.get('copy_gbps', 0):.0f} GB/s, "
             f"empty kernel {limits.get('floor_one_program_us', 0):.2f} us (1 program) / "
             f"{limits.get('floor_one_per_sm_us', 0):.2f} us (1 per SM); one program "
             f"copying a table row {limits.get('floor_fixed_row_us', 0):.2f} us, the row a "
             f"position read first names {limits.get('floor_position_then_row_us', 0):.2f} "
             f"us; graphs of {result['inner_reps']} launches, median of "
             f"{result['samples']} replays"]
    head = (f"{'shape':24s} {'copy qk':>8s} {'split':>15s} {'fused':>15s} {'fused+pdl':>10s} "
            f"{'best fused variant':>26s}  goal")
    lines += [head, "-" * len(head)]
    for entry in result["shapes"]:
        r = entry["results"]
        variants = {k: v for k, v in r.items() if k.startswith("fused") and "us" in v}
        best = min(variants, key=lambda k: variants[k]["us"]) if variants else None
        best_cell = (f"{best} {variants[best]['us']:.2f} ({variants[best]['share_of_copy']:.1%})"
                     if best else "-")
        want, met = goal(entry)
        mark = "" if met is None else (" met" if met else " MISSED")
        bits = all(v.get("bits_equal_split", True) for v in r.values())
        kernels = entry.get("split_kernels")
        split_note = ("  split kernels " + "/".join(f"{k['share_of_copy']:.0%}"
                                                   for k in kernels.values())
                      if kernels else "")
        copies = {b: c for b, c in entry.get("rows_copy", {}).items() if c["copied"]}
        if copies:
            fastest = min(copies, key=lambda b: copies[b]["us"])
            split_note += (f"  rows copied in one launch {copies[fastest]['us']:.2f} us "
                           f"({copies[fastest]['share_of_copy']:.1%}, {fastest} a program)")
        lines.append(f"{entry['shape']:24s} {entry['copy_qk_us']:8.2f} {cell(r, 'split')} "
                     f"{cell(r, 'fused')} {cell(r, 'fused+pdl', 10)} {best_cell:>26s}  "
                     f"{want}{mark}{split_note}"
                     + ("" if bits and entry["oracle"]["ok"] else "  CHECK FAILED"))
    host = result.get("host_cost")
    if host:
        lines.append("host us per eager call (" + host["geometry"] + f" T={host['tokens']}): "
                     + ", ".join(f"{k} {v:.1f}" for k, v in host["us_per_call"].items()
                                 if v is not None))
    if result.get("skipped"):
        lines.append("not measured (time budget): " + ", ".join(result["skipped"]))
    lines.append(f"checks: {'all passed' if not result['failures'] else 'FAILED'}"
                 + "".join(f"\n  {f}" for f in result["failures"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--budget", type=float, default=300.0,
                        help="seconds after which no new shape or variant is started")
    parser.add_argument("--samples", type=int, default=None,
                        help="graph replays per timing (default 100; 1 with --quick)")
    add_device_options(parser)
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="only the shapes of at most this many tokens")
    args = parser.parse_args(argv)
    device = device_of(args)
    from qkbench import env, hostcost, limits
    from qkbench.backends import backend_for

    out = Path(args.out) / "bench_kernels.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    run = Run(out, device, args.samples or (1 if args.quick else 100), args.budget,
              2 if args.quick else 32)
    backend = backend_for(device)
    run.result = {"env": {k: v for k, v in env.capture(device).items()
                          if k not in ("kernels_sha256",)}, "shapes": [],
                  "inner_reps": run.inner_reps, "samples": run.samples,
                  "max_tokens": args.max_tokens}
    run.result["env"]["gpu"] = run.result["env"].get("gpu", {}).get("name", str(device))
    lim = limits.measure(backend, run.inner_reps)
    row_floors = limits.row_floor(backend, run.inner_reps, run.samples)
    run.result["limits"] = {
        "copy_gbps": lim["copy"]["gbps"],
        "floor_one_program_us": lim["launch_floor"]["one_program"]["median_s"] * 1e6,
        "floor_one_per_sm_us": lim["launch_floor"].get("one_per_sm", {}).get("median_s", 0)
        * 1e6,
        **{f"floor_{name}_us": r["median_s"] * 1e6 for name, r in row_floors.items()}}
    if not all(r["row_copied"] for r in row_floors.values()):
        run.failures.append("the row floor's kernel did not copy the row it names")
    for shape in shapes(args.quick):
        if args.max_tokens is not None and shape.tokens > args.max_tokens:
            continue
        print(f"[{time.perf_counter() - run.started:6.1f} s] {shape.name}", file=sys.stderr,
              flush=True)
        if run.over_budget():
            run.result.setdefault("skipped", []).append(shape.name)
            continue
        try:
            entry = measure_shape(run, backend, shape)
        except Exception as e:  # a shape that cannot run is a failure, the rest still run
            run.failures.append(f"{shape.name}: {type(e).__name__}: {e}")
            continue
        shares(entry, run.result["limits"]["copy_gbps"])
        run.result["shapes"].append(entry)
        run.save()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    run.result["host_cost"] = hostcost.measure(device, 2000 if device.type == "cuda" else 1)
    run.save()
    print(table(run.result))
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
