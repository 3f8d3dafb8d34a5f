"""The command line: exit codes and the lines a user reads (one clear line per error)."""

import errno
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import typer
from typer.testing import CliRunner

import qkbench
from qkbench import archive as archives
from qkbench import report
from qkbench.cli import app, archive_path

from conftest import interpreter_only, pythonpath_with
from helpers import from_a_shell_without_the_interpreter_set, reseal

VALID = """
name = "tiny"
routes = ["split", "fused"]
tokens = [1]

[[geometry]]
name = "g"
heads_q = 2
heads_k = 1
head_dim = 64
"""


FIXTURES = Path(__file__).parent / "fixtures"
# One tiny cell, six in-process passes: the whole method through the CLI in seconds.
QUICK = ("--protocol", str(FIXTURES / "quick.toml"), "--device", "cpu")


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def assert_one_error_line(result, *fragments: str) -> str:
    """Exit 1, a single ``error:`` line on stderr with each fragment, no traceback."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_sweep_on_cuda_without_a_cuda_device_fails_in_one_line(tmp_path):
    out = tmp_path / "run.json"
    result = invoke("sweep", "--device", "cuda", "--out", str(out))
    assert_one_error_line(result, "--device cuda", "no CUDA device")
    assert not out.exists()


@pytest.mark.parametrize(("args", "line"), [
    (("--threshold", "-1"), "--threshold must be in (0, 1), got -1.0"),
    (("--passes", "8"), "--passes must be a multiple of 6 (every arm order equally often), "
                        "got 8"),
    (("--launch-state", "fast"), "--launch-state must be one of ['as-found', 'pdl'], got "
                                 "'fast'"),
    (("--tokens", "0"), "--tokens must be a non-empty array of integers >= 1"),
    (("--route", "split"), "--route needs a baseline and at least one candidate, got "
                           "['split']"),
], ids=["threshold", "passes", "launch-state", "tokens", "one-route"])
def test_a_bad_override_is_named_by_its_option(tmp_path, args, line):
    out = tmp_path / "run.json"
    result = invoke("sweep", *QUICK, *args, "--out", str(out))
    assert result.stderr.strip().splitlines()[-1] == f"error: {line}"
    assert result.exit_code == 1 and not out.exists()


def test_unknown_device_fails_in_one_line():
    assert_one_error_line(invoke("verify", "--device", "tpu"), "--device must be auto, cuda or cpu")


@pytest.mark.parametrize(("old", "new", "names"), [
    ("head_dim = 64", "head_dim = 64\nheads_v = 1",
     ["unknown key 'geometry[0].heads_v'", "expected one of"]),
    ("tokens = [1]", 'tokens = [1]\n[timing]\nsamples = "many"',
     ["'timing.samples' must be an integer", "got str 'many'"]),
    ("head_dim = 64", "", ["missing required key 'geometry[0].head_dim'", "an integer"]),
    ("head_dim = 64", 'head_dim = 64\nstyle = "llama"',
     ["geometry[0] ('g'): style must be one of"]),
], ids=["unknown-key", "wrong-type", "missing-key", "bad-value"])
def test_bad_protocol_file_fails_naming_file_key_and_expected_type(tmp_path, old, new, names):
    # A long path: the one line must not be wrapped at the console's width.
    folder = tmp_path / ("a-rather-long-folder-name-" * 4)
    folder.mkdir()
    path = folder / "bad.toml"
    path.write_text(VALID.replace(old, new, 1))
    out = tmp_path / "run.json"
    result = invoke("sweep", "--protocol", str(path), "--device", "cpu", "--out", str(out))
    assert_one_error_line(result, str(path), *names)
    assert not out.exists()


@pytest.mark.parametrize("command", ["sweep", "verify", "calibrate"])
@pytest.mark.parametrize("spec", ["", "  "], ids=["empty", "blank"])
def test_an_empty_protocol_is_refused_not_read_as_the_default(tmp_path, command, spec):
    # What a CI script passes for an unset variable: never the default protocol's run.
    out = () if command == "verify" else ("--out", str(tmp_path / "out"))
    result = invoke(command, "--protocol", spec, "--device", "cpu", *out)
    assert_one_error_line(result, "--protocol is empty: name a shipped protocol or a TOML "
                                  "file")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("route", "reason"), [
    ("nosuch", "unknown route 'nosuch'"),
    ("no_such_module_here:op", "route 'no_such_module_here:op' cannot be loaded"),
    ("[/red]", "unknown route '[/red]'"),  # printed as written, never read as markup
])
def test_unknown_route_fails_in_one_line_before_any_archive(tmp_path, route, reason):
    out = tmp_path / "run.json"
    result = invoke("sweep", "--protocol", "smoke", "--device", "cpu", "--route", "split",
                    "--route", route, "--out", str(out))
    assert_one_error_line(result, reason)
    assert not out.exists()


def _unreadable(tmp_path, kind: str):
    path = tmp_path / "run.json"
    if kind == "missing":
        return path, "no such archive"
    if kind == "text":
        path.write_text("protocol smoke, status complete\n")
        return path, "cannot be read as JSON"
    if kind == "binary":
        path.write_bytes(b"\xff\xfe\x00\x80 not text")
        return path, "cannot be read as JSON"
    if kind == "folder":
        path.mkdir()
        return path, "cannot be read as JSON"
    if kind == "huge-integer":  # past the int parser's 4300 digits: a plain ValueError
        path.write_text('{"kind": "qkbench.run", "schema_version": ' + "1" * 4301 + "}")
        return path, "cannot be read as JSON"
    if kind == "deep-nesting":  # past the parser's recursion limit
        path.write_text("[" * 100_000 + "]" * 100_000)
        return path, "cannot be read as JSON"
    if kind == "json-list":
        path.write_text("[1, 2, 3]")
        return path, "not a qkbench run archive"
    if kind == "other-kind":
        path.write_text(json.dumps({"kind": "pyperf.bench", "schema_version": 1}))
        return path, "not a qkbench run archive"
    if kind == "unknown-schema":
        path.write_text(json.dumps({"kind": "qkbench.run", "schema_version": 99}))
        return path, "schema_version 99 is not supported (this qkbench reads 1, 2, 3, 4)"
    if kind == "header-only":
        path.write_text(json.dumps({"kind": "qkbench.run", "schema_version": 1}))
        return path, "malformed archive: 'status' is missing or not str"
    raise AssertionError(kind)


@pytest.mark.parametrize("command", ["report", "audit"])
@pytest.mark.parametrize("kind", ["missing", "text", "binary", "folder", "huge-integer",
                                  "deep-nesting", "json-list", "other-kind", "unknown-schema",
                                  "header-only"])
def test_unreadable_archive_fails_in_one_clear_line(tmp_path, command, kind):
    path, reason = _unreadable(tmp_path, kind)
    assert_one_error_line(invoke(command, str(path)), str(path), reason)


def test_report_markdown_prints_a_table(smoke_sweep):
    path, _ = smoke_sweep
    result = invoke("report", str(path), "--format", "markdown")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| geometry | T | kept |"))
    assert set(lines[header + 1]) == set("|-")
    rows = [line for line in lines[header + 2:] if line.startswith("| tiny-4x2 |")]
    assert [row.split(" | ")[1] for row in rows[:2]] == ["1", "4"]
    assert all(row.count("|") == lines[header].count("|") for row in rows[:2])


def test_report_json_prints_the_archived_summary_beside_the_runs_header(smoke_sweep,
                                                                        smoke_archive):
    path, _ = smoke_sweep
    result = invoke("report", str(path), "--format", "json")
    assert result.exit_code == 0
    printed = json.loads(result.stdout)
    assert printed["summary"] == smoke_archive["summary"]
    header = printed["header"]
    code = smoke_archive["environment"]["code"]
    assert (header["device"], header["commit"], header["dirty"], header["status"]) == (
        "cpu", code["commit"], code["dirty"], "complete")
    assert header["protocol"] == {"name": "smoke", "path": smoke_archive["protocol"]["path"],
                                  "sha256": smoke_archive["protocol"]["sha256"],
                                  "cells_picked": None}
    assert (header["cache"], header["launch_state"]) == ("hot", "as-found")


def test_report_json_holds_every_line_the_other_formats_print_beside_their_tables(
        smoke_sweep, smoke_archive):
    path, _ = smoke_sweep
    printed = json.loads(invoke("report", str(path), "--format", "json").stdout)["lines"]
    rich = invoke("report", str(path)).stdout
    said = [line for part in printed.values() for line in part]
    assert printed["comparisons"] and all(line in rich for line in said)
    assert printed == report.lines(smoke_archive)


def test_report_rich_shows_the_cpu_caveat(smoke_sweep):
    path, _ = smoke_sweep
    result = invoke("report", str(path))
    assert result.exit_code == 0
    assert "Measured on the CPU" in result.stdout
    assert "split -> fused: dropped" in result.stdout


def test_report_rejects_an_unknown_format(smoke_sweep):
    path, _ = smoke_sweep
    assert_one_error_line(invoke("report", str(path), "--format", "csv"),
                          "--format must be rich, markdown or json")


@interpreter_only
def test_verify_smoke_on_cpu_exits_0_with_fused_bit_exact():
    result = invoke("verify", "--protocol", "smoke", "--device", "cpu")
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if "tiny-4x2/T" in line]
    assert len(rows) == 2
    assert all("bit-exact" in row and "NOT exact" not in row for row in rows)


@interpreter_only
def test_verify_prints_one_line_per_case_saying_ok_in_words():
    result = invoke("verify", "--protocol", "smoke", "--device", "cpu")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["tiny-4x2/T1", "tiny-4x2/T4"]
    for line in lines:
        assert "split ok (oracle error " in line
        assert "fused ok (oracle error " in line and "bit-exact with split" in line
    assert result.stderr.strip().splitlines()[-1] == (
        "verify ok: every route checked meets the oracle and is bit-exact with its exact "
        "group")


@interpreter_only
def test_verify_names_a_route_it_could_verify_on_no_case_in_one_line(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    result = invoke("verify", "--protocol", "smoke", "--device", "cpu", "--route", "eager",
                    "--route", "fake_routes:supports_nothing")
    assert result.exit_code == 0, result.output
    assert result.stderr.strip().splitlines()[-1] == (
        "verify ok: every route checked meets the oracle (2 check(s) n/s: not supported by "
        "that route; not verified on any case: fake_routes:supports_nothing)")


@pytest.fixture
def fake_routes(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fixtures"))


@interpreter_only
def test_verify_says_wrong_in_words_and_exits_1(fake_routes):
    result = invoke("verify", "--protocol", "smoke", "--device", "cpu", "--route", "split",
                    "--route", "fake_routes:off_by_a_little")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["tiny-4x2/T1", "tiny-4x2/T4"]
    for line in lines:
        assert "split ok (" in line and "fake_routes:off_by_a_little WRONG (oracle error" in line
    assert "verify failed: 2 route check(s) WRONG" in result.stderr


@interpreter_only
def test_verify_says_n_s_for_an_unsupported_case_and_exits_0(fake_routes):
    result = invoke("verify", "--protocol", "smoke", "--device", "cpu", "--route", "split",
                    "--route", "fake_routes:supports_nothing")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["tiny-4x2/T1", "tiny-4x2/T4"]
    for line in lines:
        assert "fake_routes:supports_nothing n/s (this fake peer supports no case)" in line
    assert "2 check(s) n/s" in result.stderr


@interpreter_only
def test_verify_of_nothing_but_unsupported_checks_exits_1(fake_routes):
    result = invoke("verify", "--protocol", "smoke", "--device", "cpu", "--route",
                    "fake_routes:supports_nothing")
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines()[-1] == (
        "verify failed: nothing was verified: all 2 check(s) n/s (not supported by their "
        "route)")


@interpreter_only
def test_verify_calls_a_route_returning_no_tensors_wrong_in_words(fake_routes):
    result = invoke("verify", "--protocol", "smoke", "--device", "cpu", "--route", "split",
                    "--route", "fake_routes:returns_garbage")
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    for line in result.stdout.splitlines():
        assert ("fake_routes:returns_garbage WRONG (raised TypeError: a route returns its q "
                "and k outputs, a pair of tensors; got int)") in line
    assert "verify failed: 2 route check(s) WRONG" in result.stderr


def test_version_prints_the_package_version():
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"qkbench {qkbench.__version__}"


def _options():
    root = typer.main.get_command(app)
    for name, command in [("qkbench", root), *root.commands.items()]:
        for param in command.params:
            if param.param_type_name == "option" and param.name != "help":
                yield name, param


@pytest.mark.parametrize(("command", "option"), list(_options()),
                         ids=lambda x: x if isinstance(x, str) else x.opts[0])
def test_every_option_has_help_and_says_its_default(command, option):
    assert option.help, f"{command} {option.opts[0]} has no help"
    if option.default is None or option.show_default is False:
        assert "default" in option.help, f"{command} {option.opts[0]} does not say its default"


def test_resume_help_says_it_goes_on_as_the_archive_recorded():
    result = invoke("sweep", "--help")
    text = " ".join(result.stdout.replace("│", " ").split())
    assert "with the device, protocol, routes, cells and timing it recorded" in text


def test_a_resume_of_an_older_schema_archive_is_refused_naming_its_schema(tmp_path):
    older = Path(__file__).parent.parent / "results" / "h100" / "2026-12-02-dit.json"
    copy = tmp_path / "older.json"
    copy.write_bytes(older.read_bytes())
    assert_one_error_line(invoke("sweep", "--resume", "--out", str(copy)),
                          f"{copy}: cannot resume: it is a schema 1 archive; resume it with "
                          "the qkbench version that started it")
    assert copy.read_bytes() == older.read_bytes()


def test_a_resume_of_a_gates_archive_is_refused_saying_to_run_the_gate_again(
        smoke_archive, tmp_path):
    gated = {**smoke_archive, "status": "running", "gate": {"against": {"ref": "v1"}}}
    path = tmp_path / "gate.json"
    path.write_text(json.dumps(gated))
    before = path.read_bytes()
    assert_one_error_line(invoke("sweep", "--resume", "--out", str(path)),
                          f"{path}: cannot resume: it is a gate's archive (its baseline ran "
                          "kernels exported from a git ref for that gate only); run the "
                          "qkbench gate command again")
    assert path.read_bytes() == before


@interpreter_only
def test_a_resume_needs_only_the_archive_to_go_on_as_it_recorded(tmp_path):
    from qkbench import archive, runner
    from qkbench.protocol import load

    path = tmp_path / "run.json"

    def interrupt(index: int, status: str) -> None:
        raise KeyboardInterrupt

    picked = load(str(FIXTURES / "quick.toml")).with_overrides(tokens=[2], samples=4)
    with pytest.raises(KeyboardInterrupt):
        runner.sweep(picked, torch.device("cpu"), path,
                     events=runner.Events(pass_finished=interrupt))
    result = invoke("sweep", "--device", "cpu", "--resume", "--out", str(path))
    assert result.exit_code == 0, result.output
    run = archive.read(path)
    assert run["status"] == "complete" and len(run["passes"]) >= 6
    resolved = run["protocol"]["resolved"]
    assert (resolved["tokens"], resolved["timing"]["samples"]) == ([2], 4)
    assert {c["key"] for p in run["passes"] for c in p["cases"]} == {"tiny-2x1/T2"}


@pytest.mark.parametrize("name", ["run.json", "run.json.gz", "run.gz", "RUN.JSON"])
def test_an_out_ending_in_json_or_gz_is_the_archive_itself(tmp_path, name):
    assert archive_path(tmp_path / name, "smoke", resume=False) == tmp_path / name


@pytest.mark.parametrize("name", ["nightly", "nightly/", "v3.9"])
def test_any_other_out_is_a_folder_that_gets_a_dated_archive(tmp_path, name):
    # "nightly/" reaches the CLI as Path("nightly"): the slash is lost, so the name decides.
    path = archive_path(tmp_path / name, "smoke", resume=False)
    assert path.parent == tmp_path / name.rstrip("/")
    assert re.fullmatch(r"\d{8}-\d{6}-smoke\.json\.gz", path.name), path.name


@pytest.mark.parametrize(("args", "note"), [
    (("--protocol", "text-decode"), "note: text-decode on the CPU makes 2,787,840 timed route "
     "calls over 7,391,137,628,160 q and k elements in the Triton interpreter, 15,275,995x the "
     "smoke protocol's work"),
    # Half as many calls as smoke's, each of some 1600 times their elements.
    (("--protocol", "smoke", "--tokens", "4096"), "note: smoke on the CPU makes 252 timed route "
     "calls over 396,361,728 q and k elements in the Triton interpreter, 819x the smoke "
     "protocol's work"),
    (("--protocol", "smoke"), None),
], ids=["many-calls", "large-calls", "smoke"])
def test_a_heavy_protocol_on_the_cpu_is_announced_before_it_runs(tmp_path, monkeypatch,
                                                                  args, note):
    from qkbench import runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "sweep", interrupted)
    result = invoke("sweep", *args, "--device", "cpu", "--out", str(tmp_path / "run.json"))
    if note:
        assert note in result.stderr, result.stderr
    else:
        assert "note:" not in result.stderr, result.stderr


def test_ctrl_c_names_the_real_archive_path_and_how_to_resume(tmp_path, monkeypatch):
    from qkbench import runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "sweep", interrupted)
    path = tmp_path / ("a-long-folder-name-" * 4) / "run.json.gz"
    result = invoke("sweep", "--protocol", "smoke", "--device", "cpu", "--out", str(path))
    assert result.exit_code == 130
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"interrupted: finished passes are in {path};")
    assert line.endswith(f"continue with: qkbench sweep --resume --out {path}")


def test_ctrl_c_before_the_archive_exists_says_none_was_written(tmp_path, monkeypatch):
    from qkbench import cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_protocol", interrupted)
    result = invoke("sweep", "--device", "cpu", "--out", str(tmp_path / "run.json"))
    assert result.exit_code == 130
    assert result.stderr.strip().splitlines()[-1] == "interrupted: no archive was written yet"
    assert list(tmp_path.iterdir()) == []


def _quick_sweep(*args: str):
    return invoke("sweep", *QUICK, *args)


@interpreter_only
def test_out_directory_gets_a_dated_gzip_archive_named_after_the_protocol(tmp_path):
    result = _quick_sweep("--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    (written,) = tmp_path.iterdir()
    assert re.fullmatch(r"\d{8}-\d{6}-quick\.json\.gz", written.name)
    assert written.read_bytes()[:2] == b"\x1f\x8b"
    assert f"archive: {written}" in result.stderr
    audited = invoke("audit", str(written))
    assert audited.exit_code == 0 and audited.stdout.startswith("audit ok:")


def test_resume_of_a_directory_fails_in_one_line(tmp_path):
    assert_one_error_line(invoke("sweep", "--device", "cpu", "--resume", "--out", str(tmp_path)),
                          "--resume needs --out to name an archive file")


def test_piped_sweep_prints_one_line_per_finished_pass(smoke_sweep, smoke_archive):
    _, result = smoke_sweep
    pattern = re.compile(r"(?:pass (\d)/6|replacement pass \d+ \(slot \d, \d case\(s\)\)): "
                         r"order (\S+ \S+ \S+); elapsed [\d.ms]+; "
                         r"drops so far (\d+) of (\d+) \(pass, case\)")
    found = [m for line in result.stderr.splitlines() if (m := pattern.fullmatch(line))]
    # One line per pass, in order: the six primary passes, then any replacement of a pass
    # the real clock dropped on a loaded machine.
    assert [m[2].split() for m in found] == [p["order"] for p in smoke_archive["passes"]]
    assert [int(m[1]) for m in found[:6]] == [1, 2, 3, 4, 5, 6]
    assert [int(m[4]) for m in found[:6]] == [2, 4, 6, 8, 10, 12]  # two cases a pass
    drops = smoke_archive["summary"]["comparisons"][0]["drops"]
    assert (int(found[-1][3]), int(found[-1][4])) == (drops["dropped"], drops["total"])


def test_a_resumed_sweep_counts_its_drops_from_the_passes_it_found(one_pass, tmp_path):
    from qkbench import archive as archives

    path = tmp_path / "run.json"
    shutil.copy(one_pass, path)
    found = archives.read(path)["passes"]
    result = invoke("sweep", "--resume", "--out", str(path))
    assert result.exit_code == 0, result.output
    counts = [tuple(map(int, m.groups())) for line in result.stderr.splitlines()
              if (m := re.search(r"drops so far (\d+) of (\d+)", line))]
    cases = len(found[0]["cases"])
    assert [measured for _, measured in counts][:2] == [2 * cases, 3 * cases]


@interpreter_only
def test_a_cpu_run_from_a_shell_without_the_interpreter_set_runs_the_kernels_in_it():
    done = from_a_shell_without_the_interpreter_set("verify", *QUICK)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("verify ok")


@interpreter_only
def test_verify_checks_a_single_route():
    result = invoke("verify", "--protocol", "smoke", "--device", "cpu", "--route", "split")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert [line.split(" (")[0] for line in lines] == ["tiny-4x2/T1: split ok",
                                                       "tiny-4x2/T4: split ok"]


def test_resume_of_a_complete_archive_measures_and_writes_nothing(smoke_sweep, tmp_path):
    path, _ = smoke_sweep
    copy = tmp_path / "done.json"
    copy.write_bytes(path.read_bytes())
    result = invoke("sweep", "--protocol", "smoke", "--device", "cpu", "--resume", "--out",
                    str(copy))
    assert result.exit_code == 0, result.output
    assert "resume: the archive is complete already; nothing was measured" in result.stderr
    assert copy.read_bytes() == path.read_bytes()


def test_resume_of_a_complete_archive_after_a_code_change_measures_nothing_and_passes(
        smoke_sweep, tmp_path, monkeypatch):
    # Nothing would be measured, so no code would be mixed: no --allow-code-change needed.
    from qkbench import env

    path, _ = smoke_sweep
    copy = tmp_path / "done.json"
    copy.write_bytes(path.read_bytes())
    now = env.code_now()
    monkeypatch.setattr(env, "code_now", lambda: {**now, "commit": "0" * 40})
    result = invoke("sweep", "--protocol", "smoke", "--device", "cpu", "--resume", "--out",
                    str(copy))
    assert result.exit_code == 0, result.output
    assert "resume: the archive is complete already; nothing was measured" in result.stderr
    assert copy.read_bytes() == path.read_bytes()


def test_env_on_cpu_shows_kernel_hashes_as_a_table_and_no_graph(monkeypatch):
    from qkbench import limits

    monkeypatch.setattr(limits, "measure", lambda backend, inner_reps, prime=None: {
        "copy": {"gbps": 10.0, "bytes": 2**30},
        "launch_floor": {"one": {"programs": 1, "median_s": 1e-5}}})
    result = invoke("env", "--device", "cpu")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "in a graph" not in text and "us per call on the host" in text
    assert "{" not in text  # no raw dict
    rows = {line.split()[1]: line.split()[3] for line in text.splitlines()
            if line.startswith("│ ") and ".py" in line}
    assert "fused.py" in rows
    assert all(re.fullmatch(r"[0-9a-f]{16}", digest) for digest in rows.values())


def test_resume_without_out_fails_in_one_line():
    assert_one_error_line(invoke("sweep", "--device", "cpu", "--resume"),
                          "--resume needs --out")


def assert_fails_in_one_line_after_the_archive(result, path, *fragments: str) -> str:
    """Exit 1, no traceback; stderr names the archive (after the piped progress lines),
    then one ``error:`` line (last)."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    lines = [x for x in result.stderr.strip().splitlines() if not re.match(r"pass \d+/", x)]
    assert lines[:-1] == [f"archive: {path}"], lines
    assert lines[-1].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[-1]
    return lines[-1]


