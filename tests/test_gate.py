"""``qkbench gate`` across archives, on one archive (regressions, ``--expect``), its reports
and its exit codes.

The archives are real sweeps of a tiny protocol, run in process with the synthetic clock
(``tests/synthetic.py``): every route is verified for real, only the times are a model
whose truth is known -- the candidate's true effect, a machine-wide slowdown, a null arm
that disagrees in one pass, an arm order that always disagrees.
"""

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qkbench import archive as archives
from qkbench import gate as rules
from qkbench.cli import app
from qkbench.errors import GateError
from qkbench.protocol import parse

from conftest import interpreter_only
from helpers import assert_usage_error, reseal
from synthetic import BASE_SECONDS, synthetic_sweep, tiny_protocol

BAND = '[[band]]\nname = "decode"\ntokens_max = 1'
# The gate reads comparisons by name, and these tests by the names a user gates on.
KERNELS = ("split", "fused")
PROTOCOL = tiny_protocol("gate", routes=KERNELS, samples=20, tables=BAND)
FUSED_GAIN = -0.5  # fused takes half split's time in every run below, unless said otherwise

# name -> (protocol text, synthetic clock)
RUNS = {
    "base": (PROTOCOL, {"effect": FUSED_GAIN}),
    "same-code": (PROTOCOL, {"effect": FUSED_GAIN, "seed": 1}),
    # The candidate route 10 % slower than in "base", relative to the same baseline route.
    "fused-10pct-slower": (PROTOCOL, {"effect": (1 + FUSED_GAIN) * 1.10 - 1, "seed": 1}),
    # Everything 5 % slower: a hotter card, another clock, another tenant.
    "machine-5pct-slower": (PROTOCOL, {"effect": FUSED_GAIN, "base": BASE_SECONDS * 1.05,
                                       "seed": 1}),
    # A 0.4 % change, measured by instruments 0.4 % wide (one pass's null arm) or not.
    "wide": (PROTOCOL, {"effect": FUSED_GAIN, "null_bias": {2: 0.004}}),
    "wide-0.4pct-slower": (PROTOCOL, {"effect": (1 + FUSED_GAIN) * 1.004 - 1, "seed": 1,
                                      "null_bias": {2: 0.004}}),
    "0.4pct-slower": (PROTOCOL, {"effect": (1 + FUSED_GAIN) * 1.004 - 1, "seed": 1}),
    "other-protocol": (tiny_protocol("gate", (1,), routes=KERNELS, samples=20, tables=BAND),
                       {"effect": FUSED_GAIN}),
    "fused-slower": (PROTOCOL, {"effect": 0.10}),
    "launch-state-held": (parse(PROTOCOL).with_overrides(launch_state="pdl"),
                          {"effect": FUSED_GAIN, "seed": 1}),
    # Run with options that change what a sample measures, or only how many there are.
    "cache-cold": (parse(PROTOCOL).with_overrides(cache="cold"),
                   {"effect": FUSED_GAIN, "seed": 1}),
    "threshold-2pct": (parse(PROTOCOL).with_overrides(drop_threshold=0.02),
                       {"effect": FUSED_GAIN, "seed": 1}),
    "more-samples": (parse(PROTOCOL).with_overrides(samples=30),
                     {"effect": FUSED_GAIN, "seed": 1}),
    # One arm order's null arm always disagrees: every cell is unstable.
    "unstable": (PROTOCOL, {"effect": FUSED_GAIN, "order_null_bias": {("B", "A", "A'"): 0.03}}),
    # The first pass's T = 1 disagrees, and so do its two replacements: that cell alone.
    "one-unstable": (PROTOCOL, {"effect": FUSED_GAIN,
                                "null_bias": {(0, 0): 0.03, (6, 0): 0.03, (7, 0): 0.03}}),
}

pytestmark = interpreter_only


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """name -> the path of that run's archive (swept once per module, .json.gz)."""
    folder = tmp_path_factory.mktemp("gate-runs")
    done = {}

    def make(name: str) -> str:
        if name not in done:
            text, clock = RUNS[name]
            path = folder / f"{name}.json.gz"
            synthetic_sweep(text, path, **clock)
            done[name] = str(path)
        return done[name]

    return make


