"""The dispatch, emitted: a run's crossover per geometry as a table, and the op that
follows it (``qk_norm_rope_auto``), exact on both sides of every bound."""

import json
import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from qkbench import crossover
from qkbench.case import Case, Geometry, make_inputs
from qkbench.cli import app
from qkbench.errors import QkbenchError
from qkbench.kernels import qk_norm_rope_auto
from qkbench.kernels.dispatch import DispatchTable
from qkbench.protocol import parse

from conftest import interpreter_only
from synthetic import synthetic_sweep

# Two geometries whose fused route stops winning at different widths: "early" is faster
# at T = 1 only, "late" through T = 2; "always" never stops (a censored bound).
PROTOCOL = """
name = "crossing"
routes = ["split", "fused"]
tokens = [1, 2, 4]
max_position = 64

[timing]
passes = 6
warmup = 0
samples = 5
inner_reps = 1
isolation = "inprocess"

[[geometry]]
name = "early-2x1"
heads_q = 2
heads_k = 1
head_dim = 32

[[geometry]]
name = "late-4x2"
heads_q = 4
heads_k = 2
head_dim = 32
rotary_dim = 16

[[geometry]]
name = "always-2x2"
heads_q = 2
heads_k = 2
head_dim = 32
"""
FASTER, SLOWER = -0.30, 0.10
# The k-th comparison of a pass is case k: geometries outer, tokens inner.
EFFECTS = [FASTER, SLOWER, SLOWER,   # early-2x1: T = 1, 2, 4
           FASTER, FASTER, SLOWER,   # late-4x2
           FASTER, FASTER, FASTER]   # always-2x2
H200 = Path(__file__).parent.parent / "results" / "h200"


@pytest.fixture(scope="module")
def crossing(tmp_path_factory) -> tuple[Path, dict]:
    """A synthetic run in process (the real manager, worker, verification and summary; a
    model clock with a per-case effect): its archive path and the archive."""
    path = tmp_path_factory.mktemp("crossing") / "crossing.json"
    archive = synthetic_sweep(PROTOCOL, path, case_effects=EFFECTS)
    return path, archive


@pytest.fixture(scope="module")
def table(crossing) -> dict:
    path, archive = crossing
    return crossover.dispatch_table(archive, source=str(path))


def by_name(table: dict) -> dict[str, dict]:
    return {e["geometry"]: e for e in table["geometries"]}


@interpreter_only
def test_the_table_holds_each_geometrys_own_crossing(table):
    entries = by_name(table)
    assert {g: (e["fused_through"], e["stops_at"], e["censored"]) for g, e in entries.items()} == {
        "early-2x1": (1, 2, False), "late-4x2": (2, 4, False), "always-2x2": (4, None, True)}
    assert [m["verdict"] for m in entries["late-4x2"]["measured"]] == ["faster", "faster",
                                                                        "slower"]


@interpreter_only
def test_the_table_names_its_shapes_and_where_it_came_from(table, crossing):
    path, archive = crossing
    late = by_name(table)["late-4x2"]["shape"]
    assert {k: late[k] for k in ("heads_q", "heads_k", "head_dim", "rotary_dim", "dtype")} == {
        "heads_q": 4, "heads_k": 2, "head_dim": 32, "rotary_dim": 16, "dtype": "bfloat16"}
    assert (table["kind"], table["baseline"], table["candidate"]) == (
        "qkbench.dispatch", "split", "fused")
    source = table["source"]
    assert source["archive"] == str(path)
    assert source["protocol"]["name"] == "crossing"
    assert source["protocol"]["sha256"] == archive["protocol"]["sha256"]
    assert (source["device"], source["commit"]) == (
        "cpu", archive["environment"]["code"]["commit"])