# -- a run that measured something invalid does not pass -------------------------------------



@interpreter_only
@pytest.mark.parametrize(("route", "sentence"), [
    ("invalid_routes:one_bit_off", "route invalid_routes:one_bit_off is wrong on tiny-4x2/T1: "
                                   "12.5 % of elements differ from split (in 1 of 1 passes)"),
    ("invalid_routes:raising", "route invalid_routes:raising raised on tiny-4x2/T1: "
                               "ValueError: no kernel for 1 tokens (in 1 of 1 passes)"),
    ("invalid_routes:exiting", "route invalid_routes:exiting raised on tiny-4x2/T1: "
                               "SystemExit: 0 (in 1 of 1 passes)"),
], ids=["wrong-output", "raises", "exits"])
def test_sweep_with_an_invalid_route_stops_after_its_first_pass_and_exits_1_saying_why(
        tmp_path, monkeypatch, route, sentence):
    monkeypatch.syspath_prepend(str(FIXTURES))
    out = tmp_path / "run.json"
    result = invoke("sweep", "--protocol", "smoke", "--device", "cpu", "--isolation",
                    "inprocess", "--route", "split", "--route", route, "--out", str(out))
    line = assert_fails_in_one_line_after_the_archive(
        result, out, f"error: the sweep stopped after its first pass: {route} invalid on every "
                     "case, so no comparison could give a verdict; ", sentence)
    assert line.endswith("; and 1 more invalid (route, case) pair, listed above")
    # The report lists both cells in sentences (no raw verification dicts); nothing is lost.
    listed = [x for x in result.stdout.splitlines() if x.startswith(f"route {route} ")]
    assert [x.split(": ")[0].split()[-1] for x in listed] == ["tiny-4x2/T1", "tiny-4x2/T4"]
    assert not any("{" in x for x in listed)
    from qkbench import archive

    run = archive.read(out)
    # Nothing is lost: the pass that found it is archived, the run left to resume.
    assert run["status"] == "running" and [p["status"] for p in run["passes"]] == ["ok"]
    assert all(not c["verification"][route]["ok"] for p in run["passes"] for c in p["cases"])