def invoke(*args: str):
    return CliRunner().invoke(app, ["gate", *args])


def last_line(result) -> str:
    return result.stdout.strip().splitlines()[-1]


def across(archive, a: str, b: str, *args: str):
    return invoke("--baseline", archive(a), "--candidate", archive(b), *args)


# -- across archives -----------------------------------------------------------------------


def test_two_runs_of_the_same_code_pass(archive):
    result = across(archive, "base", "same-code")
    assert result.exit_code == 0, result.output
    assert last_line(result) == "gate: PASS, 0 of 2 cases regressed beyond the 2.0 % tolerance"
    rows = [line for line in result.stdout.splitlines() if "split -> fused" in line]
    assert len(rows) == 2 and all(" unresolved " in row for row in rows)


def test_a_planted_10pct_slowdown_of_the_candidate_fails_naming_every_case(archive):
    result = across(archive, "base", "fused-10pct-slower")
    assert result.exit_code == 1, result.output
    assert last_line(result) == (
        "gate: FAIL, 2 of 2 cases regressed beyond the 2.0 % tolerance (worst +10.0 % at "
        "tiny T=1): tiny T=1 +10.0 %, tiny T=3 +10.0 %")
    rows = [line for line in result.stdout.splitlines() if "split -> fused" in line]
    assert len(rows) == 2 and all("REGRESSED" in row and "slower" in row for row in rows)


@pytest.mark.parametrize(("a", "b", "code", "verdict"), [
    ("wide", "wide-0.4pct-slower", 0, "unresolved"),
    ("base", "0.4pct-slower", 1, "slower"),
], ids=["inside-the-widths-passes", "the-same-change-on-a-narrow-instrument-fails"])
def test_a_change_passes_only_inside_the_two_runs_widths(archive, a, b, code, verdict):
    # Tolerance 0: only the instruments' widths stand between a 0.4 % change and a failure.
    result = across(archive, a, b, "--tolerance", "0%")
    assert result.exit_code == code, result.output
    rows = [line for line in result.stdout.splitlines() if "split -> fused" in line]
    assert len(rows) == 2 and all(f" {verdict} " in row for row in rows)


def test_archives_of_different_protocols_are_exit_2_naming_the_mismatch(archive):
    line = assert_usage_error(across(archive, "base", "other-protocol"),
                              "the archives cannot be compared: protocol sha256: ",
                              "in --baseline", "in --candidate", "--allow-mismatch")
    assert "device" not in line and "routes" not in line


def test_archives_timed_in_different_launch_states_are_exit_2_naming_them(archive):
    assert_usage_error(across(archive, "base", "launch-state-held"),
                       "the archives cannot be compared: launch state: as-found in --baseline, "
                       "pdl in --candidate")


@pytest.mark.parametrize(("run", "named"), [
    ("cache-cold", "cache: hot in --baseline, cold in --candidate"),
    ("threshold-2pct", "drop_threshold: 0.01 in --baseline, 0.02 in --candidate")])
def test_archives_timed_with_other_measuring_settings_are_exit_2_naming_them(
        archive, run, named):
    # The same protocol text, run with an option that changes what is measured: a cold
    # cache's effect is not a hot one's, however the code changed.
    assert_usage_error(across(archive, "base", run), f"the archives cannot be compared: {named}")


def test_an_archive_from_before_a_measuring_setting_is_exit_2_naming_what_it_lacks(
        archive, tmp_path):
    run = archives.read(archive("base"))
    del run["protocol"]["resolved"]["timing"]["clock_threshold"]  # as schema 1 archives
    older = tmp_path / "older.json.gz"
    archives.write(older, reseal(run))
    assert_usage_error(invoke("--baseline", str(older), "--candidate", archive("same-code")),
                       "the archives cannot be compared: clock_threshold: None in --baseline, "
                       "0.02 in --candidate")