@interpreter_only
def test_crossover_cli_prints_each_geometry_and_emits_the_table(crossing, table, tmp_path):
    path, _ = crossing
    out = tmp_path / "dispatch.json"
    result = CliRunner().invoke(app, ["crossover", str(path), "--emit", str(out)])
    assert result.exit_code == 0, result.output
    for line in ("fused for T <= 1, split above (stops at T = 2)",
                 "fused for T <= 2, split above (stops at T = 4)",
                 "fused everywhere (no crossover up to T = 4: censored)"):
        assert line in result.stdout
    assert result.stderr.strip() == f"dispatch table: {out}"
    assert json.loads(out.read_text()) == json.loads(json.dumps(table))


FIXTURES = Path(__file__).parent / "fixtures"


def crossover_cli(*args: str):
    return CliRunner().invoke(app, ["crossover", *args])


@pytest.fixture(scope="module")
def partly_invalid(tmp_path_factory) -> Path:
    """The smoke protocol swept whole, its candidate raising at T = 4 (valid at T = 1)."""
    path = tmp_path_factory.mktemp("partly-invalid") / "run.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(FIXTURES))
        result = CliRunner().invoke(app, [
            "sweep", "--protocol", "smoke", "--device", "cpu", "--isolation", "inprocess",
            "--route", "split", "--route", "invalid_routes:raising_past_one_token",
            "--out", str(path)])
    assert result.exit_code == 1 and path.exists(), result.output
    return path


@interpreter_only
def test_crossover_of_a_run_with_an_invalid_route_exits_1_naming_it(partly_invalid):
    result = crossover_cli(str(partly_invalid))
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "error: route invalid_routes:raising_past_one_token raised on tiny-4x2/T4: "
        "ValueError: no kernel for 4 tokens (in 6 of 6 passes)")


@interpreter_only
def test_no_dispatch_table_is_emitted_from_a_run_with_an_invalid_route(partly_invalid,
                                                                       tmp_path):
    out = tmp_path / "dispatch.json"
    result = crossover_cli(str(partly_invalid), "--emit", str(out))
    assert result.exit_code == 1 and not out.exists()
    assert "error: --emit: no dispatch table from a run with an invalid route (route " \
           "invalid_routes:raising_past_one_token raised on tiny-4x2/T4" in result.stderr


@interpreter_only
def test_no_dispatch_table_is_emitted_from_a_run_that_is_not_complete(one_pass, tmp_path):
    out = tmp_path / "dispatch.json"
    result = crossover_cli(str(one_pass), "--emit", str(out))
    assert result.exit_code == 1 and not out.exists()
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith(f"note: no qkbench is writing {one_pass}: its run stopped "
                               "before it was complete; qkbench sweep --resume")
    assert lines[-1] == ("error: --emit: no dispatch table from a run that is not complete "
                         "(status running); nothing was written")


@interpreter_only
def test_no_dispatch_table_is_emitted_from_a_comparison_other_than_split_to_fused(tmp_path):
    path = tmp_path / "eager.json"
    synthetic_sweep(PROTOCOL.replace('routes = ["split", "fused"]',
                                     'routes = ["split", "eager"]'), path,
                    case_effects=EFFECTS)
    out = tmp_path / "dispatch.json"
    result = crossover_cli(str(path), "--emit", str(out))
    assert result.exit_code == 1 and not out.exists()
    # Its table names the routes it compared, not the dispatch's.
    assert "eager for T <= 1, split above (stops at T = 2)" in result.stdout
    assert "fused" not in result.stdout
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --emit: a dispatch table chooses between split and fused, and this "
        "comparison is split -> eager; nothing was written")


@interpreter_only
def test_no_dispatch_table_is_emitted_from_a_run_in_which_no_cell_got_a_verdict(tmp_path):
    # One arm order's null arm always disagrees by 3 %: every cell is unstable.
    path = tmp_path / "unstable.json"
    synthetic_sweep(PROTOCOL, path, order_null_bias={("B", "A", "A'"): 0.03})
    out = tmp_path / "dispatch.json"
    result = crossover_cli(str(path), "--emit", str(out))
    assert result.exit_code == 1 and not out.exists()
    assert result.stderr.strip().splitlines()[-1].startswith(
        "error: --emit: no dispatch table from a run in which no cell got a verdict: all 9 "
        "are unstable")


