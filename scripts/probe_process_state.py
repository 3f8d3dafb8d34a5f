"""Which of a process's own doings makes its small launches slower than its first.

    python scripts/probe_process_state.py [--out FILE.json] [--samples 60]
    python scripts/probe_process_state.py --device cpu --quick   (exercises the code)

In the archives made on the H200, the first cell a process measured read faster than the
same cell measured later (``scripts/first_cell.py``): at T = 1 the fused kernel 7-14 % and
the split route 5-17 %, while ``fused-pdl`` moved by 2 % or less, and eager and compiled
(torch's and inductor's kernels) by about 1 %. This probe keeps one set of graphs of 32
launches alive for the whole process and times them all, interleaved, after each step
(``steps``; ``--steps`` picks and orders them): nothing, idle, the allocator's cache
emptied, a large allocation freed, new kernel variants compiled and loaded, graphs of
other cells captured and destroyed, a cell's verification, a cell's same-bytes ``copy_``
graph, one whole cell as the harness runs it, a large copy, idle again; and last the same
probes on buffers and graphs made anew. The probes (``probes``) set the op's launch path
beside Triton's own and torch's: the fused op at (32,8) x 128, T = 1, through the op's
launcher (``fused``), with PDL, and through Triton's JIT dispatch (``fused-jit``); the
split route; two one-program Triton kernels launched by Triton (empty, and the table row a
position names: ``limits.row_floor``); past the L2, the fused op at T = 8192 and the rows
copied by one Triton launch (``limits.rows_copy_launch``, 1024 elements a program); and,
only when ``--probes`` names them (a cell's same-bytes copy graph may itself be what changes
the state), a ``copy_`` of T = 1's rows and of T = 8192's. The step after which a probe
slows down names the cause; the probes that slow name what it touches.
"""

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))


def geometry(quick: bool):
    from qkbench.case import Geometry

    return Geometry("tiny", 2, 1, 64) if quick else Geometry("qwen3-32x8", 32, 8, 128)


def fused_launch(device: torch.device, quick: bool, tokens: int, seed: int, **options):
    """A zero-argument launch of the fused op at ``tokens`` on buffers of its own."""
    from bench_kernels import launcher

    from qkbench.case import Case, make_inputs
    from qkbench.kernels import qk_norm_rope

    return launcher(qk_norm_rope, make_inputs(Case(geometry(quick), tokens), seed, device),
                    True, **options)


def triton_dispatch(launch: Callable[[], None]) -> Callable[[], None]:
    """``launch`` through Triton's JIT dispatch instead of the op's own launcher."""
    from qkbench.kernels import launch as launch_path

    def run() -> None:
        direct, launch_path.DIRECT = launch_path.DIRECT, False
        try:
            launch()
        finally:
            launch_path.DIRECT = direct

    return run


PROBES = ("fused", "fused-pdl", "fused-jit", "split", "empty", "row-at-position", "copy_",
          "fused-8192", "rows-copy-8192", "copy_-8192")
# The probes run unless ``--probes`` names others: not the torch ``copy_`` graphs, which a
# cell's ``_copy_reference`` replays too and which may change the state themselves.
DEFAULT_PROBES = tuple(p for p in PROBES if not p.startswith("copy_"))