def test_a_run_whose_every_cell_is_n_s_stops_after_its_first_pass_and_exits_1_saying_so(
        tmp_path, monkeypatch):
    from qkbench import archive

    monkeypatch.syspath_prepend(str(FIXTURES))
    out = tmp_path / "run.json"
    result = _quick_sweep("--route", "split", "--route", "fake_routes:supports_nothing",
                          "--out", str(out))
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines()[-1] == (
        "error: the sweep stopped after its first pass: fake_routes:supports_nothing not "
        "supported (n/s) on every case, so no comparison could give a verdict")
    assert [p["index"] for p in archive.read(out)["passes"]] == [0]


def test_ctrl_c_in_a_calibration_names_the_run_under_way_and_how_to_finish(tmp_path,
                                                                           monkeypatch):
    from qkbench import cli

    def interrupted(proto, dev, path, *args, **kwargs):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")  # the A/A run's archive, its first passes written
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_swept", interrupted)
    result = invoke("calibrate", *QUICK, "--out", str(tmp_path))
    assert result.exit_code == 130
    (aa,) = tmp_path.iterdir()
    assert result.stderr.strip().splitlines()[-1] == (
        f"interrupted: the aa run's finished passes are in {aa}; continue it with: qkbench "
        f"sweep --resume --out {aa}; the planted run has not started: run qkbench calibrate "
        "again")


