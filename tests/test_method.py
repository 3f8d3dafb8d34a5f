"""The null-arm method (SPEC section 4) against a model clock whose truth is known.

Every sweep here runs the real manager, worker, verification and summary in process;
only the timing comes from ``SyntheticBackend``: a true effect, an order bias, a drifting
clock or a planted disagreement between the two identical arms.
"""

from itertools import permutations
from statistics import median

import pytest
import torch

from qkbench.schedule import ARMS, sample_plan
from qkbench.summary import summarize

from conftest import interpreter_only
from synthetic import ROUTES, SyntheticBackend, synthetic_sweep, tiny_protocol

pytestmark = interpreter_only

def protocol(schedule: str = "interleaved", **settings) -> str:
    """The tiny protocol under ``schedule``; ``settings`` as ``tiny_protocol`` takes them."""
    return tiny_protocol("method", schedule=schedule, **settings)


THRESHOLD = 0.01  # the protocol's default drop threshold
CASES = 2


@pytest.fixture(scope="module")
def measure(tmp_path_factory):
    """Sweep the tiny protocol with a synthetic clock; sweeps of equal settings are shared."""
    done = {}

    def sweep(schedule: str = "interleaved", timing: dict | None = None, **clock) -> dict:
        timing = timing or {}
        key = (schedule, repr(sorted(timing.items())), repr(sorted(clock.items())))
        if key not in done:
            out = tmp_path_factory.mktemp("method") / "run.json"
            done[key] = synthetic_sweep(protocol(schedule, **timing), out, **clock)
        return done[key]

    return sweep


def comparison(archive: dict) -> dict:
    (only,) = archive["summary"]["comparisons"]
    return only


def orders(archive: dict) -> dict[int, tuple[str, ...]]:
    return {p["index"]: tuple(p["order"]) for p in archive["passes"]}


def used_orders(cell: dict) -> list[tuple[str, ...]]:
    """The arm orders of the passes in a cell's balanced kept set."""
    by_pass = {r["pass"]: tuple(r["order"]) for r in cell["passes"]}
    return [by_pass[s["used"]] for s in cell["slots"] if s["used"] is not None]


A_FIRST = ("A B A'", "A A' B", "A' A B", "A' B A")  # orders an identical arm samples first


@pytest.mark.parametrize(("effect", "verdict"), [(0.10, "slower"), (-0.10, "faster")],
                         ids=["10pct-slower", "10pct-faster"])
def test_true_effect_is_resolved_with_its_sign(measure, effect, verdict):
    cells = comparison(measure(effect=effect))["cases"]
    assert len(cells) == CASES
    for cell in cells:
        e = cell["effect"]
        assert (e["kept"], e["total"], e["verdict"]) == (6, 6, verdict)
        assert e["estimate"] == pytest.approx(effect, abs=0.002)
        assert e["width"] < THRESHOLD


def test_passes_rotate_through_all_six_arm_orders(measure):
    assert set(orders(measure(effect=0.10)).values()) == set(permutations(ARMS))


def test_every_comparison_times_a_baseline_a_candidate_and_the_baseline_again(measure):
    archive = measure(effect=0.10)
    baseline, candidate = ROUTES
    for p in archive["passes"]:
        for case in p["cases"]:
            (comp,) = case["comparisons"]
            arms = {a["label"]: a for a in comp["arms"]}
            assert [a["label"] for a in comp["arms"]] == p["order"]
            assert (arms["A"]["route"], arms["B"]["route"], arms["A'"]["route"]) == (
                baseline, candidate, baseline)
            assert all(len(a["samples"]) == 30 for a in comp["arms"])


# -- identical code is never called faster or slower ----------------------------------------


def test_identical_routes_on_a_perfectly_quiet_clock_are_unresolved(measure):
    # Every delta and null is exactly 0, so each delta lies on the width itself: neither
    # side of the verdict rule may count a delta equal to the width as beyond it.
    for cell in comparison(measure(effect=0.0, noise=0.0))["cases"]:
        e = cell["effect"]
        assert (e["kept"], e["estimate"], e["width"]) == (6, 0.0, 0.0)
        assert e["verdict"] == "unresolved"


@pytest.mark.parametrize("bias", [0.05, -0.02], ids=["first-slot-plus-5pct",
                                                     "first-slot-minus-2pct"])
