"""The manager of a sweep: one worker per pass, each finished pass appended to the archive.

First the primary passes, one per order slot; then, while any (slot, case) was dropped or
failed and has retries left, replacement passes with that slot's arm order for just those
cases (balanced replacement, SPEC 4). The archive is rewritten atomically after every
pass, so a run that dies keeps what it finished; a pass whose process crashes is recorded
as failed (and replaced like a drop); ``resume`` continues an interrupted run without
repeating finished passes, pending replacements included.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from qkbench import archive as archives
from qkbench import env
from qkbench.backends import Backend
from qkbench.errors import ArchiveError
from qkbench.protocol import Protocol
from qkbench.routes import resolve
from qkbench.schedule import order_of
from qkbench.summary import open_slots, summarize
from qkbench.worker import PROGRESS, pass_header


@dataclass
class Events:
    """What a front end may hear about; the CLI draws its progress bar from these."""

    pass_started: Callable[[int, int], None] = lambda index, total: None
    case_done: Callable[[int, int], None] = lambda done, total: None
    pass_finished: Callable[[int, str], None] = lambda index, status: None
    # The finished pass's raw result, as archived (just before ``pass_finished``).
    pass_result: Callable[[dict], None] = lambda result: None


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
    """The resolved timing and routes, so the worker rebuilds exactly this protocol."""
    resolved = protocol.resolved()
    return {"routes": list(protocol.routes), **resolved["timing"]}


def _worker_env(device: torch.device) -> dict:
    child = dict(os.environ)
    if device.type == "cpu":
        child["TRITON_INTERPRET"] = "1"
    return child


def _failed_pass(job: dict, pid: int, returncode: int | None, head: list[str],
                 tail: list[str]) -> dict:
    """The archive's record of a pass that did not finish: what it said, first and last."""
    return {**pass_header(job), "status": "failed", "returncode": returncode, "pid": pid,
            "stderr_head": head, "stderr_tail": tail, "finished": time.time()}


def _run_in_process(job: dict, backend: Backend | None, events: Events) -> dict:
    """The pass in this process; an exception in it fails the pass, not the run."""
    from qkbench.worker import run_pass

    try:
        return run_pass(job, backend, events.case_done)
    except Exception:
        lines = traceback.format_exc().rstrip().splitlines()
        return _failed_pass(job, os.getpid(), None, lines[:40], lines[40:][-20:])


def _run_in_subprocess(job: dict, device: torch.device, events: Events) -> dict:
    with tempfile.TemporaryDirectory(prefix="qkbench-pass-") as tmp:
        job_path, result_path = Path(tmp, "job.json"), Path(tmp, "result.json")
        job_path.write_text(json.dumps(job))
        proc = subprocess.Popen([sys.executable, "-m", "qkbench.worker", str(job_path),
                                 str(result_path)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env=_worker_env(device))
        head: list[str] = []
        tail: deque[str] = deque(maxlen=20)
        for line in proc.stderr:
            if line.startswith(PROGRESS):
                done, total = (int(v) for v in line.split()[1:3])
                events.case_done(done, total)
            elif len(head) < 40:
                head.append(line.rstrip())
            else:
                tail.append(line.rstrip())
        code = proc.wait()
        if code == 0 and result_path.exists():
            return json.loads(result_path.read_text())
        return _failed_pass(job, proc.pid, code, head, list(tail))


def _check_resumable(existing: dict, protocol: Protocol, settings: dict, out: Path) -> None:
    if existing["protocol"]["sha256"] != protocol.sha256:
        raise ArchiveError(f"{out}: cannot resume: it was run with another protocol text")
    wanted = archives.as_stored(protocol.resolved())
    if existing["protocol"]["resolved"] != wanted:
        differ = "; ".join(f"{key} is {a!r} there, {b!r} here" for key, a, b in
                           _differing(existing["protocol"]["resolved"], wanted))
        raise ArchiveError(f"{out}: cannot resume: its settings differ from these overrides "
                           f"({differ}); repeat the --protocol and overrides it was started "
                           "with")
    if existing["settings"] != settings:
        raise ArchiveError(f"{out}: cannot resume: recorded settings {existing['settings']} "
                           f"differ from {settings}")


def _differing(a, b, path: str = "") -> list[tuple[str, object, object]]:
    """The dotted keys whose values differ between two JSON objects, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for key in sorted(set(a) | set(b), key=str)
                for d in _differing(a.get(key), b.get(key), f"{path}.{key}" if path else key)]
    return [] if a == b else [(path, a, b)]


def sweep(protocol: Protocol, device: torch.device, out: Path, *, resume: bool = False,
          command: list[str] | None = None, backend: Backend | None = None,
          events: Events | None = None, header: dict | None = None) -> dict:
    """Run (or resume) every pass of ``protocol``; returns the final archive.

    ``header``: more top-level keys for a new archive (``qkbench gate`` records the two
    commits it compares under ``gate``)."""
    events = events or Events()
    t = protocol.timing
    settings = archives.run_settings(protocol, str(device))
    for name in protocol.routes:  # an unknown or unloadable route fails before any file
        resolve(name)
    if resume:
        run = archives.read(out)
        _check_resumable(run, protocol, settings, out)
    else:
        run = archives.new(protocol, settings, env.capture(device), command or [])
        run.update(header or {})
        archives.create(out, run)
    done = {p["index"] for p in run["passes"]}

    def measure(job: dict) -> None:
        events.pass_started(job["index"], t.passes)
        if t.isolation == "process" and backend is None:
            result = _run_in_subprocess(job, device, events)
        else:
            result = _run_in_process(job, backend, events)
        result["digest"] = archives.pass_digest(result)
        run["passes"] = sorted([*run["passes"], result], key=lambda p: p["index"])
        run["summary"] = summarize(run)
        archives.write(out, run)
        events.pass_result(result)
        events.pass_finished(job["index"], result["status"])

    for index in range(t.passes):
        if index not in done:
            measure(job_for(protocol, index, device))
    run["summary"] = summarize(run)
    # Each round replaces every open slot once; a slot's attempts are bounded by retries.
    while slots := open_slots(run["summary"]):
        for slot, keys in slots.items():
            index = max(p["index"] for p in run["passes"]) + 1
            measure(job_for(protocol, index, device, replaces=slot, case_keys=keys))
    run["status"] = "complete"
    run["summary"] = summarize(run)
    archives.write(out, run)
    return run
