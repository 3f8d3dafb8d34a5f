"""``qkbench gate --against REF``: a commit's kernels against the working tree's, in one run.

REF lives in a git repository made here: the working tree's own ``kernels/`` copied into a
fresh ``git init`` and committed as ``same``, then changed and committed again under other
tags. The candidate is always the working tree's kernels (the installed
``qkbench.kernels``). Each gate runs the quick protocol in process on the CPU backend with a
clock that counts the Triton kernel launches each sample made (``LaunchClock``): the
interpreter really runs each arm's kernels, and the clock counts the work they did, with no
planted effect. Neither the wall clock nor CPU time measures that work: the wall clock's A/A
width on a shared two-core CI machine reached 70 %, and the CPU time of one call of two
identical copies of the kernels differed by 1.5-2.3x in a process whose history differed
(a pytest-xdist worker), enough to hide the doubled work of the tests below. The device
limits (a 64 MiB copy per pass) are stubbed out: they take no part in a gate's decision.
"""

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from qkbench import backends, env, limits, refs, runner, worker
from qkbench.cli import app
from qkbench.errors import GateError
from qkbench.protocol import Timing, load

from conftest import interpreter_only
from helpers import assert_usage_error, from_a_shell_without_the_interpreter_set

FIXTURES = Path(__file__).parent / "fixtures"
QUICK = str(FIXTURES / "quick.toml")
KERNELS = Path(str(resources.files("qkbench.kernels")))

