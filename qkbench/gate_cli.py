"""``qkbench gate``: the CI perf-regression gate (SPEC 5). Parses, calls, renders: the
decisions are ``gate``'s, the commits' export ``refs``' and ``against``'s, the output
``gate_output``'s."""

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from qkbench import seal, sigterm
from qkbench.errors import USAGE, GateError, QkbenchError
from qkbench.options import cells, overridden, refuse_given, timing

HELP = """The CI perf-regression gate: fail on a real regression, not on noise.

\b
Three forms (exactly one):
\b
qkbench gate --against REF [--protocol P] [--route fused ...]
  REF's kernels/ (exported from git; the working tree is untouched) are the
  baseline and the null arm, the working tree's the candidate: one run per
  route, archived in --out as DATE-gate-PROTOCOL-ROUTE.json.gz. The form
  CI should use.
\b
qkbench gate --baseline A.json --candidate B.json
  Two runs of one protocol on one device, compared per case by
  (1 + delta in B) / (1 + delta in A) - 1, each delta taken against its
  own run's baseline route, so drift that slows both routes cancels. The
  interval joins both runs' \\[best, worst] (coverage >= c_A + c_B - 1);
  the widths add. --absolute compares the candidate's per-call times.
\b
qkbench gate RUN.json [--expect "fused faster than split in all" ...]
  One archive: its regressions (candidate against baseline), or each
  expectation: ROUTE faster|slower than ROUTE SCOPE, where SCOPE is
  'in all', 'in band NAME' or 'at T OP N' (OP: <= < >= > =); met when
  every case it selects has that verdict.

\b
A case regresses when its verdict is slower and its whole interval lies
beyond the tolerance. A case whose candidate computed a wrong result
fails whatever its timing. Unstable, unmeasured and pending cases, and a
wrong baseline, are inconclusive; n/s cases are not counted. The table lists every
case; the one-line summary comes last.

\b
Exit codes:
  0  pass
  1  a case regressed or computed a wrong result, or an expectation was
     not met
  2  usage or input error: a bad option, an unknown ref, kernels that
     cannot be imported, archives that cannot be compared, an archive
     refused on reading (edited, damaged or malformed; unsigned while
     QKBENCH_SIGNING_KEY is set), a malformed --expect
  3  more inconclusive cases than --max-inconclusive, or no case judged
  130, 143  interrupted (Ctrl-C), terminated (SIGTERM): no verdict
"""

TIMING = timing("(--against only; default: the protocol's)")
CELLS = cells("(--against only; default: all of the protocol's)")


