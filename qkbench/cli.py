"""The command line: parses, calls the library, renders. Errors become one red line."""

import contextlib
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from qkbench import sigterm
from qkbench.errors import DeviceError, QkbenchError
from qkbench.gate_cli import HELP as GATE_HELP
from qkbench.gate_cli import gate
from qkbench.options import cells, overridden, refuse_given, timing
from qkbench.stdout import Stderr, Stdout, stdout_refused

if TYPE_CHECKING:
    import torch

    from qkbench.protocol import Protocol

STDOUT = Stdout()
app = typer.Typer(add_completion=False, no_args_is_help=True,
                  context_settings={"show_default": True},
                  help="Null-arm microbenchmarks of fused QK RMSNorm + RoPE.")
# Not a terminal: plain text, and wide enough that tables are not squeezed.
# No markup: what is printed holds the user's text (route, geometry and file names), which
# rich would read as markup ("[/x]": an error of its own); styled labels use ``labelled``.
out = Console(file=STDOUT, width=None if sys.stdout.isatty() else 220, markup=False)
err = Console(file=Stderr(), markup=False)


def labelled(label: str, text: str) -> Text:
    """``label: text``, the label in red."""
    return Text.assemble((f"{label}:", "red"), f" {text}")


def say_error(e: Exception) -> None:
    """The one line an error a user can mend is reported in."""
    err.print(labelled("error", str(e)), soft_wrap=True)

DeviceOpt = Annotated[str, typer.Option(help="auto (CUDA when present, else CPU), cuda, cpu")]
ArchiveArg = Annotated[Path, typer.Argument(metavar="ARCHIVE",
                                            help="a run archive (.json or .json.gz)")]
ProtocolOpt = Annotated[str | None, typer.Option(
    help="a protocol file (a path: has a '/' or ends in .toml), or a shipped protocol's bare "
         "name (default: text-decode on CUDA, smoke on CPU)")]


def _version(value: bool) -> None:
    if value:
        import qkbench

        typer.echo(f"qkbench {qkbench.__version__}")
        raise typer.Exit()


@app.callback()
def main(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="print the version and exit")] = False) -> None:
    """Null-arm microbenchmarks of fused QK RMSNorm + RoPE."""


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


def warn_if_heavy_on_cpu(proto: "Protocol", dev: "torch.device", runs: int = 1) -> None:
    """Say so before a run on the CPU of far more than the smoke protocol's work."""
    if dev.type != "cpu":
        return
    heavier = runs * proto.timed_elements() / _protocol("smoke", dev).timed_elements()
    if heavier > CPU_HEAVY:
        err.print(f"note: {proto.name} on the CPU makes {runs * proto.timed_calls():,} timed "
                  f"route calls over {runs * proto.timed_elements():,} q and k elements in the "
                  f"Triton interpreter, {heavier:,.0f}x the smoke protocol's work (minutes "
                  "here): hours or days; Ctrl-C keeps the finished passes",
                  highlight=False, soft_wrap=True)


def _protocol(spec: str | None, device):
    """The protocol ``--protocol`` names, or the device's default where it is not given
    (never where it is given empty: an unset variable in a CI script)."""
    from qkbench.protocol import load

    if spec is not None and not spec.strip():
        raise QkbenchError("--protocol is empty: name a shipped protocol or a TOML file")
    return load(spec if spec is not None else
                "text-decode" if device.type == "cuda" else "smoke")


def _resumed(path: Path) -> dict:
    """The archive ``--resume`` goes on with: its device and, where no --protocol is given,
    its protocol, routes, cells and timing are the resume's (read without the kernels,
    which must not be imported before the device is known)."""
    from qkbench.archive import check_resumable, read

    run = read(path)
    check_resumable(run, path)
    return run


def _fail(e: QkbenchError) -> None:
    say_error(e)
    raise typer.Exit(1)


PROTOCOLS = "(default: the protocol's)"
TIMING = timing(PROTOCOLS)
CELLS = cells("(default: all of the protocol's)")
# A CPU sweep of more than this many times the smoke protocol's timed work is announced.
CPU_HEAVY = 20


