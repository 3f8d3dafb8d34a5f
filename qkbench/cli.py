"""The command line: parses, calls the library, renders. Errors become one red line."""

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from qkbench.errors import DeviceError, QkbenchError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Null-arm microbenchmarks of fused QK RMSNorm + RoPE.")
# Not a terminal: plain text, and wide enough that tables are not squeezed.
out = Console(width=None if sys.stdout.isatty() else 220)
err = Console(stderr=True)

DeviceOpt = Annotated[str, typer.Option(help="auto (CUDA when present, else CPU), cuda, cpu")]
ProtocolOpt = Annotated[str | None, typer.Option(
    help="a protocol file (a path: has a '/' or ends in .toml), or a shipped protocol's bare "
         "name (default: text-decode on CUDA, smoke on CPU)")]


def _device(spec: str):
    """Resolve --device; on the CPU the Triton kernels must run in the interpreter, which
    has to be chosen before they are imported."""
    import torch

    if spec not in ("auto", "cuda", "cpu"):
        raise DeviceError(f"--device must be auto, cuda or cpu, got {spec!r}")
    if spec == "cuda" and not torch.cuda.is_available():
        raise DeviceError("--device cuda: no CUDA device is available here")
    use_cuda = spec == "cuda" or (spec == "auto" and torch.cuda.is_available())
    if not use_cuda:
        os.environ["TRITON_INTERPRET"] = "1"
    device = torch.device("cuda" if use_cuda else "cpu")
    if spec == "auto":
        err.print(f"device: {device} ({'CUDA found' if use_cuda else 'no CUDA device'})")
    return device


def _protocol(spec: str | None, device):
    from qkbench.protocol import load

    return load(spec or ("text-decode" if device.type == "cuda" else "smoke"))


def _fail(e: QkbenchError) -> None:
    err.print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


@app.command()
def sweep(
    protocol: ProtocolOpt = None,
    route: Annotated[list[str] | None, typer.Option(
        help="repeat: the first is the baseline (also the null arm), the rest candidates")] = None,
    device: DeviceOpt = "auto",
    passes: Annotated[int | None, typer.Option(help="passes (arm orders rotate)")] = None,
    warmup: Annotated[int | None, typer.Option()] = None,
    samples: Annotated[int | None, typer.Option()] = None,
    inner_reps: Annotated[int | None, typer.Option(help="launches per graph replay")] = None,
    schedule: Annotated[str | None, typer.Option(help="interleaved or blocked")] = None,
    isolation: Annotated[str | None, typer.Option(help="process or inprocess")] = None,
    threshold: Annotated[float | None, typer.Option(help="drop rule on |null|")] = None,
    cache: Annotated[str | None, typer.Option(help="hot or cold")] = None,
    out_path: Annotated[Path | None, typer.Option("--out", help="archive path")] = None,
    resume: Annotated[bool, typer.Option(help="continue the archive at --out")] = False,
) -> None:
    """Run the split / candidate / split-again arms over a protocol and archive every pass."""
    try:
        dev = _device(device)
        proto = _protocol(protocol, dev).with_overrides(
            routes=route, passes=passes, warmup=warmup, samples=samples, inner_reps=inner_reps,
            schedule=schedule, isolation=isolation, drop_threshold=threshold, cache=cache)
        from qkbench import report, runner

        if resume and out_path is None:
            raise QkbenchError("--resume needs --out, the archive to continue")
        path = out_path or Path("results") / (
            f"{proto.name}-{dev.type}-{time.strftime('%Y%m%d-%H%M%S')}.json")
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err, transient=True) as bar:
            passes_task = bar.add_task("passes", total=proto.timing.passes)
            cases_task = bar.add_task("cases", total=len(proto.cases()))

            def started(index: int, total: int) -> None:
                bar.update(cases_task, completed=0, description=f"pass {index + 1}/{total}")

            events = runner.Events(
                pass_started=started,
                case_done=lambda done, total: bar.update(cases_task, completed=done),
                pass_finished=lambda index, status: bar.advance(passes_task))
            run = runner.sweep(proto, dev, path, resume=resume, command=sys.argv, events=events)
        out.print(report.as_rich(run))
        err.print(f"archive: {path}")
        failed = [p["index"] for p in run["passes"] if p["status"] != "ok"]
        problems = []
        if failed:
            problems.append(f"{len(failed)} of {proto.timing.passes} passes failed "
                            f"(passes {failed}; their output is in the archive)")
        invalid = report.invalid(run)
        if invalid:
            more = len(invalid) - 1
            problems.append(invalid[0] + (f"; and {more} more invalid (route, case) "
                                          f"pair{'s' * (more > 1)}, listed above" if more else ""))
        if problems:
            raise QkbenchError("; ".join(problems))
    except QkbenchError as e:
        _fail(e)
    except KeyboardInterrupt:
        err.print("[red]interrupted:[/red] finished passes are in the archive; "
                  "continue with --resume --out ARCHIVE")
        raise typer.Exit(130) from None