def test_a_schema_3_baseline_is_compared_saying_its_width_follows_another_rule(
        archive, tmp_path):
    run = archives.read(archive("base"))
    run["schema_version"] = 3
    older = tmp_path / "schema3.json.gz"
    archives.write(older, reseal(run))
    result = invoke("--baseline", str(older), "--candidate", archive("same-code"))
    assert result.exit_code == 0, result.output
    assert ("the runs' widths follow different rules: --baseline's is the worst kept |null|, "
            "--candidate's the worst max(A, A')/min(A, A') - 1 of every measured pass"
            in " ".join(result.output.split()))


def test_archives_that_differ_only_in_how_many_samples_they_took_are_compared(archive):
    result = across(archive, "base", "more-samples")
    assert result.exit_code == 0, result.output
    assert "cannot be compared" not in result.output


def test_a_run_compared_with_itself_is_exit_2(archive, tmp_path):
    assert_usage_error(across(archive, "base", "base"), "hold the same run's passes")
    # A copy taken while the run was going: its first passes only, its summary then.
    run = archives.read(archive("base"))
    run["passes"], run["status"] = run["passes"][:2], "running"
    early = tmp_path / "early.json.gz"
    archives.write(early, reseal(run))
    assert_usage_error(invoke("--baseline", str(early), "--candidate", archive("base")),
                       "hold the same run's passes: a run compared with itself shows no "
                       "change by construction")


def test_allow_mismatch_compares_anyway_and_says_so(archive):
    result = across(archive, "base", "other-protocol", "--allow-mismatch")
    assert "--allow-mismatch: compared although protocol sha256: " in result.stdout
    # T=3 is in the baseline archive only: inconclusive, which --max-inconclusive 0 refuses.
    assert result.exit_code == 3, result.output
    assert last_line(result).endswith("1 inconclusive, more than --max-inconclusive 0: "
                                      "tiny T=3 unmeasured")
    allowed = across(archive, "base", "other-protocol", "--allow-mismatch",
                     "--max-inconclusive", "1")
    assert allowed.exit_code == 0, allowed.output


def test_a_machine_wide_slowdown_passes_relative_and_fails_absolute(archive):
    relative = across(archive, "base", "machine-5pct-slower")
    assert relative.exit_code == 0, relative.output
    rows = [line for line in relative.stdout.splitlines() if "split -> fused" in line]
    assert len(rows) == 2 and all(" unresolved " in row for row in rows)
    absolute = across(archive, "base", "machine-5pct-slower", "--absolute",
                      "--tolerance", "2%")
    assert absolute.exit_code == 1, absolute.output
    assert "no null arm bounds the drift between runs" in absolute.stdout
    assert last_line(absolute).startswith(
        "gate: FAIL, 2 of 2 cases regressed beyond the 2.0 % tolerance (worst +5.0 %")


def test_the_cross_archive_interval_combines_both_runs_intervals(archive):
    from qkbench import archive as archives

    a, b = (archives.read(archive(n))["summary"] for n in ("base", "fused-10pct-slower"))
    for cell, ca, cb in zip(rules.across(a, b, 0.02, {}), a["comparisons"][0]["cases"],
                            b["comparisons"][0]["cases"], strict=True):
        ea, eb = ca["effect"], cb["effect"]
        assert cell.lo == pytest.approx((1 + eb["best"]) / (1 + ea["worst"]) - 1)
        assert cell.hi == pytest.approx((1 + eb["worst"]) / (1 + ea["best"]) - 1)
        assert cell.lo <= cell.estimate <= cell.hi
        assert cell.width == pytest.approx(ea["width"] + eb["width"])
        assert cell.coverage == pytest.approx(2 * (1 - 2 ** -5) - 1)  # 93.75 %


# -- one archive ---------------------------------------------------------------------------


def test_one_archive_whose_candidate_is_slower_fails(archive):
    result = invoke(archive("fused-slower"))
    assert result.exit_code == 1, result.output
    assert last_line(result).startswith("gate: FAIL, 2 of 2 cases regressed")


def test_one_archive_whose_candidate_is_faster_passes(archive):
    result = invoke(archive("base"))
    assert result.exit_code == 0, result.output