@interpreter_only
def test_a_crossover_in_which_no_cell_got_a_verdict_exits_1_without_emit_too(tmp_path):
    path = tmp_path / "unstable.json"
    synthetic_sweep(PROTOCOL, path, order_null_bias={("B", "A", "A'"): 0.03})
    result = crossover_cli(str(path))
    assert result.exit_code == 1
    assert "split everywhere (no verdict (unstable)" in result.stdout
    assert result.stderr.strip().splitlines()[-1].startswith(
        "error: no cell got a verdict: all 9 are unstable")


@interpreter_only
def test_emit_never_replaces_the_run_archive_it_reads(crossing, tmp_path):
    path = tmp_path / "run.json"
    path.write_bytes(crossing[0].read_bytes())
    result = crossover_cli(str(path), "--emit", str(path))
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: --emit {path}: exists and is not a dispatch table (a file --emit wrote "
        "before), so it is not replaced; nothing was written")
    assert path.read_bytes() == crossing[0].read_bytes()


@interpreter_only
def test_emit_replaces_the_dispatch_table_it_wrote_before(crossing, table, tmp_path):
    out = tmp_path / "dispatch.json"
    out.write_text(json.dumps({**table, "geometries": []}))
    result = crossover_cli(str(crossing[0]), "--emit", str(out))
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text()) == json.loads(json.dumps(table))


@interpreter_only
def test_emit_takes_any_name_the_file_system_takes(crossing, tmp_path):
    out = tmp_path / ("d" * (255 - len(".json")) + ".json")
    result = crossover_cli(str(crossing[0]), "--emit", str(out))
    assert result.exit_code == 0, result.output
    assert DispatchTable.load(out).entries and sorted(tmp_path.iterdir()) == [out]


@interpreter_only
@pytest.mark.parametrize("where", [".", "folder"])
def test_emit_to_a_folder_is_refused_in_one_line(crossing, tmp_path, where):
    target = "." if where == "." else str(tmp_path)
    result = crossover_cli(str(crossing[0]), "--emit", target)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: --emit {target}: names a folder, not a file")


@pytest.mark.parametrize(("measured", "said"), [
    ([("slower", 1)], "split everywhere (not resolvably faster at the smallest T measured, 1)"),
    ([("invalid", 1)], "split everywhere (no verdict (invalid) at the smallest T measured, 1)"),
    ([("faster", 1), ("unstable", 4)],
     "fused for T <= 1, split above (stops at T = 4: no verdict there, unstable)"),
    ([("faster", 1), ("unresolved", 4)], "fused for T <= 1, split above (stops at T = 4)"),
], ids=["slower", "invalid", "unstable-after-faster", "unresolved-after-faster"])
def test_a_geometrys_dispatch_says_why_it_stops(measured, said):
    bound = next((t for v, t in reversed(measured) if v == "faster"), None)
    stop = next(t for v, t in measured if v != "faster")
    entry = {"fused_through": bound, "stops_at": stop, "censored": False,
             "measured": [{"tokens": t, "verdict": v} for v, t in measured]}
    assert crossover.describe(entry) == said


def test_a_run_of_several_candidates_needs_one_named():
    summary = {"comparisons": [{"candidate": "fused"}, {"candidate": "peer:liger"}]}
    with pytest.raises(QkbenchError, match=r"compares 2 candidates .*--candidate"):
        crossover.comparison(summary, None)
    assert crossover.comparison(summary, "peer:liger") == {"candidate": "peer:liger"}
    with pytest.raises(QkbenchError, match="no comparison with candidate 'eager'"):
        crossover.comparison(summary, "eager")