@app.command("report")
def report_cmd(
    archive: Path,
    format: Annotated[str, typer.Option(help="rich, markdown or json")] = "rich",
) -> None:
    """Render an archive's summary."""
    try:
        from qkbench import archive as archives
        from qkbench import report

        run = archives.read(archive)
        if format == "rich":
            out.print(report.as_rich(run))
        elif format == "markdown":
            typer.echo(report.as_markdown(run), nl=False)
        elif format == "json":
            typer.echo(json.dumps(run["summary"], indent=1))
        else:
            raise QkbenchError(f"--format must be rich, markdown or json, got {format!r}")
    except QkbenchError as e:
        _fail(e)


@app.command()
def audit(archive: Path) -> None:
    """Recompute every summary from the raw samples; exit 1 on any mismatch."""
    try:
        from qkbench import archive as archives
        from qkbench.audit import audit as audit_run

        problems = audit_run(archives.read(archive))
    except QkbenchError as e:
        _fail(e)
    if problems:
        for p in problems[:20]:
            err.print(f"[red]mismatch:[/red] {p}", highlight=False, soft_wrap=True)
        err.print(f"[red]audit failed:[/red] {len(problems)} problem(s) in {archive}",
                  soft_wrap=True)
        raise typer.Exit(1)
    out.print(f"audit ok: {archive} (summaries recomputed from the raw samples match)")


@app.command()
def verify(protocol: ProtocolOpt = None, device: DeviceOpt = "auto",
           route: Annotated[list[str] | None, typer.Option()] = None) -> None:
    """Check each route's exactness and accuracy on every case of a protocol (no timing)."""
    try:
        dev = _device(device)
        proto = _protocol(protocol, dev).with_overrides(routes=route)
        from qkbench.case import make_inputs
        from qkbench.routes import resolve
        from qkbench.verify import verify as verify_case

        routes = [resolve(name) for name in proto.routes]
        table = Table("case", *[r.name for r in routes], title=f"verify {proto.name} on {dev}")
        failed = 0
        for i, case in enumerate(proto.cases()):
            checks = verify_case(routes, make_inputs(case, i, dev), case.geometry.inplace)
            cells = []
            for r in routes:
                c = checks[r.name]
                failed += not c["ok"]
                detail = ("error" if "error" in c else
                          f"oracle {max(e['worst'] for e in c['oracle'].values()):.1e}")
                if "exact_with" in c:
                    detail += f", {'bit-exact' if c['differing_share'] == 0 else 'NOT exact'}"
                cells.append(f"[{'green' if c['ok'] else 'red'}]{detail}[/]")
            table.add_row(case.key, *cells)
        out.print(table)
    except QkbenchError as e:
        _fail(e)
    if failed:
        err.print(f"[red]verify failed:[/red] {failed} route check(s) failed")
        raise typer.Exit(1)


@app.command("env")
def env_cmd(device: DeviceOpt = "auto") -> None:
    """Show the environment and measure the device's copy bandwidth and launch floor."""
    try:
        dev = _device(device)
        from qkbench import env, limits
        from qkbench.backends import backend_for

        info = env.capture(dev)
        measured = limits.measure(backend_for(dev), inner_reps=32)
    except QkbenchError as e:
        _fail(e)
    for key in ("python", "torch", "triton", "cuda", "qkbench", "device", "gpu", "code"):
        out.print(f"{key}: {info.get(key)}")
    out.print(f"copy bandwidth: {measured['copy']['gbps']:.1f} GB/s "
              f"({measured['copy']['bytes'] / 2**30:.2f} GiB read + written)")
    for floor in measured["launch_floor"].values():
        out.print(f"launch floor ({floor['programs']} program(s)): "
                  f"{floor['median_s'] * 1e6:.3f} us per call in a graph")
    if dev.type == "cpu":
        out.print("(CPU: the interpreter's figures say nothing about a GPU)")