def archive_path(out_path: Path | None, protocol_name: str, resume: bool) -> Path:
    """Where a sweep writes: ``--out`` as given where it names a file (ending in ``.json``
    or ``.gz``), else inside it, a folder made where missing (and in ``results/`` without
    it), named ``<YYYYmmdd-HHMMSS>-<protocol>.json.gz``."""
    from qkbench.archive import SUFFIX

    try:
        if resume:
            if out_path is None:
                raise QkbenchError("--resume needs --out, the archive to continue")
            if out_path.is_dir():
                raise QkbenchError(f"--resume needs --out to name an archive file; {out_path} "
                                   "is a directory")
            return out_path
        if (out_path is not None and out_path.suffix.lower() in (".json", ".gz")
                and not out_path.is_dir()):
            return out_path
    except OSError as e:  # e.g. a name longer than the file system takes
        raise QkbenchError(f"--out {out_path}: cannot be used ({e.strerror})") from None
    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{protocol_name}{SUFFIX}"
    return (out_path or Path("results")) / name


def _sweep_events(runner, proto, bar, started_at: float, earlier: Sequence[dict] = ()):
    """The runner events drawn as a progress bar on a terminal, else as one plain line per
    finished pass on stderr (a CI log, a pipe), its drops counted from the ``earlier``
    passes of a resumed run on."""
    from qkbench.progress import pass_drops, pass_line

    def complete() -> None:
        err.print("resume: the archive is complete already; nothing was measured",
                  highlight=False, soft_wrap=True)

    if bar is not None:
        passes_task = bar.add_task("passes", total=proto.timing.passes)
        cases_task = bar.add_task("cases", total=len(proto.cases()))

        def started(index: int, total: int) -> None:
            bar.update(cases_task, completed=0, description=f"pass {index + 1}/{total}")

        return runner.Events(
            pass_started=started,
            case_done=lambda done, total: bar.update(cases_task, completed=done),
            pass_finished=lambda index, status: bar.advance(passes_task),
            already_complete=complete)
    counted = [pass_drops(p, proto.timing.drop_threshold) for p in earlier]
    drops = [sum(d for d, _ in counted), sum(m for _, m in counted)]

    def finished(result: dict) -> None:
        dropped, measured = pass_drops(result, proto.timing.drop_threshold)
        drops[0] += dropped
        drops[1] += measured
        err.print(pass_line(result, proto.timing.passes, time.monotonic() - started_at,
                            *drops), highlight=False, soft_wrap=True)

    return runner.Events(pass_result=finished, already_complete=complete)


def _swept(proto, dev, path: Path, resume: bool = False, allow_code_change: bool = False,
           named: Callable[[Path], None] | None = None, earlier: Sequence[dict] = ()) -> dict:
    """``runner.sweep`` with progress on stderr: a bar on a terminal, else lines. With
    ``named``, ``path`` is a name the tool chose: the next free one may be taken instead,
    and ``named`` hears it."""
    from qkbench import runner

    def sweep(bar) -> dict:
        events = _sweep_events(runner, proto, bar, time.monotonic(), earlier)
        if named is not None:
            events.archive_named = named
        return runner.sweep(proto, dev, path, resume=resume, command=sys.argv,
                            events=events, allow_code_change=allow_code_change,
                            fresh_name=named is not None)

    if err.is_terminal:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err, transient=True) as bar:
            return sweep(bar)
    return sweep(None)


