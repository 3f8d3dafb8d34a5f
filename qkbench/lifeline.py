"""A pass's worker process dies with its manager: ``python -m qkbench.lifeline JOB RESULT``.

The manager (``runner``) starts each worker this way, with ``QKBENCH_MANAGER_PID`` set to
its own pid. Before anything heavy is imported (torch takes seconds), the worker asks
Linux to SIGKILL it when its parent dies (``prctl(PR_SET_PDEATHSIG)``), then checks that
the manager did not die before that, and starts a watchdog thread that polls its parent
pid (the same guarantee where ``prctl`` is missing). Then it runs ``worker.main``. So a
killed manager never leaves a worker measuring beside the next run; and since workers hold
the archive's lock with their manager (``lock.py``), a resume cannot start before its
old worker is gone.
"""

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

MANAGER_PID = "QKBENCH_MANAGER_PID"
PR_SET_PDEATHSIG = 1
# How often the watchdog looks at the parent pid.
WATCHDOG_PERIOD_S = 0.5


def _parent_death_signal() -> bool:
    """SIGKILL this process when its parent dies (Linux); False where that is not had."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(manager: int) -> None:
    while os.getppid() == manager:
        time.sleep(WATCHDOG_PERIOD_S)
    os.kill(os.getpid(), signal.SIGKILL)


def die_with_manager() -> None:
    """Tie this process's life to its manager's (no-op unless ``QKBENCH_MANAGER_PID`` is
    set, i.e. outside a sweep)."""
    value = os.environ.get(MANAGER_PID)
    if not value:
        return
    manager = int(value)
    _parent_death_signal()
    if os.getppid() != manager:  # the manager died before the signal was armed
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=_watch, args=(manager,), name="qkbench-watchdog",
                     daemon=True).start()


if __name__ == "__main__":
    die_with_manager()
    from qkbench.worker import main

    sys.exit(main(sys.argv[1:]))
