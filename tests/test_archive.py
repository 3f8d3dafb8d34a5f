"""Run archives end to end: the real CPU backend, a fresh worker process per pass.

One full smoke sweep (shared, see ``conftest.smoke_sweep``) is read by most tests; the
crash and resume tests run their own two- or three-pass sweeps with fewer samples.
"""

import copy
import csv
import errno
import gzip
import hashlib
import io
import json
import os
import re
import signal
import sys
from itertools import permutations
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import qkbench
from qkbench import archive as archives
from qkbench import export, report, runner, summary
from qkbench.audit import audit, read_checked
from qkbench.cli import app
from qkbench.errors import ArchiveError
from qkbench.protocol import load, parse, shipped
from qkbench.schedule import ARMS

from conftest import interpreter_only, pythonpath_with
from helpers import primary_and_replacements, reseal
from synthetic import SyntheticBackend, synthetic_sweep

CPU = torch.device("cpu")
FIXTURES = Path(__file__).parent / "fixtures"
KERNELS = Path(__file__).parent.parent / "kernels"


def cheap(routes: list[str] | None = None):
    """The smoke protocol with fewer samples, at one of its cells (the full smoke sweep has
    both): the whole machinery, quickly. Its drop rule is loose (the interpreter's clock
    disagrees with itself by tens of percent), yet a loaded machine can still drop a pass:
    tests here allow its replacement."""
    return load("smoke").with_overrides(routes=routes, tokens=[1], samples=3, warmup=0,
                                        drop_threshold=0.99)


def write_json(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


# -- the full smoke sweep ------------------------------------------------------------------


def test_full_smoke_sweep_completes_through_the_cli(smoke_sweep):
    path, result = smoke_sweep
    assert result.exit_code == 0, result.output
    assert f"archive: {path}" in result.stderr
    assert "split -> fused" in result.stdout


def test_smoke_archive_audits_clean(smoke_archive):
    assert audit(smoke_archive) == []


def test_smoke_archive_is_complete_with_every_pass_ok(smoke_archive):
    primary, replacements = primary_and_replacements(smoke_archive)
    passes = smoke_archive["passes"]
    assert smoke_archive["status"] == "complete"
    assert len(primary) == 6
    assert all(p["status"] == "ok" for p in passes)
    assert smoke_archive["summary"]["passes"] == {"ok": len(passes), "failed": 0,
                                                  "replacements": len(replacements)}


def test_every_comparison_in_the_archive_has_three_arms_in_its_pass_order(smoke_archive):
    for p in smoke_archive["passes"]:
        for case in p["cases"]:
            (comp,) = case["comparisons"]
            assert comp["status"] == "ok"
            assert [a["label"] for a in comp["arms"]] == p["order"]
            assert sorted(a["label"] for a in comp["arms"]) == sorted(ARMS)


def test_smoke_passes_cover_all_six_arm_orders(smoke_archive):
    assert {tuple(p["order"]) for p in smoke_archive["passes"]} == set(permutations(ARMS))


def test_each_pass_ran_in_its_own_process(smoke_archive):
    pids = [p["pid"] for p in smoke_archive["passes"]]
    assert len(set(pids)) == len(pids) >= 6
    assert os.getpid() not in pids


def test_archive_keeps_every_raw_sample_and_warmup(smoke_archive):
    timing = smoke_archive["protocol"]["resolved"]["timing"]
    for p in smoke_archive["passes"]:
        for case in p["cases"]:
            for arm in case["comparisons"][0]["arms"]:
                assert len(arm["samples"]) == timing["samples"]
                assert len(arm["warmup"]) == timing["warmup"]
                assert all(s > 0 for s in arm["samples"] + arm["warmup"])


def test_archive_carries_its_schema_version_and_kind(smoke_archive):
    assert smoke_archive["schema_version"] == archives.SCHEMA_VERSION
    assert smoke_archive["kind"] == archives.KIND


def test_archive_protocol_hash_matches_its_text(smoke_archive):
    recorded = smoke_archive["protocol"]
    assert recorded["text"] == shipped()["smoke"]
    assert recorded["sha256"] == hashlib.sha256(recorded["text"].encode()).hexdigest()


def test_archive_records_the_resolved_settings(smoke_archive):
    assert smoke_archive["protocol"]["resolved"] == json.loads(
        json.dumps(load("smoke").resolved()))
    assert smoke_archive["settings"] == {
        "device": "cpu", "baseline": "split", "candidates": ["fused"],
        "schedule": "interleaved", "isolation": "process", "passes": 6}


def test_archive_records_the_environment(smoke_archive):
    env = smoke_archive["environment"]
    assert (env["python"], env["torch"], env["qkbench"]) == (
        sys.version.split()[0], torch.__version__, qkbench.__version__)
    assert env["device"] == "cpu" and env["triton_interpret"] is True
    assert env["triton"] and env["platform"]
    assert set(env["code"]) == {"commit", "dirty", "dirty_paths", "dirty_count", "source"}


def test_archive_names_the_exact_kernel_sources(smoke_archive):
    on_disk = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
               for p in KERNELS.glob("*.py")}
    assert smoke_archive["environment"]["kernels_sha256"] == on_disk