@app.command()
def sweep(
    protocol: ProtocolOpt = None,
    route: Annotated[list[str] | None, typer.Option(
        help="repeat: the first is the baseline (also the null arm), the rest candidates; "
             "a built-in name, peer:NAME or module:callable " + PROTOCOLS)] = None,
    device: DeviceOpt = "auto",
    passes: TIMING.passes = None,
    warmup: TIMING.warmup = None,
    samples: TIMING.samples = None,
    inner_reps: TIMING.inner_reps = None,
    schedule: TIMING.schedule = None,
    isolation: TIMING.isolation = None,
    threshold: TIMING.threshold = None,
    cache: TIMING.cache = None,
    launch_state: TIMING.launch_state = None,
    tokens: CELLS.tokens = None,
    geometry: CELLS.geometry = None,
    pass_timeout: TIMING.pass_timeout = None,
    out_path: Annotated[Path | None, typer.Option(
        "--out", help="the archive file (a name ending in .json.gz or .gz is compressed, "
                      ".json plain), or any other name: a folder (made where missing) to "
                      "write YYYYmmdd-HHMMSS-PROTOCOL.json.gz in (default: results/)",
        show_default=False)] = None,
    resume: Annotated[bool, typer.Option(
        "--resume",
        help="continue the archive at --out, without repeating its finished passes, with "
             "the device, protocol, routes, cells and timing it recorded (an option given "
             "must agree with the record)")] = False,
    allow_code_change: Annotated[bool, typer.Option(
        "--allow-code-change",
        help="let --resume continue with other code than the run started with (another git "
             "commit or kernel sources): refused without it; each pass records the code it "
             "ran and report and audit show which passes ran what")] = False,
) -> None:
    """Run a protocol's baseline, candidate and baseline-again arms; archive every pass.

    The first --route is the baseline (and the null arm), the others candidates."""
    path = None
    handlers = contextlib.ExitStack()
    handlers.enter_context(sigterm.as_interrupt())  # a cancelled job keeps its passes too
    try:
        if allow_code_change and not resume:
            raise QkbenchError("--allow-code-change only goes with --resume (a new run records "
                               "the code it starts with)")
        resumed = None
        if resume:  # its archive is --out itself
            path = archive_path(out_path, "", resume=True)
            resumed = _resumed(path)
        dev = _device(resumed["settings"]["device"] if resumed and device == "auto" else device)
        if resumed:
            from qkbench import runner, seal
            from qkbench.audit import header_problems

            # Before its header is read: a damaged one is named, not a traceback.
            runner.check_seal(resumed, seal.signing_key(), path)
            problems = header_problems(resumed)
            if problems:
                raise QkbenchError(f"{path}: cannot resume: {problems[0]} (qkbench audit "
                                   f"{path} lists every problem)")
        if resumed and protocol is None:
            from qkbench.protocol import rebuild

            base = rebuild(resumed["protocol"])
        else:
            base = _protocol(protocol, dev)
        proto = overridden(
            base, routes=route, tokens=tokens, geometries=geometry, passes=passes, warmup=warmup,
            samples=samples, inner_reps=inner_reps, schedule=schedule, isolation=isolation,
            drop_threshold=threshold, cache=cache, launch_state=launch_state,
            pass_timeout=pass_timeout)
        from qkbench import report, runner

        path = path or archive_path(out_path, proto.name, resume=False)

        def named(chosen: Path) -> None:
            nonlocal path
            path = chosen

        warn_if_heavy_on_cpu(proto, dev)
        run = _swept(proto, dev, path, resume, allow_code_change,
                     named if not resume and path != out_path else None,
                     resumed["passes"] if resumed else ())
        out.print(report.as_rich(run), soft_wrap=not out.is_terminal)
        err.print(f"archive: {path}", highlight=False, soft_wrap=True)
        problems = [line for line in (runner.stopped(proto, run),
                                      report.failed_passes_line(run),
                                      report.invalid_line(run, "listed above"),
                                      report.no_verdict_line(run)) if line]
        if problems:
            raise QkbenchError("; ".join(problems))
    except QkbenchError as e:
        _fail(e)
    except KeyboardInterrupt as e:
        said = (f"finished passes are in {path}; continue with: qkbench sweep --resume "
                f"--out {path}" if path is not None else "no archive was written yet")
        how, status = sigterm.ended(e)
        err.print(labelled(how, said), soft_wrap=True)
        raise typer.Exit(status) from None
    finally:
        handlers.close()