def test_a_stored_summary_edited_to_hide_a_regression_still_fails(archive, tmp_path):
    # The stored summary is covered by no digest: the gate judges the raw passes instead.
    run = archives.read(archive("fused-slower"))
    for comp in run["summary"]["comparisons"]:
        for cell in comp["cases"]:
            cell["effect"].update(verdict="faster", estimate=-0.1, best=-0.11, worst=-0.09)
    edited = tmp_path / "edited.json.gz"
    archives.write(edited, run)
    result = invoke(str(edited))
    assert result.exit_code == 1, result.output
    assert last_line(result).startswith("gate: FAIL, 2 of 2 cases regressed")


def test_an_archive_whose_pass_was_edited_is_refused_exit_2(archive, tmp_path):
    run = archives.read(archive("fused-slower"))
    arm = run["passes"][0]["cases"][0]["comparisons"][0]["arms"][0]
    arm["samples"] = [s * 2 for s in arm["samples"]]
    edited = tmp_path / "edited.json.gz"
    edited.write_bytes(archives.encode(run, compressed=True))  # its digests left as they were
    assert_usage_error(invoke(str(edited)), f"{edited}: pass 0: raw content does not match",
                       "qkbench audit")


def test_a_gate_that_judges_no_case_is_inconclusive():
    skipped = rules.Cell("split -> fused", "k", "g", 1, "n/s", rules.SKIPPED, "n/s")
    outcome = rules.Outcome("regressions", [skipped], 0.02)
    assert outcome.exit_code == rules.INCONCLUSIVE
    assert outcome.summary().endswith("; no case was judged")
    assert rules.Outcome("regressions", [], 0.02).exit_code == rules.INCONCLUSIVE


def test_unstable_cases_are_inconclusive_exit_3_unless_allowed(archive):
    result = invoke(archive("unstable"))
    assert result.exit_code == 3, result.output
    assert last_line(result) == (
        "gate: INCONCLUSIVE, 0 of 2 cases regressed beyond the 2.0 % tolerance; no case was "
        "judged; 2 inconclusive, more than --max-inconclusive 0: tiny T=1 unstable, tiny T=3 "
        "unstable")
    assert "orders B A A' kept failing" in result.stdout
    allowed = invoke(archive("one-unstable"), "--max-inconclusive", "1")
    assert allowed.exit_code == 0, allowed.output
    assert last_line(allowed) == (
        "gate: PASS, 0 of 2 cases regressed beyond the 2.0 % tolerance; 1 inconclusive, "
        "within --max-inconclusive 1: tiny T=1 unstable")


def test_a_run_with_no_case_judged_never_passes_whatever_it_may_leave_undecided(archive):
    result = invoke(archive("unstable"), "--max-inconclusive", "2")
    assert result.exit_code == 3, result.output
    assert last_line(result) == (
        "gate: INCONCLUSIVE, 0 of 2 cases regressed beyond the 2.0 % tolerance; no case was "
        "judged; 2 inconclusive, within --max-inconclusive 2: tiny T=1 unstable, tiny T=3 "
        "unstable")


WRONG_AT_ONE = "fake_routes:wrong_at_one_token"  # its q doubled at T = 1


@pytest.fixture(scope="module")
def wrong_run(tmp_path_factory) -> str:
    """A run whose candidate route computes a wrong result at T = 1 and is 5 % faster."""
    path = tmp_path_factory.mktemp("wrong") / "run.json.gz"
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(Path(__file__).parent / "fixtures"))
        synthetic_sweep(tiny_protocol("gate", routes=("split", WRONG_AT_ONE), samples=20),
                        path, effect=-0.05)
    return str(path)


def test_a_candidate_computing_a_wrong_result_fails_whatever_may_stay_inconclusive(wrong_run):
    result = invoke(wrong_run, "--max-inconclusive", "2")
    assert result.exit_code == 1, result.output
    assert last_line(result) == (
        f"gate: FAIL, 1 of 2 cases wrong (tiny T=1 wrong: {WRONG_AT_ONE}); 0 of 2 cases "
        "regressed beyond the 2.0 % tolerance")
    assert (f"wrong: {WRONG_AT_ONE} computed a wrong result or failed to run (pass 0"
            in result.stdout)