def gate(
    run: Annotated[Path | None, typer.Argument(
        metavar="RUN", help="one run archive (.json or .json.gz) to check on its own: its "
                            "regressions, or its --expect expectations",
        show_default=False)] = None,
    against: Annotated[str | None, typer.Option(
        help="a git ref (branch, tag, sha) whose kernels/ are the baseline and null arm, the "
             "working tree's the candidate (default: none)", show_default=False)] = None,
    baseline: Annotated[Path | None, typer.Option(
        help="the earlier run's archive, compared with --candidate (default: none)",
        show_default=False)] = None,
    candidate: Annotated[Path | None, typer.Option(
        help="the later run's archive, compared with --baseline (default: none)",
        show_default=False)] = None,
    expect: Annotated[list[str] | None, typer.Option(
        help="repeat: 'ROUTE faster|slower than ROUTE in all | in band NAME | at T OP N', "
             "checked in RUN (default: none)", show_default=False)] = None,
    tolerance: Annotated[str | None, typer.Option(
        help="a slower case regresses only when its whole interval lies beyond this: '2%' "
             "or a share such as '0.02' (default: 2%; not with --expect)",
        show_default=False)] = None,
    max_inconclusive: Annotated[int, typer.Option(
        help="inconclusive cases allowed before exit 3")] = 0,
    absolute: Annotated[bool, typer.Option(
        "--absolute",
        help="--baseline/--candidate: compare the candidate's per-call times (no null arm "
             "bounds the drift between two runs)")] = False,
    allow_mismatch: Annotated[bool, typer.Option(
        "--allow-mismatch",
        help="--baseline/--candidate: compare archives whose protocol, cells, device, "
             "routes, launch state or measuring timing settings differ (said in the "
             "output)")] = False,
    junit: Annotated[Path | None, typer.Option(
        help="write a JUnit XML report: a test case per (comparison, case) (default: none)",
        show_default=False)] = None,
    markdown: Annotated[Path | None, typer.Option(
        help="append a Markdown summary, e.g. to $GITHUB_STEP_SUMMARY or a PR comment file "
             "(default: none)", show_default=False)] = None,
    repo: Annotated[Path, typer.Option(
        help="--against: the git repository REF is looked up in")] = Path("."),
    route: Annotated[list[str] | None, typer.Option(
        help="--against, repeat: a kernel route (fused, split) to gate, one run each "
             "(default: fused)", show_default=False)] = None,
    protocol: Annotated[str | None, typer.Option(
        help="--against: a protocol file or a shipped protocol's bare name (default: "
             "text-decode on CUDA, smoke on CPU)", show_default=False)] = None,
    device: Annotated[str, typer.Option(
        help="--against: auto (CUDA when present, else CPU), cuda, cpu")] = "auto",
    out_dir: Annotated[Path | None, typer.Option(
        "--out", help="--against: the folder the archives are written to (default: "
                      "results/)", show_default=False)] = None,
    passes: TIMING.passes = None,
    warmup: TIMING.warmup = None,
    samples: TIMING.samples = None,
    inner_reps: TIMING.inner_reps = None,
    schedule: TIMING.schedule = None,
    isolation: TIMING.isolation = None,
    threshold: TIMING.threshold = None,
    cache: TIMING.cache = None,
    launch_state: TIMING.launch_state = None,
    pass_timeout: TIMING.pass_timeout = None,
    tokens: CELLS.tokens = None,
    geometry: CELLS.geometry = None,
) -> None:
    from qkbench.cli import _device, err, labelled, out, say_error

    sweep_options = {"--route": route, "--protocol": protocol, "--out": out_dir,
                     "--passes": passes, "--warmup": warmup, "--samples": samples,
                     "--inner-reps": inner_reps, "--schedule": schedule,
                     "--isolation": isolation, "--threshold": threshold, "--cache": cache,
                     "--launch-state": launch_state, "--pass-timeout": pass_timeout,
                     "--tokens": tokens,
                     "--geometry": geometry, "--device": None if device == "auto" else device}
    # A CI job cancelled (SIGTERM) ends like Ctrl-C: the ref's export removed, no verdict.
    handlers = contextlib.ExitStack()
    handlers.enter_context(sigterm.as_interrupt())
    reports = {}  # the report files to say an error in, once they were found writable
    try:
        if max_inconclusive < 0:
            raise GateError(f"--max-inconclusive must be >= 0, got {max_inconclusive}")
        forms = [name for name, given in (("--against", against is not None),
                                          ("--baseline/--candidate",
                                           baseline is not None or candidate is not None),
                                          ("RUN", run is not None)) if given]
        if len(forms) != 1:
            raise GateError("give exactly one of --against REF, --baseline A --candidate B, "
                            "or an archive RUN" + (f" (got {' and '.join(forms)})" if forms
                                                   else ""))
        if forms[0] != "--against":
            refuse_given({**sweep_options, "--repo": None if repo == Path(".") else repo},
                         "--against")
        if (absolute or allow_mismatch) and forms[0] != "--baseline/--candidate":
            raise GateError("--absolute and --allow-mismatch only go with --baseline and "
                            "--candidate")
        if expect and forms[0] != "RUN":
            raise GateError("--expect checks one archive: give it as RUN")
        if expect and tolerance is not None:
            raise GateError("--tolerance does not go with --expect: an expectation is met by "
                            "the run's verdicts alone")
        if forms[0] == "--baseline/--candidate" and (baseline is None or candidate is None):
            raise GateError("--baseline and --candidate go together")
        checked = {name: (path, path and _unwritable_report(flag, path)) for name, flag, path
                   in (("junit", "--junit", junit), ("markdown", "--markdown", markdown))}
        # A usable report file is kept to say the error in, even where the other is not.
        reports = {name: None if why else path for name, (path, why) in checked.items()}
        why = next((why for _, why in checked.values() if why), None)
        if why:
            raise GateError(why)
        if out_dir is not None:
            _check_out(out_dir)
        # The device before the rules, which import the kernels: on the CPU they must be
        # imported under the interpreter, which the device sets.
        dev = _device(device) if forms[0] == "--against" else None
        from qkbench import gate as rules

        tol = rules.parse_tolerance("2%" if tolerance is None else tolerance)
        if forms[0] == "--against":
            outcome, measure = _against(against, repo, route or ["fused"], protocol, dev,
                                        out_dir, tol, max_inconclusive, dict(
                                            passes=passes, warmup=warmup, samples=samples,
                                            inner_reps=inner_reps, schedule=schedule,
                                            isolation=isolation, drop_threshold=threshold,
                                            cache=cache, launch_state=launch_state,
                                            pass_timeout=pass_timeout, tokens=tokens,
                                            geometries=geometry))
        elif forms[0] == "RUN":
            outcome, measure = _one_run(run, expect or [], tol, max_inconclusive)
        else:
            outcome, measure = _across(baseline, candidate, tol, max_inconclusive, absolute,
                                       allow_mismatch)
        from qkbench import gate_output

        # Inside the try: output that cannot be written is exit 2, never read as a regression;
        # the table first, so that a report file that fails still leaves the verdict said.
        out.print(gate_output.as_rich(outcome, measure), highlight=False, soft_wrap=True)
        reports = {}  # one that fails now may have written the other: that one stands
        _write_reports(junit, markdown, gate_output.junit(outcome),
                       gate_output.as_markdown(outcome, measure))
    except QkbenchError as e:
        say_error(e)
        if reports:  # best effort: the error in place of a verdict, so that no earlier
            # run's report is read as this one's (the error line is said already)
            from qkbench import gate_output

            with contextlib.suppress(GateError):
                _write_reports(**reports, junit_xml=gate_output.error_junit(f"error: {e}"),
                               text=gate_output.error_markdown(f"error: {e}"))
        raise typer.Exit(USAGE) from None
    except KeyboardInterrupt as e:
        how, status = sigterm.ended(e)
        err.print(labelled(how, "no verdict; the passes that finished are in the archive "
                           "named above, if any (the ref's export is removed)"),
                  soft_wrap=True)
        raise typer.Exit(status) from None
    finally:
        handlers.close()
    raise typer.Exit(outcome.exit_code)