@app.command()
def calibrate(
    protocol: ProtocolOpt = None,
    route: Annotated[str | None, typer.Option(
        help="the route that runs against itself " + PROTOCOLS.replace("s)", "s baseline)"),
        show_default=False)] = None,
    planted: Annotated[list[int] | None, typer.Option(
        help="repeat: plant one extra call of the route every N launches, +1/N of its own "
             "work; N must divide the protocol's inner_reps (default: 32 and 8, +3.1 % and "
             "+12.5 %, where they divide it, else inner_reps, and a quarter of it where 4 "
             "divides it)",
        show_default=False)] = None,
    device: DeviceOpt = "auto",
    passes: TIMING.passes = None,
    samples: TIMING.samples = None,
    tokens: CELLS.tokens = None,
    geometry: CELLS.geometry = None,
    out_path: Annotated[Path | None, typer.Option(
        "--out", help="the directory the two archives are written in (default: results/)",
        show_default=False)] = None,
    aa: Annotated[Path | None, typer.Option(
        help="report from this A/A archive (with --planted-run) instead of running "
             "(default: run both)", show_default=False)] = None,
    planted_run: Annotated[Path | None, typer.Option(
        help="report from this planted-effect archive (with --aa) (default: run both)",
        show_default=False)] = None,
) -> None:
    """Prove the method here: an A/A run and a run against planted effects.

    The A/A run times one route against itself (any verdict but unresolved is false); the
    planted run against itself plus extra calls of known size (each must be resolved
    slower). Ends with one line: false verdicts k/n, planted effects resolved m/n. Exit 1 on
    a false verdict, a planted effect with the wrong sign, a planted effect larger than its
    cell's width estimated and left unresolved, no planted effect resolved at all, a run in
    which no cell had an estimate (a cell without one, unstable, is counted apart, not
    judged), a failed pass or a route that computed a wrong result."""
    try:
        if (aa is None) != (planted_run is None):
            raise QkbenchError("--aa and --planted-run go together (the two archives of one "
                               "calibration)")
        # The device first: on the CPU the kernels must be imported under the interpreter.
        dev = None if aa is not None else _device(device)
        from qkbench import calibration, report, runner
        from qkbench.audit import read_checked

        if aa is not None:
            refuse_given({"--protocol": protocol, "--route": route, "--planted": planted,
                          "--device": None if device == "auto" else device,
                          "--passes": passes, "--samples": samples, "--tokens": tokens,
                          "--geometry": geometry, "--out": out_path},
                         "a run, not with --aa and --planted-run (which report from archives)")
            runs = {"aa": read_checked(aa), "planted": read_checked(planted_run)}
            calibration.check_pair(runs["aa"], runs["planted"])
        else:
            proto = overridden(_protocol(protocol, dev), tokens=tokens, geometries=geometry,
                               passes=passes, samples=samples)
            every = tuple(planted or calibration.default_planted(proto.timing.inner_reps))
            if any(n < 1 for n in every):
                raise QkbenchError(f"--planted must be >= 1, got {list(every)}")
            stamp = time.strftime("%Y%m%d-%H%M%S")
            runs, paths = {}, {}
            for kind, p in calibration.protocols(proto, route or proto.baseline, every).items():
                paths[kind] = (out_path or Path("results")) / (
                    f"{stamp}-{proto.name}-calibrate-{kind}.json.gz")
                try:
                    runs[kind] = _swept(p, dev, paths[kind],
                                        named=functools.partial(paths.__setitem__, kind))
                except KeyboardInterrupt:
                    err.print(labelled("interrupted", _calibration_left(paths, kind)),
                              soft_wrap=True)
                    raise typer.Exit(130) from None
                err.print(f"archive ({kind}): {paths[kind]}", highlight=False, soft_wrap=True)
                reason = runner.stopped(p, runs[kind])
                if reason:
                    raise QkbenchError(f"calibrate ({kind} run): {reason}")
        result = calibration.summarize(runs["aa"], runs["planted"])
        out.print(report.Fitted(report.calibration_table(result)))
        line = calibration.summary_line(result)
        # A pass that failed or a route that computed a wrong result fails a sweep; it
        # cannot prove the method either (its cells are left out of the counts above).
        failed = [f"the {kind} run: {said}" for kind, run in runs.items()
                  for said in (report.failed_passes_line(run),
                               report.invalid_line(run, "which qkbench report lists"))
                  if said] + calibration.failures(result)
        if failed:
            raise QkbenchError(f"{line}: {'; '.join(failed)}")
        out.print(line, highlight=False, soft_wrap=True)
    except QkbenchError as e:
        _fail(e)