def test_identical_routes_under_a_first_slot_bias_get_no_verdict(measure, bias):
    # Today's drop rule alone kept exactly the passes where B held the biased slot and
    # called identical code "slower +5.00 %". The orders where an identical arm runs first
    # are replaced, fail again, and the cell is unstable, naming them.
    for cell in comparison(measure(first_bias=bias))["cases"]:
        e = cell["effect"]
        assert e["verdict"] == "unstable"
        assert sorted(e["unstable_orders"]) == sorted(A_FIRST)
        assert e["estimate"] is None


@pytest.mark.parametrize("bias", [0.05, -0.02], ids=["first-slot-plus-5pct",
                                                     "first-slot-minus-2pct"])
def test_identical_routes_with_every_order_kept_are_unresolved_and_balanced(measure, bias):
    # A threshold loose enough to keep the biased nulls: the kept set holds each order
    # once, the slot effect cancels in the estimate and shows in the slot effect instead.
    comp = comparison(measure(first_bias=bias, timing={"drop_threshold": 0.1}))
    for cell in comp["cases"]:
        assert cell["effect"]["verdict"] == "unresolved"
        assert cell["effect"]["estimate"] == pytest.approx(0.0, abs=0.001)
        assert sorted(used_orders(cell)) == sorted(permutations(ARMS))
    assert comp["slot_effect"]["estimate"] == pytest.approx(bias, rel=0.05)


def test_true_effect_under_a_first_slot_bias_is_estimated_without_the_bias(measure):
    # Every label 3 % slower when sampled first; B truly 10 % slower. The median of the six
    # deltas would move by about 1.6 points; the mean log ratio cancels the bias exactly.
    for cell in comparison(measure(effect=0.10, first_bias=0.03,
                                   timing={"drop_threshold": 0.05}))["cases"]:
        e = cell["effect"]
        assert e["verdict"] == "slower"
        assert e["estimate"] == pytest.approx(0.10, abs=0.005)
        assert sorted(used_orders(cell)) == sorted(permutations(ARMS))


def test_true_effect_under_a_bias_the_drop_rule_rejects_is_unstable_never_a_verdict(measure):
    for cell in comparison(measure(effect=0.10, first_bias=0.03))["cases"]:
        assert cell["effect"]["verdict"] == "unstable"
        assert sorted(cell["effect"]["unstable_orders"]) == sorted(A_FIRST)


def test_baseline_slowed_by_running_first_is_not_reported_as_a_candidate_win(measure):
    # The baseline route is 5 % slower whenever it is sampled first; the candidate is
    # truly as fast. An A-then-B benchmark would credit the candidate with a ~5 % win.
    archive = measure(first_bias=0.05, first_biased=("A", "A'"), noise=0.0)
    a_first = next(p for p in archive["passes"] if p["order"][0] == "A")
    arms = {a["label"]: a["samples"] for a in a_first["cases"][0]["comparisons"][0]["arms"]}
    naive = torch.tensor(arms["B"]).median() / torch.tensor(arms["A"]).median() - 1
    assert naive < -0.04
    for cell in comparison(archive)["cases"]:
        assert cell["effect"]["verdict"] == "unstable"


# -- balanced replacement ----------------------------------------------------------------


def test_a_dropped_pass_is_replaced_with_its_own_order_and_the_replacement_kept(measure):
    archive = measure(null_bias={1: 0.05})
    (replacement,) = [p for p in archive["passes"] if p["replaces"] is not None]
    assert (replacement["replaces"], replacement["order"]) == (1, archive["passes"][1]["order"])
    assert replacement["index"] == 6
    for cell in comparison(archive)["cases"]:
        assert [s["used"] for s in cell["slots"]] == [0, 6, 2, 3, 4, 5]
        assert cell["effect"]["kept"] == 6
        assert sorted(used_orders(cell)) == sorted(permutations(ARMS))
        assert cell["effect"]["verdict"] == "unresolved"
    assert comparison(archive)["drops"] == {"dropped": CASES, "total": 7 * CASES,
                                            "replacements": CASES, "unstable": 0}


def test_a_replacement_pass_measures_only_the_cases_that_need_it(measure):
    archive = measure(null_bias={(2, 1): 0.05})  # pass 2's second case (T=3) alone
    (replacement,) = [p for p in archive["passes"] if p["replaces"] is not None]
    assert (replacement["replaces"], replacement["case_keys"]) == (2, ["tiny/T3"])
    assert [c["key"] for c in replacement["cases"]] == ["tiny/T3"]
    t1, t3 = comparison(archive)["cases"]
    assert (t1["slots"][2]["used"], t3["slots"][2]["used"]) == (2, 6)
    assert [t1["effect"]["verdict"], t3["effect"]["verdict"]] == ["unresolved"] * 2


