"""The manager of a sweep: one worker per pass, each finished pass appended to the archive.

First the primary passes, one per order slot; then, while any (slot, case) was dropped or
failed and has retries left, replacement passes with that slot's arm order for just those
cases (balanced replacement, SPEC 4). The archive is rewritten atomically after every
pass, so a run that dies keeps what it finished; a pass whose process crashes, or runs
past ``timing.pass_timeout``, is recorded as failed (and replaced like a drop); ``resume``
continues an interrupted run without repeating finished passes, pending replacements
included, and only with the code it started with unless told otherwise.

The whole sweep holds the archive's lock (``lock.py``), which its workers inherit; each
worker is its own process group, dies with the manager (``lifeline.py``) and never sees
the signing key. Each write seals the archive (``seal.py``). Temporary files that a killed
writer left beside the archive, and pass folders of managers that are gone, are removed
when a sweep or resume starts.
"""

import contextlib
import itertools
import json
import os
import platform
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from qkbench import archive as archives
from qkbench import env, lifeline, seal
from qkbench.backends import Backend
from qkbench.errors import ArchiveError
from qkbench.lock import ArchiveHeld, ArchiveLock, alive
from qkbench.protocol import Protocol, as_recorded, rebuild
from qkbench.routes import resolve
from qkbench.schedule import order_of
from qkbench.summary import MALFORMED, open_slots, summarize
from qkbench.verify import status_word
from qkbench.worker import PROGRESS, pass_header

# The worker's progress line; a route's own line that merely begins so is output like any.
PROGRESS_LINE = re.compile(rf"{PROGRESS} (\d+) (\d+)")
# A pass's folder (its job and result files) in the temporary directory: the manager's
# pid first, so that folders of a manager that was killed can be told and removed.
PASS_DIR_PREFIX = "qkbench-pass-"


@dataclass
class Events:
    """What a front end may hear about; the CLI draws its progress bar from these."""

    pass_started: Callable[[int, int], None] = lambda index, total: None
    case_done: Callable[[int, int], None] = lambda done, total: None
    pass_finished: Callable[[int, str], None] = lambda index, status: None
    # The finished pass's raw result, as archived (just before ``pass_finished``).
    pass_result: Callable[[dict], None] = lambda result: None
    # A resume found the archive complete: nothing was measured or written.
    already_complete: Callable[[], None] = lambda: None
    # The archive's path, once it is this run's to write (a ``fresh_name`` may differ).
    archive_named: Callable[[Path], None] = lambda path: None


def job_for(protocol: Protocol, index: int, device: torch.device, replaces: int | None = None,
            case_keys: list[str] | None = None) -> dict:
    """Pass ``index``: a primary pass (its own slot's order, every case), or a replacement
    of slot ``replaces`` (that slot's order) for ``case_keys`` alone."""
    slot = index if replaces is None else replaces
    return {"index": index, "order": list(order_of(slot)), "replaces": replaces,
            "case_keys": case_keys, "device": str(device), "protocol_text": protocol.text,
            "protocol_path": protocol.path, "overrides": _overrides(protocol),
            "measure_limits": True}


def _overrides(protocol: Protocol) -> dict:
    """The resolved timing, routes and cells, so the worker rebuilds exactly this protocol."""
    resolved = protocol.resolved()
    return {"routes": list(protocol.routes), "tokens": list(protocol.tokens),
            "geometries": [g.name for g in protocol.geometries], **resolved["timing"]}


def _worker_env(device: torch.device) -> dict:
    child = dict(os.environ)
    child.pop(seal.KEY_ENV, None)  # a route runs in the worker: it never sees the key
    child[lifeline.MANAGER_PID] = str(os.getpid())
    if device.type == "cpu":
        child["TRITON_INTERPRET"] = "1"
    return child


def _failed_pass(job: dict, pid: int, returncode: int | None, head: list[str],
                 tail: list[str], reason: str | None = None) -> dict:
    """The archive's record of a pass that did not finish: what it said, first and last,
    and why it ended where the manager ended it."""
    record = {**pass_header(job), "status": "failed", "returncode": returncode, "pid": pid,
              "stderr_head": head, "stderr_tail": tail, "finished": time.time()}
    if reason is not None:
        record["reason"] = reason
    return record