def test_junit_marks_a_wrong_result_a_failure(wrong_run, tmp_path):
    report = tmp_path / "junit.xml"
    assert invoke(wrong_run, "--junit", str(report)).exit_code == 1
    cases = {c.get("name"): c for c in ET.parse(report).iter("testcase")}
    assert cases["tiny/T1"].find("failure").get("type") == "wrong"
    assert cases["tiny/T3"].find("failure") is None


def test_across_runs_a_candidate_wrong_in_the_candidate_run_fails(wrong_run):
    from qkbench.summary import current, wrong_routes

    run = archives.read(wrong_run)
    cells = rules.across(current(run), current(run), 0.02, wrong_routes(run))
    assert [(c.tokens, c.result) for c in cells] == [(1, rules.WRONG), (3, rules.OK)]
    assert cells[0].reason.endswith("in the --candidate run")
    assert rules.across(current(run), current(run), 0.02, {})[0].result == rules.UNDECIDED


def test_an_expectation_on_a_case_where_a_route_is_wrong_is_not_met(wrong_run):
    result = invoke(wrong_run, "--expect", f"{WRONG_AT_ONE} faster than split in all")
    assert result.exit_code == 1, result.output
    assert last_line(result) == (
        f'gate: FAIL, "{WRONG_AT_ONE} faster than split in all" not met in 1 of 2 cases: '
        f"tiny T=1 wrong: {WRONG_AT_ONE}")


# -- expectations ----------------------------------------------------------------------------


@pytest.mark.parametrize(("expectation", "code", "line"), [
    ("fused faster than split in all", 0,
     'gate: PASS, "fused faster than split in all" met in 2 of 2 cases'),
    ("split slower than fused in band decode", 0,
     'gate: PASS, "split slower than fused in band decode" met in 1 of 1 cases'),
    ("fused faster than split at T >= 3", 0,
     'gate: PASS, "fused faster than split at T >= 3" met in 1 of 1 cases'),
    ("fused slower than split in all", 1,
     'gate: FAIL, "fused slower than split in all" not met in 2 of 2 cases: tiny T=1 faster, '
     "tiny T=3 faster"),
], ids=["true", "true-reversed-in-a-band", "true-at-T", "false"])
def test_an_expectation_is_checked_against_the_runs_verdicts(archive, expectation, code, line):
    result = invoke(archive("base"), "--expect", expectation)
    assert result.exit_code == code, result.output
    assert last_line(result) == line


@pytest.mark.parametrize(("expectation", "fragment"), [
    ("fused is faster than split", "not an expectation; write ROUTE faster|slower than ROUTE"),
    ("fused faster than split in band prefill", "no band 'prefill' in the archive's protocol "
                                                "(it has 'decode')"),
    ("fused faster than eager in all", "the archive compares no fused with eager "
                                       "(it has split -> fused)"),
    ("fused faster than split at T < 1", "selects no case of split -> fused"),
    ("fused faster than fused in all", "a route cannot be compared with itself"),
], ids=["malformed", "unknown-band", "unknown-comparison", "empty-scope", "itself"])
def test_a_malformed_expectation_is_exit_2_in_one_line(archive, expectation, fragment):
    assert_usage_error(invoke(archive("base"), "--expect", expectation),
                       f"--expect {expectation!r}", fragment)


def test_an_expectation_selecting_only_unsupported_cases_is_a_usage_error():
    unsupported = {"key": "tiny/T1", "geometry": "tiny", "tokens": 1,
                   "effect": {"verdict": "n/s"}}
    summary = {"comparisons": [{"baseline": "split", "candidate": "peer:x",
                                "cases": [unsupported]}]}
    with pytest.raises(GateError, match=r"every case it selects of split -> peer:x is n/s"):
        rules.expect(summary, [], rules.parse_expectation("peer:x faster than split in all"),
                     {})


def test_an_expectation_given_twice_counts_its_cases_once(archive):
    claim = "fused faster than split in all"
    result = invoke(archive("base"), "--expect", claim, "--expect", f"  {claim} ")
    assert result.exit_code == 0, result.output
    assert last_line(result) == f'gate: PASS, "{claim}" met in 2 of 2 cases'