def test_a_resume_of_an_archive_whose_header_was_damaged_fails_in_one_line(one_pass,
                                                                           tmp_path):
    from qkbench import archive

    run = archive.read(one_pass)
    run["protocol"]["resolved"]["routes"] = ["split", "eager"]  # not resealed: a hand edit
    out = tmp_path / "run.json"
    out.write_text(json.dumps(run))
    result = invoke("sweep", "--resume", "--out", str(out))
    assert_one_error_line(result, f"{out}: cannot resume: it was edited since it was written")


def test_a_resume_of_a_resealed_archive_whose_protocol_record_was_edited_fails_in_one_line(
        one_pass, tmp_path):
    from qkbench import archive

    run = archive.read(one_pass)
    del run["protocol"]["resolved"]["geometries"][0]["name"]  # resealed: a careful editor
    out = tmp_path / "run.json"
    out.write_text(json.dumps(reseal(run)))
    result = invoke("sweep", "--resume", "--out", str(out))
    assert_one_error_line(result, f"{out}: cannot resume: protocol: the resolved settings "
                                  "cannot be rebuilt from its text", f"qkbench audit {out}")


def test_allow_code_change_without_resume_fails_in_one_line(tmp_path):
    assert_one_error_line(invoke("sweep", "--device", "cpu", "--allow-code-change", "--out",
                                 str(tmp_path / "run.json")),
                          "--allow-code-change only goes with --resume")
    assert list(tmp_path.iterdir()) == []