def probes(device: torch.device, quick: bool, names: Sequence[str]
           ) -> dict[str, Callable[[], None]]:
    """The launches of ``names`` (of ``PROBES``), each on buffers of its own."""
    from bench_kernels import launcher

    from qkbench.case import Case, make_inputs
    from qkbench.kernels import qk_norm_rope_split
    from qkbench.limits import _empty_kernel, _row_kernel, rows_copy_launch

    def row_at_position() -> Callable[[], None]:
        rows = 4096
        pos = torch.tensor([rows - 1], dtype=torch.int64, device=device)
        table = torch.rand(rows, 128, dtype=torch.float32, device=device)
        out = torch.empty(128, dtype=torch.float32, device=device)
        return lambda: _row_kernel[(1,)](pos, table, out, True, 128, num_warps=1)

    def empty() -> Callable[[], None]:
        x = torch.empty(1, device=device)
        return lambda: _empty_kernel[(1,)](x)

    def copy_(tokens: int) -> Callable[[], None]:
        inputs = make_inputs(Case(geometry(quick), tokens), 5, device)
        out = [torch.empty_like(x) for x in (inputs.q, inputs.k)]
        return lambda: (out[0].copy_(inputs.q), out[1].copy_(inputs.k))

    def rows_copy(tokens: int) -> Callable[[], None]:
        inputs = make_inputs(Case(geometry(quick), tokens), 5, device)
        return rows_copy_launch(inputs.q, inputs.k, *(torch.empty_like(x)
                                                     for x in (inputs.q, inputs.k)), 1024)

    large = 3 if quick else 8192
    makers = {
        "fused": lambda: fused_launch(device, quick, 1, 0),
        "fused-pdl": lambda: fused_launch(device, quick, 1, 0, pdl=True),
        "fused-jit": lambda: triton_dispatch(fused_launch(device, quick, 1, 0)),
        "split": lambda: launcher(qk_norm_rope_split,
                                  make_inputs(Case(geometry(quick), 1), 0, device), True),
        "empty": empty,
        "row-at-position": row_at_position,
        "copy_": lambda: copy_(1),
        # Past the L2: does the state touch a bandwidth-bound launch of ours too?
        "fused-8192": lambda: fused_launch(device, quick, large, 5),
        "rows-copy-8192": lambda: rows_copy(large),
        "copy_-8192": lambda: copy_(large),
    }
    return {name: makers[name]() for name in names}


# Token counts of the other cells a step runs: each compiles a kernel variant of its own.
def other_tokens(quick: bool) -> tuple[int, ...]:
    return (2, 3) if quick else (8, 64, 2048)


def other_cells(device: torch.device, quick: bool) -> None:
    """Compile and run the fused op at other token counts (new kernel variants loaded)."""
    for tokens in other_tokens(quick):
        fused_launch(device, quick, tokens, 1)()


def graphs_of_other_cells(backend, device: torch.device, quick: bool, inner_reps: int) -> None:
    """Capture, replay and destroy graphs of other cells, as a sweep's cells do."""
    for tokens in other_tokens(quick):
        launch = fused_launch(device, quick, tokens, 2)
        launch()
        arm = backend.prepare([launch], inner_reps, f"T{tokens}")
        backend.run([arm], [0] * 10, [9])
        del arm
    gc.collect()


def large_allocation(device: torch.device, quick: bool) -> None:
    x = torch.empty((1 << 20) if quick else (8 << 30), dtype=torch.uint8, device=device)
    x.fill_(1)
    del x


def sleep(seconds: float, quick: bool) -> Callable[[], None]:
    return lambda: None if quick else time.sleep(seconds)


def harness_case(quick: bool):
    """The protocol and case of the harness steps: qwen3-decode's second cell (T = 8)."""
    from qkbench.protocol import load

    p = load("smoke" if quick else "qwen3-decode")
    return p, p.cases()[1]


def verification(device: torch.device, quick: bool) -> None:
    """A cell's verification: the FP64 oracle and each route once (``verify.verify``)."""
    from qkbench.case import make_inputs
    from qkbench.routes import resolve
    from qkbench.verify import verify

    p, case = harness_case(quick)
    verify([resolve(name) for name in p.routes], make_inputs(case, 3, device),
           case.geometry.inplace)


def copy_graph(backend, device: torch.device, quick: bool, inner_reps: int) -> None:
    """A cell's same-bytes ``copy_`` of q and k, captured, replayed and destroyed."""
    from qkbench.case import make_inputs

    inputs = make_inputs(harness_case(quick)[1], 4, device)
    q, k = torch.empty_like(inputs.q), torch.empty_like(inputs.k)

    def launch() -> None:
        q.copy_(inputs.q)
        k.copy_(inputs.k)

    launch()
    arm = backend.prepare([launch], inner_reps, "copy")
    backend.run([arm], [0] * 10, [9])
    del arm
    gc.collect()


def harness_cell(backend, quick: bool) -> None:
    """One cell as a sweep's pass runs it (``worker.run_case``: inputs, verification,
    placement, each comparison's three arms, the same-bytes copy), then the cache emptied."""
    from qkbench import worker

    p, case = harness_case(quick)
    worker.run_case(backend, p, case, 1, 0, ("A", "B", "A'"))
    if backend.device.type == "cuda":
        torch.cuda.empty_cache()