def test_an_expectation_on_unstable_cases_is_inconclusive(archive):
    result = invoke(archive("unstable"), "--expect", "fused faster than split in all")
    assert result.exit_code == 3, result.output


# -- reports ---------------------------------------------------------------------------------


def test_junit_has_one_test_case_per_cell_with_failures_and_numbers(archive, tmp_path):
    path = tmp_path / "gate.xml"
    result = across(archive, "base", "fused-10pct-slower", "--junit", str(path))
    assert result.exit_code == 1
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("2", "2", "0")
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "split -> fused"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["tiny/T1", "tiny/T3"]
    for case in cases:
        failure = case.find("failure")
        assert failure is not None and failure.get("type") == "regressed"
        props = {p.get("name"): p.get("value") for p in case.find("properties")}
        assert float(props["delta"]) == pytest.approx(0.10, abs=0.002)
        assert props["verdict"] == "slower" and float(props["tolerance"]) == 0.02
        assert float(props["interval_low"]) > 0.02


def test_a_junit_test_class_is_the_same_whatever_the_base_commit():
    from qkbench import gate_output

    def classes(sha: str) -> list[str]:
        group = f"fused@{sha} -> fused"
        cell = rules.Cell(group, "tiny/T1", "tiny", 1, "faster", rules.OK, "faster")
        root = ET.fromstring(gate_output.junit(rules.Outcome("regressions", [cell], 0.02)))
        assert root.find("testsuite").get("name") == group  # the commit is still said
        return [c.get("classname") for c in root.iter("testcase")]

    assert classes("1a2b3c4d5e6f") == classes("0f9e8d7c6b5a") == ["fused@ref -> fused"]


def test_junit_marks_inconclusive_cells_skipped(archive, tmp_path):
    path = tmp_path / "gate.xml"
    assert invoke(archive("unstable"), "--junit", str(path)).exit_code == 3
    cases = ET.parse(path).getroot().findall("testsuite/testcase")
    assert len(cases) == 2
    assert all(c.find("skipped") is not None and c.find("failure") is None for c in cases)
    assert "unstable" in cases[0].find("skipped").get("message")


def test_a_report_file_that_cannot_be_written_is_refused_before_anything_is_measured(
        tmp_path, monkeypatch):
    from qkbench import gate_cli

    def measured(*args, **kwargs):
        raise AssertionError("measured before the report path was checked")

    monkeypatch.setattr(gate_cli, "_against", measured)
    (tmp_path / "a-file").write_text("")
    under_a_file = tmp_path / "a-file" / "deeper" / "junit.xml"
    assert_usage_error(invoke("--against", "HEAD", "--junit", str(under_a_file)),
                       f"{under_a_file}: cannot be written ({tmp_path / 'a-file'} is a file, "
                       "not a folder)")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    under_a_dangling_link = tmp_path / "dangling" / "junit.xml"
    assert_usage_error(invoke("--against", "HEAD", "--junit", str(under_a_dangling_link)),
                       f"{under_a_dangling_link}: cannot be written ({tmp_path / 'dangling'} "
                       "is a link to nothing)")
    (tmp_path / "junit.xml").symlink_to(tmp_path / "nowhere" / "junit.xml")
    assert_usage_error(invoke("--against", "HEAD", "--junit", str(tmp_path / "junit.xml")),
                       f"{tmp_path / 'junit.xml'}: cannot be written (it is a link to nothing)")
    too_long = tmp_path / ("a" * 300 + ".xml")
    assert_usage_error(invoke("--against", "HEAD", "--junit", str(too_long)),
                       f"{too_long}: cannot be written (File name too long)")
    assert_usage_error(invoke("--against", "HEAD", "--out", str(too_long)),
                       f"--out {too_long}: cannot be used (File name too long)")