def test_every_pass_verified_fused_bit_exact_with_split(smoke_archive):
    for p in smoke_archive["passes"]:
        for case in p["cases"]:
            checks = case["verification"]
            assert checks["split"]["ok"] and checks["fused"]["ok"]
            assert (checks["fused"]["exact_with"], checks["fused"]["differing_share"]) == (
                "split", 0.0)


# -- audit -----------------------------------------------------------------------------------


def first_arm(run: dict) -> dict:
    return run["passes"][0]["cases"][0]["comparisons"][0]["arms"][0]


def test_every_comparison_times_the_launch_floor_beside_its_arms(smoke_archive):
    timing = smoke_archive["protocol"]["resolved"]["timing"]
    for p in smoke_archive["passes"]:
        for case in p["cases"]:
            for comp in case["comparisons"]:
                floor = comp["floor"]
                assert (floor["programs"], floor["launches_per_replay"]) == (
                    1, timing["inner_reps"])
                assert len(floor["samples"]) == timing["samples"]
                assert all(s > 0 for s in floor["samples"])


def test_audit_fails_when_a_launch_floor_sample_no_longer_gives_the_stored_summary(
        smoke_archive):
    edited = copy.deepcopy(smoke_archive)
    for p in edited["passes"]:
        floor = p["cases"][0]["comparisons"][0]["floor"]
        floor["samples"] = [s * 10 for s in floor["samples"]]
    problems = audit(reseal(edited))
    assert problems and all(p.startswith("summary.") for p in problems), problems
    assert any("floor" in p for p in problems), problems


def test_audit_fails_when_one_raw_sample_is_edited(smoke_archive):
    edited = copy.deepcopy(smoke_archive)
    first_arm(edited)["samples"][0] *= 1.5
    assert "pass 0: raw content does not match its digest" in audit(edited)


def test_audit_fails_when_raw_samples_no_longer_give_the_stored_summary(smoke_archive):
    # A forger who also refreshes the digests is caught by the recomputed summary (and, the
    # pass now being dropped, by the slot it leaves open in a run that says complete).
    edited = copy.deepcopy(smoke_archive)
    arm = first_arm(edited)
    arm["samples"] = [s * 10 for s in arm["samples"]]
    problems = audit(reseal(edited))
    assert any(p.startswith("summary.") for p in problems)
    assert all(p.startswith(("summary.", "status: complete, but slot 0 ")) for p in problems)


def test_audit_fails_when_the_protocol_text_is_edited(smoke_archive):
    edited = copy.deepcopy(smoke_archive)
    edited["protocol"]["text"] += "\n# edited"
    assert audit(reseal(edited)) == ["protocol: text does not match its sha256"]


def test_audit_fails_when_the_recorded_schedule_is_edited(smoke_archive):
    edited = copy.deepcopy(smoke_archive)
    edited["settings"]["schedule"] = "blocked"
    assert audit(reseal(edited)) == [
        "settings.schedule: 'blocked' disagrees with the protocol's 'interleaved'"]


def test_audit_fails_when_the_resolved_settings_are_edited(smoke_archive):
    edited = copy.deepcopy(smoke_archive)
    edited["protocol"]["resolved"]["geometries"][0]["head_dim"] = 128
    assert audit(reseal(edited)) == ["protocol: the resolved settings do not follow from its text "
                             "and the recorded routes and timing"]


def test_audit_reports_a_pass_whose_structure_was_broken(smoke_archive):
    edited = copy.deepcopy(smoke_archive)
    del edited["passes"][0]["cases"][0]["comparisons"][0]["arms"]
    problems = audit(reseal(edited))
    assert len(problems) == 1
    assert problems[0].startswith("summary: cannot be recomputed from the passes (KeyError")


