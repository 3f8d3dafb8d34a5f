"""The code's identity in an archive: the commit, and what (if anything) made it dirty."""

import subprocess

import pytest

from qkbench.env import code_identity, dirty_paths


@pytest.mark.parametrize(("porcelain", "dirty"), [
    ("?? results/h200/run.json.gz\0", []),
    ("?? results/\0", []),
    (" M kernels/fused.py\0", ["kernels/fused.py"]),
    ("M  results/h200/committed.json\0", ["results/h200/committed.json"]),
    ("?? notes.txt\0", ["notes.txt"]),
    ("R  qkbench/new.py\0qkbench/old.py\0?? results/x.json\0", ["qkbench/new.py"]),
    ("", []),
], ids=["untracked-archive", "untracked-results-dir", "tracked-change",
        "tracked-change-in-results", "untracked-elsewhere", "rename", "clean"])
def test_dirty_paths_ignore_only_untracked_files_under_results(porcelain, dirty):
    assert dirty_paths(porcelain) == dirty


def _git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.fixture
def checkout(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "kernel.py").write_text("x = 1\n")
    _git(tmp_path, "add", "kernel.py")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    return tmp_path


def test_a_sweeps_archive_in_results_leaves_the_tree_clean(checkout):
    (checkout / "results").mkdir()
    (checkout / "results" / "run.json.gz").write_bytes(b"archive")
    code = code_identity(checkout)
    assert (code["dirty"], code["dirty_paths"], code["dirty_count"]) == (False, [], 0)


def test_a_changed_tracked_file_makes_the_tree_dirty_and_is_named(checkout):
    (checkout / "kernel.py").write_text("x = 2\n")
    (checkout / "scratch.py").write_text("")
    code = code_identity(checkout)
    assert code["dirty"] is True
    assert code["dirty_paths"] == ["kernel.py", "scratch.py"] and code["dirty_count"] == 2


def test_the_recorded_dirty_paths_are_capped(checkout, monkeypatch):
    from qkbench import env

    monkeypatch.setattr(env, "DIRTY_PATHS_KEPT", 3)
    for i in range(5):
        (checkout / f"new{i}.py").write_text("")
    code = code_identity(checkout)
    assert len(code["dirty_paths"]) == 3 and code["dirty_count"] == 5