def _calibration_left(paths: dict[str, Path], kind: str) -> str:
    """What an interrupted calibration leaves, and how to finish it: the run under way
    (``kind``) goes on with ``sweep --resume``, a run not started yet with ``calibrate``
    again; the two archives are then reported together."""
    if not paths[kind].exists():
        done = "" if kind == "aa" else f" (the A/A run is complete in {paths['aa']})"
        return f"the {kind} run had written no archive yet{done}; run qkbench calibrate again"
    said = (f"the {kind} run's finished passes are in {paths[kind]}; continue it with: "
            f"qkbench sweep --resume --out {paths[kind]}")
    if kind == "aa":
        return said + "; the planted run has not started: run qkbench calibrate again"
    return (said + f", then: qkbench calibrate --aa {paths['aa']} --planted-run "
            f"{paths[kind]}")


def _stopped_note(run: dict, archive: Path) -> str | None:
    """What a reader of an archive that no qkbench is writing, and that is not complete,
    should know: why its run stopped, where the sweep said why, and how it goes on where
    it can."""
    from qkbench.archive import SCHEMA_VERSION
    from qkbench.lock import held
    from qkbench.protocol import rebuild
    from qkbench.runner import resumable, stopped

    if run["status"] != "running" or held(archive):
        return None
    reason = (stopped(rebuild(run["protocol"]), run)
              if run.get("schema_version") == SCHEMA_VERSION else None)
    how = f"; qkbench sweep --resume --out {archive} continues it" if resumable(run) else ""
    return (f"note: no qkbench is writing {archive}: "
            f"{reason or 'its run stopped before it was complete'}{how}")


@app.command("report")
def report_cmd(
    archive: ArchiveArg,
    format: Annotated[str, typer.Option(
        help="rich, markdown or json (the run's header, its summary and the lines the other "
             "formats print beside their tables)")] = "rich",
    wide: Annotated[bool, typer.Option(
        "--wide",
        help="rich: every column of the per-cell table (kept, median delta, the width's "
             "median, copy, share of copy bandwidth), not only geometry, T, times, delta, "
             "interval, width and verdict")] = False,
    plot: Annotated[Path | None, typer.Option(
        help="also write PNGs into this directory: per comparison, delta, per-call time "
             "and bandwidth against T, named after the archive, same names replaced "
             "(default: no plots)",
        show_default=False)] = None,
) -> None:
    """Render an archive's summary (and, with --plot, its pictures)."""
    try:
        from qkbench import report
        from qkbench.audit import read_checked
        from qkbench.summary import current

        if format not in ("rich", "markdown", "json"):
            raise QkbenchError(f"--format must be rich, markdown or json, got {format!r}")
        if plot is not None and plot.exists() and not plot.is_dir():
            raise QkbenchError(f"--plot {plot}: is a file; the plots go into a folder (made "
                               "where missing)")
        run = read_checked(archive)
        for note in (_stopped_note(run, archive), report.no_verdict_line(run)):
            if note:
                err.print(note, highlight=False, soft_wrap=True)
        if format == "rich":
            out.print(report.as_rich(run, wide=wide), soft_wrap=not out.is_terminal)
        elif format == "markdown":
            STDOUT.write(report.as_markdown(run))
        else:
            STDOUT.write(json.dumps({"header": report.header(run), "summary": current(run),
                                     "lines": report.lines(run)}, indent=1) + "\n")
        STDOUT.flush()
        if plot is not None:
            from qkbench.plots import archive_stem
            from qkbench.plots import plot as draw

            try:
                written = draw(run, plot, prefix=archive_stem(archive))
            except OSError as e:
                raise QkbenchError(f"{plot}: cannot write the plots "
                                   f"({e.strerror or e})") from None
            for path in written:
                err.print(f"plot: {path}", highlight=False, soft_wrap=True)
            if not written:
                err.print("no plots: no comparison has a measured cell", highlight=False,
                          soft_wrap=True)
    except QkbenchError as e:
        _fail(e)


