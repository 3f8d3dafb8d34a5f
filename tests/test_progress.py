"""The plain progress line of a finished pass, and the drops it counts."""

from qkbench.progress import pass_drops, pass_line


def _pass(nulls: list[float | None]) -> dict:
    """A pass whose n-th case's null arm disagrees by ``nulls[n]`` (None: invalid)."""
    cases = []
    for i, null in enumerate(nulls):
        if null is None:
            comp = {"status": "invalid", "invalid_routes": ["fused"]}
        else:
            comp = {"status": "ok", "arms": [
                {"label": "A", "samples": [1.0, 1.0, 1.0]},
                {"label": "B", "samples": [0.5, 0.5, 0.5]},
                {"label": "A'", "samples": [1.0 + null] * 3}]}
        cases.append({"key": f"g/T{i}", "comparisons": [comp]})
    return {"index": 2, "order": ["B", "A", "A'"], "status": "ok", "cases": cases}


def test_a_case_whose_null_exceeds_the_threshold_is_counted_as_dropped():
    assert pass_drops(_pass([0.001, 0.02, -0.03]), threshold=0.01) == (2, 3)


def test_a_case_at_the_threshold_is_kept():
    # Dyadic numbers: A' at 1 + 2**-7 over A at 1.0 gives a null of exactly 2**-7.
    null = 2.0**-7
    assert (1.0 + null) / 1.0 - 1.0 == null
    assert pass_drops(_pass([null]), threshold=null) == (0, 1)


def test_an_invalid_comparison_is_not_counted():
    assert pass_drops(_pass([0.0, None]), threshold=0.01) == (0, 1)


def test_a_failed_pass_counts_nothing():
    assert pass_drops({"index": 0, "status": "failed"}, threshold=0.01) == (0, 0)


def test_the_line_names_pass_order_elapsed_and_drops_so_far():
    assert pass_line(_pass([0.0]), 6, 75.4, 1, 5) == (
        "pass 3/6: order B A A'; elapsed 1m15s; drops so far 1 of 5 (pass, case)")


def test_the_line_says_when_a_pass_failed():
    line = pass_line({"index": 0, "status": "failed"}, 6, 2.04, 0, 0)
    assert line == "pass 1/6 FAILED: order -; elapsed 2.0s; drops so far 0 of 0 (pass, case)"