def test_reading_an_archive_with_a_malformed_pass_names_it(smoke_archive, tmp_path):
    edited = copy.deepcopy(smoke_archive)
    edited["passes"][2] = ["not", "a", "pass"]
    with pytest.raises(ArchiveError, match=r"malformed archive: every entry of 'passes'"):
        archives.read(write_json(tmp_path / "run.json", edited))


def test_reading_an_archive_whose_gpu_entry_is_not_an_object_names_it(smoke_archive, tmp_path):
    edited = copy.deepcopy(smoke_archive)
    edited["environment"]["gpu"] = "H200"
    with pytest.raises(ArchiveError, match=r"'environment.gpu' must be an object or null, got str"):
        archives.read(write_json(tmp_path / "run.json", edited))


def test_reading_an_archive_whose_creation_time_is_not_text_names_it(smoke_archive, tmp_path):
    edited = copy.deepcopy(smoke_archive)
    edited["created"] = 1733425200
    with pytest.raises(ArchiveError, match=r"'created' is missing or not str"):
        archives.read(write_json(tmp_path / "run.json", edited))


def test_reading_an_archive_whose_l2_size_is_not_an_integer_names_it(smoke_archive, tmp_path):
    edited = copy.deepcopy(smoke_archive)
    edited["environment"]["gpu"] = {"name": "NVIDIA H200", "l2_bytes": "60 MiB"}
    with pytest.raises(ArchiveError, match=r"'environment.gpu.l2_bytes' must be an integer "
                                           r"or null, got str"):
        archives.read(write_json(tmp_path / "run.json", edited))


def test_loading_a_resealed_archive_whose_pass_cannot_be_summarised_names_it(smoke_archive,
                                                                             tmp_path):
    edited = copy.deepcopy(smoke_archive)
    del edited["passes"][0]["cases"][0]["comparisons"][0]["baseline"]
    path = write_json(tmp_path / "run.json", reseal(edited))
    with pytest.raises(ArchiveError, match=rf"^{path}: malformed archive: its summary cannot be "
                                           r"recomputed from its passes \(KeyError"):
        read_checked(path)


@pytest.mark.parametrize("sample", [float("nan"), float("inf"), 0.0, -1e-6])
def test_a_resealed_archive_with_a_sample_no_clock_gives_is_refused_naming_it(
        smoke_archive, tmp_path, sample):
    # The summary of a NaN would read "+nan%": no clock gives one, so it is an edit.
    edited = copy.deepcopy(smoke_archive)
    case = edited["passes"][0]["cases"][0]
    case["comparisons"][0]["arms"][0]["samples"][1] = sample
    path = write_json(tmp_path / "run.json", reseal(edited))
    label = case["comparisons"][0]["arms"][0]["label"]
    with pytest.raises(ArchiveError, match=re.escape(
            f"{path}: malformed archive: its summary cannot be recomputed from its passes "
            f"(ValueError: pass 0 {case['key']} arm {label} holds a sample that is not a "
            f"positive finite time ({sample!r}))")):
        read_checked(path)


def test_report_refuses_a_resealed_archive_whose_protocol_text_was_edited(smoke_archive,
                                                                          tmp_path):
    edited = copy.deepcopy(smoke_archive)
    edited["protocol"]["text"] += "\n# an edit\n"
    path = write_json(tmp_path / "run.json", reseal(edited))
    with pytest.raises(ArchiveError, match=re.escape(
            f"{path}: protocol: text does not match its sha256 (qkbench audit")):
        read_checked(path)


def test_report_refuses_a_resealed_archive_with_a_pass_given_twice(smoke_archive, tmp_path):
    edited = copy.deepcopy(smoke_archive)
    edited["passes"].append(copy.deepcopy(edited["passes"][0]))
    path = write_json(tmp_path / "run.json", reseal(edited))
    assert audit(archives.read(path))
    result = CliRunner().invoke(app, ["report", str(path)])
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {path}: ") and "qkbench audit" in line


def test_report_refuses_an_archive_whose_pass_was_edited_in_one_line(smoke_archive, tmp_path):
    edited = copy.deepcopy(smoke_archive)
    edited["passes"][1]["pid"] += 1
    path = write_json(tmp_path / "run.json", edited)
    result = CliRunner().invoke(app, ["report", str(path)])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {path}: pass 1: raw content does not match its digest (qkbench audit {path} "
        "lists every problem)"]


