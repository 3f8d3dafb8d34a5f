"""The route registry: every built-in route computes the operation and is checked first."""

import re
from dataclasses import replace

import pytest
import torch

from qkbench.case import Case, Geometry, make_inputs
from qkbench.errors import RouteError
from qkbench.routes import BUILTIN, Route, resolve
from qkbench.verify import verify

PLAIN = Geometry("plain", heads_q=2, heads_k=1, head_dim=64, rotary_dim=32,
                 weight_mode="offset", inplace=False)
MROPE = replace(PLAIN, name="mrope", rotary_dim=64, mrope_section=(8, 12, 12),
                mrope_layout="interleaved", inplace=True)


@pytest.mark.parametrize("geometry", [PLAIN, MROPE], ids=lambda g: g.name)
def test_every_builtin_route_passes_verification(geometry, device):
    inputs = make_inputs(Case(geometry, 3, max_position=64), 0, device)
    report = verify([resolve(name) for name in BUILTIN], inputs, geometry.inplace)
    assert {name: entry["ok"] for name, entry in report.items()} == dict.fromkeys(BUILTIN, True)
    assert report["fused"]["exact_with"] == "split"


def eager_scaled(factor: float):
    """The eager route with its q output scaled by ``factor``: a route off the oracle."""
    def op(q, k, *args, **options):
        q_out, k_out = resolve("eager").op(q, k, *args, **options)
        q_out.mul_(factor)
        return q_out, k_out

    return op


def test_a_wrong_route_fails_verification(device):
    inputs = make_inputs(Case(PLAIN, 3, max_position=64), 0, device)
    report = verify([resolve("split"), Route("wrong", eager_scaled(1.01))], inputs, False)
    assert report["split"]["ok"] and not report["wrong"]["ok"]


def test_a_route_that_raises_fails_verification_naming_the_error(device):
    inputs = make_inputs(Case(PLAIN, 3, max_position=64), 0, device)

    def broken(*args, **options):
        raise RuntimeError("no kernel for this")

    report = verify([Route("broken", broken)], inputs, False)
    assert report["broken"] == {"ok": False, "error": "RuntimeError: no kernel for this"}


def one_bit_off_in_the_shipped_group():
    """The fused route with one low bit of q flipped, claiming the shipped kernels' group."""
    def op(*args, **options):
        q_out, k_out = resolve("fused").op(*args, **options)
        q_out.view(-1)[:1].view(torch.int16).bitwise_xor_(1)
        return q_out, k_out

    return Route("one-bit-off", op, resolve("fused").exact_group)


@pytest.mark.parametrize("first", [True, False], ids=["listed-first", "listed-last"])
def test_a_user_route_claiming_the_shipped_group_is_judged_against_the_shipped_kernels(
        first, device):
    inputs = make_inputs(Case(PLAIN, 3, max_position=64), 0, device)
    shipped, bad = [resolve("fused"), resolve("split")], one_bit_off_in_the_shipped_group()
    report = verify([bad, *shipped] if first else [*shipped, bad], inputs, False)
    assert {name: e["ok"] for name, e in report.items()} == {
        "one-bit-off": False, "fused": True, "split": True}
    assert report["one-bit-off"]["exact_with"] == "fused"


def fresh_results_only(q, k, *args, inplace=True, q_out=None, k_out=None, **options):
    """Right values in new tensors, neither q and k (in place) nor the outputs given."""
    return resolve("eager").op(q.clone(), k.clone(), *args, inplace=True, **options)


@pytest.mark.parametrize("inplace", [True, False], ids=["in-place", "out-of-place"])
def test_a_route_that_does_not_write_where_the_op_says_is_wrong(inplace, device):
    inputs = make_inputs(Case(PLAIN, 3, max_position=64), 0, device)
    report = verify([Route("fresh", fresh_results_only)], inputs, inplace)
    assert not report["fresh"]["ok"]


def test_a_route_returning_another_dtype_than_its_inputs_is_wrong(device):
    inputs = make_inputs(Case(PLAIN, 3, max_position=64), 0, device)

    def widened(*args, **options):
        return tuple(x.float() for x in resolve("eager").op(*args, **options))

    report = verify([Route("fp32", widened)], inputs, False)
    assert report["fp32"] == {"ok": False, "error": "ValueError: its q output is torch.float32, "
                                                    "not q's torch.bfloat16"}


def test_a_user_route_is_loaded_from_module_and_callable():
    route = resolve("qkbench.routes:eager_op")
    assert route.name == "qkbench.routes:eager_op" and route.exact_group is None