def test_an_out_name_longer_than_the_file_system_takes_fails_in_one_line(tmp_path):
    out = tmp_path / ("x" * 300)
    for resume in ([], ["--resume"]):
        assert_one_error_line(invoke("sweep", "--device", "cpu", *resume, "--out", str(out)),
                              str(out), ": cannot be used (File name too long)")


def test_a_run_whose_every_cell_is_unstable_exits_1_saying_no_cell_got_a_verdict(tmp_path):
    # A drop threshold no null arm can meet: every pass order is dropped at every attempt
    # (one attempt each: retries would only repeat the drop).
    once = tmp_path / "quick-no-retries.toml"
    once.write_text((FIXTURES / "quick.toml").read_text().replace(
        "[timing]\n", "[timing]\nretries = 0\n"))
    out = tmp_path / "run.json"
    result = invoke("sweep", "--protocol", str(once), "--device", "cpu", "--threshold",
                    "0.000001", "--out", str(out))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last == ("error: no cell got a verdict: all 1 are unstable (in each, a pass order "
                    "kept no pass within its retries: its null arm disagreed past the drop "
                    "threshold 1e-06), so the run measured nothing a verdict can be read "
                    "from"), last
    from qkbench import archive

    assert archive.read(out)["status"] == "complete"  # the archive is kept whole