def test_audit_cli_passes_a_clean_archive(smoke_sweep):
    path, _ = smoke_sweep
    result = CliRunner().invoke(app, ["audit", str(path)])
    assert result.exit_code == 0
    assert result.stdout.startswith("audit ok:")


def test_audit_cli_exits_1_on_an_edited_archive(smoke_archive, tmp_path):
    edited = copy.deepcopy(smoke_archive)
    first_arm(edited)["samples"][0] *= 1.5
    path = write_json(tmp_path / "edited.json", edited)
    result = CliRunner().invoke(app, ["audit", str(path)])
    assert result.exit_code == 1
    assert "mismatch: pass 0: raw content does not match its digest" in result.stderr
    # Whether the edit also moves a recomputed median depends on the run's own samples.
    assert re.search(rf"audit failed: \d+ problem\(s\) in {re.escape(str(path))}$",
                     result.stderr.strip())


# -- never overwritten, refused resumes ------------------------------------------------------


def test_existing_archive_is_never_overwritten(tmp_path):
    path = tmp_path / "run.json"
    path.write_text("precious")
    with pytest.raises(ArchiveError, match="never overwritten"):
        runner.sweep(cheap(), CPU, path)
    assert path.read_text() == "precious"


def test_resume_refuses_other_settings_naming_each_with_both_values(smoke_sweep):
    path, _ = smoke_sweep
    before = path.read_bytes()
    with pytest.raises(ArchiveError, match=re.escape(
            "cannot resume: its settings differ from these overrides (timing.passes is 6 "
            "there, 12 here; timing.samples is 5 there, 3 here); leave out --protocol and "
            "the overrides to go on as it recorded")):
        runner.sweep(load("smoke").with_overrides(passes=12, samples=3), CPU, path, resume=True)
    assert path.read_bytes() == before


def test_resume_refuses_another_protocol_text(smoke_sweep):
    path, _ = smoke_sweep
    before = path.read_bytes()
    edited = parse(shipped()["smoke"] + "\n# edited\n", "smoke-edited.toml")
    with pytest.raises(ArchiveError, match="cannot resume: it was run with another protocol"):
        runner.sweep(edited, CPU, path, resume=True)
    assert path.read_bytes() == before


# -- a pass process killed mid-run -----------------------------------------------------------


@pytest.fixture(scope="module")
def crashed_run(tmp_path_factory) -> dict:
    """Six passes with a user route whose worker kills itself (SIGKILL) in pass 1."""
    tmp = tmp_path_factory.mktemp("crash")
    countdown = tmp / "countdown"
    countdown.write_text("1")  # pass 0 runs, pass 1 is killed, the others run
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", pythonpath_with(FIXTURES))
        mp.setenv("QKBENCH_TEST_CRASH_COUNTDOWN", str(countdown))
        mp.syspath_prepend(str(FIXTURES))  # the manager loads the route before any pass
        protocol = cheap(routes=["split", "crashing_route:qk_norm_rope"])
        runner.sweep(protocol, CPU, tmp / "run.json")
    return archives.read(tmp / "run.json")


def test_killed_pass_is_recorded_as_failed(crashed_run):
    killed = crashed_run["passes"][1]
    assert (killed["index"], killed["status"]) == (1, "failed")
    assert killed["returncode"] == -signal.SIGKILL
    assert "cases" not in killed


def test_a_killed_pass_is_replaced_with_its_order_and_the_run_completes(crashed_run):
    primary, replacements = primary_and_replacements(crashed_run)
    assert crashed_run["status"] == "complete"
    assert [p["status"] for p in primary] == ["ok", "failed", "ok", "ok", "ok", "ok"]
    assert all(p["status"] == "ok" for p in replacements)
    again = [p for p in replacements if p["replaces"] == 1]
    assert again and again[0]["order"] == primary[1]["order"]
    assert crashed_run["summary"]["passes"] == {
        "ok": len(crashed_run["passes"]) - 1, "failed": 1, "replacements": len(replacements)}
    for cell in crashed_run["summary"]["comparisons"][0]["cases"]:
        assert all(s["status"] == "kept" for s in cell["slots"])
        assert cell["slots"][1]["used"] in [p["index"] for p in again]
        assert cell["slots"][1]["failed"] == 1


