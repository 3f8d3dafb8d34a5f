"""Read, with Nsight Compute, the shared-memory split the driver configures for each launch
of the fused kernel, after kernels that carve out shared memory and after kernels that do not.

    python scripts/carveout_sequence.py --out DIR    # runs itself under ncu, then reads it
    python scripts/carveout_sequence.py --launch [--device cpu --quick]   # the launches alone

The launches run eagerly in the order of ``SEQUENCE``, all compiled and warmed first. Only
the fused kernel's launches in the sequence are profiled: ``ncu --profile-from-start off``,
with the profiler started and stopped around the sequence, and ``-k regex:qk_norm_rope``.
ncu reads their Launch Statistics and Occupancy sections, flushes no cache before them and
leaves the clocks alone.

For each launch, it reads the shared-memory configuration size the driver chose, how many
programs that size lets a multiprocessor hold (``Block Limit Shared Mem``), the theoretical
occupancy, and the function's cache configuration. Under the carveout guess
(``docs/kernel-notes.md``), the fused kernel's configuration after ``gemm`` or
``triton-smem`` is the large one those chose, and it stays so after ``fused``. The twins
of the layer bench (``bench_layer.TWINS``) ask for a split of their own: ``fused-l1`` all
L1, which may cap the programs a multiprocessor holds; ``fused-fit`` the least that does
not.

Writes ``DIR/carveout.ncu-rep``, ``DIR/carveout.csv`` (ncu's details page) and
``DIR/carveout.json``, and prints one line per launch of ours.
"""

import argparse
import csv
import glob
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_kernels import add_device_options, device_of

# The launches of the fused kernel (profiled), and the others between them (not profiled).
OURS = ("fused", "fused-l1", "fused-fit", "fused-pdl")
SEQUENCE = ("fused", "fused", "gemm", "fused", "fused", "torch-op", "fused", "copy", "fused",
            "eager", "fused", "gemm", "fused", "triton-smem", "fused", "fused", "gemm",
            "fused-l1", "fused", "gemm", "fused-fit", "fused", "gemm", "fused-pdl", "fused")
# Where Nsight Compute installs itself when not on the PATH.
NCU_GLOB = "/opt/nvidia/nsight-compute/*/ncu"
# The Launch Statistics and Occupancy rows kept per launch (the first three are printed).
KEPT = ("Shared Memory Configuration Size", "Block Limit Shared Mem", "Theoretical Occupancy",
        "Function Cache Configuration", "Driver Shared Memory Per Block",
        "Static Shared Memory Per Block", "Dynamic Shared Memory Per Block",
        "Registers Per Thread", "Block Limit Registers", "Block Limit Warps")


def labels() -> list[str]:
    """Each profiled launch's name, with what ran just before it."""
    return [f"{step} after {SEQUENCE[n - 1] if n else 'start'}"
            for n, step in enumerate(SEQUENCE) if step in OURS]


def launches(device: torch.device, quick: bool) -> dict[str, Callable[[], object]]:
    """Every step of ``SEQUENCE``, ready and launched once (compiled, warm)."""
    import carveout
    import probe_process_state as probe
    from bench_layer import TWINS, twin

    from qkbench.kernels import launch
    from qkbench.routes import resolve

    fused = probe.fused_launch(device, quick, 1, 0)
    with launch.recording() as recorded:
        fused()
    (kernel_launch, ptrs), = recorded

    def twin_launch(suffix: str) -> Callable[[], object]:
        """The fused kernel's twin of the layer bench (``bench_layer.TWINS``), its carveout
        set."""
        stages, preference = TWINS[suffix]
        kernel_twin = twin(kernel_launch, ptrs, stages)
        kernel_twin(ptrs)
        if device.type == "cuda":
            carveout.apply(kernel_twin.compiled[torch.cuda.current_device()], preference,
                           kernel_launch.options["num_warps"], torch.cuda.current_device())
        return lambda: kernel_twin(ptrs)

    eager_inputs = probe.inputs_at(device, quick, 1, 7)
    steps = {"fused": fused, "fused-l1": twin_launch("-l1"), "fused-fit": twin_launch("-fit"),
             "fused-pdl": probe.fused_launch(device, quick, 1, 1, pdl=True),
             "gemm": probe.gemm(device, quick), "triton-smem": probe.triton_smem(device, quick),
             "torch-op": probe.torch_elementwise(device),
             "copy": probe.same_bytes_copy(device, quick),
             "eager": lambda: eager_inputs.call(resolve("eager").op, inplace=False)}
    for step in steps.values():
        step()
    return steps


