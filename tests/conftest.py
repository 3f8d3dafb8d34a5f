"""Test setup: without a GPU the Triton kernels run on the CPU interpreter."""

import fcntl
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    # Must be set before the kernels are imported (Triton reads it when it decorates them).
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pythonpath_with(*first: str | Path) -> str:
    """This process's ``PYTHONPATH`` with ``first`` ahead of it, for the processes a test
    starts."""
    return os.pathsep.join([*map(str, first), *filter(None, [os.environ.get("PYTHONPATH")])])


# The interpreter without its redundant re-patching, in this process and, through
# sitecustomize, in every Python process the tests start (tests/site/interpreter_once.py).
_SITE = str(Path(__file__).parent / "site")
sys.path.insert(0, _SITE)
os.environ["PYTHONPATH"] = pythonpath_with(_SITE)
import interpreter_once  # noqa: E402  (found on the path set just above)

interpreter_once.install()

DEVICE = "cuda" if ON_GPU else "cpu"

gpu_only = pytest.mark.skipif(not ON_GPU, reason="needs a CUDA device")
# A test that runs the Triton kernels on CPU tensors in this process: with a GPU the
# kernels were compiled for it, not interpreted. CI (no GPU) runs these.
interpreter_only = pytest.mark.skipif(ON_GPU, reason="needs the Triton interpreter (no GPU)")


def pytest_xdist_auto_num_workers(config) -> int | None:
    """``-n auto`` with a GPU is one process: the GPU tests time and probe one card, and a
    worker per core would share it. Without one, pytest-xdist's own count (the cores)."""
    return 0 if ON_GPU else None


@pytest.fixture(autouse=True)
def _interpreter_setting_restored(monkeypatch):
    """``--device cpu`` sets TRITON_INTERPRET for its workers; no test leaks it to the next.
    No signing key from the environment either: a test that signs sets its own."""
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
    monkeypatch.delenv("QKBENCH_SIGNING_KEY", raising=False)


@pytest.fixture
def device() -> str:
    return DEVICE


@pytest.fixture(scope="session")
def smoke_sweep(tmp_path_factory, request):
    """The full smoke protocol swept once through the CLI, a fresh process per pass:
    ``(archive path, CLI result)``, shared by every test that only reads an archive. Once
    per test run: pytest-xdist's workers share it, the first to ask sweeping it under a
    lock and the others reading what it left (the result's exit code and output)."""
    root = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):  # a pytest-xdist worker: the run's folder
        root = root.parent
    folder = root / "smoke"
    path, recorded = folder / "smoke.json", folder / "result.json"
    with open(root / "smoke.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not recorded.exists():
            folder.mkdir(exist_ok=True)
            result = _sweep_smoke(path)
            recorded.write_text(json.dumps({name: getattr(result, name) for name in RESULT}))
    return path, SimpleNamespace(**json.loads(recorded.read_text()))


RESULT = ("exit_code", "output", "stdout", "stderr")  # what the tests read of a CLI result


def _sweep_smoke(path: Path):
    # Imported here, not at the top: the kernels must see TRITON_INTERPRET first.
    from typer.testing import CliRunner

    from qkbench.cli import app

    with pytest.MonkeyPatch.context() as mp:
        # ``--device cpu`` sets TRITON_INTERPRET for its workers; keep it out of this process.
        mp.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
        return CliRunner().invoke(app, ["sweep", "--protocol", "smoke", "--device", "cpu",
                                        "--out", str(path)])


@pytest.fixture(scope="session")
def smoke_archive(smoke_sweep) -> dict:
    """The smoke sweep's archive, as read back from disk."""
    from qkbench import archive

    path, result = smoke_sweep
    assert result.exit_code == 0, result.output
    return archive.read(path)


@pytest.fixture(scope="session")
def one_pass(tmp_path_factory):
    """``tests/fixtures/quick.toml`` interrupted (Ctrl-C) right after its first pass was
    archived: a running archive to resume, edit or lock."""
    from qkbench import runner
    from qkbench.protocol import load

    path = tmp_path_factory.mktemp("one-pass") / "run.json"

    def interrupt(index: int, status: str) -> None:
        raise KeyboardInterrupt

    quick = Path(__file__).parent / "fixtures" / "quick.toml"
    with pytest.raises(KeyboardInterrupt):
        runner.sweep(load(str(quick)), torch.device("cpu"), path,
                     events=runner.Events(pass_finished=interrupt))
    return path
