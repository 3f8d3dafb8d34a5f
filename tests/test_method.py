"""The null-arm method (SPEC section 4) against a model clock whose truth is known.

Every sweep here runs the real manager, worker, verification and summary in process;
only the timing comes from ``SyntheticBackend``: a true effect, an order bias, a drifting
clock or a planted disagreement between the two identical arms.
"""

from itertools import permutations

import pytest
import torch

from qkbench import runner
from qkbench.protocol import parse
from qkbench.schedule import ARMS

from conftest import interpreter_only
from synthetic import SyntheticBackend

pytestmark = interpreter_only

PROTOCOL = """
name = "method"
routes = ["split", "fused"]
tokens = [1, 3]
max_position = 64

[timing]
passes = 6
warmup = 2
samples = 30
inner_reps = 1
isolation = "inprocess"
schedule = "{schedule}"

[[geometry]]
name = "tiny"
heads_q = 2
heads_k = 1
head_dim = 64
"""
THRESHOLD = 0.01  # the protocol's default drop threshold
CASES = 2


@pytest.fixture(scope="module")
def measure(tmp_path_factory):
    """Sweep the tiny protocol with a synthetic clock; sweeps of equal settings are shared."""
    done = {}

    def sweep(schedule: str = "interleaved", **clock) -> dict:
        key = (schedule, repr(sorted(clock.items())))
        if key not in done:
            backend = SyntheticBackend(**clock)
            out = tmp_path_factory.mktemp("method") / "run.json"
            done[key] = runner.sweep(parse(PROTOCOL.format(schedule=schedule)),
                                     torch.device("cpu"), out, backend=backend,
                                     events=backend.events())
        return done[key]

    return sweep


def comparison(archive: dict) -> dict:
    (only,) = archive["summary"]["comparisons"]
    return only


def orders(archive: dict) -> dict[int, tuple[str, ...]]:
    return {p["index"]: tuple(p["order"]) for p in archive["passes"]}


def kept_passes(cell: dict) -> set[int]:
    return {r["pass"] for r in cell["passes"] if r["kept"]}


@pytest.mark.parametrize(("effect", "verdict"), [(0.10, "slower"), (-0.10, "faster")],
                         ids=["10pct-slower", "10pct-faster"])
def test_true_effect_is_resolved_with_its_sign(measure, effect, verdict):
    cells = comparison(measure(effect=effect))["cases"]
    assert len(cells) == CASES
    for cell in cells:
        e = cell["effect"]
        assert (e["kept"], e["total"], e["verdict"]) == (6, 6, verdict)
        assert e["median"] == pytest.approx(effect, abs=0.002)
        assert e["width"] < THRESHOLD


def test_passes_rotate_through_all_six_arm_orders(measure):
    assert set(orders(measure(effect=0.10)).values()) == set(permutations(ARMS))


def test_every_comparison_times_a_baseline_a_candidate_and_the_baseline_again(measure):
    archive = measure(effect=0.10)
    for p in archive["passes"]:
        for case in p["cases"]:
            (comp,) = case["comparisons"]
            arms = {a["label"]: a for a in comp["arms"]}
            assert [a["label"] for a in comp["arms"]] == p["order"]
            assert (arms["A"]["route"], arms["B"]["route"], arms["A'"]["route"]) == (
                "split", "fused", "split")
            assert all(len(a["samples"]) == 30 and len(a["warmup"]) == 2 for a in comp["arms"])


def test_first_position_bias_drops_the_passes_where_an_identical_arm_ran_first(measure):
    archive = measure(first_bias=0.05)
    candidate_first = {i for i, order in orders(archive).items() if order[0] == "B"}
    assert len(candidate_first) == 2
    for cell in comparison(archive)["cases"]:
        assert kept_passes(cell) == candidate_first
        for r in cell["passes"]:
            if r["pass"] not in candidate_first:
                assert abs(r["null"]) == pytest.approx(0.05, rel=0.1)
    assert comparison(archive)["drops"] == {"dropped": 4 * CASES, "total": 6 * CASES}