def test_the_h200_prefill_table_marks_its_censored_bounds():
    from qkbench import archive

    entries = by_name(crossover.dispatch_table(archive.read(H200 / "2026-12-03-prefill.json")))
    assert (entries["qwen3-32x8"]["fused_through"], entries["qwen3-32x8"]["censored"]) == (
        32768, True)
    # Re-summarised by today's rules its T = 2048 cell is unstable: no verdict ends the run.
    assert (entries["qwen3.5-16x2"]["fused_through"], entries["qwen3.5-16x2"]["stops_at"]) == (
        None, 2048)


# -- qk_norm_rope_auto -------------------------------------------------------------------


def _geometry(name: str):
    return next(g for g in parse(PROTOCOL).geometries if g.name == name)


def _spy(monkeypatch) -> list[str]:
    """Record which route each call of qk_norm_rope_auto took."""
    from qkbench.kernels import dispatch

    taken = []
    for name, route in (("qk_norm_rope", "fused"), ("qk_norm_rope_split", "split")):
        op = getattr(dispatch, name)

        def spy(*args, _op=op, _route=route, **kwargs):
            taken.append(_route)
            return _op(*args, **kwargs)

        monkeypatch.setattr(dispatch, name, spy)
    return taken


@interpreter_only
@pytest.mark.parametrize(("geometry", "tokens", "route"), [
    ("early-2x1", 1, "fused"), ("early-2x1", 2, "split"),
    ("late-4x2", 2, "fused"), ("late-4x2", 3, "split"), ("late-4x2", 5, "split"),
    ("always-2x2", 7, "fused"),
], ids=["early-T1", "early-T2", "late-T2", "late-T3-gap", "late-T5", "censored-T7"])
def test_auto_takes_the_tables_route_and_is_exact_on_both_sides(table, monkeypatch,
                                                                 geometry, tokens, route):
    from qkbench.kernels import qk_norm_rope, qk_norm_rope_auto, qk_norm_rope_split
    from qkbench.kernels.dispatch import DispatchTable

    inputs = make_inputs(Case(_geometry(geometry), tokens, max_position=64), 7, "cpu")
    dispatch = DispatchTable(json.loads(json.dumps(table)))
    taken = _spy(monkeypatch)
    out = inputs.call(qk_norm_rope_auto, dispatch=dispatch, inplace=False)
    assert taken == [route]
    for op in (qk_norm_rope, qk_norm_rope_split):
        for got, want in zip(out, inputs.call(op, inplace=False), strict=True):
            assert torch.equal(got, want)


@interpreter_only
def test_auto_takes_pdl_on_either_route(table, monkeypatch):
    from qkbench.kernels import qk_norm_rope_auto, qk_norm_rope_split
    from qkbench.kernels.dispatch import DispatchTable

    inputs = make_inputs(Case(_geometry("early-2x1"), 2, max_position=64), 7, "cpu")
    taken = _spy(monkeypatch)
    split = inputs.call(qk_norm_rope_auto, dispatch=DispatchTable(table), inplace=False,
                        pdl=True)
    fused = inputs.call(qk_norm_rope_auto, inplace=False, pdl=True)
    assert taken == ["split", "fused"]
    for out in (split, fused):
        for got, want in zip(out, inputs.call(qk_norm_rope_split, inplace=False), strict=True):
            assert torch.equal(got, want)


@interpreter_only
def test_auto_without_a_table_is_fused_and_a_shape_the_table_lacks_is_split(table,
                                                                             monkeypatch):
    from qkbench.kernels import qk_norm_rope_auto
    from qkbench.kernels.dispatch import DispatchTable

    taken = _spy(monkeypatch)
    listed = make_inputs(Case(_geometry("early-2x1"), 4, max_position=64), 1, "cpu")
    listed.call(qk_norm_rope_auto, inplace=False)
    unlisted = make_inputs(Case(_geometry("early-2x1"), 1, dtype="float16", max_position=64),
                           1, "cpu")
    unlisted.call(qk_norm_rope_auto, dispatch=DispatchTable(table), inplace=False)
    assert taken == ["fused", "split"]