def _run_in_process(job: dict, backend: Backend | None, events: Events) -> dict:
    """The pass in this process; an exception in it (or a route's ``sys.exit``) fails the
    pass, not the run. (It cannot be timed out: nothing can stop a hung call in this
    process.)"""
    from qkbench.worker import run_pass

    try:
        return run_pass(job, backend, events.case_done)
    except (Exception, SystemExit):
        lines = traceback.format_exc().rstrip().splitlines()
        return _failed_pass(job, os.getpid(), None, lines[:40], lines[40:][-20:])


# Seconds between looks at whether a pass's worker has exited while its stderr stays open.
EXIT_POLL_S = 0.5


def _read_lines(stream, lines: queue.Queue) -> None:
    try:
        for line in stream:
            lines.put(line)
    finally:
        # Whatever ends the reading, the pass's loop must hear it now, not at its timeout.
        lines.put(None)


def _end(proc: subprocess.Popen) -> None:
    """SIGKILL the worker's whole process group (it is the group's leader)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _run_in_subprocess(job: dict, device: torch.device, events: Events, timeout: float,
                       lock: ArchiveLock | None = None) -> dict:
    """The pass in a fresh worker process (a process group of its own, holding the
    archive's lock with the manager); ended, and recorded failed, after ``timeout`` s."""
    with tempfile.TemporaryDirectory(prefix=f"{PASS_DIR_PREFIX}{os.getpid()}-") as tmp:
        job_path, result_path = Path(tmp, "job.json"), Path(tmp, "result.json")
        job_path.write_text(json.dumps(job))
        deadline = time.monotonic() + timeout
        proc = subprocess.Popen([sys.executable, "-m", "qkbench.lifeline", str(job_path),
                                 str(result_path)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, errors="replace",
                                env=_worker_env(device),
                                start_new_session=True,
                                pass_fds=() if lock is None else (lock.fd,))
        head: list[str] = []
        tail: deque[str] = deque(maxlen=20)
        lines: queue.Queue = queue.Queue()
        reader = threading.Thread(target=_read_lines, args=(proc.stderr, lines), daemon=True)
        timed_out = False

        def take(line: str) -> None:
            if progress := PROGRESS_LINE.fullmatch(line.rstrip()):
                events.case_done(int(progress[1]), int(progress[2]))
            elif len(head) < 40:
                head.append(line.rstrip())
            else:
                tail.append(line.rstrip())

        eof = False
        try:
            if lock is not None:
                lock.note_worker(proc.pid)
            reader.start()
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise queue.Empty
                try:
                    line = lines.get(timeout=min(left, EXIT_POLL_S))
                except queue.Empty:
                    if proc.poll() is not None:
                        # The worker is done; a process it left behind (a library's helper)
                        # may hold its stderr open, so its end is not waited for.
                        break
                    continue
                if line is None:
                    eof = True
                    break
                take(line)
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except (queue.Empty, subprocess.TimeoutExpired):
            timed_out = True
        finally:
            if proc.poll() is None or not eof:
                # Timed out, the manager interrupted, or the worker left processes behind:
                # its whole group ends, so none outlives its pass.
                _end(proc)
            if reader.ident is not None:  # an interrupt may land before it was started
                reader.join(timeout=5)
            if lock is not None:
                lock.note_worker(None)
        while not lines.empty():
            if (line := lines.get()) is not None:
                take(line)
        if timed_out:
            return _failed_pass(job, proc.pid, proc.returncode, head, list(tail),
                                reason=f"timed out after {timeout:g} s")
        if proc.returncode == 0 and result_path.exists():
            return json.loads(result_path.read_text())
        return _failed_pass(job, proc.pid, proc.returncode, head, list(tail))


def remove_dead_pass_dirs(root: Path | None = None) -> list[Path]:
    """Pass folders (``qkbench-pass-PID-*``) of managers that are gone: a manager killed
    by SIGKILL cannot remove its own. Only this user's folders are looked at."""
    root = Path(root or tempfile.gettempdir())
    pattern = re.compile(rf"{re.escape(PASS_DIR_PREFIX)}(\d+)-.+")
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if not m or int(m[1]) == os.getpid() or alive(int(m[1])):
            continue
        try:
            if not entry.is_dir() or entry.is_symlink() or entry.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def _check_resumable(existing: dict, protocol: Protocol, settings: dict, out: Path) -> None:
    archives.check_resumable(existing, out)
    if existing["protocol"]["sha256"] != protocol.sha256:
        raise ArchiveError(f"{out}: cannot resume: it was run with another protocol text")
    wanted = as_recorded(archives.as_stored(protocol.resolved()), existing["protocol"]["resolved"])
    if existing["protocol"]["resolved"] != wanted:
        differ = "; ".join(f"{key} is {a!r} there, {b!r} here" for key, a, b in
                           _differing(existing["protocol"]["resolved"], wanted))
        raise ArchiveError(f"{out}: cannot resume: its settings differ from these overrides "
                           f"({differ}); leave out --protocol and the overrides to go on as "
                           "it recorded")
    if existing["settings"] != settings:
        raise ArchiveError(f"{out}: cannot resume: recorded settings {existing['settings']} "
                           f"differ from {settings}")


def _free(out: Path) -> ArchiveLock:
    """The held lock of the first of ``out``, ``out``-2, ``out``-3, ... that no other run
    holds and none has written (two sweeps started in one second stamp one name)."""
    stem, suffix = ((out.name[:-len(archives.SUFFIX)], archives.SUFFIX)
                    if out.name.endswith(archives.SUFFIX) else (out.stem, out.suffix))
    for n in itertools.count(1):
        lock = ArchiveLock(out if n == 1 else out.with_name(f"{stem}-{n}{suffix}"))
        try:
            lock.acquire()
        except ArchiveHeld:
            continue
        if not os.path.lexists(lock.archive):
            return lock
        lock.release()
    raise AssertionError("unreachable")


def check_seal(existing: dict, key: bytes | None, out: Path) -> bytes | None:
    """Resume only an archive whose digests still hold, signed the way this run would
    sign (a signed run goes on with the same key; an unsigned one without a key). A
    complete one is only read, so any key goes: its digests are checked as far as the key
    allows. Returns the key they were checked with."""
    from qkbench.audit import digest_problems

    recorded = existing.get("seal") or {}
    signed = seal.is_signed(existing)
    if existing.get("status") == "complete":
        if not signed or key is None or recorded.get("key_id") != seal.key_id(key):
            key = None
    elif signed and key is None:
        raise ArchiveError(f"{out}: cannot resume: it is signed ({seal.HMAC_SHA256}); set "
                           f"{seal.KEY_ENV} to the key it was started with")
    elif signed and recorded.get("key_id") != seal.key_id(key):
        raise ArchiveError(f"{out}: cannot resume: it is signed with another key (key id "
                           f"{recorded.get('key_id')}, {seal.KEY_ENV} has {seal.key_id(key)})")
    elif not signed and key is not None:
        raise ArchiveError(f"{out}: cannot resume: it is not signed, and {seal.KEY_ENV} is "
                           "set: its passes cannot be signed now; unset the key to resume it")
    problems = digest_problems(existing, key)
    if problems:
        raise ArchiveError(f"{out}: cannot resume: it was edited since it was written "
                           f"({problems[0]}{'; ...' if len(problems) > 1 else ''}); "
                           "`qkbench audit` it")
    return key


def _check_sound(existing: dict, key: bytes | None, out: Path) -> None:
    """Resume only an archive whose passes can be summarised and whose record holds
    together (what ``audit`` checks but the stored summary): more passes would be measured
    only to be blamed for what an earlier one broke."""
    from qkbench.audit import examine

    problems = examine(existing, key, stored_summary=False).problems
    if problems:
        raise ArchiveError(f"{out}: cannot resume: {problems[0]} (`qkbench audit {out}` "
                           "lists every problem); start a new sweep")


def _check_code(existing: dict, out: Path, allow_code_change: bool) -> tuple[dict, list[str]]:
    """The code this resume runs, and how it differs from the code the run started with;
    refused when it differs unless ``allow_code_change``."""
    now = env.code_now()
    differ = env.code_differences(env.environment_code(existing["environment"]), now)
    if differ and not allow_code_change:
        raise ArchiveError(f"{out}: cannot resume: the code changed since the run started "
                           f"({'; '.join(differ)}); resume from the tree it started with, or "
                           "pass --allow-code-change to mix them (each pass records the "
                           "code it ran)")
    return now, differ


def _check_machine(existing: dict, device: torch.device, out: Path) -> dict:
    """This machine's ``env.MACHINE_KEYS``; refused where they differ from the run's: its
    passes would be two machines' under one header."""
    now = env.machine(env.capture(device))
    was = env.machine(existing["environment"])
    differ = [f"{key} {was[key]} -> {now[key]}" for key in now if was[key] != now[key]]
    if differ:
        raise ArchiveError(f"{out}: cannot resume: this machine is not the one the run "
                           f"started on ({'; '.join(differ)}); resume it there, or start a "
                           "new sweep here")
    return now


def _names(value) -> list | None:
    """The names of a list of named tables (geometries, bands), else None."""
    if isinstance(value, list) and all(isinstance(v, dict) and "name" in v for v in value):
        return [v["name"] for v in value]
    return None


def _differing(a, b, path: str = "") -> list[tuple[str, object, object]]:
    """The dotted keys whose values differ between two JSON objects, with both values; a
    list of named tables by its names, or where those agree, table by table."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for key in sorted(set(a) | set(b), key=str)
                for d in _differing(a.get(key), b.get(key), f"{path}.{key}" if path else key)]
    names_a, names_b = _names(a), _names(b)
    if a != b and None not in (names_a, names_b):
        if names_a != names_b:
            return [(f"{path} (names)", names_a, names_b)]
        return [d for x, y in zip(a, b, strict=True)
                for d in _differing(x, y, f"{path}[{x['name']}]")]
    return [] if a == b else [(path, a, b)]


def hopeless(protocol: Protocol, result: dict | None) -> set[str]:
    """The routes that make a run hopeless after ``result`` (a pass, or None before one):
    where on every case the pass verified each comparison has a route that is wrong there
    (raised, or off the oracle or its exactness group) or does not support it (n/s), no
    pass can give any verdict. Empty otherwise, and where a case went unverified (e.g. out
    of memory): that one may still give one."""
    checks = [c.get("verification") for c in (result or {}).get("cases", [])]
    if not checks or None in checks:
        return set()
    pairs = [(protocol.baseline, candidate) for candidate in protocol.candidates]
    unusable = [{name for name, check in v.items() if status_word(check) != "ok"}
                for v in checks]
    if all(set(pair) & bad for bad in unusable for pair in pairs):
        return {r for bad in unusable for pair in pairs for r in set(pair) & bad}
    return set()


def first_pass(run: dict) -> dict | None:
    return next((p for p in run["passes"] if p["index"] == 0), None)


def stopped(protocol: Protocol, run: dict) -> str | None:
    """Why ``sweep`` returned ``run`` before it was complete (None where it did not stop)."""
    broken = hopeless(protocol, first_pass(run)) if run["status"] != "complete" else set()
    return (f"the sweep stopped after its first pass: "
            f"{_invalid_everywhere(broken, first_pass(run))}") if broken else None


def _invalid_everywhere(broken: set[str], result: dict) -> str:
    words = {status_word(c["verification"][r]) for c in result["cases"] for r in broken}
    what = " or ".join(said for word, said in (("WRONG", "invalid"),
                                               ("n/s", "not supported (n/s)"))
                       if word in words)
    return (f"{', '.join(sorted(broken))} {what} on every case, so no comparison could give a "
            "verdict")


def resumable(run: dict) -> bool:
    """Whether ``sweep --resume`` can go on with ``run``: a running archive of this schema,
    not a gate's (its routes are a ref's), whose first pass left a verdict possible."""
    if (run["status"] != "running" or run.get("schema_version") != archives.SCHEMA_VERSION
            or run.get("gate")):
        return False
    return not hopeless(rebuild(run["protocol"]), first_pass(run))


def sweep(protocol: Protocol, device: torch.device, out: Path, *, resume: bool = False,
          command: list[str] | None = None, backend: Backend | None = None,
          events: Events | None = None, allow_code_change: bool = False,
          header: dict | None = None, fresh_name: bool = False) -> dict:
    """Run (or resume) every pass of ``protocol``; returns the final archive.

    Signs the archive when ``QKBENCH_SIGNING_KEY`` is set (``seal.py``). A resume refuses
    an archive another process is writing, one edited since it was written, and a tree
    whose git commit or kernel sources differ from the run's (unless
    ``allow_code_change``: then the resume is recorded, and every pass records its code).
    ``header``: more top-level keys for a new archive (``qkbench gate`` records the two
    commits it compares under ``gate``). ``fresh_name``: ``out`` is a name the tool chose
    (a time stamp), not the user: where another run holds or has written it, the next free
    one (``NAME-2.json.gz``, ...) is taken instead; ``events.archive_named`` hears which.
    """
    events = events or Events()
    t = protocol.timing
    key = seal.signing_key()
    settings = archives.run_settings(protocol, str(device))
    for name in protocol.routes:  # an unknown or unloadable route fails before any file
        resolve(name)
    out = Path(out)
    try:
        if out.is_symlink():
            # The lock and the atomic replace go by name: through a link they would guard and
            # replace the link, and two writers of the one archive would both go on.
            out = Path(os.path.realpath(out))
        is_file = out.is_file()
    except OSError as e:  # e.g. a name longer than the file system takes
        raise ArchiveError(f"{out}: cannot be used ({e.strerror})") from None
    if resume and not is_file:  # before the lock, which would make its folder
        archives.read(out)
    with _free(out) if fresh_name and not resume else ArchiveLock(out) as lock:
        out = lock.archive
        events.archive_named(out)
        archives.remove_stale_tmp_files(out)
        remove_dead_pass_dirs()

        def save(create: bool = False) -> None:
            seal.seal(run, key)
            (archives.create if create else archives.write)(out, run)

        if resume:
            run = archives.read(out)
            _check_resumable(run, protocol, settings, out)
            _check_sound(run, check_seal(run, key, out), out)
            if run["status"] == "complete":
                # Nothing will be measured or written: the code and the machine have no say.
                events.already_complete()
                return run
            code, differ = _check_code(run, out, allow_code_change)
            here = _check_machine(run, device, out)
            broken = hopeless(protocol, first_pass(run))
            if broken:
                # A slot with an invalid route is never replaced: no verdict can come of it.
                raise ArchiveError(f"{out}: cannot resume: its first pass found "
                                   f"{_invalid_everywhere(broken, first_pass(run))}; start "
                                   "a new sweep")
            run["resumed"].append({
                "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": command or [],
                "after_passes": len(run["passes"]), "code": code, "code_changes": differ,
                "allowed_code_change": allow_code_change, "host": platform.node(),
                "machine": here})
            save()
        else:
            run = archives.new(protocol, settings, env.capture(device), command or [])
            run.update(header or {})
            save(create=True)
        done = {p["index"] for p in run["passes"]}

        def measure(job: dict) -> None:
            events.pass_started(job["index"], t.passes)
            if t.isolation == "process" and backend is None:
                result = _run_in_subprocess(job, device, events, t.pass_timeout, lock)
            else:
                result = _run_in_process(job, backend, events)
            differ = env.code_differences(env.run_code(run, job["index"]), result["code"]) \
                if "code" in result else []
            if differ:
                # Kept, the pass would mix two candidates' times in one verdict.
                raise ArchiveError(f"{out}: pass {job['index']} ran other code than the run "
                                   f"({'; '.join(differ)}): the tree changed during the run; "
                                   "the pass is not kept (restore the code and resume, or "
                                   "start a new run)")
            result = archives.as_stored(result)
            result["digest"] = archives.pass_digest(result, key)
            run["passes"] = sorted([*run["passes"], result], key=lambda p: p["index"])
            try:
                run["summary"] = summarize(run)
            except MALFORMED as e:
                save()  # the pass is kept as measured, for audit and report to name
                raise ArchiveError(f"{out}: pass {result['index']} cannot be summarised ({e}); "
                                   "it is kept in the archive") from None
            save()
            events.pass_result(result)
            events.pass_finished(job["index"], result["status"])

        for index in range(t.passes):
            if index not in done:
                measure(job_for(protocol, index, device))
                # Nothing valid can come of more passes: stop there (``stopped`` says why).
                if index == 0 and hopeless(protocol, first_pass(run)):
                    return run
        run["summary"] = summarize(run)
        # Each round replaces every open slot once; a slot's attempts are bounded by retries.
        while slots := open_slots(run["summary"]):
            for slot, keys in slots.items():
                index = max(p["index"] for p in run["passes"]) + 1
                measure(job_for(protocol, index, device, replaces=slot, case_keys=keys))
        run["status"] = "complete"
        run["summary"] = summarize(run)
        save()
    return run

