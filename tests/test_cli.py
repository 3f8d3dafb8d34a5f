"""The command line: exit codes and the lines a user reads (one clear line per error)."""

import json

import pytest
import torch
from typer.testing import CliRunner

from qkbench.cli import app

from conftest import interpreter_only

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


@pytest.mark.parametrize(("route", "reason"), [
    ("nosuch", "unknown route 'nosuch'"),
    ("no_such_module_here:op", "route 'no_such_module_here:op' cannot be loaded"),
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
    if kind == "json-list":
        path.write_text("[1, 2, 3]")
        return path, "not a qkbench run archive"
    if kind == "other-kind":
        path.write_text(json.dumps({"kind": "pyperf.bench", "schema_version": 1}))
        return path, "not a qkbench run archive"
    if kind == "unknown-schema":
        path.write_text(json.dumps({"kind": "qkbench.run", "schema_version": 99}))
        return path, "schema_version 99 is not supported (this qkbench reads 1)"
    if kind == "header-only":
        path.write_text(json.dumps({"kind": "qkbench.run", "schema_version": 1}))
        return path, "malformed archive: 'status' is missing or not str"
    raise AssertionError(kind)


@pytest.mark.parametrize("command", ["report", "audit"])
@pytest.mark.parametrize("kind", ["missing", "text", "binary", "folder", "json-list",
                                  "other-kind", "unknown-schema", "header-only"])
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


def test_report_json_prints_the_archived_summary(smoke_sweep, smoke_archive):
    path, _ = smoke_sweep
    result = invoke("report", str(path), "--format", "json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == smoke_archive["summary"]


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


def test_resume_without_out_fails_in_one_line():
    assert_one_error_line(invoke("sweep", "--device", "cpu", "--resume"),
                          "--resume needs --out")