def test_an_empty_markdown_path_is_named_and_the_junit_file_still_gets_the_error(
        archive, tmp_path):
    # `--markdown "$GITHUB_STEP_SUMMARY"` outside GitHub Actions: the value is empty.
    junit = tmp_path / "gate" / "junit.xml"
    result = invoke(archive("base"), "--junit", str(junit), "--markdown", "")
    assert_usage_error(result, "--markdown .: cannot be written (it is a folder; an empty "
                               "value, such as an unset $GITHUB_STEP_SUMMARY, reads as '.')")
    error = ET.parse(junit).getroot().find("testsuite/testcase/error")
    assert "--markdown .: cannot be written" in error.get("message")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_report_that_fails_as_it_is_written_leaves_the_verdict_printed(archive):
    result = invoke(archive("fused-slower"), "--markdown", "/dev/full")
    assert result.exit_code == 2, result.output
    assert "gate: FAIL, 2 of 2 cases regressed" in result.stdout
    assert result.stderr.strip() == "error: /dev/full: cannot be written (No space left on device)"


def test_a_gate_that_cannot_run_leaves_its_error_in_the_reports_not_an_earlier_verdict(
        archive, tmp_path):
    junit, markdown = tmp_path / "junit.xml", tmp_path / "summary.md"
    assert invoke(archive("base"), "--junit", str(junit), "--markdown", str(markdown)
                  ).exit_code == 0
    missing = tmp_path / "missing.json"
    line = assert_usage_error(invoke(str(missing), "--junit", str(junit), "--markdown",
                                     str(markdown)), str(missing))
    error = ET.parse(junit).find("testsuite/testcase/error")
    assert error is not None and error.get("message") == line
    assert ET.parse(junit).getroot().get("errors") == "1"
    assert markdown.read_text().endswith(f"### qkbench gate: ERROR\n\n**{line}**\n")


def test_the_gate_judges_from_a_thread_other_than_the_main_one(archive):
    import threading

    results = []
    worker = threading.Thread(target=lambda: results.append(invoke(archive("base"))))
    worker.start()
    worker.join()
    (result,) = results
    assert result.exit_code == 0, result.output
    assert last_line(result).startswith("gate: PASS")


def test_a_report_file_s_missing_folders_are_made(archive, tmp_path):
    junit = tmp_path / "results" / "gate" / "junit.xml"
    markdown = tmp_path / "summary" / "gate.md"
    result = invoke(archive("base"), "--junit", str(junit), "--markdown", str(markdown))
    assert result.exit_code == 0, result.output
    assert ET.parse(junit).getroot().tag == "testsuites"
    assert "gate: PASS" in markdown.read_text()


def test_with_the_signing_key_set_an_unsigned_archive_is_not_judged(archive, monkeypatch):
    path = archive("base")  # swept without the key (a sweep with it would sign)
    monkeypatch.setenv("QKBENCH_SIGNING_KEY", "a CI secret")
    assert_usage_error(invoke(path), f"RUN {path}: not signed, and QKBENCH_SIGNING_KEY is set: "
                                     "with the key the gate judges only archives signed with it")


def test_with_the_signing_key_set_a_signed_archive_is_judged(archive, monkeypatch, tmp_path):
    from qkbench import archive as archives

    key = b"a CI secret"
    signed = tmp_path / "signed.json"
    archives.write(signed, reseal(archives.read(Path(archive("base"))), key))  # as CI's sweep
    monkeypatch.setenv("QKBENCH_SIGNING_KEY", key.decode())
    result = invoke(str(signed))
    assert result.exit_code == 0, result.output


def test_markdown_renders_a_table_and_ends_with_the_summary(archive, tmp_path):
    path = tmp_path / "summary.md"
    result = across(archive, "base", "fused-10pct-slower", "--markdown", str(path))
    lines = path.read_text().splitlines()
    assert lines[0] == "### qkbench gate: FAIL"
    header = next(i for i, x in enumerate(lines) if x.startswith("| comparison |"))
    assert set(lines[header + 1]) == set("|-")
    rows = lines[header + 2:header + 4]
    assert all(r.startswith("| split -> fused | tiny | ") and "**REGRESSED**" in r for r in rows)
    assert all(r.count("|") == lines[header].count("|") for r in rows)
    assert lines[-1] == f"**{last_line(result)}**"