def one_run(archive: dict) -> str:
    """How a run's cells are read, for the gate's table."""
    from qkbench.summary import width_rule

    return ("delta = candidate / baseline - 1 (mean log ratio over the balanced kept "
            f"passes); interval = [best, worst] kept delta; width = {width_rule(archive)}")


def _read(path: Path, flag: str) -> dict:
    from qkbench.audit import read_checked

    run = read_checked(path)
    if seal.signing_key() is not None and not seal.is_signed(run):
        # With the key, what the gate judges must carry its signature: an unsigned
        # archive's digests can be recomputed by anyone after an edit.
        raise GateError(f"{flag} {path}: not signed, and {seal.KEY_ENV} is set: with the key "
                        "the gate judges only archives signed with it")
    if not run["passes"]:
        raise GateError(f"{flag} {path}: no pass finished, so it has no summary")
    return run


def _one_run(path: Path, expectations: list[str], tol: float, max_inconclusive: int):
    from qkbench import gate as rules
    from qkbench.protocol import selection
    from qkbench.report import failures
    from qkbench.summary import current, wrong_routes

    # One expectation given twice is one claim: its cases are counted once.
    parsed = list(dict.fromkeys(rules.parse_expectation(x) for x in expectations))
    run = _read(path, "RUN")
    summary, wrong = current(run), wrong_routes(run)
    notes = failures(run)
    if parsed:
        bands = run["protocol"]["resolved"]["bands"]
        picked = selection(run["protocol"])
        cells = [c for x in parsed for c in rules.expect(summary, bands, x, wrong, picked)]
        return (rules.Outcome("expectations", cells, None, max_inconclusive, notes),
                "expectations over the run's verdicts (" + one_run(run) + ")")
    return (rules.Outcome("regressions", rules.regressions(summary, tol, wrong), tol,
                          max_inconclusive, notes), one_run(run))


ABSOLUTE_WARNING = ("--absolute: these are the candidate's per-call times in two runs; no null "
                    "arm bounds the drift between runs (clocks, temperature, driver, other "
                    "tenants), so a change here may be the machine's, not the code's. Without "
                    "--absolute each run's own baseline route cancels what slows both alike.")


def _across(baseline: Path, candidate: Path, tol: float, max_inconclusive: int,
            absolute: bool, allow_mismatch: bool):
    from qkbench import gate as rules
    from qkbench.summary import current, wrong_routes

    a, b = _read(baseline, "--baseline"), _read(candidate, "--candidate")
    # One run, whole or in part (a copy taken while it ran): its start and first pass.
    if a.get("created") == b.get("created") and a["passes"][:1] == b["passes"][:1]:
        raise GateError(f"--baseline {baseline} and --candidate {candidate} hold the same run's "
                        "passes: a run compared with itself shows no change by construction")
    differ = rules.mismatches(a, b)
    notes = []
    if differ and not allow_mismatch:
        raise GateError(f"the archives cannot be compared: {'; '.join(differ)} (--allow-mismatch "
                        "compares them anyway)")
    if differ:
        notes.append("--allow-mismatch: compared although " + "; ".join(differ))
    from qkbench.summary import width_rule

    rules_a, rules_b = width_rule(a), width_rule(b)
    if rules_a != rules_b:
        notes.append(f"the runs' widths follow different rules: --baseline's is the "
                     f"{rules_a}, --candidate's the {rules_b} (an older archive's schema)")
    if absolute:
        notes.append(ABSOLUTE_WARNING)
        measure = ("change = the candidate's per-call time in --candidate / in --baseline - 1 "
                   "(medians); interval = [min_B / max_A - 1, max_B / min_A - 1] over the "
                   "balanced kept passes; width = the two runs' widths added (they bound "
                   "neither run's drift against the other)")
    else:
        measure = ("change = (1 + delta in --candidate) / (1 + delta in --baseline) - 1, each "
                   "delta candidate / baseline - 1 in its own run; interval = [(1 + best_B) / "
                   "(1 + worst_A) - 1, (1 + worst_B) / (1 + best_A) - 1]; width = the two runs' "
                   "widths added")
    cells = rules.across(current(a), current(b), tol, wrong_routes(b), absolute)
    return rules.Outcome("regressions", cells, tol, max_inconclusive, notes), measure


