"""scripts/fuzz_routes.py: its cases pass on the shipped kernels, and a route that differs
by one bit, or raises, is reported."""

import json

import pytest
import torch

from qkbench.accuracy import INT_VIEW, bits
from qkbench.kernels import qk_norm_rope

from conftest import interpreter_only
from helpers import script


@pytest.fixture(scope="module")
def fuzz():
    return script("fuzz_routes")


def tensors(inputs, around: tuple) -> tuple[torch.Tensor, ...]:
    """Every tensor a drawn case holds: its arguments, and the memory around q and k."""
    return (inputs.q, inputs.k, inputs.q_weight, inputs.k_weight, inputs.positions,
            inputs.cos_sin_cache, *around)


def quick_seed(fuzz, first: int = 0) -> int:
    """The first seed from ``first`` whose case has k elements and costs little: few
    elements, and no second fused call or reference."""
    for seed in range(first, first + 1000):
        case = fuzz.draw(seed)
        if (0 < case.tokens * case.heads_k * case.head_dim <= 256
                and not case.also_out_of_place and not fuzz.well_behaved(case)):
            return seed
    raise AssertionError("no quick seed")


@pytest.fixture
def fused_k_one_bit_off(monkeypatch):
    """The fused op with the lowest bit of the first element of its k output flipped."""

    def one_bit_off(*args, **kwargs):
        q, k = qk_norm_rope(*args, **kwargs)
        if k.numel():
            first = k[(0,) * k.dim()]
            first.view(INT_VIEW[k.dtype]).bitwise_xor_(1)
        return q, k

    monkeypatch.setattr("qkbench.kernels.qk_norm_rope", one_bit_off)


@pytest.fixture
def split_raises(monkeypatch):
    def raises(*args, **kwargs):
        raise RuntimeError("split broke")

    monkeypatch.setattr("qkbench.kernels.qk_norm_rope_split", raises)


@interpreter_only
def test_seeds_pass_on_the_shipped_kernels(fuzz, capsys):
    assert fuzz.main(["--seeds", "0", "6"]) == 0
    assert capsys.readouterr().out.startswith("6 cases from seed 0, 0 with problems, ")


@interpreter_only
def test_one_bit_of_k_off_in_the_fused_route_fails_its_case(fuzz, fused_k_one_bit_off,
                                                             capsys):
    seed = quick_seed(fuzz)
    assert fuzz.main(["--seeds", str(seed), "1"]) == 1
    problem, summary = capsys.readouterr().out.splitlines()
    line = json.loads(problem)
    assert line["case"]["seed"] == seed
    assert any(p.startswith("k bits differ between fused and split: 1 of ")
               for p in line["problems"])
    assert not any(p.startswith("q bits differ") for p in line["problems"])
    assert summary.startswith(f"1 cases from seed {seed}, 1 with problems, ")


def test_a_seed_draws_the_same_case_and_input_bits_every_time(fuzz):
    for seed in range(20):
        case = fuzz.draw(seed)
        assert case == fuzz.draw(seed)
        first, again = (tensors(*fuzz.make_inputs(case)) for _ in range(2))
        for x, y in zip(first, again, strict=True):
            assert x.shape == y.shape and x.stride() == y.stride() and x.dtype == y.dtype
            assert torch.equal(bits(x) if x.is_floating_point() else x,
                               bits(y) if y.is_floating_point() else y)
    assert all(fuzz.draw(seed) != fuzz.draw(0) for seed in range(1, 20))  # the seed matters


@interpreter_only
def test_an_exception_in_a_route_is_its_cases_problem(fuzz, split_raises, capsys):
    seed = quick_seed(fuzz)
    assert fuzz.main(["--seeds", str(seed), "1"]) == 1
    line = json.loads(capsys.readouterr().out.splitlines()[0])
    assert line["problems"] == ["split raised RuntimeError: split broke"]


@interpreter_only
def test_out_gets_the_problem_lines_printed(fuzz, split_raises, tmp_path, capsys):
    seed = quick_seed(fuzz)
    out = tmp_path / "problems.jsonl"
    assert fuzz.main(["--seeds", str(seed), "1", "--out", str(out)]) == 1
    printed = capsys.readouterr().out.splitlines()
    assert out.read_text().splitlines() == printed[:1]


def test_a_spent_budget_starts_no_case(fuzz, capsys):
    assert fuzz.main(["--seeds", "0", "5", "--budget", "0"]) == 0
    assert capsys.readouterr().out.startswith("0 cases from seed 0, 0 with problems, ")


@interpreter_only
def test_every_drawn_call_passes_the_ops_validation(fuzz):
    """The validation of both routes, without their kernels, on many more seeds than a run
    covers: no drawn call is one the op refuses."""
    from qkbench.kernels.calls import SLOTS, written
    from qkbench.kernels.checks import check_qk_norm_rope
    from qkbench.kernels.overlap import Footprint

    for seed in range(2000):
        case = fuzz.draw(seed)
        i, _ = fuzz.make_inputs(case)
        q_out, k_out, _ = fuzz.outputs(case, i.q, i.k)
        options = fuzz.options(case)
        check_qk_norm_rope(i.q, i.k, i.q_weight, i.k_weight, i.positions, i.cos_sin_cache,
                           q_out=q_out, k_out=k_out, **options)
        tensors = (i.q, i.k, q_out, k_out, i.q_weight, i.k_weight, i.cos_sin_cache,
                   i.positions)
        Footprint(tensors, written(options["inplace"], tensors)).check(SLOTS, tensors)