def test_archive_with_a_killed_pass_audits_clean(crashed_run):
    assert audit(crashed_run) == []


def test_report_names_the_killed_pass(crashed_run):
    assert any(line.startswith("pass 2 (archive index 1) failed (exit -9)")
               for line in report.failures(crashed_run))


class FailingBackend(SyntheticBackend):
    """A synthetic clock that raises while timing pass 1, as a dying driver call would."""

    def run(self, arms, sequence, sync_after):
        if self.pass_index == 1:
            raise RuntimeError("planted failure in pass 1")
        return super().run(arms, sequence, sync_after)


@pytest.fixture(scope="module")
def raised_in_process(tmp_path_factory) -> dict:
    """Six in-process passes whose backend raises in pass 1."""
    protocol = cheap().with_overrides(isolation="inprocess")
    out = tmp_path_factory.mktemp("raised") / "run.json"
    synthetic_sweep(protocol, out, FailingBackend())
    return archives.read(out)


@interpreter_only
def test_an_exception_in_an_in_process_pass_fails_that_pass_only(raised_in_process):
    assert raised_in_process["status"] == "complete"
    assert [(p["index"], p["status"]) for p in raised_in_process["passes"]] == [
        (0, "ok"), (1, "failed"), *((i, "ok") for i in range(2, 7))]
    assert any(line.startswith("pass 2 (archive index 1) failed")
               and "planted failure in pass 1" in line
               for line in report.failures(raised_in_process))


# -- an interrupted run, resumed -------------------------------------------------------------


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> Path:
    """A sweep interrupted (Ctrl-C) right after its first pass was archived."""
    path = tmp_path_factory.mktemp("interrupted") / "run.json"

    def interrupt(index: int, status: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.sweep(cheap(), CPU, path, events=runner.Events(pass_finished=interrupt))
    return path


@pytest.fixture
def before_launch_state(interrupted, tmp_path) -> Path:
    """The interrupted run as made before timing.launch_state: its record lacks it."""
    older = archives.read(interrupted)
    del older["protocol"]["resolved"]["timing"]["launch_state"]
    return write_json(tmp_path / "older.json", reseal(older))


def test_resume_continues_an_archive_made_before_the_launch_state_setting(before_launch_state):
    """It ran as the setting's default does."""
    run = runner.sweep(cheap(), CPU, before_launch_state, resume=True)
    assert run["status"] == "complete" and "launch_state" not in run["protocol"]["resolved"][
        "timing"]
    assert audit(run) == []


def test_resume_refuses_an_older_archive_asked_to_go_on_in_another_launch_state(
        before_launch_state):
    with pytest.raises(ArchiveError, match=r"timing\.launch_state is None there, 'pdl' here"):
        runner.sweep(cheap().with_overrides(launch_state="pdl"), CPU, before_launch_state,
                     resume=True)


def test_interrupted_run_keeps_the_passes_it_finished(interrupted):
    run = archives.read(interrupted)
    assert run["status"] == "running"
    assert [(p["index"], p["status"]) for p in run["passes"]] == [(0, "ok")]
    assert audit(run) == []


def test_resume_finishes_an_interrupted_run_without_repeating_finished_passes(
        interrupted, tmp_path):
    path = tmp_path / "run.json"
    path.write_bytes(interrupted.read_bytes())
    before = archives.read(path)
    started = []
    runner.sweep(cheap(), CPU, path, resume=True,
                 events=runner.Events(pass_started=lambda index, total: started.append(index)))
    after = archives.read(path)
    assert started[:5] == [1, 2, 3, 4, 5]
    # Anything after the primary passes replaces a pass the real clock dropped.
    _, replacements = primary_and_replacements(after)
    assert started[5:] == [p["index"] for p in replacements]
    assert after["status"] == "complete"
    assert after["passes"][0] == before["passes"][0]  # same pid, start time, samples
    assert after["passes"][1]["index"] == 1
    assert after["passes"][1]["pid"] != after["passes"][0]["pid"]
    assert audit(after) == []


# -- a write that fails ----------------------------------------------------------------------


def test_a_full_disk_mid_run_keeps_the_archive_as_last_written(tmp_path):
    """ENOSPC for real while the first pass is archived: the archive's temporary name is
    made a link to ``/dev/full`` (every write there fails with ENOSPC) once the header is
    on disk. The run stops with an ArchiveError naming the file; the file still holds the
    header, whole, and no temporary file is left beside it."""
    path = tmp_path / "run.json"
    tmp = tmp_path / f".run.json.{os.getpid()}.tmp"

    def fill_the_disk(index: int, total: int) -> None:
        tmp.symlink_to("/dev/full")

    with pytest.raises(ArchiveError, match=rf"^{re.escape(str(path))}: cannot write the "
                                           r"archive: No space left on device$"):
        runner.sweep(cheap().with_overrides(isolation="inprocess"), CPU, path,
                     events=runner.Events(pass_started=fill_the_disk))
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]
    kept = archives.read(path)
    assert (kept["status"], kept["passes"]) == ("running", [])