def test_an_order_that_always_disagrees_is_unstable_and_named(measure):
    archive = measure(order_null_bias={("B", "A", "A'"): 0.03})
    for cell in comparison(archive)["cases"]:
        assert cell["effect"]["verdict"] == "unstable"
        assert cell["effect"]["unstable_orders"] == ["B A A'"]
        (slot,) = [s for s in cell["slots"] if s["status"] == "unstable"]
        assert slot["attempts"] == 3  # the primary pass and the two retries
    assert {p["replaces"] for p in archive["passes"] if p["replaces"] is not None} == {2}


def test_retries_bound_the_replacement_passes(measure):
    archive = measure(order_null_bias={("B", "A", "A'"): 0.03}, timing={"retries": 0})
    assert all(p["replaces"] is None for p in archive["passes"])
    for cell in comparison(archive)["cases"]:
        assert cell["effect"]["unstable_orders"] == ["B A A'"]
        assert cell["effect"]["verdict"] == "unstable"


def test_instrument_width_is_the_worst_null_of_every_measured_pass(measure):
    comp = comparison(measure(null_bias={1: 0.05, 2: 0.005}))  # pass 1 dropped, replaced
    for cell in comp["cases"]:
        assert cell["effect"]["width"] == pytest.approx(0.05, abs=0.0005)
        assert cell["effect"]["verdict"] == "unresolved"
    assert comp["width"]["worst"] == pytest.approx(0.05, abs=0.0005)


def test_an_archive_of_schema_3_keeps_the_width_of_its_kept_passes(measure):
    archive = measure(null_bias={1: 0.05, 2: 0.005})
    (comp,) = summarize({**archive, "schema_version": 3})["comparisons"]
    for cell in comp["cases"]:
        assert cell["effect"]["width"] == pytest.approx(0.005, abs=0.0005)
    assert comp["width"]["worst"] == pytest.approx(0.005, abs=0.0005)


# One arm of every comparison struck 5 % slower, whichever it is: the drop rule keeps the
# passes where it was B, and ten retries let nearly every slot find one.
ONE_ARM = {"one_arm": 0.05, "noise": 1e-3, "seed": 3}
ONE_ARM_TIMING = {"retries": 10, "tokens": [1, 2, 3, 4, 5, 6]}


def one_arm_cells(tmp_path, effect: float = 0.0) -> list[dict]:
    text = tiny_protocol("one-arm", tokens=ONE_ARM_TIMING["tokens"],
                         retries=ONE_ARM_TIMING["retries"])
    return comparison(synthetic_sweep(text, tmp_path / "run.json", effect=effect,
                                      **ONE_ARM))["cases"]


def test_identical_code_struck_on_one_arm_per_pass_is_never_called_slower(tmp_path):
    cells = one_arm_cells(tmp_path)
    judged = [c for c in cells if c["effect"]["estimate"] is not None]
    # The trap is set: the kept passes all carry the strike on B, beyond their own nulls.
    assert len(judged) >= 4
    for cell in judged:
        kept = [r for r in cell["passes"] if r["kept"] and r["pass"] in
                {s["used"] for s in cell["slots"]}]
        assert min(r["delta"] for r in kept) > max(abs(r["null"]) for r in kept)
    assert [c["effect"]["verdict"] for c in cells if c["effect"]["verdict"]
            in ("faster", "slower")] == []


def test_a_true_gain_struck_on_one_arm_per_pass_is_never_called_slower(tmp_path):
    verdicts = {c["effect"]["verdict"] for c in one_arm_cells(tmp_path, effect=-0.03)}
    assert "slower" not in verdicts


def test_delta_inside_the_instrument_width_is_unresolved(measure):
    # A true 0.3 % slowdown, measured by an instrument 0.5 % wide.
    comp = comparison(measure(effect=0.003, null_bias={2: 0.005}))
    for cell in comp["cases"]:
        assert cell["effect"]["estimate"] == pytest.approx(0.003, abs=0.001)
        assert cell["effect"]["verdict"] == "unresolved"


def test_a_candidate_spread_wider_than_the_width_is_unresolved(measure):
    # The median delta lies beyond the width, but one order's delta does not: the
    # verdict covers the candidate's spread, not only the baseline's agreement.
    comp = comparison(measure(effect=0.01, first_bias=-0.012, first_biased=("B",),
                              null_bias={0: 0.004}))
    for cell in comp["cases"]:
        deltas = [r["delta"] for r in cell["passes"]]
        assert min(deltas) < cell["effect"]["width"] < median(deltas)
        assert cell["effect"]["verdict"] == "unresolved"