def steps(backend, device: torch.device, quick: bool, inner_reps: int
          ) -> dict[str, tuple[str, Callable[[], None]]]:
    """key -> (what the process does before the probes are timed again, the doing)."""
    from qkbench.limits import copy_bandwidth

    empty_cache = torch.cuda.empty_cache if device.type == "cuda" else (lambda: None)
    return {
        "start": ("start", lambda: None),
        "again": ("again", lambda: None),
        "idle3": ("idle 3 s", sleep(3, quick)),
        "empty-cache": ("empty_cache", empty_cache),
        "alloc": ("8 GiB allocated, freed, cache emptied",
                  lambda: (large_allocation(device, quick), empty_cache())),
        "kernels": ("new kernel variants (T = 8, 64, 2048) compiled and run",
                    lambda: other_cells(device, quick)),
        "graphs": ("graphs of other cells captured, replayed, destroyed; cache emptied",
                   lambda: (graphs_of_other_cells(backend, device, quick, inner_reps),
                            empty_cache())),
        "verify": ("a cell's verification (oracle, each route once)",
                   lambda: verification(device, quick)),
        "copy-graph": ("a cell's same-bytes copy_ graph captured, replayed, destroyed",
                       lambda: copy_graph(backend, device, quick, inner_reps)),
        "cell": ("a harness cell (qwen3-decode T = 8), cache emptied",
                 lambda: harness_cell(backend, quick)),
        "copy": ("a 256 MiB copy_, 20 samples", lambda: copy_bandwidth(backend)),
        "idle10": ("idle 10 s", sleep(10, quick)),
        "idle30": ("idle 30 s", sleep(30, quick)),
    }


def time_probes(backend, arms: dict, warmup: int, samples: int) -> dict[str, float]:
    """Median per-call us of each arm, sampled in rounds over the arms, warm-up dropped."""
    names = list(arms)
    rounds = warmup + samples
    sequence = [i for _ in range(rounds) for i in range(len(names))]
    timed = backend.run([arms[n] for n in names], sequence, [len(sequence) - 1])
    per_arm = {n: timed.seconds[i::len(names)][warmup:] for i, n in enumerate(names)}
    return {n: statistics.median(s) * 1e6 for n, s in per_arm.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--steps", default=None,
                        help="comma-separated step keys, in order (default: all, as listed "
                             "in steps())")
    parser.add_argument("--probes", default=",".join(DEFAULT_PROBES),
                        help="comma-separated probes (default: those that are no torch "
                             "copy_, whose graphs may themselves change the state)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from qkbench.backends import backend_for

    backend = backend_for(device)
    inner_reps = 1 if args.quick else 32
    samples, warmup = (2, 1) if args.quick else (args.samples, args.warmup)
    known = steps(backend, device, args.quick, inner_reps)

    def pick(option: str | None, names: list[str], what: str) -> list[str]:
        chosen = option.split(",") if option else names
        unknown = [k for k in chosen if k not in names]
        if unknown:
            parser.error(f"unknown {what} {', '.join(unknown)}; known: {', '.join(names)}")
        return chosen

    plan = [known[k] for k in pick(args.steps, list(known), "step(s)")]
    chosen = pick(args.probes, list(PROBES), "probe(s)")

    def prepared() -> dict:
        """The chosen probes on buffers and graphs of their own, each launched once."""
        launches = probes(device, args.quick, chosen)
        for launch in launches.values():
            launch()
        return {name: backend.prepare([launch], inner_reps, name)
                for name, launch in launches.items()}

    arms = prepared()
    monitor = getattr(backend, "monitor", None)
    rows = []
    for n, (name, action) in enumerate(plan, 1):
        action()
        row = {"step": name, "us": time_probes(backend, arms, warmup, samples),
               "telemetry": monitor.read(0) if monitor else None}
        if n == len(plan):
            row["us_new_graphs"] = time_probes(backend, prepared(), warmup, samples)
        rows.append(row)
        print(f"{name:70s} " + "  ".join(f"{k} {us:7.3f}" for k, us in row["us"].items()),
              flush=True)
        if args.out:
            args.out.write_text(json.dumps({"device": str(device), "rows": rows}, indent=1))
    print("new graphs and buffers  " + "  ".join(f"{k} {us:7.3f}"
                                                 for k, us in rows[-1]["us_new_graphs"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
