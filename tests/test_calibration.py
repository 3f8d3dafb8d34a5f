"""Calibration: an A/A run must resolve nothing, planted effects of known size must be
resolved slower (SPEC 4). The timing comes from the synthetic clock, which charges each
arm for the work its launches declare (a planted route: 1 + 1/N)."""

import copy
import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qkbench import calibration
from qkbench.cli import app
from qkbench.errors import ProtocolError
from qkbench.protocol import parse
from qkbench.summary import current

from conftest import interpreter_only
from helpers import reseal
from synthetic import ROUTES, synthetic_sweep, tiny_protocol

pytestmark = interpreter_only

PROTOCOL = tiny_protocol("calibrated", inner_reps=8)
EVERY = (8, 2)  # +12.5 % and +50 % of the route's own work
ROUTE = ROUTES[0]  # the route calibrated
FIXTURES = Path(__file__).parent / "fixtures"


def calibrate(tmp_path, **clock) -> dict:
    """Both runs on the synthetic clock; returns their archives by kind."""
    runs = {}
    for kind, p in calibration.protocols(parse(PROTOCOL), ROUTE, EVERY).items():
        runs[kind] = synthetic_sweep(p, tmp_path / f"{kind}.json.gz", **clock)
    return runs


@pytest.fixture(scope="module")
def unbiased(tmp_path_factory) -> dict:
    return calibrate(tmp_path_factory.mktemp("calibrate"))


def test_an_unbiased_machine_gives_no_false_verdict(unbiased):
    result = calibration.summarize(unbiased["aa"], unbiased["planted"])
    assert (result["false_verdicts"], result["aa_cells"]) == (0, 2)
    assert all(c["aa"]["verdict"] == "unresolved" for c in result["cases"])


def test_every_planted_effect_is_resolved_slower_near_its_size(unbiased):
    result = calibration.summarize(unbiased["aa"], unbiased["planted"])
    assert (result["planted_resolved"], result["planted_cells"]) == (4, 4)
    for case in result["cases"]:
        assert [p["expected"] for p in case["planted"]] == [0.125, 0.5]
        for p in case["planted"]:
            assert p["verdict"] == "slower"
            assert p["estimate"] == pytest.approx(p["expected"], abs=0.002)
        assert case["smallest_resolved"] == 0.125


def test_the_summary_line_counts_false_verdicts_and_resolved_effects(unbiased):
    line = calibration.summary_line(calibration.summarize(unbiased["aa"], unbiased["planted"]))
    assert line == (f"calibrate {ROUTE}: false verdicts 0/2, planted effects resolved 4/4 "
                    "(4/4 of those larger than their cell's width)")


def test_an_unstable_planted_cell_is_counted_apart_as_an_unstable_a_a_cell_is(unbiased,
                                                                             monkeypatch):
    def one_planted_cell_unstable(archive):
        summary = copy.deepcopy(current(archive))
        if archive is unbiased["planted"]:
            summary["comparisons"][0]["cases"][0]["effect"].update(
                estimate=None, width=None, verdict="unstable")
        return summary

    monkeypatch.setattr(calibration, "current", one_planted_cell_unstable)
    result = calibration.summarize(unbiased["aa"], unbiased["planted"])
    assert calibration.summary_line(result) == (
        f"calibrate {ROUTE}: false verdicts 0/2, planted effects resolved 3/3 (3/3 of those "
        "larger than their cell's width); cells without an estimate: 1 planted")
    assert not calibration.failures(result)


def test_a_first_slot_bias_gives_no_false_verdict(tmp_path):
    runs = calibrate(tmp_path, first_bias=0.05)
    result = calibration.summarize(runs["aa"], runs["planted"])
    assert result["false_verdicts"] == 0
    assert {c["aa"]["verdict"] for c in result["cases"]} == {"unstable"}


def test_a_machine_that_favours_one_arm_label_shows_false_verdicts(tmp_path):
    # The clock makes the B arm 5 % slower whatever runs in it: the A/A run must say so.
    runs = calibrate(tmp_path, effect=0.05)
    result = calibration.summarize(runs["aa"], runs["planted"])
    assert result["false_verdicts"] == 2


@pytest.mark.parametrize(("every", "sets", "launches", "share"), [
    (32, 1, 32, 1 / 32), (8, 1, 32, 4 / 32), (2, 1, 2, 0.5), (8, 100, 200, 25 / 200)])
def test_planted_share_counts_the_extra_calls_in_one_replay(every, sets, launches, share):
    assert calibration.planted_share(every, sets, launches) == pytest.approx(share)