def full_shape(**given) -> dict:
    """A table's shape of every key calls are matched on: (4,2) x 64, bf16, neox, plain
    weights, no MRoPE, unless ``given``."""
    return {"heads_q": 4, "heads_k": 2, "head_dim": 64, "rotary_dim": 64,
            "dtype": "bfloat16", "style": "neox", "weight_mode": "plain",
            "mrope_section": None, "mrope_layout": "sectioned", **given}


@pytest.fixture
def split_everywhere() -> DispatchTable:
    """A table that sends every call of the ``g`` geometry below to the split route."""
    return DispatchTable({"kind": "qkbench.dispatch", "version": 1, "baseline": "split",
                          "candidate": "fused", "geometries": [
                              {"geometry": "g", "fused_through": None, "censored": False,
                               "shape": full_shape()}]})


def small_inputs(device):
    return make_inputs(Case(Geometry("g", 4, 2, 64), 3, max_position=16), 0, device)


@pytest.mark.parametrize(("options", "error", "pattern"), [
    ({"pdl": "yes"}, TypeError, r"pdl must be a bool, got str"),
    ({"mrope_section": 5}, TypeError, r"mrope_section must be a sequence of 3 ints, got int"),
    ({"q": None}, TypeError, r"q must be a torch.Tensor, got NoneType"),
], ids=["pdl", "mrope-section", "q"])
def test_auto_names_bad_input_whichever_route_the_table_picks(split_everywhere, device,
                                                              options, error, pattern):
    inputs = small_inputs(device)
    arguments = inputs.arguments(**options)
    with pytest.raises(error, match=pattern):
        qk_norm_rope_auto(**arguments, dispatch=split_everywhere)


def test_a_numpy_mrope_section_is_matched_as_its_numbers(device):
    np = pytest.importorskip("numpy")
    table = DispatchTable({"kind": "qkbench.dispatch", "version": 1, "baseline": "split",
                           "candidate": "fused", "geometries": [
                               {"geometry": "m", "fused_through": 8, "censored": False,
                                "shape": full_shape(dtype="float32",
                                                    mrope_section=[8, 12, 12])}]})
    q, k = torch.empty(3, 4, 64), torch.empty(3, 2, 64)
    assert table.route(q, k, mrope_section=np.array([8, 12, 12])) == "fused"
    assert table.route(q, k, mrope_section=np.array([12, 12, 8])) == "split"


def test_auto_refuses_a_dispatch_that_is_not_a_table(device):
    arguments = small_inputs(device).arguments()
    with pytest.raises(TypeError, match=r"dispatch must be a DispatchTable "
                                        r"\(DispatchTable.load\(path\)\) or None, got str"):
        qk_norm_rope_auto(**arguments, dispatch="dispatch.json")


def test_a_table_whose_geometries_are_malformed_is_refused_in_words():
    data = {"kind": "qkbench.dispatch", "version": 1, "baseline": "split",
            "candidate": "fused", "geometries": [{"geometry": "g"}]}
    with pytest.raises(ValueError, match=r"not a dispatch table: its geometries are malformed "
                                         r"\(KeyError: 'shape'\)"):
        DispatchTable(data)


