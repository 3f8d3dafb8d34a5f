"""Standard output and error as the CLI writes them: whatever ``sys.stdout`` and
``sys.stderr`` are when written (a test runner swaps them). A write standard output refuses
(a full disk, a reader that went away) is raised as ``OutputError``, which the CLI reports
in one line like any user error; one standard error refuses is dropped, with the rest of
its output, and the command goes on: it holds only diagnostics (a run's archive keeps what
it measured, the exit status says how it ended), and a log reader that went away must not
end a run."""

import errno
import os
import sys

from qkbench.errors import QkbenchError


class OutputError(QkbenchError):
    """Standard output refused a write."""


class _Current:
    """A text stream over whatever ``sys.<name>`` is when written."""

    name = ""

    @property
    def stream(self):
        return getattr(sys, self.name)

    def isatty(self) -> bool:
        return self.stream.isatty()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"


class Stdout(_Current):
    """Standard output (what rich's Console and the CSV writer write to); a refused write
    raises ``OutputError``."""

    name = "stdout"

    def write(self, text: str) -> int:
        return _guarded(lambda: self.stream.write(text))

    def flush(self) -> None:
        _guarded(self.stream.flush)


class Stderr(_Current):
    """Standard error; a refused write is dropped, with the rest of its output."""

    name = "stderr"

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError:
            _discard_the_rest(self.stream)
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError:
            _discard_the_rest(self.stream)


def _guarded(call):
    try:
        return call()
    except OSError as e:
        raise refused(e) from None


def refused(e: OSError) -> OutputError:
    """The error a write standard output refused with ``e`` is reported as (what was not
    written is discarded)."""
    _discard_the_rest(sys.stdout)
    return OutputError(f"standard output: {e.strerror or e}; the output is incomplete")


def stdout_refused(e: BaseException) -> OutputError | None:
    """``e`` as an ``OutputError`` where it is standard output's refusal (ours, or an
    ``OSError`` of a write that did not come through ``Stdout``: click's help), else None."""
    if isinstance(e, OutputError):
        return e
    if isinstance(e, OSError) and e.errno in (errno.EPIPE, errno.ENOSPC, errno.EIO):
        return refused(e)
    return None


def _discard_the_rest(stream) -> None:
    # What could not be written stays in the stream's buffer, and the interpreter would try
    # again at exit and print a traceback of its own: point the descriptor at /dev/null (the
    # remedy Python's documentation gives for SIGPIPE). A stream with no descriptor (a test
    # runner's) has nothing to flush at exit.
    try:
        fd = stream.fileno()
    except (OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