def test_a_planted_step_that_does_not_divide_inner_reps_is_refused():
    with pytest.raises(ProtocolError, match=r"--planted 3: must divide the protocol's "
                                            r"inner_reps \(8\)"):
        calibration.protocols(parse(PROTOCOL), ROUTE, (8, 3))


@pytest.mark.parametrize(("inner_reps", "every"), [
    (32, (32, 8)), (64, (32, 8)), (16, (16, 4)), (8, (8, 2)), (6, (6,)), (2, (2,)), (1, (1,))])
def test_the_default_planted_steps_divide_the_protocols_inner_reps(inner_reps, every):
    assert calibration.default_planted(inner_reps) == every


def _write(path, archive: dict):
    with gzip.open(path, "wt") as f:
        json.dump(archive, f)
    return str(path)


def test_calibrate_cli_reports_from_archives_and_ends_with_the_line(unbiased, tmp_path):
    result = CliRunner().invoke(app, ["calibrate", "--aa", _write(tmp_path / "a.json.gz",
                                      unbiased["aa"]), "--planted-run",
                                      _write(tmp_path / "p.json.gz", unbiased["planted"])])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert "tiny" in result.stdout and "planted +12.50%" in result.stdout
    assert lines[-1].startswith(f"calibrate {ROUTE}: false verdicts 0/2")


def test_calibrate_cli_exits_1_on_a_false_verdict(tmp_path):
    runs = calibrate(tmp_path, effect=0.05)
    result = CliRunner().invoke(app, ["calibrate", "--aa", _write(tmp_path / "a.json.gz",
                                      runs["aa"]), "--planted-run",
                                      _write(tmp_path / "p.json.gz", runs["planted"])])
    assert result.exit_code == 1
    assert f"error: calibrate {ROUTE}: false verdicts 2/2" in result.stderr


def report_from(tmp_path, aa: dict, planted: dict, *more: str):
    return CliRunner().invoke(app, ["calibrate", "--aa", _write(tmp_path / "a.json.gz", aa),
                                    "--planted-run", _write(tmp_path / "p.json.gz", planted),
                                    *more])


def assert_one_error(result, line: str) -> None:
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip().splitlines() == [f"error: {line}"]


def test_archives_given_the_wrong_way_round_are_refused_naming_them(unbiased, tmp_path):
    assert_one_error(report_from(tmp_path, unbiased["planted"], unbiased["aa"]),
                     f"--aa: not an A/A calibration archive (its routes are {ROUTE}, "
                     f"{ROUTE}+1/8, {ROUTE}+1/2; such a run times ROUTE against ROUTE~twin)")


def test_an_ordinary_sweep_is_not_a_planted_run(unbiased, tmp_path):
    sweep = synthetic_sweep(PROTOCOL, tmp_path / "sweep.json.gz")
    assert_one_error(report_from(tmp_path, unbiased["aa"], sweep),
                     "--planted-run: not a planted calibration archive (its routes are "
                     f"{', '.join(ROUTES)}; such a run times ROUTE against ROUTE+1/N)")


def test_the_runs_of_two_calibrations_are_not_read_as_one(unbiased, tmp_path):
    other = parse(tiny_protocol("calibrated", (1,), inner_reps=8))
    aa = synthetic_sweep(calibration.protocols(other, ROUTE, EVERY)["aa"],
                         tmp_path / "other-aa.json.gz")
    assert_one_error(report_from(tmp_path, aa, unbiased["planted"]),
                     "--aa and --planted-run ran different protocols or cells: give the two "
                     "archives of one calibration")


def test_a_machine_on_which_every_cell_is_unstable_fails_calibration_proving_nothing(
        tmp_path):
    # One arm order's null arm always disagrees by 3 %: every cell of both runs is unstable.
    runs = calibrate(tmp_path, order_null_bias={("B", "A", "A'"): 0.03})
    result = report_from(tmp_path, runs["aa"], runs["planted"])
    assert_one_error(result, f"calibrate {ROUTE}: false verdicts 0/0, planted effects resolved "
                     "0/0 (0/0 of those larger than their cell's width); cells without an "
                     "estimate: 2 A/A, 4 planted: no A/A cell had an estimate, so none could "
                     "be judged; no planted cell had an estimate, so none could be resolved")


def test_a_planted_run_with_no_cell_estimated_fails_calibration_proving_nothing(
        unbiased, tmp_path):
    planted = synthetic_sweep(calibration.protocols(parse(PROTOCOL), ROUTE, EVERY)["planted"],
                              tmp_path / "planted.json.gz",
                              order_null_bias={("B", "A", "A'"): 0.03})
    assert_one_error(report_from(tmp_path, unbiased["aa"], planted),
                     f"calibrate {ROUTE}: false verdicts 0/2, planted effects resolved 0/0 "
                     "(0/0 of those larger than their cell's width); cells without an "
                     "estimate: 4 planted: no planted cell had an estimate, so none could be "
                     "resolved")