def test_a_case_that_was_not_measured_is_reported_as_invalid(smoke_archive):
    edited = copy.deepcopy(smoke_archive)
    case = edited["passes"][3]["cases"][0]
    edited["passes"][3]["cases"][0] = {"key": case["key"], "case": case["case"],
                                       "error": "CUDA out of memory"}
    assert report.invalid(edited) == [
        "case tiny-4x2/T1 was not measured: CUDA out of memory "
        f"(in 1 of {len(edited['passes'])} passes)"]
    assert report.invalid(smoke_archive) == []


def test_a_slot_whose_first_attempt_ran_out_of_memory_is_filled_by_its_replacement(
        smoke_archive):
    edited = copy.deepcopy(smoke_archive)
    first = edited["passes"][0]
    replacement = {**copy.deepcopy(first), "index": len(edited["passes"]),
                   "replaces": first["index"]}
    case = first["cases"][0]
    first["cases"][0] = {"key": case["key"], "case": case["case"], "error": "CUDA out of memory"}
    edited["passes"].append(replacement)

    def cell(archive: dict) -> dict:
        return next(c for c in summary.summarize(archive)["comparisons"][0]["cases"]
                    if c["key"] == case["key"])

    slot = next(s for s in cell(edited)["slots"] if s["slot"] == first["index"])
    assert (slot["used"], slot["failed"]) == (replacement["index"], 1)
    assert cell(edited)["time_us"] == cell(smoke_archive)["time_us"]
    # The bytes too (the error record holds none): the same rate on the same bytes.
    assert all(cell(edited)["bandwidth"][role]["route_gbps"]
               == cell(smoke_archive)["bandwidth"][role]["route_gbps"]
               for role in ("baseline", "candidate"))


# -- archives people can store: gzip, and the samples as CSV ---------------------------------


def test_a_gz_archive_round_trips_to_the_same_run(smoke_archive, tmp_path):
    path = tmp_path / "run.json.gz"
    archives.write(path, smoke_archive)
    assert path.read_bytes()[:2] == archives.GZIP_MAGIC
    assert archives.read(path) == smoke_archive


def test_a_gz_archive_is_smaller_than_its_json(smoke_archive, tmp_path):
    archives.write(tmp_path / "run.json", smoke_archive)
    archives.write(tmp_path / "run.json.gz", smoke_archive)
    assert (tmp_path / "run.json.gz").stat().st_size * 4 < (tmp_path / "run.json").stat().st_size


def test_the_same_run_always_gives_the_same_gz_bytes(smoke_archive, tmp_path):
    archives.write(tmp_path / "a.json.gz", smoke_archive)
    archives.write(tmp_path / "b.json.gz", smoke_archive)
    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()


def test_a_json_named_archive_is_written_as_plain_json(smoke_archive, tmp_path):
    archives.write(tmp_path / "run.json", smoke_archive)
    assert json.loads((tmp_path / "run.json").read_text()) == smoke_archive


def test_reading_detects_gzip_by_its_magic_bytes_not_its_name(smoke_archive, tmp_path):
    misnamed = tmp_path / "run.json"
    misnamed.write_bytes(archives.encode(smoke_archive, compressed=True))
    assert archives.read(misnamed) == smoke_archive


def test_a_truncated_gz_archive_fails_in_one_clear_line(smoke_archive, tmp_path):
    path = tmp_path / "run.json.gz"
    path.write_bytes(archives.encode(smoke_archive, compressed=True)[:200])
    result = CliRunner().invoke(app, ["report", str(path)])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {path}: cannot be read as JSON")


