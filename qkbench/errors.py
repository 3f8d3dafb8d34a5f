"""The errors qkbench reports to a user: the CLI turns each into one line and exit 1
(``qkbench gate``: exit ``USAGE``)."""

# Exit codes of ``qkbench gate``: here, so that the command can name them before it imports
# its rules (which import the kernels, and must not before the device is known).
PASS, FAIL, USAGE, INCONCLUSIVE = 0, 1, 2, 3


class QkbenchError(Exception):
    """Base of every error that is the user's to fix, not a bug."""


class ProtocolError(QkbenchError):
    """A protocol file or a case in it is invalid."""


class ArchiveError(QkbenchError):
    """An archive cannot be read, is of an unknown schema, or would be overwritten."""


class DeviceError(QkbenchError):
    """The requested device is not there."""


class RouteError(QkbenchError):
    """A route cannot be built or computes the wrong result."""


class GateError(QkbenchError):
    """A gate's input is unusable: a git ref, an expectation, archives that cannot be
    compared. ``qkbench gate`` exits 2 on it (and on any other ``QkbenchError``)."""
