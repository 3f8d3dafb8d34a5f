"""A candidate that changes how fast the baseline runs beside it: what the null arm cannot
see (A and A' run beside the same B), set out per candidate and flagged in the report."""

import pytest

from qkbench import report
from qkbench.neighbours import baseline_beside

from conftest import interpreter_only
from synthetic import synthetic_sweep, tiny_protocol

ROUTES = ("split", "fused", "fused-pdl")
FLAG = "larger than the width"


def _case(tokens: int, baseline_us: dict[str, float]) -> dict:
    """A case record whose baseline arms read ``baseline_us[candidate]`` beside each
    candidate (the candidate's own arm at half that)."""
    return {"key": f"g/T{tokens}", "case": {"tokens": tokens}, "comparisons": [
        {"status": "ok", "candidate": cand, "arms": [
            {"label": label, "samples": [us * (0.5 if label == "B" else 1) * 1e-6] * 3}
            for label in ("A", "B", "A'")]}
        for cand, us in baseline_us.items()]}


def test_baseline_beside_each_candidate_is_set_against_beside_the_first_per_token_band():
    """Planted: beside fused-pdl the split arms read 10 % faster at T = 1 and 5 % at T = 128
    than beside fused; beside eager they read the same."""
    archive = {"protocol": {"resolved": {"routes": ["split", "fused", "fused-pdl", "eager"]}},
               "passes": [{"cases": [
                   _case(1, {"fused": 4.0, "fused-pdl": 3.6, "eager": 4.0}),
                   _case(128, {"fused": 6.0, "fused-pdl": 5.7, "eager": 6.0})]}] * 2}
    rows = {(r["candidate"], r["small"]): r for r in baseline_beside(archive)}
    assert list(rows) == [("fused-pdl", True), ("fused-pdl", False), ("eager", True),
                          ("eager", False)]
    assert rows["fused-pdl", True]["median"] == pytest.approx(-0.10)
    assert rows["fused-pdl", False]["median"] == pytest.approx(-0.05)
    assert rows["eager", True]["median"] == pytest.approx(0.0)
    assert rows["fused-pdl", True]["pairs"] == 2


def test_a_case_without_the_first_candidates_comparison_sets_nothing_against_it():
    archive = {"protocol": {"resolved": {"routes": ["split", "fused", "fused-pdl"]}},
               "passes": [{"cases": [_case(1, {"fused-pdl": 3.6})]}]}
    assert baseline_beside(archive) == []


def _swept(tmp_path, **clock) -> dict:
    text = tiny_protocol("neighbours", routes=ROUTES)
    return synthetic_sweep(text, tmp_path / "run.json", **clock)


@interpreter_only
def test_a_candidate_that_speeds_up_its_neighbour_is_flagged_with_its_size(tmp_path):
    """Planted: the split arms run 8 % faster in the fused-pdl comparison (the second of
    each cell) than in the fused one; the null arm sees nothing."""
    archive = _swept(tmp_path, baseline_effects=[0.0, -0.08])
    (line,) = [line for line in report.neighbour_lines(archive) if "T <= 64" in line]
    assert line.startswith("split beside fused-pdl against beside fused, T <= 64: -8.0")
    assert FLAG in line


@interpreter_only
def test_identical_neighbours_are_never_flagged(tmp_path):
    archive = _swept(tmp_path)
    lines = report.neighbour_lines(archive)
    assert lines and not any(FLAG in line for line in lines)
    assert all(abs(r["median"]) < 0.001 for r in baseline_beside(archive))