def test_a_run_with_a_cell_that_got_a_verdict_is_not_called_verdictless(smoke_archive):
    from qkbench import report

    verdicts = {c["effect"]["verdict"] for comp in smoke_archive["summary"]["comparisons"]
                for c in comp["cases"]}
    assert verdicts - {"unstable"}, verdicts
    assert report.no_verdict_line(smoke_archive) is None


@interpreter_only
def test_a_run_stopped_by_an_invalid_route_is_not_resumed_and_not_offered_a_resume(
        tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    out = tmp_path / "run.json"
    args = ["sweep", "--protocol", "smoke", "--device", "cpu", "--isolation", "inprocess",
            "--route", "split", "--route", "invalid_routes:raising", "--out", str(out)]
    assert invoke(*args).exit_code == 1
    resumed = invoke(*args, "--resume")
    assert_one_error_line(resumed, f"{out}: cannot resume: its first pass found "
                                   "invalid_routes:raising invalid on every case")
    note = invoke("report", str(out)).stderr
    assert note.strip() == (f"note: no qkbench is writing {out}: the sweep stopped after its "
                            "first pass: invalid_routes:raising invalid on every case, so no "
                            "comparison could give a verdict")


@interpreter_only
def test_calibrate_with_a_route_invalid_everywhere_exits_1_saying_the_run_stopped(
        tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setenv("PYTHONPATH", pythonpath_with(FIXTURES))  # for the passes' workers
    result = invoke("calibrate", "--protocol", "smoke", "--device", "cpu", "--route",
                    "invalid_routes:raising", "--out", str(tmp_path))
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines()[-1].startswith(
        "error: calibrate (aa run): the sweep stopped after its first pass: "
        "invalid_routes:raising")


# -- one clear line, never a traceback -------------------------------------------------------


def test_sweep_with_a_protocol_path_that_does_not_exist_does_not_run_the_shipped_one(tmp_path):
    out = tmp_path / "run.json"
    result = invoke("sweep", "--protocol", "nosuchdir/smoke.toml", "--device", "cpu",
                    "--out", str(out))
    assert_one_error_line(result, "no protocol file 'nosuchdir/smoke.toml' (a path")
    assert not out.exists()


def test_sweep_with_a_binary_protocol_file_fails_in_one_line(tmp_path):
    path = tmp_path / "model.toml"
    path.write_bytes(bytes(range(256)) * 4)
    result = invoke("sweep", "--protocol", str(path), "--device", "cpu",
                    "--out", str(tmp_path / "run.json"))
    assert_one_error_line(result, f"{path}: not a text protocol file (byte 128 is not UTF-8)")


def _unwritable_out(tmp_path, kind: str):
    """An --out that cannot be written, for real; and what the error line must say."""
    if kind == "under-a-file":
        (tmp_path / "notes.txt").write_text("a file, not a folder")
        return tmp_path / "notes.txt" / "runs" / "run.json", "notes.txt is a file, not a directory"
    if kind == "in-proc":
        if not Path("/proc/self").exists():
            pytest.skip("no /proc mounted here")
        return Path("/proc/qkbench-run.json"), "/proc does not take new files"
    if kind == "read-only":
        if os.geteuid() != 0:
            folder = tmp_path / "locked"
            folder.mkdir(mode=0o555)
            return folder / "run.json", "Permission denied"
        # root writes through any mode bits: sysfs refuses new files even to root.
        if not Path("/sys/kernel").is_dir():
            pytest.skip("running as root (mode bits do not stop writes) and no sysfs mounted")
        return Path("/sys/qkbench-run.json"), "Permission denied"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["under-a-file", "in-proc", "read-only"])
def test_sweep_with_an_unwritable_out_fails_in_one_line_naming_it(tmp_path, kind):
    out, reason = _unwritable_out(tmp_path, kind)
    result = invoke("sweep", *QUICK, "--out", str(out))
    assert_one_error_line(result, f"{out}: cannot write the archive: ", reason)
    assert not out.exists()


@pytest.fixture(params=["tmpfs", "dev-full"])
def full_disk(request, tmp_path):
    """A folder whose next archive write fails with ENOSPC from the kernel, not a mock.

    ``tmpfs``: a 64 KiB tmpfs filled to the last block (needs the right to mount, i.e.
    root; skipped elsewhere). ``dev-full``: the archive's temporary file name is a link to
    ``/dev/full``, whose every write fails with ENOSPC (any Linux; the name is the writer's
    ``.NAME.PID.tmp`` and this process is the writer)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if request.param == "tmpfs":
        try:
            mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "qkbench-full",
                                    str(folder)], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            pytest.skip(f"cannot mount a tmpfs here ({e})")
        if mount.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root: {mount.stderr.strip()})")
        request.addfinalizer(lambda: subprocess.run(["umount", str(folder)], check=True))
        filler = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(filler, b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC
        finally:
            os.close(filler)
    else:
        (folder / f".run.json.{os.getpid()}.tmp").symlink_to("/dev/full")
    return folder


def test_sweep_on_a_full_disk_fails_in_one_line_and_leaves_no_file(full_disk):
    before = sorted(p.name for p in full_disk.iterdir() if p.name == "filler")
    out = full_disk / "run.json"
    result = invoke("sweep", *QUICK, "--out", str(out))
    assert_one_error_line(result, f"{out}: cannot write the archive: No space left on device")
    assert sorted(p.name for p in full_disk.iterdir()) == before  # no archive, no temp file


@pytest.mark.parametrize(("source", "reason"), [
    ("import os\nraise RuntimeError('needs a GPU driver')\n",
     "raised RuntimeError: needs a GPU driver"),
    ("def op(q, k\n    return q, k\n", "raised SyntaxError: "),
], ids=["raises-at-import", "syntax-error"])
def test_a_route_module_that_fails_to_import_fails_in_one_line_naming_its_file(
        tmp_path, monkeypatch, source, reason):
    module = f"user_route_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run.json"
    result = invoke("sweep", *QUICK, "--route", "split", "--route", f"{module}:op",
                    "--out", str(out))
    assert_one_error_line(result, f"route '{module}:op' cannot be loaded: importing "
                                  f"{tmp_path / module}.py {reason}")
    assert not out.exists()


@pytest.mark.parametrize("command", ["report", "audit"])
@pytest.mark.parametrize(("dotted", "reason"), [
    ("environment.torch", "'environment.torch' is missing"),
    ("environment.code", "'environment.code' is missing"),
    ("environment.code.commit", "'environment.code.commit' is missing"),
    ("protocol.resolved.name", "'protocol.resolved.name' is missing"),
    ("protocol.resolved.timing", "'protocol.resolved.timing' is missing"),
    ("protocol.resolved.timing.drop_threshold",
     "'protocol.resolved.timing.drop_threshold' is missing"),
    ("protocol.resolved.bands", "'protocol.resolved.bands' is missing"),
    ("settings.schedule", "'settings.schedule' is missing"),
])
def test_an_archive_missing_a_header_key_fails_in_one_line(
        smoke_archive, tmp_path, command, dotted, reason):
    edited = json.loads(json.dumps(smoke_archive))
    *parents, key = dotted.split(".")
    table = edited
    for parent in parents:
        table = table[parent]
    del table[key]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(edited))
    assert_one_error_line(invoke(command, str(path)), f"{path}: malformed archive: {reason}")


def test_an_archive_with_a_header_value_of_the_wrong_type_fails_in_one_line(
        smoke_archive, tmp_path):
    edited = json.loads(json.dumps(smoke_archive))
    edited["environment"]["code"] = "abc123"
    path = tmp_path / "run.json"
    path.write_text(json.dumps(edited))
    assert_one_error_line(invoke("report", str(path)),
                          "malformed archive: 'environment.code' must be an object, got str")


@pytest.mark.parametrize(("command", "code"), [("report", 1), ("audit", 1), ("crossover", 1),
                                               ("export --csv", 1), ("gate", 2)])
@pytest.mark.parametrize(("part", "value", "reason"), [
    ("protocol.resolved.routes.0", None, "'protocol.resolved.routes[0]' must be a string, "
     "got NoneType"),
    ("environment.kernels_sha256", -1, "'environment.kernels_sha256' must be an object, got int"),
    ("passes.0.code", "abc", "'passes[0].code' must be an object, got str"),
    ("passes.0.limits.copy.bytes", None, "'passes[0].limits.copy.bytes' must be a number, "
     "got NoneType"),
    ("passes.0.cases.0.verification.split", None,
     "'passes[0].cases[0].verification.split' must be an object, got NoneType"),
    ("passes.0.cases.0.verification.split.ok", "yes",
     "'passes[0].cases[0].verification.split.ok' must be true or false, got str"),
    ("passes.0.cases.0.comparisons.0.arms.0.route", ..., "'passes[0].cases[0].comparisons[0]."
     "arms[0].route' is missing"),
])
def test_an_archive_edited_and_resealed_into_a_bad_shape_fails_in_one_line(
        smoke_archive, tmp_path, command, code, part, value, reason):
    edited = json.loads(json.dumps(smoke_archive))
    *parents, key = [int(k) if k.isdigit() else k for k in part.split(".")]
    table = edited
    for parent in parents:
        table = table[parent]
    if value is ...:
        del table[key]
    else:
        table[key] = value
    path = tmp_path / "run.json"
    path.write_text(json.dumps(reseal(edited)))
    result = invoke(*command.split(), str(path))
    assert result.exit_code == code and "Traceback" not in result.output, result.output
    assert result.stderr.strip().splitlines() == [f"error: {path}: malformed archive: {reason}"]


def test_python_m_qkbench_is_the_qkbench_command():
    import subprocess
    import sys

    for module in ("qkbench", "qkbench.cli"):
        done = subprocess.run([sys.executable, "-m", module, "report", "/nonexistent.json"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, (module, done.stdout, done.stderr)
        assert "/nonexistent.json" in done.stderr



@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_gate_with_both_output_streams_refused_exits_2_never_1(smoke_sweep):
    # `qkbench gate RUN 2>&1 | head` once head has gone: the error cannot be said either.
    import sys

    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "qkbench", "gate", str(smoke_sweep[0])],
                              stdout=full, stderr=full, timeout=120)
    assert done.returncode == 2


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_sweep_whose_standard_error_is_refused_runs_to_the_end(tmp_path):
    # Its progress lines have no reader (a log pipe gone): the run is not ended by that.
    import sys

    out = tmp_path / "run.json"
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "qkbench", "sweep", "--protocol", "smoke",
                               "--device", "cpu", "--tokens", "1", "--samples", "5",
                               "--warmup", "1", "--isolation", "inprocess", "--out", str(out)],
                              stdout=subprocess.PIPE, stderr=full, text=True, timeout=600)
    assert done.returncode == 0, done.stdout
    assert archives.read(out)["status"] == "complete"
    assert "split -> fused: dropped" in done.stdout


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize(("command", "code"), [
    ("report {}", 1), ("export --csv {}", 1), ("gate {}", 2), ("audit {}", 1),
    ("crossover {}", 1), ("env --device cpu", 1), ("--help", 1), ("--version", 1)])
def test_output_refused_by_a_full_disk_is_one_line_and_gate_never_reads_it_as_a_regression(
        smoke_sweep, command, code):
    import sys

    path, _ = smoke_sweep
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "qkbench",
                               *command.format(path).split()],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == code, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: standard output: No space left on device; the output is incomplete")
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
