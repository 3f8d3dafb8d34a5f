"""SIGTERM (a cancelled CI job, a scheduler's time limit) taken as Ctrl-C is: raised where
a command runs, so that it unwinds through the same clean-up and says what was kept."""

import contextlib
import signal
import threading
from collections.abc import Iterator


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that a command unwinds as from Ctrl-C."""


def _raise(signum: int, frame: object) -> None:
    raise Terminated


@contextlib.contextmanager
def as_interrupt() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` inside the block. Only the main thread may set a
    handler; elsewhere SIGTERM ends the process as ever."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise) if main else None
    try:
        yield
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def ended(e: KeyboardInterrupt) -> tuple[str, int]:
    """How an interrupt is said, and its exit status: 143 for SIGTERM, 130 for Ctrl-C."""
    if isinstance(e, Terminated):
        return "terminated (SIGTERM)", 128 + signal.SIGTERM
    return "interrupted", 130