@app.command()
def crossover(
    archive: ArchiveArg,
    emit: Annotated[Path | None, typer.Option(
        help="write the dispatch table here as JSON (qkbench.kernels.dispatch.DispatchTable "
             "loads it; only a table written before is replaced): only from a complete run "
             "of split against fused with a verdict somewhere (default: print only)",
        show_default=False)] = None,
    candidate: Annotated[str | None, typer.Option(
        help="the comparison's candidate route (default: the run's only one)",
        show_default=False)] = None,
) -> None:
    """Per geometry, the T through which the candidate is resolvably faster; its dispatch.

    The table --emit writes is what qkbench.kernels.dispatch.DispatchTable loads."""
    try:
        from qkbench import crossover as cross
        from qkbench.audit import read_checked
        from qkbench.kernels.dispatch import ROUTES as DISPATCH_ROUTES
        from qkbench.report import Fitted, Table, invalid_line, no_verdict_line

        run = read_checked(archive)
        table = cross.dispatch_table(run, candidate, source=str(archive))
        invalid = invalid_line(run, "which qkbench report lists")
    except QkbenchError as e:
        _fail(e)
    source = table["source"]
    shown = Table(f"{table['baseline']} -> {table['candidate']}: crossover per geometry "
                  f"(protocol {source['protocol']['name']}, {source['gpu'] or source['device']}"
                  f", commit {(source['commit'] or 'unknown')[:12]})",
                  ["geometry", "shape", "faster through T", "stops at T", "dispatch"],
                  wrap={1, 4}, left={0, 1, 4})
    for e in table["geometries"]:
        s = e["shape"]
        shown.rows.append([e["geometry"],
                           f"({s['heads_q']},{s['heads_k']})x{s['head_dim']}/r{s['rotary_dim']} "
                           f"{s['dtype']}",
                           "-" if e["fused_through"] is None else str(e["fused_through"]),
                           "none in range" if e["censored"] else
                           "-" if e["stops_at"] is None else str(e["stops_at"]),
                           cross.describe(e, table["baseline"], table["candidate"])])
    out.print(Fitted(shown, list(range(len(shown.headers)))))
    note = _stopped_note(run, archive)
    if note:
        err.print(note, highlight=False, soft_wrap=True)
    try:
        # A dispatch table steers a model's every call: only from a whole run of valid routes.
        if emit is not None and run["status"] != "complete":
            raise QkbenchError(f"--emit: no dispatch table from a run that is not complete "
                               f"(status {run['status']}); nothing was written")
        if emit is not None and invalid:
            raise QkbenchError(f"--emit: no dispatch table from a run with an invalid route "
                               f"({invalid}); nothing was written")
        if emit is not None and (table["baseline"], table["candidate"]) != DISPATCH_ROUTES:
            raise QkbenchError(f"--emit: a dispatch table chooses between "
                               f"{' and '.join(DISPATCH_ROUTES)}, and this comparison is "
                               f"{table['baseline']} -> {table['candidate']}; nothing was "
                               "written")
        unread = no_verdict_line(run)
        if unread:
            raise QkbenchError(unread if emit is None else
                               f"--emit: no dispatch table from a run in which {unread}; "
                               "nothing was written")
        if invalid:
            raise QkbenchError(invalid)
        if emit is not None:
            cross.write(emit, table)
            err.print(f"dispatch table: {emit}", highlight=False, soft_wrap=True)
    except QkbenchError as e:
        _fail(e)