def test_baseline_slowed_by_running_first_is_not_reported_as_a_candidate_win(measure):
    # The baseline route is 5 % slower whenever it is sampled first; the candidate is
    # truly as fast. An A-then-B benchmark would credit the candidate with a ~5 % win.
    # Noise-free, so that only the bias could move the verdict (with noise, two kept
    # passes give a width as small as the noise itself, and a verdict either way).
    archive = measure(first_bias=0.05, first_biased=("A", "A'"), noise=0.0)
    a_first = next(p for p in archive["passes"] if p["order"][0] == "A")
    arms = {a["label"]: a["samples"] for a in a_first["cases"][0]["comparisons"][0]["arms"]}
    naive = torch.tensor(arms["B"]).median() / torch.tensor(arms["A"]).median() - 1
    assert naive < -0.04
    for cell in comparison(archive)["cases"]:
        assert cell["effect"]["verdict"] == "unresolved"
        assert cell["effect"]["median"] == pytest.approx(0.0, abs=1e-12)
        assert kept_passes(cell) == {i for i, o in orders(archive).items() if o[0] == "B"}


def test_planted_null_disagreement_drops_exactly_those_passes(measure):
    # Passes 1 and 4 disagree past the 1 % threshold; pass 2's 0.5 % stays within it.
    archive = measure(null_bias={1: 0.05, 4: -0.03, 2: 0.005})
    comp = comparison(archive)
    for cell in comp["cases"]:
        assert kept_passes(cell) == {0, 2, 3, 5}
        assert (cell["effect"]["kept"], cell["effect"]["total"]) == (4, 6)
    assert comp["drops"] == {"dropped": 2 * CASES, "total": 6 * CASES}


def test_instrument_width_is_the_worst_kept_null(measure):
    comp = comparison(measure(null_bias={1: 0.05, 4: -0.03, 2: 0.005}))
    for cell in comp["cases"]:
        assert cell["effect"]["width"] == pytest.approx(0.005, abs=0.0005)
    assert comp["width"]["worst"] == pytest.approx(0.005, abs=0.0005)


def test_delta_inside_the_instrument_width_is_unresolved(measure):
    # A true 0.3 % slowdown, measured by an instrument 0.5 % wide.
    comp = comparison(measure(effect=0.003, null_bias={2: 0.005}))
    for cell in comp["cases"]:
        assert cell["effect"]["median"] == pytest.approx(0.003, abs=0.001)
        assert cell["effect"]["verdict"] == "unresolved"


def test_interleaved_schedule_keeps_a_drifting_clock_out_of_the_null_arm(measure):
    comp = comparison(measure(drift=0.2))
    nulls = [abs(r["null"]) for cell in comp["cases"] for r in cell["passes"]]
    assert max(nulls) < THRESHOLD / 2
    assert comp["drops"]["dropped"] == 0


def test_blocked_schedule_shows_a_drifting_clock_in_the_null_arm(measure):
    comp = comparison(measure("blocked", drift=0.2))
    nulls = [abs(r["null"]) for cell in comp["cases"] for r in cell["passes"]]
    assert min(nulls) > 0.05
    assert comp["drops"] == {"dropped": 6 * CASES, "total": 6 * CASES}


def _case_results(cache: str, l2_bytes: int | None, tmp_path) -> list[dict]:
    """Two passes of the tiny protocol under ``cache``, on a synthetic device with this L2."""
    text = PROTOCOL.format(schedule="interleaved").replace(
        "inner_reps = 1", f'inner_reps = 1\ncache = "{cache}"\npasses = 2').replace(
        "passes = 6\n", "")
    backend = SyntheticBackend()
    backend.l2_bytes = l2_bytes
    run = runner.sweep(parse(text), torch.device("cpu"), tmp_path / "run.json",
                       backend=backend, events=backend.events())
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