def test_markdown_is_appended_as_a_ci_job_summary_expects(archive, tmp_path):
    path = tmp_path / "step-summary.md"
    path.write_text("earlier step\n")
    invoke(archive("base"), "--markdown", str(path))
    assert path.read_text().startswith("earlier step\n### qkbench gate: PASS")


# -- usage -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "fragment"), [
    ((), "give exactly one of --against REF, --baseline A --candidate B, or an archive RUN"),
    (("RUN", "--against", "HEAD"), "(got --against and RUN)"),
    (("--baseline", "RUN"), "--baseline and --candidate go together"),
    (("RUN", "--absolute"), "--absolute and --allow-mismatch only go with --baseline"),
    (("--baseline", "RUN", "--candidate", "RUN", "--expect", "a faster than b in all"),
     "--expect checks one archive: give it as RUN"),
    (("RUN", "--passes", "12"), "--passes goes only with --against"),
    (("RUN", "--tolerance", "2"), "a bare number is a share and must be below 1 "
                                  "(for 2 percent write '2%')"),
    (("RUN", "--tolerance", "two"), "give a percentage such as '2%'"),
    (("RUN", "--max-inconclusive", "-1"), "--max-inconclusive must be >= 0"),
    (("RUN", "--expect", "fused faster than split in all", "--tolerance", "5%"),
     "--tolerance does not go with --expect"),
], ids=["none", "two-forms", "half-a-pair", "absolute-alone", "expect-across",
        "sweep-option-on-an-archive", "bare-tolerance", "word-tolerance", "negative-max",
        "tolerance-with-expect"])
def test_usage_errors_are_exit_2_in_one_line(archive, args, fragment):
    args = [archive("base") if a == "RUN" else a for a in args]
    assert_usage_error(invoke(*args), fragment)


@pytest.mark.parametrize(("text", "reason"), [
    (json.dumps([1, 2]), "not a qkbench run archive"),
    ("[" * 100_000 + "]" * 100_000, "cannot be read as JSON (nested too deeply)"),
], ids=["not-a-run", "nested-too-deeply"])
def test_an_unreadable_archive_is_exit_2_naming_it(tmp_path, text, reason):
    path = tmp_path / "run.json"
    path.write_text(text)
    assert_usage_error(invoke(str(path)), f"{path}: {reason}")


@pytest.mark.parametrize(("text", "value"), [("2%", 0.02), ("2.5 %", 0.025), ("0.02", 0.02),
                                             ("0%", 0.0)])
def test_tolerance_reads_a_percentage_or_a_share(text, value):
    assert rules.parse_tolerance(text) == pytest.approx(value)


def test_a_slower_case_whose_interval_reaches_into_the_tolerance_passes():
    result, reason = rules.decide("slower", 0.015, 0.02)
    assert result == "pass"
    assert reason == "slower, but its interval reaches +1.5 %, within the 2.0 % tolerance"


def test_a_slower_case_whose_whole_interval_is_past_the_tolerance_regresses():
    assert rules.decide("slower", 0.025, 0.02)[0] == "regressed"


def test_an_unresolved_case_past_the_tolerance_but_within_the_width_says_so():
    result, reason = rules.decide("unresolved", 0.04, 0.02, 0.12)
    assert result == "pass"
    assert reason == ("unresolved: its whole interval lies past the 2.0 % tolerance, but "
                      "within the instrument's width (12.0 %)")


def test_a_gate_whose_instrument_is_wider_than_its_tolerance_says_so(archive):
    result = invoke(archive("wide"), "--tolerance", "0.1%")
    assert result.exit_code == 0, result.output
    assert ("the instrument was wider than the 0.1 % tolerance at 2 of 2 judged cases (widest "
            "0.4 % at tiny T=") in " ".join(result.stdout.split())
    assert "wider than" not in invoke(archive("wide")).stdout


def test_a_case_a_route_does_not_support_is_not_judged():
    assert rules.decide("n/s", None, 0.02)[0] == "n/s"


def test_an_expectation_without_a_scope_is_refused():
    with pytest.raises(GateError, match="fused faster than split"):
        rules.parse_expectation("fused faster than split")
