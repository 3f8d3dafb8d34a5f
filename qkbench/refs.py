"""The kernels of a git commit, run beside the working tree's: the baseline of
``qkbench gate --against REF``.

``kernels/`` imports itself relatively and nothing of the harness (``tests/test_gate_against.py``
enforces it), so the folder at any commit is a complete package under any name. ``exported``
resolves REF to a commit (``git rev-parse``), writes ``kernels/`` at that commit from git's
object store (``git archive``: the working tree is never touched) into a temporary folder as
the package ``qkbench_ref_<sha12>``, and names that folder in the environment variable
``QKBENCH_REF_DIR`` for as long as the gate runs. ``routes.resolve("fused@<sha12>")`` (or
``split@<sha12>``) imports the package from that folder by its file location, in the manager
and in every worker process alike (workers inherit the manager's environment), so nothing is
added to ``sys.path`` and no ``PYTHONPATH`` is rewritten. The folder is removed, and the
package dropped from ``sys.modules``, when the gate ends.

Exactness: a ref's routes form their own exact group, ``triton@<sha12>``: where its split and
fused share a sweep they must agree bit for bit, as the working tree's two do in the group
``triton``. The gate's sweeps time one route against its ref twin, so there only the FP64
oracle is checked: a change may legitimately move the rounding of both routes (a new
reduction order, say), and the gate measures speed; a candidate off the oracle is still
marked invalid and never timed.
"""

import ast
import hashlib
import importlib.util
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from qkbench.errors import GateError, RouteError

ENV = "QKBENCH_REF_DIR"  # the folder holding the exported packages
PREFIX = "qkbench_ref_"
SEP = "@"
# Kernel routes that can be taken at a commit: the entry point and the byte model (the
# working tree's, so that both sides of a gate count the same bytes).
ROUTES = {"fused": ("qk_norm_rope", "fused_bytes"),
          "split": ("qk_norm_rope_split", "split_bytes")}
SHA12 = re.compile(r"[0-9a-f]{12}")
# What a kernel module may import: itself (relatively), torch, triton and the standard library.
ALLOWED_IMPORTS = frozenset({"torch", "triton"}) | frozenset(sys.stdlib_module_names)


def package_name(sha12: str) -> str:
    return f"{PREFIX}{sha12}"


def is_ref_route(name: str) -> bool:
    """``NAME@<commit>``: a kernel route at a commit (a ``module:callable`` never is)."""
    base, sep, _ = name.partition(SEP)
    return bool(sep and base) and ":" not in base


