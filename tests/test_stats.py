"""The method's statistics against a frozen fixture of small cases worked out by hand."""

import json
from pathlib import Path

import pytest

from qkbench import stats

CASES = json.loads((Path(__file__).parent / "fixtures" / "stats_cases.json").read_text())


def cases(function: str):
    return pytest.mark.parametrize("case", CASES[function], ids=[c["id"] for c in CASES[function]])


def approx(value):
    if value is None or isinstance(value, (bool, str, list)):  # names, flags, order lists
        return value
    return pytest.approx(value, rel=1e-12, abs=1e-15)


def effect_of(fields: dict) -> stats.Effect:
    """An ``Effect`` with the fields a case gives and empty others."""
    empty = {"kept": 0, "total": 0, "estimate": None, "median": None, "best": None,
             "worst": None, "coverage": None, "width": None, "width_median": None,
             "verdict": "unresolved"}
    return stats.Effect(**{**empty, **fields})


@cases("null_ratio")
def test_null_ratio_is_the_ratio_of_the_identical_arms_medians(case):
    assert stats.null_ratio(case["a"], case["a_again"]) == approx(case["expected"])


@cases("baseline_time")
def test_baseline_time_is_the_geometric_mean_of_both_identical_arms_medians(case):
    assert stats.baseline_time(case["a"], case["a_again"]) == approx(case["expected"])


@cases("delta_ratio")
def test_delta_ratio_compares_the_candidate_median_with_the_baseline(case):
    assert stats.delta_ratio(case["b"], case["a"], case["a_again"]) == approx(case["expected"])


@cases("kept")
def test_drop_rule_keeps_a_pass_whose_null_is_within_the_threshold(case):
    assert stats.kept(case["null"], case["threshold"]) is case["expected"]


@cases("verdict")
def test_verdict_needs_every_kept_delta_beyond_the_width_and_every_order(case):
    assert stats.verdict(case["deltas"], case["width"], case["complete"]) == case["expected"]


@cases("mean_log_ratio")
def test_estimate_is_the_mean_of_the_log_ratios(case):
    assert stats.mean_log_ratio(case["ratios"]) == approx(case["expected"])


@cases("coverage")
def test_interval_coverage_is_exact_for_n_kept_passes(case):
    assert stats.coverage(case["n"]) == approx(case["expected"])


@cases("slot_effect")
def test_slot_effect_compares_the_first_sampled_arm_with_the_later_ones(case):
    assert stats.slot_effect(case["slot_medians"]) == approx(case["expected"])


@cases("effect")
def test_effect_summarises_the_balanced_kept_set(case):
    got = stats.effect(case["nulls"], case["deltas"], case["total"], case["state"],
                       case.get("unstable_orders", ())).as_dict()
    got["unstable_orders"] = list(got["unstable_orders"])
    assert {k: got[k] for k in case["expected"]} == {k: approx(v)
                                                     for k, v in case["expected"].items()}


def test_effect_refuses_an_unbalanced_kept_set_without_a_state():
    with pytest.raises(ValueError, match="one pass per slot: 5 of 6"):
        stats.effect([0.0] * 5, [-0.1] * 5, 6)


@cases("band_summary")
def test_band_summary_reports_cells_and_the_spread_of_their_estimates(case):
    got = stats.band_summary([effect_of(e) for e in case["effects"]])
    assert got == {k: approx(v) for k, v in case["expected"].items()}


@cases("crossover")
def test_crossover_is_where_the_first_faster_run_ends(case):
    cells = [(tokens, effect_of({"verdict": verdict})) for tokens, verdict in case["cells"]]
    assert stats.crossover(cells) == case["expected"]


@cases("dispatch_bound")
def test_dispatch_bound_is_the_last_width_clearing_the_margin_on_every_geometry(case):
    by_geometry = {g: [(tokens, effect_of({"estimate": m, "width": w, "verdict": v}))
                       for tokens, m, w, v in cells]
                   for g, cells in case["by_geometry"].items()}
    assert stats.dispatch_bound(by_geometry, case["margin"]) == case["expected"]


def test_dispatch_bound_of_no_geometry_is_none():
    assert stats.dispatch_bound({}, 10.0) == {"bound": None, "censored": False}


def test_the_identical_arms_disagree_as_much_whichever_of_them_ran_slower():
    a_slow = stats.null_ratio([1.05], [1.0])
    a_again_slow = stats.null_ratio([1.0], [1.05])
    assert abs(a_slow) < abs(a_again_slow)  # |null| alone would differ
    assert stats.disagreement(a_slow) == pytest.approx(0.05)
    assert stats.disagreement(a_again_slow) == pytest.approx(0.05)