# A fused route that does its work twice: once more into scratch outputs, then for real
# (so its output is still right). As a ref commit's kernels/__init__.py ends, or patched
# into the working tree's package: a real doubling of the route's work, timed by the host.
TWICE = '''

_fused_once = qk_norm_rope


def qk_norm_rope(q, k, *args, inplace=True, q_out=None, k_out=None, **options):
    """The fused route, its work done twice."""
    _fused_once(q, k, *args, inplace=False, **options)
    return _fused_once(q, k, *args, inplace=inplace, q_out=q_out, k_out=k_out, **options)
'''


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=qkbench",
                           "-c", "user.email=qkbench@example.invalid",
                           "-c", "commit.gpgsign=false", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, tag: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", tag)
    git(repo, "tag", tag)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """Tags: ``same`` (the working tree's kernels), ``slow`` (fused does its work twice),
    ``syntax-error``, ``import-fails``, ``no-fused``, ``imports-harness``, ``no-kernels``."""
    root = tmp_path_factory.mktemp("ref-repo")
    git(root, "init", "-q")
    kernels = root / "kernels"
    shutil.copytree(KERNELS, kernels, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    commit(root, "same")
    init = (kernels / "__init__.py").read_text()
    (kernels / "__init__.py").write_text(init + TWICE)
    commit(root, "slow")
    (kernels / "__init__.py").write_text(init + "\ndef broken(:\n    pass\n")
    commit(root, "syntax-error")
    (kernels / "__init__.py").write_text(init + "\nfrom .nosuch import helper\n")
    commit(root, "import-fails")
    (kernels / "__init__.py").write_text(init.replace("from .fused import qk_norm_rope\n", "")
                                         .replace('"qk_norm_rope", ', ""))
    commit(root, "no-fused")
    (kernels / "__init__.py").write_text(init + "\nfrom qkbench.case import Case\n")
    commit(root, "imports-harness")
    shutil.rmtree(kernels)
    (root / "README").write_text("the kernels moved elsewhere\n")
    commit(root, "no-kernels")
    return root


class LaunchClock(backends.CpuBackend):
    """The CPU backend timed by the Triton kernel launches of each sample (``launches``,
    counted by the ``launch_clock`` fixture), a tenth of a second apiece, with 0.5 % seeded
    noise (so that an A/A comparison has a width). The references (a torch copy, an empty
    launch) launch no Triton kernel: they take one launch's time, as a clock would give
    them some."""

    SECONDS_PER_LAUNCH = 0.1
    NOISE = 0.005

    def __init__(self):
        self.launches = 0
        self.rng = np.random.default_rng(0)

    def run(self, arms, sequence, sync_after) -> backends.Timed:
        seconds = []
        for arm in sequence:
            calls = arms[arm]
            before = self.launches
            backends._cycle(calls.launches, calls.inner_reps)
            launches = max(self.launches - before, calls.inner_reps)
            work = launches * self.SECONDS_PER_LAUNCH / calls.inner_reps
            seconds.append(work * (1 + self.NOISE * self.rng.standard_normal()))
        return backends.Timed(seconds)


@pytest.fixture
def launch_clock(monkeypatch):
    """Passes in process time their arms by kernel launches; no device limits are measured."""
    from triton.runtime.interpreter import InterpretedFunction

    clock = LaunchClock()
    interpreted = InterpretedFunction.run

    def run(self, *args, **kwargs):
        clock.launches += 1
        return interpreted(self, *args, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", run)
    monkeypatch.setattr(worker, "backend_for", lambda device: clock)
    monkeypatch.setattr(limits, "measure", lambda backend, inner_reps, prime=None: None)


def gate(repo: Path, ref: str, out: Path, *args: str):
    return CliRunner().invoke(app, ["gate", "--against", ref, "--repo", str(repo),
                                    "--protocol", QUICK, "--device", "cpu", "--out", str(out),
                                    *args])


def the_archive(out: Path) -> dict:
    (path,) = out.iterdir()
    assert path.name.endswith("-gate-quick-fused.json.gz")
    return json.loads(gzip.decompress(path.read_bytes()))


# -- the kernels stay exportable ---------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(KERNELS.glob("*.py")), ids=lambda p: p.name)
def test_kernel_modules_import_only_themselves_torch_triton_and_the_standard_library(path):
    # What lets `gate --against` run any commit's kernels/ as a package of its own name.
    assert refs.foreign_imports(path.read_text(), path.name) == []


# -- outcomes ----------------------------------------------------------------------------------


@interpreter_only
def test_against_a_ref_with_the_same_kernels_passes(repo, tmp_path, launch_clock):
    result = gate(repo, "same", tmp_path)
    assert result.exit_code == 0, result.output
    last = result.stdout.strip().splitlines()[-1]
    assert last == "gate: PASS, 0 of 1 cases regressed beyond the 2.0 % tolerance"
    sha12 = git(repo, "rev-parse", "same")[:12]
    (row,) = [line for line in result.stdout.splitlines() if f"fused@{sha12} -> fused" in line]
    assert " unresolved " in row
    assert f"archive: {next(tmp_path.iterdir())}" in result.stderr


@interpreter_only
def test_a_gate_on_the_cpu_from_a_shell_without_the_interpreter_set_runs_both_refs(repo,
                                                                                  tmp_path):
    done = from_a_shell_without_the_interpreter_set(
        "gate", "--against", "same", "--repo", str(repo), "--protocol", QUICK, "--device",
        "cpu", "--out", str(tmp_path))
    run = the_archive(tmp_path)
    checks = [check for p in run["passes"] for c in p["cases"]
              for check in c["verification"].values()]
    assert checks and all(check["ok"] for check in checks), done.stdout + done.stderr
    assert done.returncode in (0, 3), done.stdout + done.stderr  # a noisy clock: no FAIL


@interpreter_only
def test_the_sweeps_options_reach_the_gates_run(repo, tmp_path, launch_clock):
    result = gate(repo, "same", tmp_path, "--pass-timeout", "123", "--tokens", "2",
                  "--samples", "4")
    assert result.exit_code == 0, result.output
    resolved = the_archive(tmp_path)["protocol"]["resolved"]
    assert (resolved["timing"]["pass_timeout"], resolved["timing"]["samples"],
            resolved["tokens"]) == (123.0, 4, [2])


@pytest.fixture
def slower_working_tree(monkeypatch):
    """The working tree's fused route doing its work twice: what the installed package
    exports is what the gate measures as the candidate, so this is a regressed tree."""
    import qkbench.kernels

    namespace = {"qk_norm_rope": qkbench.kernels.qk_norm_rope}
    exec(TWICE, namespace)
    monkeypatch.setattr(qkbench.kernels, "qk_norm_rope", namespace["qk_norm_rope"])


@interpreter_only
def test_a_working_tree_slower_than_the_ref_fails_with_exit_1_naming_the_case(
        repo, tmp_path, launch_clock, slower_working_tree):
    result = gate(repo, "same", tmp_path)
    assert result.exit_code == 1, result.output
    last = result.stdout.strip().splitlines()[-1]
    worst = re.fullmatch(r"gate: FAIL, 1 of 1 cases regressed beyond the 2\.0 % tolerance "
                         r"\(worst (\+\d+\.\d %) at tiny-2x1 T=1\): tiny-2x1 T=1 (\S+ %)", last)
    assert worst, last
    assert worst[1] == worst[2] and float(worst[1][1:-2]) > 50  # twice the work
    row = next(line for line in result.stdout.splitlines() if "tiny-2x1" in line and "│" in line)
    assert "slower" in row and "REGRESSED" in row


@interpreter_only
def test_against_a_slower_ref_the_working_tree_passes_as_faster(repo, tmp_path, launch_clock):
    result = gate(repo, "slow", tmp_path)
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if "tiny-2x1" in line and "│" in line)
    assert "faster" in row and "pass" in row
    assert result.stdout.strip().splitlines()[-1] == (
        "gate: PASS, 0 of 1 cases regressed beyond the 2.0 % tolerance")
    # The archive names both commits and both kernels; it audits clean.
    run = the_archive(tmp_path)
    sha = git(repo, "rev-parse", "slow")
    against, candidate = run["gate"]["against"], run["gate"]["candidate"]
    assert (against["ref"], against["commit"], against["package"]) == (
        "slow", sha, f"qkbench_ref_{sha[:12]}")
    assert candidate["commit"] == env.code_identity()["commit"]
    assert candidate["kernels_sha256"] == env.kernel_hashes()
    differ = {n for n in against["kernels_sha256"]
              if against["kernels_sha256"][n] != candidate["kernels_sha256"].get(n)}
    assert differ == {"__init__.py"}
    assert run["protocol"]["resolved"]["routes"] == [f"fused@{sha[:12]}", "fused"]
    assert CliRunner().invoke(app, ["audit", str(next(tmp_path.iterdir()))]).exit_code == 0


# -- what cannot be gated is exit 2 in one line -------------------------------------------------


@pytest.mark.parametrize(("ref", "fragments"), [
    ("no-kernels", ["it has no kernels/ folder, so its kernels cannot be exported"]),
    ("syntax-error", ["its kernels cannot be imported: kernels/__init__.py:",
                      "SyntaxError"]),
    ("import-fails", ["cannot be imported: kernels/__init__.py:", "ModuleNotFoundError",
                      "nosuch"]),
    ("no-fused", ["have no qk_norm_rope (the fused route)"]),
    ("imports-harness", ["kernels/__init__.py imports the harness (qkbench.case (line"]),
    ("no-such-branch", ["--against no-such-branch: no such commit in "]),
], ids=lambda x: x if isinstance(x, str) else None)
def test_a_ref_whose_kernels_cannot_be_used_is_exit_2_in_one_line(repo, tmp_path, ref,
                                                                   fragments):
    result = gate(repo, ref, tmp_path)
    sha12 = "" if ref == "no-such-branch" else git(repo, "rev-parse", ref)[:12]
    assert_usage_error(result, f"--against {ref}", sha12, *fragments)
    assert list(tmp_path.iterdir()) == []  # nothing measured, nothing written
    assert refs.ENV not in os.environ


def test_a_route_without_a_kernel_at_a_commit_is_exit_2(repo, tmp_path):
    assert_usage_error(gate(repo, "same", tmp_path, "--route", "eager"),
                       "--route eager: only the kernel routes (fused, split)")


@pytest.mark.parametrize(("name", "why"), [("a-file", "is a file"),
                                         ("run.json.gz", "names an archive file")])
def test_an_out_that_is_not_a_folder_is_exit_2_before_anything_runs(repo, tmp_path, name,
                                                                     why):
    out = tmp_path / name
    if name == "a-file":
        out.write_text("")
    assert_usage_error(gate(repo, "same", out), f"--out {out}: {why}; --against writes one "
                                                "archive per route into a folder")
    assert [p.name for p in tmp_path.iterdir()] == ([name] if name == "a-file" else [])


def test_a_repository_that_is_not_one_is_exit_2(tmp_path):
    assert_usage_error(gate(tmp_path, "HEAD", tmp_path / "out"), "is not in a git repository")


# -- worker processes ----------------------------------------------------------------------------


@interpreter_only
def test_a_worker_process_resolves_the_ref_route_and_the_export_is_removed_after(repo):
    """The manager names the export folder in the environment; a worker inherits it."""
    protocol = load(QUICK)
    with refs.exported("same", repo, ["fused"]) as export:
        folder = Path(os.environ[refs.ENV])
        proto = protocol.with_overrides(routes=[export.route("fused"), "fused"])
        job = runner.job_for(proto, 0, torch.device("cpu"))
        job["measure_limits"] = False
        result = runner._run_in_subprocess(job, torch.device("cpu"), runner.Events(),
                                           Timing().pass_timeout)
        assert export.package in sys.modules
    assert result["status"] == "ok", result.get("stderr_tail")
    (case,) = result["cases"]
    assert case["verification"][export.route("fused")]["ok"]
    (comp,) = case["comparisons"]
    assert {a["label"]: a["route"] for a in comp["arms"]} == {
        "A": export.route("fused"), "A'": export.route("fused"), "B": "fused"}
    assert not folder.exists() and refs.ENV not in os.environ
    assert export.package not in sys.modules


def test_a_ref_route_without_an_export_is_a_clear_route_error(monkeypatch):
    from qkbench.errors import RouteError
    from qkbench.routes import resolve

    monkeypatch.delenv(refs.ENV, raising=False)
    with pytest.raises(RouteError, match="QKBENCH_REF_DIR is not set"):
        resolve("fused@0123456789ab")
    with pytest.raises(RouteError, match="12 hex digits"):
        resolve("fused@main")


def test_exported_refuses_an_option_looking_ref(repo):
    with pytest.raises(GateError, match="not a git ref"), refs.exported("--help", repo, ["fused"]):
        pass


def test_a_repo_given_as_a_folder_inside_it_exports_the_commits_kernels(repo):
    inside = repo / "inside"
    inside.mkdir(exist_ok=True)
    with refs.exported("same", inside, ["fused"]) as export:
        assert export.commit == git(repo, "rev-parse", "same")
        assert (export.folder / "__init__.py").is_file()


def test_a_ref_that_names_a_branch_and_a_tag_is_refused_naming_both_forms(repo, tmp_path):
    git(repo, "branch", "twin", "slow")
    git(repo, "tag", "twin", "same")
    git(repo, "config", "core.warnAmbiguousRefs", "false")  # git's warning off: refused still
    try:
        assert_usage_error(gate(repo, "twin", tmp_path),
                           f"--against twin: ambiguous in {repo}", "refs/heads/twin",
                           "refs/tags/twin")
        with refs.exported("refs/heads/twin", repo, ["fused"]) as export:
            assert export.commit == git(repo, "rev-parse", "slow")
    finally:
        git(repo, "config", "--unset", "core.warnAmbiguousRefs")
        git(repo, "tag", "-d", "twin")
        git(repo, "branch", "-D", "twin")


@interpreter_only
def test_a_short_sha_that_two_commits_share_is_refused_as_ambiguous(tmp_path):
    def git(*args: str, stdin: str | None = None) -> str:
        fixed = {"GIT_AUTHOR_DATE": "2026-01-01T00:00:00", "GIT_COMMITTER_DATE":
                 "2026-01-01T00:00:00", "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b",
                 "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b"}
        return subprocess.run(["git", "-C", str(tmp_path), *args], input=stdin, check=True,
                              capture_output=True, text=True, env={**os.environ, **fixed}
                              ).stdout.strip()

    git("init", "-q")
    tree = git("mktree", stdin="")
    seen: dict[str, str] = {}
    for i in range(2000):  # fixed dates: the same commits, so the same first collision
        sha = git("commit-tree", tree, "-m", str(i))
        if sha[:4] in seen:
            break
        seen[sha[:4]] = sha
    else:
        pytest.fail("no two commits share their first four hex digits")
    with pytest.raises(GateError, match=rf"--against {sha[:4]}: ambiguous in .* give more of "
                                        "the sha"):
        refs.commit_of(sha[:4], tmp_path)
    assert refs.commit_of(sha[:12], tmp_path) == sha


def test_a_refs_split_and_fused_agree_bit_for_bit_and_the_working_tree_meets_the_oracle(
        repo, device):
    from qkbench.case import Case, Geometry, make_inputs
    from qkbench.routes import resolve
    from qkbench.verify import verify

    inputs = make_inputs(Case(Geometry("g", 2, 1, 64), 3, max_position=64), 0, device)
    with refs.exported("same", repo, ["split", "fused"]) as export:
        routes = [resolve(export.route("split")), resolve(export.route("fused")),
                  resolve("fused")]
        report = verify(routes, inputs, True)
    assert routes[0].exact_group == routes[1].exact_group == f"triton@{export.sha12}"
    ref_fused, tree_fused = report[export.route("fused")], report["fused"]
    assert ref_fused["ok"] and ref_fused["exact_with"] == export.route("split")
    assert ref_fused["differing_share"] == 0.0
    assert tree_fused["ok"] and "exact_with" not in tree_fused  # the oracle only


def test_an_interrupted_gate_exits_130_and_removes_the_export(repo, tmp_path, monkeypatch):
    from qkbench import against

    seen = {}

    def interrupted(export, *args, **kwargs):
        seen["folder"] = Path(os.environ[refs.ENV])
        raise KeyboardInterrupt

    monkeypatch.setattr(against, "run", interrupted)
    result = gate(repo, "same", tmp_path)
    assert result.exit_code == 130
    assert result.stderr.strip().splitlines()[-1].startswith("interrupted: no verdict")
    assert not seen["folder"].exists() and refs.ENV not in os.environ


def test_a_heavy_gate_on_the_cpu_is_announced_before_it_runs(repo, tmp_path, monkeypatch):
    from qkbench import against

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(against, "run", interrupted)
    result = CliRunner().invoke(app, [
        "gate", "--against", "same", "--repo", str(repo), "--protocol", "text-decode",
        "--route", "fused", "--route", "split", "--device", "cpu", "--out", str(tmp_path)])
    assert result.exit_code == 130
    # One run a route: twice the sweep's note for the one protocol.
    assert ("note: text-decode on the CPU makes 5,575,680 timed route calls over "
            "14,782,275,256,320 q and k elements in the Triton interpreter, 30,551,991x the "
            "smoke protocol's work") in result.stderr, result.stderr


@interpreter_only
def test_a_gate_ended_by_sigterm_exits_143_and_removes_the_export(repo, tmp_path):
    import signal

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "TRITON_INTERPRET": "1"}
    env.pop("QKBENCH_SIGNING_KEY", None)
    proc = subprocess.Popen([sys.executable, "-c", "from qkbench.cli import app; app()", "gate",
                             "--against", "same", "--repo", str(repo), "--protocol", QUICK,
                             "--device", "cpu", "--out", str(tmp_path / "out")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
    said = []
    for line in proc.stderr:  # the sweep has started: the export is in place
        said.append(line)
        if line.startswith("archive: "):
            break
    assert any(p.name.startswith("qkbench-ref-") for p in scratch.iterdir()), said
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 143, rest
    assert rest.strip().splitlines()[-1].startswith("terminated (SIGTERM): no verdict")
    assert not [p for p in scratch.iterdir() if p.name.startswith("qkbench-ref-")]
