"""The environment a run was measured in: hardware, software, and the code's identity."""

import hashlib
import os
import platform
import subprocess
import sys
from importlib import metadata, resources
from pathlib import Path

import torch

import qkbench
from qkbench import telemetry


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git(*args: str, root: Path | None = None) -> str | None:
    root = root or Path(qkbench.__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip("\n") if out.returncode == 0 else None


# Untracked files here are what sweeps write (archives): they do not make the code dirty.
RESULTS_DIR = "results/"
# At most this many dirty paths are recorded (the count is always exact).
DIRTY_PATHS_KEPT = 50


def dirty_paths(porcelain_z: str) -> list[str]:
    """The paths that make a tree dirty, from ``git status --porcelain -z``: every tracked
    change, and every untracked path outside ``results/`` (a sweep's own archives there
    do not count; a tracked file changed there does)."""
    entries = porcelain_z.split("\0")
    paths, i = [], 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        status, path = entry[:2], entry[3:]
        if "R" in status or "C" in status:
            i += 1  # a rename or copy is followed by its source path
        if status == "??" and path.startswith(RESULTS_DIR):
            continue
        paths.append(path)
    return paths


def code_identity(root: Path | None = None) -> dict:
    """The git commit, whether the tree is dirty and what made it so; or what
    ``QKBENCH_GIT_COMMIT`` / ``QKBENCH_GIT_DIRTY`` say where the tree travelled without its
    ``.git`` (e.g. to a GPU machine)."""
    commit = _git("rev-parse", "HEAD", root=root)
    if commit is not None:
        dirty = dirty_paths(_git("status", "--porcelain", "-z", root=root) or "")
        return {"commit": commit, "dirty": bool(dirty), "dirty_paths": dirty[:DIRTY_PATHS_KEPT],
                "dirty_count": len(dirty), "source": "git"}
    env_commit = os.environ.get("QKBENCH_GIT_COMMIT")
    return {"commit": env_commit, "dirty": os.environ.get("QKBENCH_GIT_DIRTY") == "1"
            if env_commit else None, "dirty_paths": None, "dirty_count": None,
            "source": "environment" if env_commit else None}


def code_now() -> dict:
    """The code a pass runs: the tree's identity and its kernel and harness sources' hashes
    (what each pass records as ``code``, and what a resume compares with the run's
    environment)."""
    return {**code_identity(), "kernels_sha256": kernel_hashes(),
            "harness_sha256": harness_hashes()}


def environment_code(environment: dict) -> dict:
    """An archive environment's code, in the form a pass records it (``code_now``; an
    archive from before the harness hashes has None for them)."""
    return {**(environment.get("code") or {}),
            "kernels_sha256": environment.get("kernels_sha256") or {},
            "harness_sha256": environment.get("harness_sha256")}


def resume_of(archive: dict, index: int) -> dict | None:
    """The resume of a run archive that ran pass ``index``; None where the run's start did."""
    started = sorted((r for r in archive.get("resumed") or [] if r["after_passes"] <= index),
                     key=lambda r: r["after_passes"])
    return started[-1] if started else None


def run_code(archive: dict, index: int) -> dict:
    """The code pass ``index`` of a run archive had to run: the code of the resume that ran
    it (``resume_of``), else the code the run started with (``environment_code``)."""
    resume = resume_of(archive, index)
    return resume["code"] if resume else environment_code(archive["environment"])


def code_differences(was: dict, now: dict) -> list[str]:
    """How code ``now`` differs from code ``was`` (each as ``code_now`` gives it): the git
    commit, each kernel source file and each harness source file (where both record
    them); empty when they are the same code. (Whether the tree is dirty is not compared:
    a sweep's own archive can make it so; an edit it does not commit shows in the sources'
    hashes.)"""
    out = []
    if was.get("commit") != now.get("commit"):
        out.append(f"git commit {_short(was.get('commit'))} -> {_short(now.get('commit'))}")
    out += _file_changes("kernels", was.get("kernels_sha256") or {},
                         now.get("kernels_sha256") or {})
    if was.get("harness_sha256") is not None and now.get("harness_sha256") is not None:
        out += _file_changes("qkbench", was["harness_sha256"], now["harness_sha256"])
    return out


def _file_changes(folder: str, old: dict[str, str], new: dict[str, str]) -> list[str]:
    """Each source file of ``folder`` removed, added or changed, by its hashes."""
    out = []
    for name in sorted(set(old) | set(new)):
        if name not in new:
            out.append(f"{folder}/{name} removed")
        elif name not in old:
            out.append(f"{folder}/{name} added")
        elif old[name] != new[name]:
            out.append(f"{folder}/{name} {old[name][:8]} -> {new[name][:8]}")
    return out


def _short(commit: str | None) -> str:
    return commit[:12] if commit else "unknown"


def kernel_hashes() -> dict[str, str]:
    """sha256 of every kernel source file, so an archive names the exact kernels."""
    return _source_hashes("qkbench.kernels")


def harness_hashes() -> dict[str, str]:
    """sha256 of every harness source file (the kernels are ``kernel_hashes``'), so that a
    resume sees an edit the git commit does not."""
    return _source_hashes("qkbench")


def _source_hashes(package: str) -> dict[str, str]:
    folder = resources.files(package)
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir(), key=lambda p: p.name) if p.name.endswith(".py")}


# What a run's figures hang on besides its code: a resume on a machine that differs in
# one of these would mix two machines' passes under one header.
MACHINE_KEYS = ("device", "gpu.name", "gpu.capability", "gpu.memory_bytes", "cuda", "torch",
                "triton", "python", "triton_interpret")


def machine(environment: dict) -> dict[str, object]:
    """An environment's ``MACHINE_KEYS``, by dotted name (None where absent)."""
    return {key: _dotted(environment, key) for key in MACHINE_KEYS}


def _dotted(table: dict, key: str):
    for part in key.split("."):
        table = table.get(part) if isinstance(table, dict) else None
    return table


def capture(device: torch.device) -> dict:
    env = {
        "python": sys.version.split()[0], "platform": platform.platform(),
        "host": platform.node(), "torch": torch.__version__, "triton": _version("triton"),
        # The statistics (intervals, medians) are computed with these.
        "numpy": _version("numpy"), "scipy": _version("scipy"),
        "cuda": torch.version.cuda, "qkbench": qkbench.__version__,
        "code": code_identity(), "kernels_sha256": kernel_hashes(),
        "harness_sha256": harness_hashes(), "device": str(device),
        "triton_interpret": os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
    }
    if device.type == "cuda":
        index = device.index or 0
        props = torch.cuda.get_device_properties(index)
        env["gpu"] = {"name": props.name, "sms": props.multi_processor_count,
                      "memory_bytes": props.total_memory, "l2_bytes": props.L2_cache_size,
                      "capability": f"{props.major}.{props.minor}",
                      **telemetry.Monitor(index).describe()}
    return env