@pytest.mark.parametrize(("change", "pattern"), [
    ({"fused_through": "8"}, r"fused_through must be a whole number of tokens >= 1 or null, "
                             r"got '8'"),
    ({"fused_through": True}, r"fused_through must be a whole number of tokens >= 1 or null, "
                              r"got True"),
    ({"fused_through": -5}, r"fused_through must be a whole number of tokens >= 1 or null, "
                            r"got -5"),
    ({"censored": "false"}, r"censored must be true or false, got 'false'"),
    ({"censored": True, "stops_at": 16}, r"censored \(no stop measured\) beside stops_at 16"),
    ({"shape": {**full_shape(), "head_dimm": 64}}, r"unknown shape keys head_dimm"),
    ({"shape": {}}, r"its shape lacks heads_q, heads_k, head_dim, rotary_dim, dtype, style, "
                    r"weight_mode, mrope_section, mrope_layout, which calls are matched on"),
    ({"shape": {"heads_q": 4}}, r"its shape lacks heads_k, "),
    ({"shape": full_shape(heads_q="4")}, r"shape heads_q must be a whole number >= 1, "
                                         r"got '4'"),
    ({"shape": full_shape(rotary_dim=None)}, r"shape rotary_dim must be a whole number >= 1, "
                                             r"got None"),
    ({"shape": full_shape(dtype=16)}, r"shape dtype must be a string, got 16"),
    ({"shape": full_shape(mrope_section=[8, "12", 12])},
     r"shape mrope_section must be a list of whole numbers >= 0 or null"),
    ({"shape": full_shape(mrope_section=[-1, 17, 16])},
     r"shape mrope_section must be a list of whole numbers >= 0 or null"),
], ids=["bound-text", "bound-bool", "bound-negative", "censored-text", "censored-stopped",
        "misspelt-key", "empty-shape", "partial-shape", "heads-text", "rotary-null",
        "dtype-number", "section-text", "section-negative"])
def test_a_geometry_that_would_misroute_calls_is_refused_naming_it(change, pattern):
    entry = {"geometry": "g", "fused_through": 8, "censored": False,
             "shape": {**full_shape(), "inplace": True}, **change}
    data = {"kind": "qkbench.dispatch", "version": 1, "baseline": "split",
            "candidate": "fused", "geometries": [entry]}
    with pytest.raises(ValueError, match=r"not a dispatch table: its geometries are malformed "
                                         rf"\(\w+Error: .*geometry 'g': {pattern}"):
        DispatchTable(data)


def test_an_mrope_section_with_an_axis_of_no_lane_loads_as_the_kernels_take_it():
    entry = {"geometry": "vl", "fused_through": 8, "censored": False,
             "shape": full_shape(mrope_section=[0, 16, 16])}
    table = DispatchTable({"kind": "qkbench.dispatch", "version": 1, "baseline": "split",
                           "candidate": "fused", "geometries": [entry]})
    assert len(table.entries) == 1


@pytest.mark.parametrize(("data", "pattern"), [
    (b'{"kind": ', r"not a dispatch table \(not JSON: Expecting value"),
    (b'{"a": "\xff"}', r"not a dispatch table \(not JSON: 'utf-8' codec can't decode"),
    (b"[" * 100_000 + b"]" * 100_000, r"not a dispatch table \(not JSON: nested too deeply"),
    (b'{"kind": "qkbench.run"}', r"not a dispatch table: kind must be 'qkbench.dispatch'"),
], ids=["truncated", "not-utf8", "nested-too-deeply", "a-run-archive"])
def test_loading_a_file_that_is_not_a_table_names_the_file(tmp_path, data, pattern):
    path = tmp_path / "dispatch.json"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: {pattern}"):
        DispatchTable.load(path)


def test_a_table_of_another_comparison_or_kind_is_refused():
    from qkbench.kernels.dispatch import DispatchTable

    table = {"kind": "qkbench.dispatch", "version": 1, "baseline": "split",
             "candidate": "fused", "geometries": []}
    assert DispatchTable(table).entries == []

    with pytest.raises(ValueError, match=r"compare split .* with fused .* compares split with "
                                          r"peer:liger"):
        DispatchTable({**table, "candidate": "peer:liger"})
    with pytest.raises(ValueError, match="not a dispatch table"):
        DispatchTable({"kind": "qkbench.run"})
    with pytest.raises(ValueError, match="version 2 is not supported"):
        DispatchTable({**table, "version": 2})