@app.command()
def audit(archive: ArchiveArg) -> None:
    """Check an archive against itself; exit 1 on any problem.

    Its digests, its structure against its header, every in-pass figure and every summary
    recomputed from the raw samples.

    With QKBENCH_SIGNING_KEY set, a signed archive's HMAC digests are verified (its
    origin), and an unsigned archive fails; without it, audit checks consistency only.
    """
    try:
        from qkbench import archive as archives
        from qkbench import seal
        from qkbench.audit import examine

        found = examine(archives.read(archive), seal.signing_key())
    except QkbenchError as e:
        _fail(e)
    for note in found.notes:
        err.print(f"note: {note}", highlight=False, soft_wrap=True)
    if found.problems:
        for p in found.problems[:20]:
            err.print(labelled("mismatch", p), soft_wrap=True)
        if len(found.problems) > 20:
            err.print(f"... and {len(found.problems) - 20} more", highlight=False)
        err.print(labelled("audit failed", f"{len(found.problems)} problem(s) in {archive}"),
                  soft_wrap=True)
        raise typer.Exit(1)
    out.print(f"audit ok: {archive} (summaries recomputed from the raw samples match; "
              f"structure and in-pass figures check); proves {found.origin}",
              highlight=False, soft_wrap=True)


@app.command()
def verify(protocol: ProtocolOpt = None, device: DeviceOpt = "auto",
           route: Annotated[list[str] | None, typer.Option(
               help="repeat: the routes to check, one or more (default: the protocol's)")]
           = None, tokens: CELLS.tokens = None, geometry: CELLS.geometry = None) -> None:
    """Check each route's exactness and accuracy on every case of a protocol (no timing).

    One line per case as it is checked: each route ok, WRONG or n/s (not supported), and why.
    """
    failed = unsupported = checked = 0
    verified: dict[str, int] = {}  # route -> cases it was checked on (not n/s)
    compared = False  # whether any route was compared bit for bit with its group
    try:
        dev = _device(device)
        proto = overridden(_protocol(protocol, dev), tokens=tokens, geometries=geometry)
        from qkbench.case import make_inputs
        from qkbench.protocol import selection
        from qkbench.routes import resolve
        from qkbench.verify import describe, status_word
        from qkbench.verify import verify as verify_case

        # Any number of routes, one too: nothing is compared in time here.
        routes = [resolve(name) for name in dict.fromkeys(route or proto.routes)]
        cases = proto.cases()
        picked = selection(proto.record())
        err.print(f"verify {proto.name} on {dev}: {len(cases)} case(s)"
                  + (f" ({picked})" if picked else "")
                  + f", routes {', '.join(r.name for r in routes)}", highlight=False,
                  soft_wrap=True)
        for i, case in enumerate(cases):
            checks = verify_case(routes, make_inputs(case, i, dev), case.geometry.inplace)
            words = [status_word(checks[r.name]) for r in routes]
            failed += words.count("WRONG")
            unsupported += words.count("n/s")
            checked += len(words)
            for r, word in zip(routes, words, strict=True):
                verified[r.name] = verified.get(r.name, 0) + (word != "n/s")
            compared |= any("exact_with" in check for check in checks.values())
            out.print(f"{case.key}: " + "; ".join(f"{r.name} {describe(checks[r.name])}"
                                                  for r in routes),
                      highlight=False, soft_wrap=True)
    except QkbenchError as e:
        _fail(e)
    if failed:
        err.print(f"verify failed: {failed} route check(s) WRONG", highlight=False,
                  soft_wrap=True)
        raise typer.Exit(1)
    if unsupported == checked:
        err.print(f"verify failed: nothing was verified: all {checked} check(s) n/s (not "
                  "supported by their route)", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    never = [name for name, n in verified.items() if not n]
    err.print("verify ok: every route checked meets the oracle"
              + (" and is bit-exact with its exact group" if compared else "")
              + (f" ({unsupported} check(s) n/s: not supported by that route"
                 + (f"; not verified on any case: {', '.join(never)}" if never else "") + ")"
                 if unsupported else ""), highlight=False, soft_wrap=True)


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
    for key in ("python", "torch", "triton", "cuda", "qkbench", "device"):
        out.print(f"{key}: {info.get(key)}", highlight=False)
    for key, value in info.get("gpu", {}).items():
        out.print(f"gpu {key.replace('_', ' ')}: {value}", highlight=False)
    code = info["code"]
    commit = code["commit"] or "unknown (no git checkout, no QKBENCH_GIT_COMMIT)"
    out.print(f"commit: {commit}" + (f" (dirty: {code['dirty_count']} path(s): "
                                     f"{', '.join(code['dirty_paths'][:5])}"
                                     f"{', ...' if code['dirty_count'] > 5 else ''})"
                                     if code.get("dirty_paths") else
                                     " (dirty)" if code.get("dirty") else ""),
              highlight=False, soft_wrap=True)
    hashes = Table("kernel file", "sha256 (first 16)", title="kernel sources",
                   title_justify="left")
    for name, digest in info["kernels_sha256"].items():
        hashes.add_row(name, digest[:16])
    out.print(hashes)
    out.print(f"copy bandwidth: {measured['copy']['gbps']:.1f} GB/s "
              f"({measured['copy']['bytes'] / 2**30:.2f} GiB read + written)")
    where = "in a graph" if dev.type == "cuda" else "on the host"
    for floor in measured["launch_floor"].values():
        out.print(f"launch floor ({floor['programs']} program(s)): "
                  f"{floor['median_s'] * 1e6:.3f} us per call {where}")
    if dev.type == "cpu":
        out.print("(CPU: the interpreter's figures say nothing about a GPU)")


@app.command()
def export(
    archive: ArchiveArg,
    csv: Annotated[bool, typer.Option(
        "--csv", help="one row per timed sample: pass, case, comparison, arm, route, "
                      "sample, seconds (header row first)")] = False,
    out_file: Annotated[Path | None, typer.Option(
        "--out", help="write here, gzip-compressed where the name ends in .gz; never over "
                      "an existing file (default: stdout)", show_default=False)] = None,
) -> None:
    """Export an archive's raw samples for analysis elsewhere (pandas, R)."""
    try:
        from qkbench.audit import read_checked
        from qkbench.export import write_csv
        from qkbench.files import check_target, write_whole

        if not csv:
            raise QkbenchError("export needs a format: --csv")
        run = read_checked(archive)
        note = _stopped_note(run, archive)
        if note:
            err.print(note, highlight=False, soft_wrap=True)
        if out_file is None:
            write_csv(run, STDOUT)
            STDOUT.flush()
            return
        check_target(out_file, "--out")
        if os.path.lexists(out_file):  # checked again as the file goes in
            raise QkbenchError(f"{out_file} exists: choose another --out")
        try:
            n = write_whole(out_file, lambda f: write_csv(run, f), replace=False,
                            gzipped=out_file.suffix.lower() == ".gz")
        except FileExistsError:
            raise QkbenchError(f"{out_file} exists: choose another --out") from None
        except OSError as e:
            raise QkbenchError(f"{out_file}: cannot be written ({e.strerror})") from None
    except QkbenchError as e:
        _fail(e)
    err.print(f"wrote {n} samples to {out_file}", highlight=False, soft_wrap=True)


# qkbench gate: the CI regression gate (its logic in gate, gate_cli, refs, against).
app.command("gate", help=GATE_HELP)(gate)


def run() -> None:
    """The ``qkbench`` command: ``app``, with standard output's refusal anywhere (a full
    disk, a reader that went away) one error line and exit 1, as each command reports it."""
    try:
        app()
    except Exception as e:
        refusal = stdout_refused(e)
        if refusal is None:
            raise
        say_error(refusal)
        sys.exit(1)


if __name__ == "__main__":
    run()