def absolute_imports(source: str, filename: str = "<kernel>") -> list[tuple[str, int]]:
    """Every absolute import of a module: (module, line). Relative imports are left out."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append((node.module or "", node.lineno))
    return found


def foreign_imports(source: str, filename: str = "<kernel>") -> list[str]:
    """The absolute imports of a module that are not torch, triton or the standard library,
    as ``"qkbench.case (line 3)"``."""
    return [f"{name} (line {line})" for name, line in absolute_imports(source, filename)
            if name.partition(".")[0] not in ALLOWED_IMPORTS]


def source_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every ``.py`` file directly in ``folder`` (as ``env.kernel_hashes``)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir(), key=lambda p: p.name) if p.name.endswith(".py")}


# -- importing an exported package (manager and workers) -------------------------------------


def _where(error: BaseException, folder: Path) -> str:
    """``kernels/FILE.py:LINE`` of the deepest frame inside the export, if any."""
    if isinstance(error, SyntaxError) and error.filename:
        path, line = Path(error.filename), error.lineno
    else:
        frames = [f for f in traceback.extract_tb(error.__traceback__)
                  if Path(f.filename).is_relative_to(folder)]
        if not frames:
            return ""
        path, line = Path(frames[-1].filename), frames[-1].lineno
    if not path.is_relative_to(folder):
        return ""
    return f"kernels/{path.relative_to(folder).as_posix()}:{line}: "


def unload(package: str) -> None:
    """Drop a package and its submodules from ``sys.modules``."""
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        del sys.modules[name]


def load(sha12: str):
    """The exported package of commit ``sha12``, imported from ``$QKBENCH_REF_DIR``."""
    name = package_name(sha12)
    root = os.environ.get(ENV)
    if not root:
        raise RouteError(f"no kernels are exported for commit {sha12}: {ENV} is not set "
                         "(qkbench gate --against REF exports them while it runs)")
    folder = Path(root, name)
    init = folder / "__init__.py"
    loaded = sys.modules.get(name)
    if loaded is not None and Path(loaded.__file__ or "").parent == folder:
        return loaded
    unload(name)  # an export of the same commit made earlier, elsewhere
    if not init.is_file():
        raise RouteError(f"no kernels are exported for commit {sha12} in {root} "
                         f"(no {name}/__init__.py)")
    spec = importlib.util.spec_from_file_location(name, init,
                                                  submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:
        unload(name)
        raise RouteError(f"the kernels of commit {sha12} cannot be imported: "
                         f"{_where(e, folder)}{type(e).__name__}: {e}") from None
    return module


def route(name: str):
    """The route ``BASE@<sha12>``: the kernel route BASE as the commit's kernels define it."""
    from qkbench.kernels import traffic
    from qkbench.routes import Route

    base, _, sha12 = name.partition(SEP)
    if base not in ROUTES:
        raise RouteError(f"route {name!r}: only the kernel routes ({', '.join(ROUTES)}) can "
                         "be taken at a commit")
    if not SHA12.fullmatch(sha12):
        raise RouteError(f"route {name!r}: '@' must be followed by the first 12 hex digits of "
                         "a commit (qkbench gate --against names its routes so)")
    entry, byte_model = ROUTES[base]
    op = getattr(load(sha12), entry, None)
    if not callable(op):
        raise RouteError(f"route {name!r}: the kernels of commit {sha12} have no {entry} "
                         f"(the {base} route)")
    return Route(name, op, f"triton{SEP}{sha12}", getattr(traffic, byte_model))


# -- exporting a commit (the manager) --------------------------------------------------------


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    # In the C locale: its messages are read (an ambiguous ref's warning).
    env = {**os.environ, "LC_ALL": "C", "LANGUAGE": ""}
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True,
                              timeout=120, env=env)
    except FileNotFoundError:
        raise GateError("--against needs git, which is not installed here") from None
    except subprocess.TimeoutExpired:
        raise GateError(f"git {args[0]} in {repo} did not finish in 120 s") from None