# -- schedule and synchronisation --------------------------------------------------------


def test_interleaved_schedule_keeps_a_drifting_clock_out_of_the_null_arm(measure):
    comp = comparison(measure(drift=0.2))
    nulls = [abs(r["null"]) for cell in comp["cases"] for r in cell["passes"]]
    assert max(nulls) < THRESHOLD / 2
    assert comp["drops"]["dropped"] == 0
    assert all(cell["effect"]["verdict"] == "unresolved" for cell in comp["cases"])


def test_blocked_schedule_shows_a_drifting_clock_in_the_null_arm(measure):
    comp = comparison(measure("blocked", drift=0.2))
    first = [r for cell in comp["cases"] for r in cell["passes"] if r["pass"] < 6]
    assert min(abs(r["null"]) for r in first) > 0.05
    assert all(cell["effect"]["verdict"] == "unstable" for cell in comp["cases"])


def test_no_arm_systematically_follows_a_synchronisation(measure):
    # Every sample right after a host sync is 30 % slow, and a sync comes every 2 rounds:
    # half the samples of the order's first arm would follow one, enough to move its
    # median (every 3 rounds a third would, and the median hid them). The round after
    # each sync is discarded, so the identical arms agree and nothing is resolved.
    comp = comparison(measure(after_sync=0.3, timing={"chunk": 2}))
    assert comp["drops"]["dropped"] == 0
    for cell in comp["cases"]:
        assert cell["effect"]["verdict"] == "unresolved"
        assert abs(cell["effect"]["estimate"]) < 0.001


@pytest.mark.parametrize(("schedule", "chunk", "warmup"), [
    ("interleaved", 2, 2), ("interleaved", 3, 2), ("blocked", 2, 2), ("blocked", 3, 2),
    # No warm-up: a blocked arm's first round may itself follow a synchronisation.
    ("interleaved", 2, 0), ("blocked", 2, 0), ("blocked", 3, 0)])
def test_the_round_after_every_synchronisation_is_not_timed(schedule, chunk, warmup):
    # The tiny protocol's samples; a round is one sample of each arm in turn (interleaved)
    # or one sample (blocked).
    plan = sample_plan(len(ARMS), warmup, 30, schedule, chunk)
    round_len = len(ARMS) if schedule == "interleaved" else 1
    followed = [p for p in plan.sync_after if p + 1 < len(plan.arms)]
    assert followed  # syncs inside the plan, not only the final one
    for p in followed:
        assert not any(plan.timed[p + 1:p + 1 + round_len]), f"timed after the sync at {p}"


@pytest.mark.parametrize("schedule", ["interleaved", "blocked"])
def test_without_warm_up_the_first_round_follows_the_setup_synchronisation_and_is_not_timed(
        schedule):
    # The backend synchronises after preparing the arms (graph capture, priming), so the
    # plan's first round starts on an idle device whatever the warm-up.
    plan = sample_plan(len(ARMS), 0, 30, schedule, 64)
    round_len = len(ARMS) if schedule == "interleaved" else 1
    assert not any(plan.timed[:round_len])
    assert all(plan.timed[round_len:2 * round_len])


# -- telemetry -----------------------------------------------------------------------------


def test_a_moved_clock_is_flagged_and_kept_by_default(measure):
    comp = comparison(measure(card={3: {"sm_clock_mhz": 1500}}))
    for cell in comp["cases"]:
        (flagged,) = [r for r in cell["passes"] if r["flags"]]
        assert flagged["pass"] == 3 and flagged["kept"]
        assert "SM clock moved 1500-1980 MHz" in flagged["flags"][0]
        assert cell["effect"]["verdict"] == "unresolved"
    assert comp["flagged_rows"] == CASES


def test_drop_throttled_turns_a_throttle_flag_into_a_replaced_drop(measure):
    archive = measure(card={3: {"throttle": ["sw_power_cap"], "throttle_mask": 4}},
                      timing={"drop_throttled": True})
    for cell in comparison(archive)["cases"]:
        dropped = [r for r in cell["passes"] if not r["kept"]]
        assert [(r["pass"], r["drop_reason"]) for r in dropped] == [(3, "throttled")]
        assert cell["slots"][3]["used"] == 6
        assert cell["effect"]["verdict"] == "unresolved"


