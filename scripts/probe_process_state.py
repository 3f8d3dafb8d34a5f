"""What sets the state that makes our non-PDL launches slower, and what clears it.

    python scripts/probe_process_state.py [--out FILE.json] [--steps KEY,...] [--probes NAME,...]
    python scripts/probe_process_state.py --device cpu --quick   (exercises the code)

Two readings of the archives (``scripts/run_context.py``, ``docs/kernel-notes.md``):

* The first cell a process measures reads faster than the same cell measured later: at
  T = 1 the fused kernel by 7-14 %, the split route by 5-17 %. Fused-pdl, eager and
  compiled move by 2 % or less.
* Within one cell and pass, the split arms read 11-12 % faster at T <= 64 (9 % at
  T = 128-2048) in the comparison with ``fused-pdl`` than in the one with ``fused``. In
  the comparisons with eager or compiled they read like later cells.

So the speed of a non-PDL launch of ours seems to hang on a sticky state of the card,
set by what ran before it. This probe keeps one set of 32-launch graphs of our non-PDL
kernels alive for the whole process (``probes``):
- the fused op at (32,8) x 128, T = 1, through the op's launcher and through Triton's JIT
  dispatch;
- the split route;
- two one-program Triton kernels (empty; the table row a position names), the second
  twice, once with the preferred shared-memory carveout at 0 (all L1);
- past the L2, the fused op at T = 8192 and the rows copied by one Triton launch.

Interleaved among themselves, it times them after each step (``steps``; ``--steps`` picks
and orders them, and may repeat one):
- nothing, idle;
- graphs of other kernels replayed: fused with PDL, a bf16 GEMM (cuBLAS), a Triton GEMM
  of 128 KiB shared memory a program, a torch elementwise op, a cell's same-bytes
  ``copy_``;
- the allocator's cache emptied, 8 GiB allocated and freed;
- new kernel variants compiled; other cells' graphs captured and destroyed;
- a cell's verification; one whole cell as a pass runs it; a 256 MiB copy;
- and the carveout at 0 set on every compiled kernel of ours, the graphs captured anew.

A step after which the probes slow down sets the state; one after which they speed up
clears it. A probe that does not move, while the others do, says what the state touches.
The states a step leaves are not undone, so a second process with another order
(``--steps``) separates steps that the first order confounds.
"""

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_kernels import add_device_options, device_of


def prefer_l1(compiled) -> None:
    """Ask the driver to run ``compiled`` (a Triton CompiledKernel) with all L1, no shared
    memory carved out, whatever ran before it (a no-op without a compiled CUDA kernel)."""
    import carveout

    if hasattr(compiled, "function"):
        carveout.set_carveout(compiled, 0)


def geometry(quick: bool):
    from qkbench.case import Geometry

    return Geometry("tiny", 2, 1, 64) if quick else Geometry("qwen3-32x8", 32, 8, 128)


def inputs_at(device: torch.device, quick: bool, tokens: int, seed: int):
    from qkbench.case import Case, make_inputs

    return make_inputs(Case(geometry(quick), tokens), seed, device)


def fused_launch(device: torch.device, quick: bool, tokens: int, seed: int, **options):
    """A zero-argument launch of the fused op at ``tokens`` on buffers of its own."""
    from bench_kernels import launcher

    from qkbench.kernels import qk_norm_rope

    return launcher(qk_norm_rope, inputs_at(device, quick, tokens, seed), True, **options)


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


PROBES = ("fused", "fused-jit", "split", "empty", "row-at-position", "row-at-position-l1",
          "fused-8192", "rows-copy-8192")


def probes(device: torch.device, quick: bool, names: Sequence[str]
           ) -> dict[str, Callable[[], None]]:
    """The launches of ``names`` (of ``PROBES``), each on buffers of its own."""
    from bench_kernels import launcher

    from qkbench.kernels import qk_norm_rope_split
    from qkbench.limits import _row_kernel, empty_launch, rows_copy_launch

    def row_at_position(carveout_0: bool) -> Callable[[], None]:
        rows = 4096
        pos = torch.tensor([rows - 1], dtype=torch.int64, device=device)
        table = torch.rand(rows, 128, dtype=torch.float32, device=device)
        out = torch.empty(128, dtype=torch.float32, device=device)
        # num_stages (meaningless for a loop-free kernel) makes the carveout-0 twin a
        # compiled kernel, and so a CUfunction, of its own.
        stages = 1 if carveout_0 else 3

        def launch():
            return _row_kernel[(1,)](pos, table, out, True, 128, num_warps=1,
                                     num_stages=stages)

        if carveout_0:
            prefer_l1(launch())
        return launch

    def rows_copy(tokens: int) -> Callable[[], None]:
        x = inputs_at(device, quick, tokens, 5)
        return rows_copy_launch(x.q, x.k, torch.empty_like(x.q), torch.empty_like(x.k), 1024)

    large = 3 if quick else 8192
    makers = {
        "fused": lambda: fused_launch(device, quick, 1, 0),
        "fused-jit": lambda: triton_dispatch(fused_launch(device, quick, 1, 0)),
        "split": lambda: launcher(qk_norm_rope_split, inputs_at(device, quick, 1, 0), True),
        "empty": lambda: empty_launch(device),
        "row-at-position": lambda: row_at_position(False),
        "row-at-position-l1": lambda: row_at_position(True),
        # Past the L2: does the state touch a bandwidth-bound launch of ours too?
        "fused-8192": lambda: fused_launch(device, quick, large, 5),
        "rows-copy-8192": lambda: rows_copy(large),
    }
    return {name: makers[name]() for name in names}