def test_an_unfinished_run_is_refused_naming_it(unbiased, tmp_path):
    unfinished = reseal({**copy.deepcopy(unbiased["planted"]), "status": "running"})
    assert_one_error(report_from(tmp_path, unbiased["aa"], unfinished),
                     "--planted-run: the run is unfinished (status running): finish it with "
                     "qkbench sweep --resume first")


def test_a_planted_effect_beyond_the_width_estimated_and_unresolved_is_a_failure(
        unbiased, monkeypatch):
    assert calibration.failures(calibration.summarize(unbiased["aa"], unbiased["planted"])) == []
    # The planted run's summary with one +12.5 % cell as if its interval had reached zero.
    missed = copy.deepcopy(current(unbiased["planted"]))
    comp = next(c for c in missed["comparisons"] if c["candidate"] == f"{ROUTE}+1/8")
    comp["cases"][0]["effect"]["verdict"] = "unresolved"
    monkeypatch.setattr(calibration, "current", lambda archive: missed if archive is unbiased[
        "planted"] else current(archive))
    result = calibration.summarize(unbiased["aa"], unbiased["planted"])
    assert result["missed"] == 1
    assert calibration.failures(result) == [
        "1 planted effects larger than their cell's width left unresolved"]


def test_runs_timed_with_other_measuring_settings_are_not_one_calibration(unbiased, tmp_path):
    cold = calibration.protocols(parse(PROTOCOL).with_overrides(cache="cold"), ROUTE, EVERY)
    planted = synthetic_sweep(cold["planted"], tmp_path / "cold-planted.json.gz")
    assert_one_error(report_from(tmp_path, unbiased["aa"], planted),
                     "--aa and --planted-run were timed differently (cache hot against cold): "
                     "give the two archives of one calibration")


def test_a_run_option_with_archives_is_refused_not_ignored(unbiased, tmp_path):
    assert_one_error(report_from(tmp_path, unbiased["aa"], unbiased["planted"], "--tokens", "4",
                                 "--passes", "12"),
                     "--passes, --tokens go only with a run, not with --aa and --planted-run "
                     "(which report from archives)")


def test_runs_of_two_machines_are_not_one_calibration(unbiased, tmp_path):
    elsewhere = copy.deepcopy(unbiased["planted"])
    elsewhere["environment"]["torch"] = "2.0.0"
    assert_one_error(report_from(tmp_path, unbiased["aa"], reseal(elsewhere)),
                     "--aa and --planted-run ran on different machines (torch "
                     f"{unbiased['aa']['environment']['torch']} against 2.0.0): give the two "
                     "archives of one calibration")


def test_a_calibration_whose_route_computes_a_wrong_result_fails_naming_it(tmp_path,
                                                                         monkeypatch):
    # Its cells at T = 3 are left out of the counts, so the counts alone would pass.
    monkeypatch.syspath_prepend(str(FIXTURES))
    wrong = "invalid_routes:raising_past_one_token"
    runs = {kind: synthetic_sweep(p, tmp_path / f"{kind}.json.gz")
            for kind, p in calibration.protocols(parse(PROTOCOL), wrong, EVERY).items()}
    result = report_from(tmp_path, runs["aa"], runs["planted"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: calibrate {wrong}: false verdicts 0/1, planted effects "
                           "resolved 2/2")
    for kind in ("aa", "planted"):
        assert (f"the {kind} run: route {wrong} raised on tiny/T3: ValueError: no kernel for "
                "3 tokens (in 6 of 6 passes)") in line


def test_a_planted_run_that_resolved_no_effect_fails_calibration_proving_nothing(
        unbiased, monkeypatch):
    # Every planted cell estimated, each interval wider than its effect and reaching zero.
    blurred = copy.deepcopy(current(unbiased["planted"]))
    for comp in blurred["comparisons"]:
        for case in comp["cases"]:
            case["effect"].update(verdict="unresolved", width=1.0)
    monkeypatch.setattr(calibration, "current", lambda archive: blurred if archive is unbiased[
        "planted"] else current(archive))
    result = calibration.summarize(unbiased["aa"], unbiased["planted"])
    assert (result["planted_resolved"], result["planted_cells"], result["missed"]) == (0, 4, 0)
    assert calibration.failures(result) == [
        "no planted effect was resolved, so the run showed no effect of those sizes can be "
        "told from noise here"]
