"""Files a command writes for the user (a dispatch table, an export): whole or not at all."""

import contextlib
import gzip
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TextIO, TypeVar

from qkbench.errors import QkbenchError

T = TypeVar("T")


def check_target(path: Path, option: str) -> None:
    """Refuse a path that names no file to write: ``.``, ``/``, or an existing folder."""
    if not Path(path).name or os.path.isdir(path):
        raise QkbenchError(f"{option} {path}: names a folder, not a file")


def write_whole(path: Path, write: Callable[[TextIO], T], *, replace: bool,
                gzipped: bool = False) -> T:
    """Run ``write`` on a new text file beside ``path`` (gzip-compressed where ``gzipped``),
    then move it into place: over a file of that name where ``replace``, else
    only where none exists (``FileExistsError``). On any failure (a full disk, a file size
    limit) nothing is left behind, and a file already at ``path`` keeps what it held.
    The temporary name is short, so that any name ``path`` may have still leaves room."""
    path = Path(path)
    tmp = path.with_name(f".qk-{secrets.token_hex(4)}.tmp")
    try:
        with (gzip.open if gzipped else open)(tmp, "xt", newline="") as f:
            result = write(f)
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails where a file of that name exists, whenever it came
            os.unlink(tmp)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return result
