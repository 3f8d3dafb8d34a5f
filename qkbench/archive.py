"""Run archives: versioned, self-describing JSON written atomically, never overwritten.

Schema history:
  1 (2026-12-02): protocol text + sha256 + resolved settings, environment, every pass
    with its arm order, pid, raw per-sample times, warm-up samples and telemetry of each
    arm, per-case verification, placement seed and same-bytes copy reference; a sha256
    digest of each pass's raw content; the derived summary.
  2 (2026-12-03): balanced replacement: replacement passes (``replaces``: the slot whose
    arm order they repeat, ``case_keys``: the cases they measure); every pass records its
    order, the code it ran (commit, kernel hashes) and, per comparison, the placement
    (allocation order, padding, buffer offsets modulo 2 MiB); the warm-up of each arm
    includes the rounds discarded after host synchronisations; the summary's cells carry
    order slots, the mean-log-ratio estimate, the interval's coverage, the slot effect and
    censored crossovers (see ``summary.py``). Schema 1 archives are still read: audit
    checks them by their own rules (``legacy.py``), reports re-summarise them.
  3 (2026-12-03): sealed: ``seal`` holds a digest of the header (schema version, kind,
    created, command, status, protocol, settings, environment, resumes) and of the list of
    pass digests, with its algorithm (``sha256``, or ``hmac-sha256`` and the key's id when
    signed, see ``seal.py``); pass digests use the same algorithm. ``resumed`` lists each
    resume (when, its command, the code it ran, whether it was let change the code); the
    environment records numpy and scipy; ``timing.pass_timeout`` is resolved; a pass that
    did not finish may say why (``reason``, e.g. "timed out after 1800 s"). Schema 1 and 2
    archives are audited by what they have (no header digest, no signature).
  4 (2026-12-07): the same record; its summary takes each cell's width over every pass that
    measured it, the dropped ones too (``summary.WIDTH_OF_EVERY_PASS``). Schema 3 and
    earlier archives are audited and reported by the kept passes' widths they were made with.
  Storage, not schema: an archive whose name ends in ``.gz`` is written gzip-compressed
  (deterministically: no name, mtime 0); readers detect gzip by its magic bytes.
  ``environment.code.dirty_paths`` (added beside ``dirty``) lists what made a tree dirty.
  ``gate`` (optional, 2026-12-03; written by ``qkbench gate --against``): ``against`` (the
  ref given, its commit, the export package, its kernels' sha256) and ``candidate`` (the
  working tree's commit, dirty flag and kernels' sha256); the routes are then
  ``ROUTE@<sha12>`` (the ref's) and ``ROUTE`` (the working tree's).
"""

import contextlib
import errno
import gzip
import json
import os
import re
import time
import zlib
from pathlib import Path

from qkbench import seal
from qkbench.errors import ArchiveError

SCHEMA_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
KIND = "qkbench.run"
GZIP_MAGIC = b"\x1f\x8b"
SUFFIX = ".json.gz"  # what a new archive is called unless its path says otherwise


def as_stored(value):
    """``value`` as reading it back from an archive gives it (tuples become lists)."""
    return json.loads(json.dumps(value))


def pass_digest(result: dict, key: bytes | None = None) -> str:
    """The digest of a pass's raw content (everything but the digest itself), canonically:
    sha256, or HMAC-SHA256 with a signing key (``seal.py``)."""
    return seal.pass_digest(result, key)


def run_settings(protocol, device: str) -> dict:
    """What a run's header records of how it ran; ``audit`` rebuilds it from the protocol."""
    t = protocol.timing
    return {"device": device, "baseline": protocol.baseline,
            "candidates": list(protocol.candidates), "schedule": t.schedule,
            "isolation": t.isolation, "passes": t.passes}


def new(protocol, settings: dict, environment: dict, command: list[str]) -> dict:
    return {
        "schema_version": SCHEMA_VERSION, "kind": KIND, "status": "running",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": command,
        "protocol": protocol.record(),
        "settings": settings, "environment": environment, "resumed": [], "passes": [],
        "summary": None, "seal": None,
    }


def encode(archive: dict, compressed: bool) -> bytes:
    """The bytes of an archive file: indented JSON, gzip-compressed when asked (with no
    file name and mtime 0, so the same archive always gives the same bytes)."""
    text = json.dumps(archive, indent=1).encode()
    return gzip.compress(text, compresslevel=6, mtime=0) if compressed else text


