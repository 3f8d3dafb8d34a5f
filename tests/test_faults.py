"""Runs that meet faults made for real: a manager killed by SIGKILL (its worker, its lock,
its pass folder, its archive before the first pass), two writers on one archive, a route
that hangs past the pass timeout, a writer killed mid-write, and a resume after the code
changed (in a copy of the tree with a git history of its own).

Processes are started and killed by pid; each test ends every process it started.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from qkbench import archive as archives
from qkbench import runner
from qkbench.audit import examine
from qkbench.cli import app
from qkbench.errors import ArchiveError, ProtocolError
from qkbench.lock import ArchiveLock, alive, lock_path
from qkbench.protocol import load, parse

from conftest import pythonpath_with
from helpers import primary_and_replacements, reseal

CPU = torch.device("cpu")
FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).parent.parent
QUICK = FIXTURES / "quick.toml"
HANG = "QKBENCH_TEST_HANG_COUNTDOWN"
# quick.toml in fresh worker processes, with a candidate that can be made to hang.
HANGING = ["--protocol", str(QUICK), "--device", "cpu", "--isolation", "process",
           "--route", "split", "--route", "hanging_route:qk_norm_rope"]


def hanging_protocol():
    return load(str(QUICK)).with_overrides(routes=["split", "hanging_route:qk_norm_rope"],
                                           isolation="process")


def wait_for(predicate, timeout: float, what: str):
    """Poll until ``predicate()`` is truthy; its value, or a failure naming ``what``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def child_env(**extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath_with(FIXTURES)
    env["TRITON_INTERPRET"] = "1"
    env.pop("QKBENCH_SIGNING_KEY", None)
    env.update(extra)
    return env


@contextlib.contextmanager
def managing_workers(**env: str):
    """This process set up as the manager of a sweep in worker processes: the fixtures'
    routes importable here and in the workers, ``env`` set, and the interpreter setting
    kept out of this process (``--device cpu`` sets it for its workers)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", child_env()["PYTHONPATH"])
        mp.syspath_prepend(str(FIXTURES))
        mp.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
        for name, value in env.items():
            mp.setenv(name, value)
        yield mp


def spawn_cli(args: list[str], **env: str) -> subprocess.Popen:
    """``qkbench ARGS`` as a process of its own (a manager this test can kill)."""
    return subprocess.Popen([sys.executable, "-c", "from qkbench.cli import app; app()", *args],
                            env=child_env(**env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def lock_record(path: Path) -> dict | None:
    try:
        return json.loads(lock_path(path).read_text())
    except (OSError, ValueError):
        return None


def lock_holders(path: Path) -> list[str]:
    """The processes with ``path``'s lock file open (pid and command line), from /proc."""
    target = str(lock_path(path))
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if any(os.readlink(fd) == target for fd in (proc / "fd").iterdir()):
                found.append(f"{proc.name}: {(proc / 'cmdline').read_bytes()[:200]!r}")
        except OSError:
            continue
    return found


def one_error_line(result) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_a_sweep_ended_by_sigterm_exits_143_ends_its_worker_and_says_how_to_resume(tmp_path):
    countdown = tmp_path / "hang"
    countdown.write_text("1")  # the second worker to call the route hangs: pass 0 finishes
    out = tmp_path / "run.json"
    manager = spawn_cli(["sweep", *HANGING, "--out", str(out)], **{HANG: str(countdown)})
    try:
        wait_for(lambda: not countdown.exists(), 120, "a worker to reach the hanging route")
        worker = lock_record(out)["worker"]
        manager.send_signal(signal.SIGTERM)
        _, stderr = manager.communicate(timeout=60)
    finally:
        kill(manager.pid)
    assert manager.returncode == 143, stderr
    assert stderr.strip().splitlines()[-1] == (
        f"terminated (SIGTERM): finished passes are in {out}; continue with: qkbench sweep "
        f"--resume --out {out}")
    assert not alive(worker)
    assert [p["index"] for p in archives.read(out)["passes"]] == [0]


# -- a manager killed while its first worker runs (items 5, 6, 8, 9) ---------------------------


@pytest.fixture(scope="module")
def killed_manager(tmp_path_factory):
    """A sweep whose first worker hangs; while it runs, a second ``--resume`` and a second
    fresh sweep on the same ``--out``; then the manager is SIGKILLed."""
    tmp = tmp_path_factory.mktemp("killed")
    scratch = tmp / "tmpdir"  # the manager's TMPDIR: its pass folders land here
    scratch.mkdir()
    countdown = tmp / "hang"
    countdown.write_text("0")  # the first worker to call the route hangs
    out = tmp / "run.json"
    manager = spawn_cli(["sweep", *HANGING, "--out", str(out)],
                        **{HANG: str(countdown), "TMPDIR": str(scratch)})
    worker = None
    try:
        record = wait_for(lambda: (r := lock_record(out)) and r.get("worker") and r,
                          120, "the manager to start its first worker")
        worker = record["worker"]
        wait_for(lambda: not countdown.exists(), 120, "the worker to reach the hanging route")
        with pytest.MonkeyPatch.context() as mp:
            mp.syspath_prepend(str(FIXTURES))
            mp.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
            second_resume = CliRunner().invoke(app, ["sweep", *HANGING, "--resume",
                                                     "--out", str(out)])
            second_fresh = CliRunner().invoke(app, ["sweep", *HANGING, "--out", str(out)])
        pass_dirs = sorted(scratch.glob(f"qkbench-pass-{manager.pid}-*"))
        archived = archives.read(out)
        kill(manager.pid)
        manager.wait()
        killed_at = time.monotonic()
        wait_for(lambda: not alive(worker), 30, f"the worker (pid {worker}) to die")
        worker_gone_after = time.monotonic() - killed_at
        wait_for(lambda: not lock_holders(out), 30, "every process to close the lock file")
    finally:
        if manager.poll() is None:
            kill(manager.pid)
        manager.communicate()
        if worker is not None and alive(worker):
            kill(worker)
    return SimpleNamespace(out=out, scratch=scratch, manager=manager.pid, worker=worker,
                           second_resume=second_resume, second_fresh=second_fresh,
                           pass_dirs=pass_dirs, archived=archived,
                           worker_gone_after=worker_gone_after)


def test_a_second_writer_on_one_out_is_refused_naming_the_holder(killed_manager):
    k = killed_manager
    holder = f"another qkbench is writing this archive (manager pid {k.manager}, worker pid " \
             f"{k.worker})"
    for result in (k.second_resume, k.second_fresh):
        line = one_error_line(result)
        assert line.startswith(f"error: {k.out}: {holder}"), line
        assert f"kill {k.manager}" in line


def test_the_refused_writers_left_the_archive_as_the_manager_wrote_it(killed_manager):
    assert killed_manager.archived["status"] == "running"
    assert killed_manager.archived["passes"] == []
    assert killed_manager.archived["resumed"] == []


def test_a_killed_manager_takes_its_worker_with_it(killed_manager):
    # The worker had hung for good (an hour's sleep): only its manager's death ended it.
    assert killed_manager.worker_gone_after < 10


def test_an_archive_killed_before_its_first_pass_audits_as_such(killed_manager):
    run = archives.read(killed_manager.out)
    assert (run["status"], run["passes"], run["summary"]) == ("running", [], None)
    result = CliRunner().invoke(app, ["audit", str(killed_manager.out)])
    assert result.exit_code == 0, result.output
    assert "note: no passes yet" in result.stderr
    assert result.stdout.startswith(f"audit ok: {killed_manager.out}")


def test_resume_removes_a_killed_managers_pass_folder_and_starts(killed_manager, monkeypatch):
    k = killed_manager
    assert k.pass_dirs and all(p.is_dir() for p in k.pass_dirs)  # left by the SIGKILL
    assert lock_holders(k.out) == []
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setattr(tempfile, "tempdir", str(k.scratch))

    def stop(index: int, total: int) -> None:
        raise KeyboardInterrupt  # the resume got the lock and cleaned up: enough

    with pytest.raises(KeyboardInterrupt):
        runner.sweep(hanging_protocol(), CPU, k.out, resume=True,
                     events=runner.Events(pass_started=stop))
    assert not any(p.exists() for p in k.pass_dirs)
    run = archives.read(k.out)
    assert len(run["resumed"]) == 1 and run["resumed"][0]["after_passes"] == 0
    assert not lock_path(k.out).exists()  # released


# Acquires the archive's lock, starts a "worker" that inherits it (as the runner's do, but
# without a parent-death signal), records it, and dies by SIGKILL: a worker outliving its
# manager, as on a machine where the signal could not be armed.
ORPHANING_MANAGER = """
import os, signal, subprocess, sys
from pathlib import Path
from qkbench.lock import ArchiveLock

lock = ArchiveLock(Path(sys.argv[1]))
lock.acquire()
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                          pass_fds=(lock.fd,), start_new_session=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
lock.note_worker(worker.pid)
print(worker.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_resume_never_starts_while_an_old_worker_holds_the_lock(one_pass, tmp_path):
    out = tmp_path / "run.json"
    out.write_bytes(one_pass.read_bytes())
    manager = subprocess.run([sys.executable, "-c", ORPHANING_MANAGER, str(out)],
                             capture_output=True, text=True, env=child_env(), timeout=120)
    assert manager.returncode == -signal.SIGKILL, manager.stderr
    worker = int(manager.stdout)
    try:
        assert alive(worker)
        with pytest.raises(ArchiveError) as refused:
            runner.sweep(load(str(QUICK)), CPU, out, resume=True)
        assert str(refused.value) == (
            f"{out}: the run that wrote it was killed (manager pid {manager_pid(out)}) but "
            f"its worker (pid {worker}) still runs and holds the lock; end it (kill {worker}) "
            "before --resume")
    finally:
        if alive(worker):
            kill(worker)
    wait_for(lambda: not alive(worker), 30, "the worker to die")

    def stop(index: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # past the lock now: the resume starts
        runner.sweep(load(str(QUICK)), CPU, out, resume=True,
                     events=runner.Events(pass_started=stop))
    assert len(archives.read(out)["resumed"]) == 1


def test_a_run_reached_through_a_symlink_is_locked_and_written_as_itself(one_pass, tmp_path):
    real, link = tmp_path / "run.json", tmp_path / "latest.json"
    real.write_bytes(one_pass.read_bytes())
    link.symlink_to(real.name)
    with ArchiveLock(real), pytest.raises(ArchiveError, match="another qkbench is writing"):
        runner.sweep(load(str(QUICK)), CPU, link, resume=True)  # a second writer, by a link
    runner.sweep(load(str(QUICK)), CPU, link, resume=True)
    assert link.is_symlink() and link.resolve() == real
    assert archives.read(real)["status"] == "complete"


def test_resume_refuses_an_uncommitted_edit_of_the_harness_naming_the_file(one_pass, tmp_path,
                                                                          monkeypatch):
    from qkbench import env

    out = tmp_path / "run.json"
    out.write_bytes(one_pass.read_bytes())
    edited = {**env.harness_hashes(), "routes.py": "0" * 64}  # the commit is the same
    monkeypatch.setattr(env, "harness_hashes", lambda: edited)
    with pytest.raises(ArchiveError, match=r"cannot resume: the code changed since the run "
                                           r"started \(qkbench/routes.py [0-9a-f]{8} -> "
                                           r"00000000\)"):
        runner.sweep(load(str(QUICK)), CPU, out, resume=True)


def test_resume_refuses_another_machine_naming_what_differs(one_pass, tmp_path):
    out = tmp_path / "run.json"
    run = archives.read(one_pass)
    run["environment"]["torch"] = "2.0.0"  # the run started under another torch
    archives.write(out, reseal(run))
    with pytest.raises(ArchiveError, match=r"cannot resume: this machine is not the one the "
                                           r"run started on \(torch 2.0.0 -> "):
        runner.sweep(load(str(QUICK)), CPU, out, resume=True)


def test_a_resume_records_the_host_and_machine_it_ran_on(one_pass, tmp_path):
    import platform

    from qkbench import env

    out = tmp_path / "run.json"
    out.write_bytes(one_pass.read_bytes())
    run = runner.sweep(load(str(QUICK)), CPU, out, resume=True)
    (resumed,) = run["resumed"]
    assert resumed["host"] == platform.node()
    assert resumed["machine"] == env.machine(run["environment"])


def test_an_archive_from_before_the_harness_hashes_compares_its_kernels_only():
    from qkbench import env

    now = env.code_now()
    was = {**now, "harness_sha256": None}
    assert env.code_differences(was, {**now, "harness_sha256": {"routes.py": "0" * 64}}) == []


def test_a_pass_that_ran_other_code_than_the_run_stops_it_and_is_not_kept(monkeypatch,
                                                                           tmp_path):
    from qkbench import env

    from synthetic import synthetic_sweep, tiny_protocol

    code_now, seen = env.code_now, []

    def edited_after_the_first_pass() -> dict:
        seen.append(1)
        now = code_now()
        if len(seen) > 1:  # pass 0 runs the run's code; the tree is edited before pass 1 ends
            now["kernels_sha256"] = {**now["kernels_sha256"], "fused.py": "0" * 64}
        return now

    monkeypatch.setattr(env, "code_now", edited_after_the_first_pass)
    out = tmp_path / "run.json"
    with pytest.raises(ArchiveError, match=r"pass 1 ran other code than the run \(kernels/"
                                           r"fused.py [0-9a-f]{8} -> 00000000\): the tree "
                                           "changed during the run; the pass is not kept"):
        synthetic_sweep(tiny_protocol("edited"), out, effect=-0.5)
    run = archives.read(out)
    assert [p["index"] for p in run["passes"]] == [0] and run["status"] == "running"
    assert examine(run).problems == []


def manager_pid(out: Path) -> int:
    return lock_record(out)["manager"]


def test_pass_folders_of_dead_managers_are_removed_and_live_ones_kept(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead_dir = tmp_path / f"qkbench-pass-{gone.pid}-x1"
        live_dir = tmp_path / f"qkbench-pass-{running.pid}-x2"
        other = tmp_path / "qkbench-pass-notes"
        for folder in (dead_dir, live_dir, other):
            folder.mkdir()
            (folder / "job.json").write_text("{}")
        assert runner.remove_dead_pass_dirs(tmp_path) == [dead_dir]
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live_dir.name, other.name])
    finally:
        running.kill()
        running.wait()


# -- a route that hangs past the pass timeout (item 7) -----------------------------------------

TIMEOUT_S = 20  # well past a quick pass's worker (start-up included) on a loaded machine


@pytest.fixture(scope="module")
def timed_out(tmp_path_factory):
    """quick.toml in worker processes with a candidate that hangs in the first pass, and a
    pass timeout: through the CLI, the manager being this process."""
    tmp = tmp_path_factory.mktemp("timeout")
    scratch = tmp / "tmpdir"
    scratch.mkdir()
    countdown = tmp / "hang"
    countdown.write_text("0")
    out = tmp / "out" / "run.json"
    with managing_workers(**{HANG: str(countdown)}) as mp:
        mp.setattr(tempfile, "tempdir", str(scratch))
        result = CliRunner().invoke(app, ["sweep", *HANGING, "--pass-timeout", str(TIMEOUT_S),
                                          "--out", str(out)])
    return SimpleNamespace(result=result, run=archives.read(out), out=out, scratch=scratch)


def test_a_hung_pass_is_ended_and_recorded_as_timed_out(timed_out):
    hung = timed_out.run["passes"][0]
    assert (hung["index"], hung["status"], hung["returncode"]) == (0, "failed", -signal.SIGKILL)
    assert hung["reason"] == f"timed out after {TIMEOUT_S} s"
    assert not alive(hung["pid"])


def test_a_timed_out_pass_is_replaced_with_its_order_and_the_run_completes(timed_out):
    run = timed_out.run
    primary, replacements = primary_and_replacements(run)
    assert run["status"] == "complete"
    assert [p["status"] for p in primary] == ["failed", "ok", "ok", "ok", "ok", "ok"]
    assert all(p["status"] == "ok" for p in replacements)
    # The first replacement is the hung pass's (its slot is the lowest open one); more may
    # follow where the real clock dropped a pass.
    assert (replacements[0]["replaces"], replacements[0]["order"]) == (0, primary[0]["order"])
    assert examine(run).problems == []


def test_a_timed_out_pass_exits_1_and_is_named_in_the_report(timed_out):
    result = timed_out.result
    assert result.exit_code == 1
    # Numbered as the progress lines number it, beside the archive's index.
    assert "pass 1/6 FAILED" in result.stderr, result.stderr
    assert (f"pass 1 (archive index 0) failed (exit -9): timed out after {TIMEOUT_S} s"
            in result.stdout)
    # Counted among every pass the run made, its replacements included.
    made = len(timed_out.run["passes"])
    assert made > 6
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: 1 of {made} passes failed")


def test_a_timed_out_run_leaves_no_pass_folder_and_no_lock(timed_out):
    assert list(timed_out.scratch.iterdir()) == []
    assert [p.name for p in timed_out.out.parent.iterdir()] == ["run.json"]


@pytest.fixture(scope="module")
def swept_in_workers(tmp_path_factory) -> SimpleNamespace:
    """quick.toml in worker processes through the CLI, with two candidates that work but
    trouble their process: one writes bytes that are not UTF-8 on its stderr, one leaves a
    helper process holding that stderr. Its archive and the helpers' pids, once every
    primary pass is seen to finish well inside its timeout."""
    tmp = tmp_path_factory.mktemp("workers")
    out, helpers = tmp / "run.json", tmp / "helpers"
    with managing_workers(QKBENCH_TEST_HELPERS=str(helpers)):
        start = time.monotonic()
        result = CliRunner().invoke(app, [
            "sweep", "--protocol", str(QUICK), "--device", "cpu", "--isolation", "process",
            "--route", "split", "--route", "mumbling_route:qk_norm_rope",
            "--route", "helper_route:qk_norm_rope", "--pass-timeout", str(TIMEOUT_S),
            "--out", str(out)])
        elapsed = time.monotonic() - start
    return SimpleNamespace(result=result, run=archives.read(out), elapsed=elapsed,
                           helpers=[int(x) for x in helpers.read_text().split()])


def test_a_worker_writing_bytes_that_are_not_utf8_on_stderr_still_completes_its_passes(
        swept_in_workers):
    # Its stderr is read for progress lines: a byte it cannot decode must not stop the
    # reading, or every pass would wait out its timeout and be recorded as timed out.
    run, result = swept_in_workers.run, swept_in_workers.result
    assert [p["status"] for p in run["passes"]][:6] == ["ok"] * 6, result.output
    assert "timed out" not in result.output


def test_a_route_line_that_begins_as_a_progress_line_is_output_not_a_crash(swept_in_workers):
    run, result = swept_in_workers.run, swept_in_workers.result
    assert [p["status"] for p in run["passes"]][:6] == ["ok"] * 6, result.output
    assert swept_in_workers.elapsed < 6 * TIMEOUT_S


def test_a_worker_that_leaves_a_helper_holding_its_stderr_completes_and_the_helper_ends(
        swept_in_workers):
    # The worker exits with its result while the helper it started keeps the pipe open: the
    # pass is judged by the worker's exit, and its process group (the helper) is ended.
    assert [p["status"] for p in swept_in_workers.run["passes"]][:6] == ["ok"] * 6
    pids = swept_in_workers.helpers
    assert len(pids) >= 6
    wait_for(lambda: not any(alive(pid) for pid in pids), 10, "the helpers to end")


def test_pass_timeout_help_says_in_process_passes_cannot_be_timed_out():
    result = CliRunner().invoke(app, ["sweep", "--help"])
    text = " ".join(result.stdout.replace("│", " ").split())
    assert "in-process passes (--isolation inprocess) cannot be timed out" in text


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf"])
def test_a_pass_timeout_that_is_not_a_positive_number_of_seconds_is_refused(value):
    text = QUICK.read_text().replace("[timing]", f"[timing]\npass_timeout = {value}")
    with pytest.raises(ProtocolError, match=r"'timing.pass_timeout' must be a finite number "
                                            r"of seconds > 0"):
        parse(text, "quick.toml")


# -- a writer killed mid-write (item 8) --------------------------------------------------------


# Holds the lock and rewrites the archive, slowed where the test kills it: while the bytes
# are being made (its temporary file is open and empty), or with half of them on disk.
SLOW_WRITER = """
import os, sys, time
from pathlib import Path
from qkbench import archive
from qkbench.lock import ArchiveLock

path, when = Path(sys.argv[1]), sys.argv[2]
run = archive.read(path)
full = archive.encode(run, False)
if when == "empty":
    archive.encode = lambda *args: time.sleep(600)
else:
    archive.encode = lambda *args: full[: len(full) // 2]
    os.fsync = lambda fd: time.sleep(600)
with ArchiveLock(path):
    archive.write(path, run)
"""


@pytest.mark.parametrize("when", ["empty", "partial"])
def test_a_writer_killed_mid_write_leaves_the_archive_whole_and_resume_removes_its_tmp(
        one_pass, tmp_path, when):
    path = tmp_path / "run.json"
    path.write_bytes(one_pass.read_bytes())
    before = path.read_bytes()
    writer = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(path), when],
                              env=child_env())
    tmp = archives.tmp_path(path, writer.pid)
    try:
        size = 0 if when == "empty" else len(archives.encode(archives.read(path), False)) // 2
        wait_for(lambda: tmp.exists() and tmp.stat().st_size == size, 60,
                 f"the writer's {tmp.name} to hold {size} bytes")
        time.sleep(0.2)
    finally:
        kill(writer.pid)
        writer.wait()
    assert tmp.stat().st_size == size  # left behind: SIGKILL cannot be caught
    assert path.read_bytes() == before  # never a half-written file under the archive's name

    def stop(index: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.sweep(load(str(QUICK)), CPU, path, resume=True,
                     events=runner.Events(pass_started=stop))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]
    assert archives.read(path)["passes"] == archives.decode(before)["passes"]


# -- resume after the code changed (item 4) ----------------------------------------------------


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=qkbench-test", "-c",
                           "user.email=test@example.invalid", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


# Interrupts a quick.toml sweep (Ctrl-C) right after its first pass was archived.
FIRST_PASS_ONLY = """
import sys
import torch
from pathlib import Path
from qkbench import runner
from qkbench.protocol import load

def stop(index, status):
    raise KeyboardInterrupt

try:
    runner.sweep(load(sys.argv[1]), torch.device("cpu"), Path(sys.argv[2]),
                 command=["qkbench", "sweep"], events=runner.Events(pass_finished=stop))
except KeyboardInterrupt:
    pass
"""


@pytest.fixture(scope="module")
def changed_tree(tmp_path_factory):
    """A copy of the tree (qkbench with its kernels and protocols, as installed) in a git
    repository of its own; a one-pass run made with it; then a comment appended to
    kernels/fused.py and committed; then a resume refused, and one let change the code."""
    root = tmp_path_factory.mktemp("tree")
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "qkbench", root / "qkbench", ignore=ignore)
    shutil.copytree(REPO / "kernels", root / "qkbench" / "kernels", ignore=ignore)
    shutil.copytree(REPO / "protocols", root / "qkbench" / "protocols", ignore=ignore)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "the code a run starts with")
    before = git(root, "rev-parse", "HEAD")
    out = tmp_path_factory.mktemp("runs") / "run.json"
    env = child_env(PYTHONPATH=pythonpath_with(root, FIXTURES))  # the copy first
    # Run from the copy (a -c script puts the working directory first on sys.path).
    subprocess.run([sys.executable, "-c", FIRST_PASS_ONLY, str(QUICK), str(out)], env=env,
                   cwd=root, check=True, timeout=300)
    fused = root / "qkbench" / "kernels" / "fused.py"
    fused.write_text(fused.read_text() + "# a comment, as in the issue\n")
    git(root, "commit", "-qam", "a comment in the fused kernel")
    after = git(root, "rev-parse", "HEAD")
    resume = [sys.executable, "-c", "from qkbench.cli import app; app()", "sweep",
              "--protocol", str(QUICK), "--device", "cpu", "--resume", "--out", str(out)]
    refused = subprocess.run(resume, env=env, cwd=root, capture_output=True, text=True,
                             timeout=300)
    refused_archive = archives.read(out)
    allowed = subprocess.run([*resume, "--allow-code-change"], env=env, cwd=root,
                             capture_output=True, text=True, timeout=300)
    assert archives.read(out)["environment"]["code"]["commit"] == before  # the copy's
    return SimpleNamespace(out=out, before=before, after=after, refused=refused,
                           refused_archive=refused_archive, allowed=allowed,
                           run=archives.read(out))


def test_resume_refuses_a_changed_tree_naming_what_changed(changed_tree):
    t = changed_tree
    assert t.refused.returncode == 1
    (line,) = t.refused.stderr.strip().splitlines()
    assert line.startswith(f"error: {t.out}: cannot resume: the code changed since the run "
                           f"started (git commit {t.before[:12]} -> {t.after[:12]}; "
                           "kernels/fused.py ")
    assert "--allow-code-change" in line
    assert [p["index"] for p in t.refused_archive["passes"]] == [0]
    assert t.refused_archive["resumed"] == []


def test_resume_with_allow_code_change_records_which_passes_ran_what(changed_tree):
    t = changed_tree
    assert t.allowed.returncode == 0, t.allowed.stderr
    run = t.run
    assert run["status"] == "complete"
    assert run["environment"]["code"]["commit"] == t.before  # the run's start, kept
    primary_and_replacements(run)  # replacements of dropped passes run the new code too
    assert [p["code"]["commit"] for p in run["passes"]] == (
        [t.before] + [t.after] * (len(run["passes"]) - 1))
    fused = {p["code"]["kernels_sha256"]["fused.py"] for p in run["passes"][1:]}
    assert fused != {run["environment"]["kernels_sha256"]["fused.py"]} and len(fused) == 1
    (resumed,) = run["resumed"]
    assert resumed["allowed_code_change"] and resumed["after_passes"] == 1
    assert resumed["code"]["commit"] == t.after


def test_report_and_audit_show_which_passes_ran_what(changed_tree):
    t = changed_tree
    found = examine(t.run)
    assert found.problems == []
    last = t.run["passes"][-1]["index"]  # 5, or past it where a dropped pass was replaced
    other = (f"code: passes 1-{last} ran other code (git commit {t.before[:12]} -> "
             f"{t.after[:12]}; kernels/fused.py ")
    assert "code: passes 0 ran the code the run started with" in found.notes
    assert any(n.startswith(other) for n in found.notes)
    report = CliRunner().invoke(app, ["report", str(t.out)])
    assert report.exit_code == 0
    assert "code: passes 0 ran the code the run started with" in report.stdout
    assert other in report.stdout.replace("\n", " ")


def test_audit_catches_passes_that_ran_other_code_without_leave(changed_tree):
    edited = json.loads(json.dumps(changed_tree.run))
    edited["resumed"][0]["allowed_code_change"] = False
    problems = examine(reseal(edited)).problems
    assert len(problems) == 1
    assert problems[0].startswith("resume 1: ran other code than the run started with (git "
                                  "commit ")
    assert problems[0].endswith("without --allow-code-change")


def test_a_name_the_tool_chose_that_another_run_holds_or_wrote_takes_the_next_free_one(
        tmp_path):
    from synthetic import SyntheticBackend, tiny_protocol

    stamped = tmp_path / "20261207-091746-tiny.json.gz"
    stamped.write_text("another run's archive")
    with ArchiveLock(tmp_path / "20261207-091746-tiny-2.json.gz"):  # another run, writing
        named = []
        runner.sweep(parse(tiny_protocol()), CPU, stamped, backend=SyntheticBackend(),
                     events=runner.Events(archive_named=named.append), fresh_name=True)
    third = tmp_path / "20261207-091746-tiny-3.json.gz"
    assert named == [third]
    assert archives.read(third)["status"] == "complete"
    assert stamped.read_text() == "another run's archive"
    with pytest.raises(ArchiveError, match="exists: archives are never overwritten"):
        runner.sweep(parse(tiny_protocol()), CPU, stamped, backend=SyntheticBackend())


def test_ctrl_c_as_a_worker_starts_exits_130_and_ends_the_worker(tmp_path, monkeypatch):
    started = []

    def interrupt_as_noted(self, pid):
        if pid is not None:
            started.append(pid)
            raise KeyboardInterrupt  # before the worker's stderr reader thread starts

    monkeypatch.setattr(ArchiveLock, "note_worker", interrupt_as_noted)
    out = tmp_path / "run.json"
    result = CliRunner().invoke(app, ["sweep", "--protocol", str(QUICK), "--device", "cpu",
                                      "--isolation", "process", "--out", str(out)])
    assert result.exit_code == 130, result.output
    assert result.stderr.strip().splitlines()[-1].startswith("interrupted: finished passes")
    assert started and not alive(started[0])


def test_a_pass_with_a_sample_no_clock_gives_is_kept_and_the_sweep_stops_naming_it(tmp_path):
    from synthetic import SyntheticBackend, synthetic_sweep, tiny_protocol

    class ZeroInPassOne(SyntheticBackend):
        def run(self, arms, sequence, sync_after):
            timed = super().run(arms, sequence, sync_after)
            if self.pass_index == 1:
                timed.seconds[-1] = 0.0  # a sample (the first are warm-ups)
            return timed

    out = tmp_path / "run.json.gz"
    with pytest.raises(ArchiveError, match=f"{out}: pass 1 cannot be summarised .*not a "
                       "positive finite time.*; it is kept in the archive"):
        synthetic_sweep(tiny_protocol(), out, ZeroInPassOne())
    assert [p["index"] for p in archives.read(out)["passes"]] == [0, 1]
    # Resumed, it is refused before a pass runs: none would be kept, each blamed in turn.
    with pytest.raises(ArchiveError, match=f"{out}: cannot resume: summary: cannot be "
                       "recomputed .*pass 1 tiny/T1 arm B .*; start a new sweep"):
        runner.sweep(parse(tiny_protocol()), torch.device("cpu"), out, resume=True,
                     backend=SyntheticBackend())
    assert [p["index"] for p in archives.read(out)["passes"]] == [0, 1]
    assert archives.read(out)["resumed"] == []