@pytest.mark.parametrize(("name", "reason"), [
    ("nosuch", "unknown route 'nosuch'"),
    ("qkbench.routes:no_such_op", "cannot be loaded"),
    ("qkbench.routes:BUILTIN", "is not callable"),
])
def test_a_bad_route_name_is_a_route_error(name, reason):
    with pytest.raises(RouteError, match=reason):
        resolve(name)


def test_a_route_off_the_oracle_is_described_in_a_sentence_with_the_bound(device):
    from qkbench.report import route_problem

    inputs = make_inputs(Case(PLAIN, 3, max_position=64), 0, device)
    report = verify([Route("wrong", eager_scaled(1.05))], inputs, False)
    sentence = route_problem("wrong", "plain/T3", report["wrong"])
    assert re.fullmatch(r"route wrong is wrong on plain/T3: its q output is up to \S+ of a "
                        r"row's scale off the FP64 oracle \(bound 1\.6e-02\)", sentence), sentence


# What the plain implementation handles: both styles, full and partial rotary, in place and
# out of place, the offset weight, an fp16 activation table, MRoPE.
PLAIN_CASES = {
    "gptj-partial-fp16": (replace(PLAIN, name="gptj", style="gptj", rotary_dim=32,
                                  inplace=True), "float16"),
    "neox-full-inplace": (replace(PLAIN, name="full", rotary_dim=None, weight_mode="plain",
                                  inplace=True), "bfloat16"),
    "neox-partial-offset": (replace(PLAIN, name="text", rotary_dim=16, weight_mode="offset",
                                    inplace=False), "bfloat16"),
    "mrope-interleaved": (MROPE, "bfloat16"),
}


@pytest.mark.parametrize(("geometry", "dtype"), PLAIN_CASES.values(), ids=PLAIN_CASES.keys())
def test_compiled_is_torch_compile_of_the_plain_op_checked_against_the_oracle_only(
        geometry, dtype, device):
    inputs = make_inputs(Case(geometry, 5, dtype=dtype, table_dtype="activation",
                              max_position=64), 1, device)
    compiled = resolve("compiled")
    assert compiled.exact_group is None and compiled.traffic is None
    report = verify([resolve("fused"), compiled], inputs, geometry.inplace)
    assert report["compiled"]["ok"] and "exact_with" not in report["compiled"]


def _verified(*cases: dict) -> dict:
    return {"cases": [{"key": f"c{i}", "verification": v} for i, v in enumerate(cases)]}


OK, BAD, NS = {"ok": True}, {"ok": False, "error": "raised"}, {"ok": False, "unsupported": "x"}


def test_a_run_is_hopeless_only_when_no_case_of_any_comparison_can_give_a_verdict():
    from types import SimpleNamespace

    from qkbench.runner import hopeless

    one = SimpleNamespace(baseline="split", candidates=("bad",))
    two = SimpleNamespace(baseline="split", candidates=("fused", "bad"))
    everywhere = _verified({"split": OK, "fused": OK, "bad": BAD},
                           {"split": OK, "fused": OK, "bad": BAD})
    assert hopeless(one, everywhere) == {"bad"}
    assert hopeless(two, everywhere) == set()  # split -> fused can still give verdicts
    assert hopeless(one, _verified({"split": OK, "bad": BAD}, {"split": OK, "bad": OK})) == set()
    # Not supported (n/s) on one case and wrong on the other: neither can give a verdict.
    assert hopeless(one, _verified({"split": OK, "bad": NS}, {"split": OK, "bad": BAD})) == {
        "bad"}
    assert hopeless(one, _verified({"split": OK, "bad": NS}, {"split": OK, "bad": NS})) == {
        "bad"}
    assert hopeless(two, _verified({"split": OK, "fused": NS, "bad": BAD},
                                   {"split": OK, "fused": OK, "bad": NS})) == set()
    assert hopeless(one, {"cases": [{"key": "c0", "error": "out of memory"}]}) == set()
    assert hopeless(one, {"cases": [{"key": "c0", "verification": {"split": OK, "bad": NS}},
                                    {"key": "c1", "error": "out of memory"}]}) == set()


@pytest.mark.parametrize(("name", "every"), [("split+1/8", 8), ("split+1/8~twin", 8),
                                             ("split", None), ("split~twin", None)])
def test_planted_every_reads_n_under_the_twins_name_too(name, every):
    from qkbench.routes import planted_every

    assert planted_every(name) == every
    if every is not None:
        assert resolve(name).extra_every == every