@contextmanager
def profiled(device: torch.device) -> Iterator[None]:
    """The CUDA profiler on for the block's launches, and only those (a no-op unless run
    under ncu ``--profile-from-start off``, and on the CPU)."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
    yield
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


def run_sequence(device: torch.device, quick: bool) -> None:
    """The sequence, the profiler on around it."""
    steps = launches(device, quick)
    with profiled(device):
        for step in SEQUENCE:
            steps[step]()


def ncu_csv(text: str, page: str) -> list[dict[str, str]]:
    """The rows of ncu's ``--csv --page PAGE`` output, from its header on (the lines
    before it are the profiler's own)."""
    start = text.find('"ID"')
    if start < 0:
        raise SystemExit("ncu's report holds no profiled launch (no \"ID\" header in its "
                         f"{page} page): {text[:300]!r}")
    return list(csv.DictReader(io.StringIO(text[start:])))


def read_details(text: str) -> list[dict[str, str]]:
    """Per profiled launch, in launch order, its kernel's name and the ``KEPT`` rows of its
    sections, from ncu's ``--csv --page details`` output."""
    rows = ncu_csv(text, "details")
    by_id: dict[int, dict[str, str]] = {}
    for row in rows:
        entry = by_id.setdefault(int(row["ID"]), {"kernel": row["Kernel Name"]})
        if row["Metric Name"] in KEPT:
            entry[row["Metric Name"]] = f"{row['Metric Value']} {row['Metric Unit']}".strip()
    return [by_id[i] for i in sorted(by_id)]


def table(names: list[str], details: list[dict[str, str]]) -> list[dict[str, str]]:
    """Each profiled launch's label beside what ncu read of it."""
    if len(details) != len(names):
        raise SystemExit(f"ncu profiled {len(details)} launches of the fused kernel; the "
                         f"sequence has {len(names)}")
    return [{"launch": name, **d} for name, d in zip(names, details, strict=True)]


def find_ncu() -> str:
    found = shutil.which("ncu") or next(iter(sorted(glob.glob(NCU_GLOB), reverse=True)), None)
    if found is None:
        raise SystemExit(f"ncu (Nsight Compute) is neither on the PATH nor at {NCU_GLOB}")
    return found


def under_ncu(out: Path) -> int:
    ncu = find_ncu()
    out.mkdir(parents=True, exist_ok=True)
    report = out / "carveout"
    # No cache flush before a profiled launch: the split is what is read, and a flush might
    # disturb it.
    subprocess.run([ncu, "--clock-control", "none", "--cache-control", "none",
                    "--profile-from-start", "off", "--section", "LaunchStats",
                    "--section", "Occupancy", "-k", "regex:qk_norm_rope", "-f",
                    "-o", str(report), sys.executable, __file__, "--launch"], check=True)
    text = subprocess.run([ncu, "--import", f"{report}.ncu-rep", "--csv", "--page",
                           "details"], check=True, capture_output=True, text=True).stdout
    (out / "carveout.csv").write_text(text)
    rows = table(labels(), read_details(text))
    (out / "carveout.json").write_text(json.dumps(rows, indent=1))
    for row in rows:
        print(f"{row['launch']:28s} " + "  ".join(
            f"{k}: {row.get(k, '-')}" for k in KEPT[:3]))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--launch", action="store_true",
                        help="run the launches alone (what ncu profiles)")
    add_device_options(parser)
    args = parser.parse_args(argv)
    device = device_of(args)
    if args.launch:
        run_sequence(device, args.quick)
        return 0
    return under_ncu(Path(args.out))


if __name__ == "__main__":
    sys.exit(main())