def _said(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else f"exit {proc.returncode}"


def toplevel(ref: str, repo: Path) -> Path:
    """The root of the git work tree ``repo`` lies in (``repo`` may be a folder in it)."""
    if not ref or ref.startswith("-"):
        raise GateError(f"--against {ref!r}: not a git ref")
    top = _git(repo, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise GateError(f"--against {ref}: {repo} is not in a git repository ({_said(top)})")
    return Path(top.stdout.decode().strip())


def commit_of(ref: str, top: Path) -> str:
    """The full sha of the commit ``ref`` names in the repository at ``top``; refused where
    git finds ``ref`` ambiguous (a branch and a tag of one name), which it would resolve
    by its own precedence, perhaps not to the commit meant."""
    # The warning on, whatever the user's git configuration says.
    proc = _git(top, "-c", "core.warnAmbiguousRefs=true", "rev-parse", "--verify",
                f"{ref}^{{commit}}")
    if proc.returncode != 0 and b"short object ID" in proc.stderr:  # git: "... is ambiguous"
        raise GateError(f"--against {ref}: ambiguous in {top} (more than one object's sha "
                        "begins so): give more of the sha")
    if proc.returncode != 0:
        raise GateError(f"--against {ref}: no such commit in {top} "
                        "(a branch, tag or sha that git rev-parse knows; in CI fetch it first, "
                        "e.g. git fetch origin main)")
    if b"is ambiguous" in proc.stderr:
        raise GateError(f"--against {ref}: ambiguous in {top} (more than one ref of that "
                        "name, e.g. a branch and a tag): name it in full, e.g. "
                        f"refs/heads/{ref} or refs/tags/{ref}")
    return proc.stdout.decode().strip()


def export(repo: Path, ref: str, commit: str, dest: Path) -> Path:
    """Write ``kernels/`` at ``commit`` into ``dest/qkbench_ref_<sha12>``; returns that folder.

    Refuses (``GateError``) a commit with no ``kernels/`` package, a kernel module that does
    not parse, or one that imports the harness (it would run the working tree's code)."""
    sha12 = commit[:12]
    said = f"--against {ref} ({sha12})"
    proc = _git(repo, "archive", "--format=tar", commit, "--", "kernels")
    if proc.returncode != 0:
        raise GateError(f"{said}: it has no kernels/ folder, so its kernels cannot be "
                        f"exported ({_said(proc)})")
    folder = dest / package_name(sha12)
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        for member in tar.getmembers():
            path = PurePosixPath(member.name)
            if not member.isfile() or path.parts[0] != "kernels" or ".." in path.parts:
                continue
            target = folder.joinpath(*path.parts[1:])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(member).read())
    if not (folder / "__init__.py").is_file():
        raise GateError(f"{said}: its kernels/ is not a package (no kernels/__init__.py)")
    for path in sorted(folder.rglob("*.py")):
        rel = f"kernels/{path.relative_to(folder).as_posix()}"
        try:
            harness = [f"{name} (line {line})" for name, line in
                       absolute_imports(path.read_text(), rel)
                       if name.partition(".")[0] == "qkbench"]
        except SyntaxError as e:
            raise GateError(f"{said}: its kernels cannot be imported: {rel}:{e.lineno}: "
                            f"SyntaxError: {e.msg}") from None
        if harness:
            raise GateError(f"{said}: {rel} imports the harness ({', '.join(harness)}), so "
                            "its kernels cannot run beside the working tree's")
    return folder


@dataclass(frozen=True)
class Export:
    """A commit's kernels, exported and importable while the ``exported`` block runs."""

    ref: str  # as the user gave it
    commit: str
    folder: Path
    kernels_sha256: dict[str, str] = field(default_factory=dict)

    @property
    def sha12(self) -> str:
        return self.commit[:12]

    @property
    def package(self) -> str:
        return package_name(self.sha12)

    def route(self, base: str) -> str:
        return f"{base}{SEP}{self.sha12}"

    def record(self) -> dict:
        return {"ref": self.ref, "commit": self.commit, "package": self.package,
                "kernels_sha256": self.kernels_sha256}


@contextmanager
def exported(ref: str, repo: Path, routes: Sequence[str]) -> Iterator[Export]:
    """Export ``kernels/`` at ``ref`` and make ``<route>@<sha12>`` resolvable (here and in
    worker processes started meanwhile) for each of ``routes``, each checked by importing
    it now; everything is undone on exit."""
    from qkbench.routes import resolve

    for base in routes:
        if base not in ROUTES:
            raise GateError(f"--route {base}: only the kernel routes ({', '.join(ROUTES)}) can "
                            "be gated against a commit")
    top = toplevel(ref, repo)
    commit = commit_of(ref, top)
    previous = os.environ.get(ENV)
    with tempfile.TemporaryDirectory(prefix="qkbench-ref-") as tmp:
        # From the root: git reads the pathspec kernels/ relative to the folder it runs in.
        folder = export(top, ref, commit, Path(tmp))
        done = Export(ref, commit, folder, source_hashes(folder))
        os.environ[ENV] = tmp
        try:
            for base in routes:
                try:
                    resolve(done.route(base))
                except RouteError as e:
                    raise GateError(f"--against {ref} ({done.sha12}): {e}") from None
            yield done
        finally:
            unload(done.package)
            if previous is None:
                os.environ.pop(ENV, None)
            else:
                os.environ[ENV] = previous