@pytest.mark.parametrize("name", ["run.json.gz", "RUN.JSON.GZ"])
def test_an_archive_named_gz_in_any_case_is_written_compressed(smoke_archive, tmp_path, name):
    # sweep --out takes the suffix in any case as an archive's name.
    path = tmp_path / name
    archives.write(path, smoke_archive)
    assert path.read_bytes()[:2] == archives.GZIP_MAGIC
    assert archives.read(path) == json.loads(json.dumps(smoke_archive))


def test_audit_cli_passes_a_clean_gz_archive(smoke_archive, tmp_path):
    path = tmp_path / "run.json.gz"
    archives.write(path, smoke_archive)
    result = CliRunner().invoke(app, ["audit", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("audit ok:")


def test_csv_export_has_a_header_and_one_row_per_timed_sample(smoke_archive, tmp_path):
    path = tmp_path / "run.json.gz"
    archives.write(path, smoke_archive)
    out = tmp_path / "samples.csv"
    result = CliRunner().invoke(app, ["export", str(path), "--csv", "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = out.read_text().splitlines()
    assert lines[0] == "pass,case,comparison,arm,route,sample,seconds"
    timing = smoke_archive["protocol"]["resolved"]["timing"]
    # Each pass's cases (2; a replacement pass only those it replaces) x 1 comparison
    # x 3 arms x the protocol's samples
    cases = sum(len(p["cases"]) for p in smoke_archive["passes"])
    assert cases >= 6 * 2
    assert len(lines) - 1 == export.sample_count(smoke_archive) == cases * 3 * timing["samples"]
    assert f"wrote {len(lines) - 1} samples to {out}" in result.stderr


def test_csv_rows_carry_each_raw_sample_exactly(smoke_archive):
    rows = list(csv.DictReader(io.StringIO(_csv(smoke_archive))))
    arm = first_arm(smoke_archive)
    first = [r for r in rows if r["pass"] == "0" and r["arm"] == arm["label"]
             and r["case"] == smoke_archive["passes"][0]["cases"][0]["key"]]
    assert [float(r["seconds"]) for r in first] == arm["samples"]
    assert [int(r["sample"]) for r in first] == list(range(len(arm["samples"])))
    assert {(r["comparison"], r["route"]) for r in first} == {("split->fused", arm["route"])}


def _csv(run: dict) -> str:
    buffer = io.StringIO()
    export.write_csv(run, buffer)
    return buffer.getvalue()


def test_export_to_stdout_without_out(smoke_sweep, smoke_archive):
    path, _ = smoke_sweep
    result = CliRunner().invoke(app, ["export", str(path), "--csv"])
    assert result.exit_code == 0
    assert result.stdout == _csv(smoke_archive)


def test_export_refuses_to_overwrite_a_file(smoke_sweep, tmp_path):
    path, _ = smoke_sweep
    out = tmp_path / "samples.csv"
    out.write_text("precious")
    result = CliRunner().invoke(app, ["export", str(path), "--csv", "--out", str(out)])
    assert result.exit_code == 1 and "exists" in result.stderr
    assert out.read_text() == "precious"


def test_an_export_to_a_gz_name_is_gzip_compressed(smoke_sweep, smoke_archive, tmp_path):
    path, _ = smoke_sweep
    out = tmp_path / "samples.csv.gz"
    result = CliRunner().invoke(app, ["export", str(path), "--csv", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert gzip.decompress(out.read_bytes()).decode() == _csv(smoke_archive)


def test_an_export_whose_write_fails_leaves_no_file_and_can_be_run_again(
        smoke_sweep, smoke_archive, tmp_path, monkeypatch):
    path, _ = smoke_sweep
    out = tmp_path / "samples.csv"
    rows = _csv(smoke_archive)

    def disk_full_midway(run, f):
        f.write(rows[:100])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(export, "write_csv", disk_full_midway)
    result = CliRunner().invoke(app, ["export", str(path), "--csv", "--out", str(out)])
    assert result.exit_code == 1
    assert result.stderr.strip() == f"error: {out}: cannot be written (No space left on device)"
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    result = CliRunner().invoke(app, ["export", str(path), "--csv", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text() == rows


@pytest.mark.parametrize("where", [".", "folder"])
def test_an_export_to_a_folder_is_refused_in_one_line(smoke_sweep, tmp_path, where):
    path, _ = smoke_sweep
    target = "." if where == "." else str(tmp_path)
    result = CliRunner().invoke(app, ["export", str(path), "--csv", "--out", target])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip() == f"error: --out {target}: names a folder, not a file"