def test_an_idle_throttle_reason_is_not_a_flag(measure):
    comp = comparison(measure(card={3: {"throttle": ["gpu_idle"], "throttle_mask": 1}}))
    assert comp["flagged_rows"] == 0
    assert all(cell["effect"]["verdict"] == "unresolved" for cell in comp["cases"])


def _case_results(cache: str, l2_bytes: int | None, tmp_path) -> list[dict]:
    """The tiny protocol's passes under ``cache``, on a synthetic device with this L2."""
    text = protocol(cache=cache)
    backend = SyntheticBackend()
    backend.l2_bytes = l2_bytes
    run = synthetic_sweep(text, tmp_path / "run.json", backend)
    return [c for p in run["passes"] for c in p["cases"]]


def test_cold_cache_rotates_enough_input_sets_to_sweep_twice_the_l2(tmp_path):
    l2 = 1000
    for c in _case_results("cold", l2, tmp_path):
        assert c["input_sets"] == -(-2 * l2 // c["input_set_bytes"])
        assert c["input_sets"] > 1 and c["input_sets"] * c["input_set_bytes"] >= 2 * l2
        # Every set is launched in each replay, whatever inner_reps says.
        assert c["launches_per_replay"] == c["input_sets"]


def test_hot_cache_reuses_one_input_set(tmp_path):
    for c in _case_results("hot", 1000, tmp_path):
        assert (c["input_sets"], c["launches_per_replay"]) == (1, 1)


# -- placement -------------------------------------------------------------------------------


def _placements(archive: dict) -> list[tuple[tuple[str, ...], dict]]:
    """(sampling order, placement record) of every comparison timed in a run."""
    return [(tuple(p["order"]), comp["placement"]) for p in archive["passes"]
            for case in p["cases"] for comp in case["comparisons"]]


def test_allocation_order_is_seeded_and_independent_of_the_sampling_order(measure):
    placements = _placements(measure(effect=0.10))
    assert all(sorted(pl["allocation_order"]) == sorted(ARMS) for _, pl in placements)
    assert any(list(order) != pl["allocation_order"] for order, pl in placements)
    assert len({tuple(pl["allocation_order"]) for _, pl in placements}) > 1


def test_padding_is_allocated_before_every_arm(measure):
    for _, pl in _placements(measure(effect=0.10)):
        assert set(pl["padding_bytes"]) == set(ARMS)
        assert all(n > 0 for n in pl["padding_bytes"].values())
    assert len({pl["padding_bytes"]["A"] for _, pl in _placements(measure(effect=0.10))}) > 1


OUT_OF_PLACE = tiny_protocol("method", geometry="inplace = false")


def test_each_out_of_place_buffer_records_its_offset_and_moves_between_passes(tmp_path):
    run = synthetic_sweep(OUT_OF_PLACE, tmp_path / "run.json")
    offsets = [pl["offsets_mod_2mib"] for _, pl in _placements(run)]
    # q_out and k_out of one input set, per arm.
    assert all(len(o[label]) == 2 for o in offsets for label in ARMS)
    assert all(0 <= x < 2 << 20 for o in offsets for xs in o.values() for x in xs)
    assert len({o["A"][0] for o in offsets}) > 1


# -- crossover and dispatch bound -------------------------------------------------------------


def test_a_bound_with_no_crossover_in_range_is_censored(measure):
    comp = comparison(measure(effect=-0.5))
    assert comp["dispatch_bound"] == {"bound": 3, "censored": True}
    assert comp["crossover"]["tiny"] == {"faster_through": 3, "stops_at": None,
                                         "censored": True}


def test_a_bound_never_crosses_an_unstable_cell(tmp_path):
    # T = 1, 3, 5, the candidate twice as fast everywhere; the T = 3 cell disagrees in
    # pass 2 (order B A A') and in both its replacements (passes 6 and 7, where it is the
    # only case), so that cell is unstable and ends the run.
    text = tiny_protocol("method", (1, 3, 5))
    run = synthetic_sweep(text, tmp_path / "run.json", effect=-0.5,
                          null_bias={(2, 1): 0.05, (6, 0): 0.05, (7, 0): 0.05})
    comp = comparison(run)
    assert [c["effect"]["verdict"] for c in comp["cases"]] == ["faster", "unstable", "faster"]
    assert comp["dispatch_bound"] == {"bound": 1, "censored": False}
    assert comp["crossover"]["tiny"] == {"faster_through": 1, "stops_at": 3, "censored": False}
