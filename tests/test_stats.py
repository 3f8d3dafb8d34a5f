"""The method's statistics against a frozen fixture of small cases worked out by hand."""

import json
from pathlib import Path
from statistics import median

import pytest

from qkbench import stats

CASES = json.loads((Path(__file__).parent / "fixtures" / "stats_cases.json").read_text())


def cases(function: str):
    return pytest.mark.parametrize("case", CASES[function], ids=[c["id"] for c in CASES[function]])


def approx(value):
    return value if value is None or isinstance(value, (bool, str)) else pytest.approx(
        value, rel=1e-12, abs=1e-15)


def effect_of(fields: dict) -> stats.Effect:
    """An ``Effect`` with the fields a case gives and empty others."""
    empty = {"kept": 0, "total": 0, "median": None, "best": None, "worst": None,
             "ci_low": None, "ci_high": None, "width": None, "width_median": None,
             "verdict": "unresolved"}
    return stats.Effect(**{**empty, **fields})


@cases("null_ratio")
def test_null_ratio_is_the_ratio_of_the_identical_arms_medians(case):
    assert stats.null_ratio(case["a"], case["a_again"]) == approx(case["expected"])


@cases("baseline_time")
def test_baseline_time_is_the_median_of_both_identical_arms_pooled(case):
    assert stats.baseline_time(case["a"], case["a_again"]) == approx(case["expected"])


@cases("delta_ratio")
def test_delta_ratio_compares_the_candidate_median_with_the_pooled_baseline(case):
    assert stats.delta_ratio(case["b"], case["a"], case["a_again"]) == approx(case["expected"])


@cases("kept")
def test_drop_rule_keeps_a_pass_whose_null_is_within_the_threshold(case):
    assert stats.kept(case["null"], case["threshold"]) is case["expected"]


@cases("verdict")
def test_verdict_is_unresolved_unless_the_effect_lies_outside_the_width(case):
    assert stats.verdict(case["median"], case["width"]) == case["expected"]


@cases("effect")
def test_effect_summarises_the_kept_passes_only(case):
    got = stats.effect(case["nulls"], case["deltas"], case["threshold"]).as_dict()
    assert {k: got[k] for k in case["expected"]} == {k: approx(v)
                                                     for k, v in case["expected"].items()}


@cases("effect")
def test_effect_interval_brackets_the_median_when_it_exists(case):
    got = stats.effect(case["nulls"], case["deltas"], case["threshold"])
    if case["ci"] is None:
        assert (got.ci_low, got.ci_high) == (None, None)
    else:
        assert got.ci_low <= got.median <= got.ci_high


@cases("band_summary")
def test_band_summary_reports_cells_and_the_spread_of_their_medians(case):
    got = stats.band_summary([effect_of(e) for e in case["effects"]])
    assert got == {k: approx(v) for k, v in case["expected"].items()}


@cases("crossover")
def test_crossover_is_where_the_first_faster_run_ends(case):
    cells = [(tokens, effect_of({"verdict": verdict})) for tokens, verdict in case["cells"]]
    assert stats.crossover(cells) == case["expected"]


@cases("dispatch_bound")
def test_dispatch_bound_is_the_last_width_clearing_the_margin_on_every_geometry(case):
    by_geometry = {g: [(tokens, effect_of({"median": m, "width": w})) for tokens, m, w in cells]
                   for g, cells in case["by_geometry"].items()}
    assert stats.dispatch_bound(by_geometry, case["margin"]) == case["expected"]


def test_dispatch_bound_of_no_geometry_is_none():
    assert stats.dispatch_bound({}, 10.0) is None


@pytest.mark.parametrize("values", [[], [1.0], [2.0, 2.0, 2.0]],
                         ids=["empty", "one", "one-distinct"])
def test_bootstrap_interval_needs_two_distinct_values(values):
    assert stats.bootstrap_median_ci(values) is None


@pytest.mark.parametrize("values", [[3.0, 1.0], [0.1 * i for i in range(1, 11)],
                                    [5.0, 5.0, 5.0, 9.0, 1.0, 5.0, 7.0]],
                         ids=["two", "ten", "ties"])
def test_bootstrap_interval_contains_the_median_within_the_data(values):
    low, high = stats.bootstrap_median_ci(values)
    assert min(values) <= low <= median(values) <= high <= max(values)


def test_bootstrap_interval_is_reproducible():
    values = [0.3, 0.1, 0.4, 0.1, 0.5, 0.9, 0.2, 0.6]
    assert stats.bootstrap_median_ci(values) == stats.bootstrap_median_ci(values)
