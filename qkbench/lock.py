"""One writer per archive: an exclusive lock on a sidecar file, held for a whole sweep.

``.NAME.lock`` beside the archive ``NAME`` is locked with ``flock`` for as long as a sweep
or a resume runs, and its worker processes inherit the locked descriptor: the lock is
free only once the manager *and* every worker it started are gone (a worker that outlives
a killed manager keeps it). The file records their pids, so a second writer is refused
with a line that names them. ``flock`` locks are released by the kernel when the last
holder dies, so a killed run never leaves a stale lock, only (at worst) the file, which
the next writer reuses.
"""

import contextlib
import errno
import fcntl
import json
import os
import platform
import time
from pathlib import Path

from qkbench.archive import prepare_folder, write_error
from qkbench.errors import ArchiveError


def lock_path(archive: Path) -> Path:
    return archive.with_name(f".{archive.name}.lock")


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (a killed manager's orphaned
    worker may be reaped late, or never, where PID 1 reaps nothing). A process whose main
    thread is a zombie while another of its threads is still exiting is alive: it still
    holds its files."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stats = [t.read_text() for t in Path(f"/proc/{pid}/task").glob("*/stat")]
    except OSError:
        stats = []
    if not stats:
        return True  # no /proc here, or it is gone this instant: say alive, to be safe
    return any(s.rpartition(")")[2].split()[:1] not in (["Z"], ["X"]) for s in stats)


def held(archive: Path) -> bool:
    """Whether a sweep or resume is writing ``archive`` now: a lock file whose manager or
    worker still runs (read, not locked, so a writer starting this instant is never
    refused for it). A lock file that cannot be read says held, to be safe."""
    try:
        record = json.loads(lock_path(Path(archive)).read_text())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True
    if not isinstance(record, dict):
        return True
    pids = [record.get("manager"), record.get("worker")]
    return any(isinstance(pid, int) and alive(pid) for pid in pids)


class ArchiveHeld(ArchiveError):
    """Another process holds the archive's lock."""


class ArchiveLock:
    """``with ArchiveLock(path) as lock:``: the exclusive right to write ``path``."""

    def __init__(self, archive: Path):
        self.archive = Path(archive)
        self.path = lock_path(self.archive)
        self.fd: int | None = None
        self.record = {"manager": os.getpid(), "worker": None, "host": platform.node(),
                       "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

    def __enter__(self) -> "ArchiveLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        if self.fd is not None:  # held already (``runner._free`` takes it before ``with``)
            return
        prepare_folder(self.archive)
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as e:
                raise write_error(self.archive, e, self.path) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise write_error(self.archive, e, self.path) from None
                raise ArchiveHeld(self._held_message()) from None
            # The file may have been removed (and its lock released) between our open and
            # our lock; then the lock is on a name nobody else sees: take the new file.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                self._write()
                return
            os.close(fd)

    def note_worker(self, pid: int | None) -> None:
        """Record the worker now running (None once it is gone)."""
        self.record["worker"] = pid
        self._write()

    def _write(self) -> None:
        """Best effort: the pids are for the message a second writer reads; on a full disk
        the lock still holds without them (and the archive write then says why)."""
        data = json.dumps(self.record).encode()
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, data, 0)

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()  # while still held: nobody can be locking this file now
        os.close(self.fd)
        self.fd = None

    def _held_message(self) -> str:
        try:
            record = json.loads(self.path.read_text())
            manager, worker = int(record["manager"]), record.get("worker")
            host = record.get("host")
        except (OSError, ValueError, KeyError, TypeError):
            return (f"{self.archive}: another qkbench is writing this archive (its lock "
                    f"{self.path} is held); wait for it, or end it and --resume")
        where = f" on {host}" if host and host != platform.node() else ""
        if worker is not None and alive(int(worker)) and not alive(manager):
            return (f"{self.archive}: the run that wrote it was killed (manager pid {manager}) "
                    f"but its worker (pid {worker}{where}) still runs and holds the lock; "
                    f"end it (kill {worker}) before --resume")
        running = f"manager pid {manager}" + (f", worker pid {worker}" if worker else "")
        return (f"{self.archive}: another qkbench is writing this archive ({running}{where}); "
                f"wait for it to finish, or end it (kill {manager}) and --resume")