def decode(data: bytes) -> object:
    """An archive file's JSON, gzip-compressed or not (told apart by the magic bytes); a
    ValueError where it is not JSON, nesting past the parser's depth included."""
    if data[:2] == GZIP_MAGIC:
        data = gzip.decompress(data)
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def prepare_folder(path: Path) -> None:
    """Make the archive's folder, or say in an ``ArchiveError`` why it cannot be."""
    blocking = next((p for p in path.parents if p.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise ArchiveError(f"{path}: cannot write the archive: {blocking} is a file, "
                           "not a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise write_error(path, e) from None


def write_error(path: Path, e: OSError, *own: Path) -> ArchiveError:
    """One line for an archive (or its lock or temporary file) that cannot be written."""
    reason = e.strerror or str(e)
    if e.errno == errno.ENOENT and os.path.isdir(path.parent):  # /proc takes no new files
        reason = f"{path.parent} does not take new files ({reason})"
    where = f" ({e.filename})" if e.filename and str(e.filename) not in (
        str(path), *map(str, own)) else ""
    return ArchiveError(f"{path}: cannot write the archive: {reason}{where}")


def tmp_path(path: Path, pid: int | None = None) -> Path:
    """Where ``write`` puts the new bytes before renaming them over ``path``."""
    return path.with_name(f".{path.name}.{os.getpid() if pid is None else pid}.tmp")


def stale_tmp_files(path: Path) -> list[Path]:
    """Temporary files of ``path`` left by other processes (a writer killed mid-write:
    SIGKILL cannot be caught, so its ``.NAME.PID.tmp`` stays). Only meaningful while
    holding the archive's lock: then no other process can be writing them."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.(\d+)\.tmp")
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    return [path.with_name(n) for n in sorted(names)
            if (m := pattern.fullmatch(n)) and int(m[1]) != os.getpid()]


def remove_stale_tmp_files(path: Path) -> list[Path]:
    removed = []
    for stale in stale_tmp_files(path):
        with contextlib.suppress(OSError):
            stale.unlink()
            removed.append(stale)
    return removed


def write(path: Path, archive: dict) -> None:
    """Write atomically: a reader sees the old file or the new one, never a part.

    A path ending in ``.gz`` (any case) is written gzip-compressed, any other as plain JSON. Any
    failure (a parent that is a file, a read-only or virtual file system, a full disk) is
    an ``ArchiveError`` naming the file; on any failure or interruption the temporary
    file is removed, so nothing half-written is left, and the archive keeps what it held.
    (A writer killed by SIGKILL cannot remove it: the next sweep or resume of the archive
    does, see ``stale_tmp_files``.)
    """
    tmp = tmp_path(path)
    try:
        prepare_folder(path)
        with open(tmp, "wb") as f:
            f.write(encode(archive, path.suffix.lower() == ".gz"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if not isinstance(e, OSError):
            raise
        raise write_error(path, e, tmp) from None


def create(path: Path, archive: dict) -> None:
    """Write a new archive; refuses to replace an existing file."""
    if os.path.exists(path):  # False, not an error, where it cannot be looked at
        raise ArchiveError(f"{path} exists: archives are never overwritten "
                           "(choose another --out, or --resume it)")
    write(path, archive)


def check_resumable(run: dict, path: Path) -> None:
    """Refuse to resume an archive of another schema than this qkbench writes, or a gate's
    (its baseline ran a ref's kernels, exported for that gate only)."""
    version = run.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ArchiveError(f"{path}: cannot resume: it is a schema {version} archive; resume "
                           "it with the qkbench version that started it")
    if run.get("gate"):
        raise ArchiveError(f"{path}: cannot resume: it is a gate's archive (its baseline "
                           "ran kernels exported from a git ref for that gate only); run the "
                           "qkbench gate command again")


def read(path: Path) -> dict:
    """Read and check an archive's kind and schema version (plain or gzip-compressed JSON,
    whatever its name says)."""
    try:
        data = decode(Path(path).read_bytes())
    except FileNotFoundError:
        raise ArchiveError(f"{path}: no such archive") from None
    except (OSError, EOFError, zlib.error, ValueError) as e:  # ValueError: JSON, Unicode
        raise ArchiveError(f"{path}: cannot be read as JSON ({e})") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise ArchiveError(f"{path}: not a qkbench run archive")
    version = data.get("schema_version")
    if version not in READABLE_VERSIONS:
        raise ArchiveError(f"{path}: schema_version {version!r} is not supported "
                           f"(this qkbench reads {', '.join(map(str, READABLE_VERSIONS))})")
    _check_shape(path, data)
    return data


# The top-level keys every archive has, with their JSON types (the summary is null until
# the first pass finishes).
_SHAPE = {"status": (str,), "created": (str,), "command": (list,), "protocol": (dict,),
          "settings": (dict,), "environment": (dict,), "passes": (list,),
          "summary": (dict, type(None))}
# Keys a schema 3 archive has besides (its seal is null until the first write).
_SHAPE_3 = {"resumed": (list,), "seal": (dict, type(None))}
_NUMBER = (int, float)
_TEXT = (str, type(None))


class _OrNull:
    """A part that may also be null."""

    def __init__(self, spec) -> None:
        self.spec = spec


def _names(types: tuple) -> str:
    json_names = {"str": "a string", "dict": "an object", "list": "an array", "int": "a number",
                  "float": "a number", "NoneType": "null", "bool": "true or false"}
    return " or ".join(dict.fromkeys(json_names[t.__name__] for t in types))


def _check_shape(path: Path, data: dict) -> None:
    shape = {**_SHAPE, **(_SHAPE_3 if data["schema_version"] >= 3 else {})}
    later = [key for key in _SHAPE_3 if key not in shape and key in data]
    if later:
        # Only a schema 3 or later writer makes them, so an older number beside them is an
        # edit that would skip the header digest (one that drops them too reads as that older
        # schema, which audit then says is checked for consistency only).
        raise ArchiveError(f"{path}: malformed archive: schema_version "
                           f"{data['schema_version']} but it has {' and '.join(later)}, "
                           "which only schema 3 and later archives have (was its version "
                           "edited?)")
    for key, types in shape.items():
        if not isinstance(data.get(key, ...), types):
            raise ArchiveError(f"{path}: malformed archive: '{key}' is missing or not "
                               f"{' or '.join(t.__name__ for t in types)}")
    _check_parts(path, data, _HEADER)
    gpu = data["environment"].get("gpu")
    if gpu is not None and not isinstance(gpu, dict):
        raise ArchiveError(f"{path}: malformed archive: 'environment.gpu' must be an object "
                           f"or null, got {type(gpu).__name__}")
    l2 = (gpu or {}).get("l2_bytes")
    if l2 is not None and (not isinstance(l2, int) or isinstance(l2, bool)):
        # The plots draw the L2's size as a line on the token axis.
        raise ArchiveError(f"{path}: malformed archive: 'environment.gpu.l2_bytes' must be "
                           f"an integer or null, got {type(l2).__name__}")
    if not all(isinstance(p, dict) and isinstance(p.get("status"), str)
               for p in data["passes"]):
        raise ArchiveError(f"{path}: malformed archive: every entry of 'passes' must be an "
                           "object with a 'status'")
    _check_parts(path, data, _PARTS)


# The parts of an archive that report, export, audit, the gate and resume read besides what
# its summary is recomputed from (``summary.current`` checks that): a dict is an object of
# these keys (one ending in "?" may be absent, "*" stands for any key), a list an array of
# its one item, a tuple the types a value may have. ``_HEADER`` is checked before the rules
# above that read it (the environment's gpu), ``_PARTS`` after them.
_HASHES = {"*": (str,)}
_CODE = {"commit?": _TEXT, "kernels_sha256?": _OrNull(_HASHES),
         "harness_sha256?": _OrNull(_HASHES)}
_HEADER = {
    "protocol": {"text": (str,), "sha256": (str,), "resolved": {
        "name": (str,), "routes": [(str,)], "timing": {"drop_threshold": _NUMBER},
        "bands": (list,), "dispatch_margin": _NUMBER}},
    "settings": {"device": (str,), "schedule": (str,), "isolation": (str,)},
    "environment": {"device": (str,), "torch": (str,), "triton": _TEXT,
                    "code": {"commit": _TEXT}, "kernels_sha256?": _OrNull(_HASHES),
                    "harness_sha256?": _OrNull(_HASHES)},
}
_PARTS = {
    "resumed?": [{"code?": _CODE}],
    "passes": [{"index": (int,), "code?": _CODE,
                "limits?": _OrNull({"copy": {"bytes": (int,), "gbps": _NUMBER},
                                    "launch_floor": {"*": {"median_s": _NUMBER}}}),
                "cases?": [{"key": (str,), "verification?": {"*": {"ok": (bool,)}},
                            "comparisons?": [{"arms?": [{"label": (str,), "route": (str,),
                                                         "samples": [_NUMBER]}]}]}]}],
}


def _check_parts(path: Path, value, spec, where: str = "") -> None:
    if isinstance(spec, _OrNull):
        if value is not None:
            _check_parts(path, value, spec.spec, where)
        return
    types = (dict,) if isinstance(spec, dict) else (list,) if isinstance(spec, list) else spec
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        want = _names(types)
        raise ArchiveError(f"{path}: malformed archive: '{where}' must be {want}, got "
                           f"{type(value).__name__}")
    if isinstance(spec, list):
        for i, item in enumerate(value):
            _check_parts(path, item, spec[0], f"{where}[{i}]")
    elif isinstance(spec, dict):
        for key, part in spec.items():
            name = key.rstrip("?")
            found = value.keys() if name == "*" else [name] if name in value else []
            if not found and not key.endswith("?") and name != "*":
                raise ArchiveError(f"{path}: malformed archive: '{_joined(where, name)}' is "
                                   "missing")
            for k in found:
                _check_parts(path, value[k], part, _joined(where, k))


def _joined(where: str, key: str) -> str:
    """The dotted name of ``key`` in the part at ``where``."""
    return f"{where}.{key}" if where else key