def replayed(backend, launch: Callable[[], None], inner_reps: int, label: str,
             replays: int = 20) -> float:
    """Capture ``launch`` in a graph, replay it ``replays`` times, destroy it: the median
    per-call us of those replays."""
    launch()
    arm = backend.prepare([launch], inner_reps, label)
    seconds = backend.run([arm], [0] * replays, [replays - 1]).seconds
    del arm
    gc.collect()
    return statistics.median(seconds) * 1e6


# Token counts of the other cells a step runs: each compiles a kernel variant of its own.
def other_tokens(quick: bool) -> tuple[int, ...]:
    return (2, 3) if quick else (8, 64, 2048)


def gemm(device: torch.device, quick: bool) -> Callable[[], None]:
    """A bf16 GEMM, as a model's projections run before the op (cuBLAS; large shared
    memory on Hopper)."""
    n = 64 if quick else 4096
    a, b = (torch.randn(n, n, device=device).to(torch.bfloat16) for _ in range(2))
    out = torch.empty_like(a)
    return lambda: torch.mm(a, b, out=out)


def triton_smem(device: torch.device, quick: bool) -> Callable[[], None]:
    """A Triton GEMM whose 128 x 256 and 256 x 128 tiles take 128 KiB of shared memory a
    program (131072 bytes in Triton 3.6's sm_90 build; past 48 KiB Triton asks the driver
    to prefer shared memory for it): not torch's, but a shared-memory-heavy kernel, to
    tell the carveout guess from one about torch's kernels."""
    # Defined here, not at import: under the interpreter TRITON_INTERPRET is set by main.
    import triton
    import triton.language as tl

    @triton.jit
    def smem_matmul(a_ptr, b_ptr, c_ptr, N: tl.constexpr, BLOCK: tl.constexpr,
                    BK: tl.constexpr):
        rm = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        rn = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BLOCK, BLOCK), tl.float32)
        for k in range(0, N, BK):
            a = tl.load(a_ptr + rm[:, None] * N + (k + rk)[None, :])
            b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))

    n, block, bk = (32, 16, 16) if quick else (4096, 128, 256)
    a, b = (torch.randn(n, n, device=device).to(torch.bfloat16) for _ in range(2))
    out = torch.empty_like(a)
    grid = (n // block, n // block)
    return lambda: smem_matmul[grid](a, b, out, n, block, bk, num_warps=8, num_stages=1)


def torch_elementwise(device: torch.device) -> Callable[[], None]:
    x = torch.randn(4096, device=device)
    return lambda: x.mul_(1.0)


# The kinds of kernel the FP64 oracle launches, each a step of its own (``oracle_part``).
ORACLE_PARTS = {"fp64": "a float64 multiply over a cell's q",
                "reduce32": "a float32 mean over a cell's q rows",
                "reduce64": "a float64 mean over a cell's q rows",
                "gather": "a cell's table rows gathered by position",
                "cast64": "a cell's q cast to float64 (a new tensor)",
                "table64": "the whole table cast to float64, as the oracle casts it",
                "index": "the table indexed by position and lane, as the oracle indexes it",
                "cat": "two float64 halves of a cell's q concatenated"}


def oracle_part(device: torch.device, quick: bool, part: str) -> Callable[[], None]:
    """The launch of ``ORACLE_PARTS[part]`` on a cell's inputs, its buffers made first."""
    x = cell_inputs(device, quick)
    table = x.cos_sin_cache
    if part == "gather":
        out = torch.empty((x.positions.numel(), table.shape[-1]), dtype=table.dtype,
                          device=device)
        return lambda: torch.index_select(table, 0, x.positions.reshape(-1), out=out)
    if part == "table64":
        return lambda: table.to(torch.float64)
    if part == "index":
        half = table.shape[-1] // 2
        pos = x.positions.reshape(-1, 1).expand(-1, half).long()
        lanes = torch.arange(half, device=device)
        return lambda: table[pos, lanes]
    if part == "cast64":
        return lambda: x.q.double()
    if part == "cat":
        halves = x.q.double().chunk(2, dim=-1)
        return lambda: torch.cat(halves, -1)
    q = x.q.float()
    if part == "fp64":
        q64 = q.double()
        return lambda: q64.mul_(1.0)
    source = q.double() if part == "reduce64" else q
    out = torch.empty((*q.shape[:-1], 1), dtype=source.dtype, device=device)
    return lambda: torch.mean(source, -1, keepdim=True, out=out)


def same_bytes_copy(device: torch.device, quick: bool) -> Callable[[], None]:
    """A cell's same-bytes ``copy_`` of q and k (``worker._copy_reference``)."""
    x = inputs_at(device, quick, 8, 4)
    q, k = torch.empty_like(x.q), torch.empty_like(x.k)
    return lambda: (q.copy_(x.q), k.copy_(x.k))


def large_allocation(device: torch.device, quick: bool, fill: bool = True) -> None:
    """8 GiB allocated (and filled by a kernel if ``fill``), then freed to the cache."""
    x = torch.empty((1 << 20) if quick else (8 << 30), dtype=torch.uint8, device=device)
    if fill:
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


def cell_inputs(device: torch.device, quick: bool):
    """The inputs of the harness steps' cell, made as a cell makes them."""
    from qkbench.case import make_inputs

    _, case = harness_case(quick)
    return make_inputs(case, 3, device)


def oracle(inputs) -> Callable[[], None]:
    """The FP64 oracle of ``inputs`` (the first part of a verification), synchronised."""
    from qkbench.kernels import reference

    def run() -> None:
        inputs.call(reference.qk_norm_rope_oracle)
        if inputs.q.is_cuda:
            torch.cuda.synchronize()
    return run


def copies(device: torch.device, to_device: bool) -> Callable[[], None]:
    """A 1 MiB copy between pageable host memory and the device, buffers made first."""
    host = torch.ones(1 << 18)
    on_device = torch.ones(1 << 18, device=device)
    if to_device:
        return lambda: on_device.copy_(host)
    return lambda: host.copy_(on_device)  # synchronous: pageable memory


def harness_cell(backend, quick: bool) -> None:
    """One cell as a sweep's pass runs it (``worker.run_case``: inputs, verification,
    placement, each comparison's three arms, the same-bytes copy), then the cache emptied."""
    from qkbench import worker

    p, case = harness_case(quick)
    worker.run_case(backend, p, case, 1, 0, ("A", "B", "A'"))
    if backend.device.type == "cuda":
        torch.cuda.empty_cache()


# A step: what it does, the doing (which may return the per-call us of a graph it replayed),
# and whether the probes' graphs are captured anew after it.
Step = tuple[str, Callable[[], float | None], bool]


def steps(backend, device: torch.device, quick: bool, inner_reps: int,
          ours: list) -> dict[str, Callable[[], Step]]:
    """key -> what makes the step (its buffers and launches: only the steps a run asks
    for are made, before its first reading); ``ours``: the op's kernel launches behind the
    probes (their compiled kernels take the carveout at ``prefer-l1``)."""
    from qkbench.limits import copy_bandwidth, empty_launch

    empty_cache = torch.cuda.empty_cache if device.type == "cuda" else (lambda: None)
    synchronize = backend.synchronize
    gib = (1 << 20) if quick else (1 << 30)  # the steps' "1 GiB" (1 MiB under --quick)

    def gib_buffer(gibs: int = 1) -> torch.Tensor:
        return torch.empty(gibs * gib, dtype=torch.uint8, device=device)

    def graph_of(make: Callable[[], Callable[[], None]], label: str):
        return lambda: replayed(backend, make(), inner_reps, label)

    def allocate() -> None:
        large_allocation(device, quick)
        empty_cache()

    def new_kernels() -> None:
        for tokens in other_tokens(quick):
            fused_launch(device, quick, tokens, 1)()

    def other_graphs() -> None:
        for tokens in other_tokens(quick):
            replayed(backend, fused_launch(device, quick, tokens, 2), inner_reps, f"T{tokens}")
        empty_cache()

    def copy() -> None:
        copy_bandwidth(backend)

    def eager(launch: Callable[[], object], stream: bool = False):
        """``launch`` (its buffers made before the first step, so the step allocates
        nothing; it may compile, which leaves the state as it is) run once outside a graph
        (on a stream of its own if ``stream``), then the device synchronised."""
        side = torch.cuda.Stream(device) if stream and device.type == "cuda" else None

        def run() -> None:
            with torch.cuda.stream(side) if side else nullcontext():
                launch()
            synchronize()
        return run

    def bare_allocation() -> None:
        large_allocation(device, quick, fill=False)
        empty_cache()

    kept: list[torch.Tensor] = []

    def keep_allocation() -> None:
        kept.append(gib_buffer())

    def free_kept() -> None:
        kept.clear()
        empty_cache()

    def make_inputs() -> None:
        cell_inputs(device, quick)

    def fill_cached(gibs: int = 1) -> Callable[[], None]:
        """``gibs`` GiB allocated, filled and freed to the allocator's cache before the first
        step; each step takes it back from the cache (no cudaMalloc, unless a step before
        emptied the cache), fills it and frees it: a fresh mapping's first fill (``alloc``)
        without the fresh mapping."""
        gib_buffer(gibs).fill_(0)

        def fill() -> None:
            gib_buffer(gibs).fill_(1)
            synchronize()
        return fill

    def fill_in_use() -> Callable[[], None]:
        filled = gib_buffer()
        filled.fill_(0)

        def fill() -> None:
            filled.fill_(1)
            synchronize()
        return fill

    def carveout() -> None:
        for kernel_launch in ours:
            for compiled in kernel_launch.compiled.values():
                prefer_l1(compiled)

    makers = {
        "start": lambda: ("start", lambda: None, False),
        "again": lambda: ("again", lambda: None, False),
        "idle3": lambda: ("idle 3 s", sleep(3, quick), False),
        "pdl": lambda: ("a graph of fused-pdl at T = 1 replayed 20 times",
                graph_of(lambda: fused_launch(device, quick, 1, 6, pdl=True), "pdl"), False),
        "gemm": lambda: ("a graph of a bf16 4096^3 GEMM replayed 20 times",
                 graph_of(lambda: gemm(device, quick), "gemm"), False),
        "triton-smem": lambda: ("a graph of a Triton 4096^3 GEMM, 128 KiB shared memory a program, "
                        "replayed 20 times",
                        graph_of(lambda: triton_smem(device, quick), "triton-smem"), False),
        "torch-op": lambda: ("a graph of a torch elementwise op replayed 20 times",
                     graph_of(lambda: torch_elementwise(device), "torch-op"), False),
        "copy-graph": lambda: ("a cell's same-bytes copy_ graph replayed 20 times",
                       graph_of(lambda: same_bytes_copy(device, quick), "copy"), False),
        "empty-cache": lambda: ("empty_cache", empty_cache, False),
        "alloc": lambda: ("8 GiB allocated, freed, cache emptied", allocate, False),
        "kernels": lambda: ("new kernel variants (T = 8, 64, 2048) compiled and run", new_kernels,
                    False),
        "graphs": lambda: ("graphs of other cells captured, replayed, destroyed; cache emptied",
                   other_graphs, False),
        "verify": lambda: ("a cell's verification (oracle, each route once)",
                   lambda: verification(device, quick), False),
        "cell": lambda: ("a harness cell (qwen3-decode T = 8), cache emptied",
                 lambda: harness_cell(backend, quick), False),
        "copy": lambda: ("a 256 MiB copy_, 20 samples", copy, False),
        "prefer-l1": lambda: ("carveout 0 on the op's kernels; the probes' graphs captured anew",
                      carveout, True),
        "idle10": lambda: ("idle 10 s", sleep(10, quick), False),
        "sync": lambda: ("the device synchronised", synchronize, False),
        "alloc-bare": lambda: ("8 GiB allocated (no kernel), freed, cache emptied", bare_allocation,
                       False),
        "malloc": lambda: ("1 GiB allocated (no kernel) and kept", keep_allocation, False),
        "free": lambda: ("the kept allocations freed, cache emptied", free_kept, False),
        "eager-empty": lambda: ("Triton's empty kernel launched once outside a graph",
                        eager(empty_launch(device)), False),
        "eager-empty-stream": lambda: ("Triton's empty kernel launched once outside a graph, on a "
                               "stream of its own", eager(empty_launch(device), True), False),
        "eager-torch": lambda: ("a torch elementwise op launched once outside a graph",
                        eager(torch_elementwise(device)), False),
        "eager-fused": lambda: ("the fused op at T = 1 launched once outside a graph",
                        eager(fused_launch(device, quick, 1, 7)), False),
        "fill": lambda: ("a 1 GiB fill_ of memory allocated and touched before the first step",
                 fill_in_use(), False),
        "fill-cached": lambda: ("1 GiB taken from the allocator's cache, filled, freed to it",
                                fill_cached(), False),
        "fill8-cached": lambda: ("8 GiB taken from the allocator's cache, filled, freed to it",
                                 fill_cached(8), False),
        "eager-fused-8192": lambda: ("the fused op at T = 8192 launched once outside a graph",
                             eager(fused_launch(device, quick, 3 if quick else 8192, 8)),
                             False),
        "eager-pdl-empty": lambda: ("Triton's empty kernel launched once outside a graph, with PDL",
                            eager(empty_launch(device, pdl=True)), False),
        "inputs": lambda: ("a cell's inputs made (allocations, fills, copies)",
                           make_inputs, False),
        **{f"oracle-{part}": (lambda part=part, what=what: (
            f"{what}, once outside a graph", eager(oracle_part(device, quick, part)), False))
           for part, what in ORACLE_PARTS.items()},
        "oracle": lambda: ("a cell's FP64 oracle (torch ops)",
                           oracle(cell_inputs(device, quick)), False),
        "h2d": lambda: ("a 1 MiB copy from pageable host memory to the device",
                        eager(copies(device, True)), False),
        "d2h": lambda: ("a 1 MiB copy from the device to pageable host memory",
                        eager(copies(device, False)), False),
        "pdl-empty": lambda: ("a graph of Triton's empty kernel with PDL replayed 20 times",
                      graph_of(lambda: empty_launch(device, pdl=True), "pdl-empty"), False),
    }
    return makers


# The default order: the cheap setters first, each checked for a reset by PDL after it;
# then what a pass does between cells; then the carveout.
DEFAULT_STEPS = ("start", "again", "idle3", "pdl", "triton-smem", "again", "pdl", "torch-op",
                 "pdl", "gemm", "again", "pdl",
                 "copy-graph", "again", "pdl", "empty-cache", "alloc", "kernels", "graphs",
                 "verify", "cell", "copy", "idle10", "gemm", "prefer-l1", "gemm", "again")


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
    add_device_options(parser)
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--steps", default=",".join(DEFAULT_STEPS),
                        help="comma-separated step keys, in order, repeats allowed")
    parser.add_argument("--probes", default=",".join(PROBES),
                        help="comma-separated probes (default: all)")
    args = parser.parse_args(argv)
    device = device_of(args)
    from qkbench.backends import backend_for
    from qkbench.kernels import launch as launch_path

    backend = backend_for(device)
    inner_reps = 1 if args.quick else 32
    samples, warmup = (2, 1) if args.quick else (args.samples, args.warmup)
    ours: list = []  # the op's kernel launches behind the probes
    known = steps(backend, device, args.quick, inner_reps, ours)

    def pick(option: str, names: Sequence[str], what: str) -> list[str]:
        chosen = option.split(",")
        unknown = [k for k in chosen if k not in names]
        if unknown:
            parser.error(f"unknown {what} {', '.join(unknown)}; known: {', '.join(names)}")
        return chosen

    plan = pick(args.steps, list(known), "step(s)")
    made = {key: known[key]() for key in dict.fromkeys(plan)}
    chosen = pick(args.probes, PROBES, "probe(s)")

    def prepared() -> dict:
        """The chosen probes on buffers and graphs of their own, each launched once."""
        launches = probes(device, args.quick, chosen)
        with launch_path.recording() as recorded:
            for launch in launches.values():
                launch()
        ours[:] = [kernel_launch for kernel_launch, _ in recorded]
        return {name: backend.prepare([launch], inner_reps, name)
                for name, launch in launches.items()}

    arms = prepared()
    monitor = getattr(backend, "monitor", None)
    rows = []
    for key in plan:
        name, action, remake = made[key]
        step_us = action()
        if remake:
            arms = prepared()
        # The decode probes first, interleaved among themselves, then the large ones: a
        # state a large launch sets reaches the decode probes only after the next step.
        us = {}
        for group in (False, True):
            group_arms = {n: a for n, a in arms.items() if n.endswith("-8192") == group}
            if group_arms:
                us.update(time_probes(backend, group_arms, warmup, samples))
        row = {"step": key, "what": name, "step_us": step_us, "us": us,
               "telemetry": monitor.read(0) if monitor else None}
        rows.append(row)
        print(f"{key:12s} " + ("" if step_us is None else f"[{step_us:8.3f}] ")
              + "  ".join(f"{k} {us:7.3f}" for k, us in row["us"].items()), flush=True)
        if args.out:
            args.out.write_text(json.dumps({"device": str(device), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