def _against(ref: str, repo: Path, routes: list[str], protocol: str | None, dev,
             out_dir: Path | None, tol: float, max_inconclusive: int, timing: dict):
    from qkbench import against, refs
    from qkbench import gate as rules
    from qkbench.cli import _protocol, _sweep_events, err, warn_if_heavy_on_cpu
    from qkbench.report import failures

    routes = list(dict.fromkeys(routes))
    proto = overridden(_protocol(protocol, dev), **timing)
    warn_if_heavy_on_cpu(proto, dev, len(routes))
    with refs.exported(ref, repo, routes) as export:
        differs = against.installed_differs(repo)
        if differs:
            err.print(differs, highlight=False, soft_wrap=True)
        err.print(f"gate: {', '.join(export.route(r) for r in routes)} ({ref}, commit "
                  f"{export.commit}) against the working tree's {', '.join(routes)}",
                  highlight=False, soft_wrap=True)
        started = time.monotonic()
        from qkbench import runner

        done = against.run(export, proto, routes, dev, out_dir or Path("results"),
                           command=sys.argv,
                           events_for=lambda p: _sweep_events(runner, p, None, started),
                           starting=lambda path: err.print(f"archive: {path}",
                                                           highlight=False, soft_wrap=True))
    from qkbench.summary import current, wrong_routes

    cells = [c for _, archive in done
             for c in rules.regressions(current(archive), tol, wrong_routes(archive))]
    notes = [n for _, archive in done for n in failures(archive)]
    return rules.Outcome("regressions", cells, tol, max_inconclusive, notes), (
        f"{ref} ({export.sha12}) as baseline and null arm, the working tree as candidate; "
        + one_run(done[0][1]))


def _check_out(out_dir: Path) -> None:
    """Refuse an ``--out`` that cannot hold the archives, before anything is measured."""
    try:
        why = None if out_dir.is_dir() else (
            "is a file" if out_dir.exists() else "names an archive file"
            if out_dir.suffix.lower() in (".json", ".gz") else None)
    except OSError as e:  # a name too long
        raise GateError(f"--out {out_dir}: cannot be used ({e.strerror})") from None
    if why:
        raise GateError(f"--out {out_dir}: {why}; --against writes one archive per route into "
                        "a folder")


def _unwritable_report(flag: str, path: Path) -> str | None:
    """Why a report file could not be written, found before anything is measured (None: it
    can be). Its missing folders are made when it is written (as ``--out``'s are, e.g.
    ``results/gate`` on a fresh checkout), so the nearest folder that exists must be
    writable."""
    try:
        why = _unwritable(path)
    except OSError as e:  # a name too long, a folder that cannot be searched
        why = e.strerror
    if why and str(path) == ".":
        why += "; an empty value, such as an unset $GITHUB_STEP_SUMMARY, reads as '.'"
    return f"{flag} {path}: cannot be written ({why})" if why else None


def _unwritable(path: Path) -> str | None:
    folder = path.parent
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    if path.is_dir():
        why = "it is a folder"
    elif path.exists():  # a file to replace or append to, or a device such as /dev/stdout
        why = None if os.access(path, os.W_OK) else "it is not writable"
    elif path.is_symlink():
        why = "it is a link to nothing"
    elif folder.is_symlink() and not folder.exists():
        why = f"{folder} is a link to nothing"
    elif not folder.is_dir():
        why = f"{folder} is a file, not a folder"
    else:
        why = None if os.access(folder, os.W_OK) else f"{folder} is not writable"
    return why


def _write_reports(junit: Path | None, markdown: Path | None, junit_xml: bytes,
                   text: str) -> None:
    """``junit_xml`` into the JUnit file and ``text`` appended to the Markdown one (either
    path None: not written), their missing folders made."""
    for path, write in ((junit, lambda f: f.write_bytes(junit_xml)),
                        (markdown, lambda f: _append(f, text))):
        if path is not None:
            try:
                if not path.exists():
                    path.parent.mkdir(parents=True, exist_ok=True)
                write(path)
            except OSError as e:  # the disk full, the file replaced since it was checked
                raise GateError(f"{path}: cannot be written ({e.strerror})") from None


def _append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)
