"""The GPU scripts' logic, run on tiny shapes under the interpreter: they pass on the
shipped kernels and fail loudly on a wrong one."""

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import triton

from qkbench.kernels import qk_norm_rope

from conftest import interpreter_only
from helpers import SCRIPTS, script


@interpreter_only
def test_bench_checks_times_and_tabulates_every_variant(tmp_path, capsys):
    bench = script("bench_kernels")
    assert bench.main(["--device", "cpu", "--quick", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "bench_kernels.json").read_text())
    assert result["failures"] == [] and len(result["shapes"]) == 2
    for entry in result["shapes"]:
        fused = {k: v for k, v in entry["results"].items() if k.startswith("fused")}
        assert "fused" in fused and entry["oracle"]["ok"]
        assert all(v["bits_equal_split"] and v["us"] > 0 for v in fused.values())
        assert "share_of_copy" in entry["results"]["split"]
    assert "fused+pdl" in result["shapes"][0]["results"]  # a decode width
    assert result["limits"]["floor_position_then_row_us"] > 0
    assert result["limits"]["floor_fixed_row_us"] > 0
    kernels = result["shapes"][1]["split_kernels"]  # past the decode widths
    assert sum(k["bytes"] for k in kernels.values()) == result["shapes"][1]["bytes"]["split"]
    copies = result["shapes"][1]["rows_copy"]  # tiny-partial: (2,1) x 128 bf16, 65 tokens
    rows_read_and_written = 2 * 65 * (2 + 1) * 128 * 2
    assert len(copies) > 1 and all(c["copied"] and c["bytes"] == rows_read_and_written
                                   and c["share_of_copy"] > 0 for c in copies.values())
    table = capsys.readouterr().out
    assert table.rstrip().endswith("checks: all passed") and "host us per eager call" in table
    assert "rows copied in one launch" in table


@interpreter_only
def test_bench_measures_only_the_shapes_up_to_max_tokens(tmp_path):
    bench = script("bench_kernels")
    argv = ["--device", "cpu", "--quick", "--max-tokens", "3", "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    result = json.loads((tmp_path / "bench_kernels.json").read_text())
    assert [entry["tokens"] for entry in result["shapes"]] == [3]
    assert result["max_tokens"] == 3


def missing_an_element(monkeypatch, probe: str, flags_of: Callable[[dict], dict]) -> None:
    """``qkbench.limits``' ``probe`` reporting that its kernel missed what it copies."""
    from qkbench import limits

    measured = getattr(limits, probe)

    def missed(*args, **kwargs):
        result = measured(*args, **kwargs)
        flags = flags_of(result)
        flags.update({key: False for key in ("row_copied", "copied") if key in flags})
        return result

    monkeypatch.setattr(limits, probe, missed)


@interpreter_only
def test_bench_fails_loudly_when_the_row_floor_misses_the_row_it_names(
        tmp_path, monkeypatch, capsys):
    missing_an_element(monkeypatch, "row_floor", lambda r: r["position_then_row"])
    bench = script("bench_kernels")
    argv = ["--device", "cpu", "--quick", "--max-tokens", "3", "--out", str(tmp_path)]
    assert bench.main(argv) == 1
    assert "the row floor's kernel did not copy the row it names" in capsys.readouterr().out


@interpreter_only
def test_a_rows_copy_that_missed_an_element_is_a_bench_failure(tmp_path, monkeypatch):
    # The bench's own step on its quick shape past the decode widths, not a whole bench of
    # that shape (half a minute under the interpreter): that a failure makes the bench exit
    # 1 naming it, the row floor's test shows.
    from qkbench.backends import backend_for
    from qkbench.case import Case, make_inputs

    missing_an_element(monkeypatch, "rows_copy", lambda r: next(iter(r.values())))
    bench = script("bench_kernels")
    shape = bench.shapes(quick=True)[-1]
    assert shape.tokens > bench.DECODE_MAX  # where the bench copies the rows
    device = torch.device("cpu")
    run = bench.Run(tmp_path / "bench_kernels.json", device, samples=1, budget_s=300,
                    inner_reps=2)
    inputs = make_inputs(Case(shape.geometry, shape.tokens, max_position=shape.max_position),
                         0, device)
    entry = {"shape": shape.name}
    copies = bench.rows_copy(run, backend_for(device), entry, inputs, shape.geometry.inplace)
    assert run.failures == [f"{shape.name}: the rows' copy missed an element"]
    assert len(copies) > 1 and not all(c["copied"] for c in copies.values())


@pytest.fixture
def fused_off_by_one_ulp(monkeypatch):
    """The fused op with one element of its k output one ulp off."""

    def off_by_one_ulp(*args, **kwargs):
        q, k = qk_norm_rope(*args, **kwargs)
        k.view(torch.int16)[0, 0, 0] += 1
        return q, k

    monkeypatch.setattr("qkbench.kernels.qk_norm_rope", off_by_one_ulp)


@interpreter_only
def test_bench_fails_loudly_when_fused_differs_from_split(tmp_path, fused_off_by_one_ulp,
                                                          capsys):
    bench = script("bench_kernels")
    argv = ["--device", "cpu", "--quick", "--max-tokens", "3", "--out", str(tmp_path)]
    assert bench.main(argv) == 1
    assert "differs from split in its bits" in capsys.readouterr().out


@interpreter_only
def test_sanitize_cases_pass_on_small_strides(capsys):
    assert script("sanitize_case").main(["--small", "--device", "cpu"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("sanitize cases: PASS")


@interpreter_only
def test_sanitize_case_sees_a_route_without_nan():
    sanitize = script("sanitize_case")

    def finite(*args, **kwargs):
        q, k = qk_norm_rope(*args, **kwargs)
        return q.nan_to_num_(), k.nan_to_num_()

    problem = sanitize.positions_case(finite, torch.device("cpu"), graph=False)
    assert problem is not None and "differs from the split route" in problem


@interpreter_only
def test_perf_tables_render_each_route_beside_the_baseline_with_its_resolved_delta(tmp_path):
    from synthetic import BASE_SECONDS, REFERENCE_SECONDS, synthetic_sweep, tiny_protocol

    out = tmp_path / "run.json"
    synthetic_sweep(tiny_protocol("tables", routes=("split", "fused")), out, effect=-0.3)
    lines = script("perf_tables").table(out).splitlines()
    assert lines[0].startswith(f"**tables** (`{out}`)")
    assert lines[2] == ("| geometry | T | split us | fused us | fused % of copy "
                        "| fused vs split | floor us beside fused |")
    rows = [line.strip("| ").split(" | ") for line in lines[4:]]
    assert [row[1] for row in rows] == ["1", "3"]  # one row per cell, in protocol order
    for row in rows:
        assert float(row[2]) == pytest.approx(BASE_SECONDS * 1e6, rel=0.01)
        assert float(row[3]) == pytest.approx(0.7 * BASE_SECONDS * 1e6, rel=0.01)
        assert row[5].startswith("-30.")  # the planted -30 %, with the run's width
        assert float(row[6]) == pytest.approx(REFERENCE_SECONDS["floor"] * 1e6, rel=0.01)


def test_perf_tables_of_an_archive_without_floors_have_no_floor_column():
    lines = script("perf_tables").table(
        Path(__file__).parent.parent / "results/h200/2026-12-04-v39/dit.json.gz").splitlines()
    assert "floor" not in lines[2]


@interpreter_only
def test_perf_tables_show_the_verdict_where_a_cell_did_not_resolve(tmp_path):
    from synthetic import synthetic_sweep, tiny_protocol

    out = tmp_path / "run.json"
    # Identical code, a biased slot: the kernels, whose table this is.
    synthetic_sweep(tiny_protocol("tables", routes=("split", "fused")), out, first_bias=0.05)
    rows = [line.strip("| ").split(" | ")
            for line in script("perf_tables").table(out).splitlines()[4:]]
    assert [row[1] for row in rows] == ["1", "3"]  # one row per cell
    assert all(row[3] in ("unstable", "unresolved") and row[5] == "-" for row in rows)


@interpreter_only
def test_l2_policy_bench_times_every_arm_in_one_schedule(tmp_path, capsys):
    bench = script("bench_l2_policy")
    argv = ["--device", "cpu", "--quick", "--rounds", "2", "--visit", "1", "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    (entry,) = json.loads((tmp_path / "bench_l2_policy.json").read_text())["shapes"]
    assert set(entry["us"]) == set(bench.ARM_SETS["k-tiles"])
    assert all(entry["checks_passed"].values())
    assert all(len(v) == 2 for v in entry["us"].values())


def test_l2_policy_gqa8_geometries_put_eight_times_a_q_tiles_tokens_in_a_k_tile():
    from qkbench.kernels.plan import plan_pair

    bench = script("bench_l2_policy")
    shapes = bench.shapes(quick=False, tokens=[2048], geometries="gqa8")
    assert [(s.geometry.heads_q, s.geometry.heads_k) for s in shapes] == [(8, 1), (16, 2),
                                                                          (32, 4)]
    for s in shapes:
        g = s.geometry
        q, k = plan_pair(s.tokens, g.heads_q, g.heads_k, g.head_dim, 2, torch.device("cpu"),
                         spread=False)
        assert k.block_t == 8 * q.block_t, (g.name, q, k)


def test_l2_policy_odd_programs_arms_double_and_halve_the_padded_launchs_programs():
    from qkbench.kernels import plan
    from qkbench.kernels.fused import fused_plans

    bench = script("bench_l2_policy")
    for s in bench.shapes(quick=False, tokens=[8192], geometries="odd"):
        g = s.geometry
        rows = {}
        for arm, settings in bench.ARM_SETS["odd-programs"].items():
            with plan.use(**settings):
                q, _ = fused_plans(s.tokens, g.heads_q, g.heads_k, g.head_dim, g.rotary,
                                   torch.device("cpu"))
            rows[arm] = q.block_t * q.block_h
        assert rows["e4096"] == 2 * rows["default"] == 4 * rows["e1024"], (g.name, rows)


def test_l2_policy_quick_shape_runs_other_k_tiles_in_its_variant_arms():
    """The quick run exercises the rule past the L2: its arms plan different k tiles."""
    from qkbench.kernels import plan
    from qkbench.kernels.fused import fused_plans

    bench = script("bench_l2_policy")
    (shape,) = bench.shapes(quick=True, tokens=[])
    g = shape.geometry
    arms = bench.ARM_SETS["k-tiles"]

    def k_tile(settings: dict) -> int:
        with plan.use(**{"l2_bytes": 1, **settings}):
            return fused_plans(shape.tokens, g.heads_q, g.heads_k, g.head_dim, g.rotary,
                               torch.device("cpu"))[1].block_t

    assert len({k_tile(arms[arm]) for arm in ("default", "k-tiles-3.4", "k-ratio-1")}) == 3


@interpreter_only
def test_l2_policy_bench_checks_an_arm_at_positions_0_against_split_at_those_positions():
    from dataclasses import replace

    from qkbench.backends import backend_for
    from qkbench.case import Case, make_inputs
    from qkbench.kernels import qk_norm_rope_split

    bench = script("bench_l2_policy")
    (shape,) = bench.shapes(quick=True, tokens=[])
    g = shape.geometry
    arms = {"default": {"l2_bytes": 1}, "at-0": {"l2_bytes": 1, bench.POSITIONS: "zero"}}
    entry = bench.measure_shape(backend_for(torch.device("cpu")), shape, arms, {}, 1, 1, 1,
                                cold=False, copy_gbps=1.0)
    assert entry["checks_passed"] == {"default": True, "at-0": True}
    # The two references differ, so each arm passed against its own.
    inputs = make_inputs(Case(g, shape.tokens, max_position=shape.max_position), 0, "cpu")
    at_zero = replace(inputs, positions=torch.zeros_like(inputs.positions))
    assert not bench.identical(bench.call(qk_norm_rope_split, inputs, g.inplace),
                               bench.call(qk_norm_rope_split, at_zero, g.inplace))


@interpreter_only
def test_l2_policy_bench_fails_loudly_when_an_arm_differs_from_split(
        tmp_path, fused_off_by_one_ulp, capsys):
    bench = script("bench_l2_policy")
    argv = ["--device", "cpu", "--quick", "--rounds", "1", "--visit", "1", "--out", str(tmp_path)]
    assert bench.main(argv) == 1
    assert "CHECK FAILED: default, default-again" in capsys.readouterr().out


@interpreter_only
def test_l2_policy_bench_times_the_rows_copies_beside_the_op_with_their_own_bytes(tmp_path):
    bench = script("bench_l2_policy")
    argv = ["--device", "cpu", "--quick", "--rounds", "1", "--visit", "1", "--arms", "copies",
            "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    (entry,) = json.loads((tmp_path / "bench_l2_policy.json").read_text())["shapes"]
    copies = bench.copy_arms("copies")
    assert set(entry["us"]) == {"default", "default-again", *copies} and "copy_" in copies
    assert all(entry["checks_passed"].values())
    rows = 2 * 40 * (4 + 1) * 64 * 2  # the tiny shape's q and k rows, read and written
    assert {entry["bytes"][arm] for arm in copies} == {rows}
    assert entry["bytes"]["default"] > rows
    assert all(v["share_of_copy"] > 0 for v in entry["summary"].values())


@interpreter_only
def test_l2_policy_bench_times_the_split_route_with_its_own_bytes(tmp_path):
    from qkbench.case import Case, make_inputs
    from qkbench.kernels import traffic

    bench = script("bench_l2_policy")
    argv = ["--device", "cpu", "--quick", "--rounds", "1", "--visit", "1", "--arms", "norm",
            "--route", "split", "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    (entry,) = json.loads((tmp_path / "bench_l2_policy.json").read_text())["shapes"]
    assert set(entry["us"]) == set(bench.ARM_SETS["norm"])
    assert all(entry["checks_passed"].values())
    (shape,) = bench.shapes(quick=True, tokens=[])
    inputs = make_inputs(Case(shape.geometry, shape.tokens), 0, torch.device("cpu"))
    assert set(entry["bytes"].values()) == {inputs.call(traffic.split_bytes)}
    assert inputs.call(traffic.split_bytes) != inputs.call(traffic.fused_bytes)


def test_l2_policy_norm_arms_plan_other_rms_norm_programs():
    """Each norm arm gives the split route's rms_norm other tiles or warps at the quick
    shape, and leaves the fused kernel's plan alone."""
    from qkbench.kernels import plan
    from qkbench.kernels.fused import fused_plans
    from qkbench.kernels.rms_norm import norm_plan

    bench = script("bench_l2_policy")
    (shape,) = bench.shapes(quick=True, tokens=[])
    g, cpu = shape.geometry, torch.device("cpu")

    def plans(settings: dict) -> tuple:
        with plan.use(**settings):
            return (norm_plan(shape.tokens, g.heads_q, g.head_dim, cpu),
                    fused_plans(shape.tokens, g.heads_q, g.heads_k, g.head_dim, g.rotary, cpu))

    arms = [plans(settings) for label, settings in bench.ARM_SETS["norm"].items()
            if label != "default-again"]
    assert len({norm for norm, _ in arms}) == len(arms)
    assert len({fused for _, fused in arms}) == 1


@interpreter_only
def test_l2_policy_bench_times_the_rows_copy_at_each_program_size_and_warp_count(
        tmp_path, monkeypatch):
    from qkbench import limits

    launched, copy = set(), limits.rows_copy_launch

    def recording_copy(q, k, qo, ko, block, warps=None):
        launched.add((block, warps))
        return copy(q, k, qo, ko, block, warps)

    monkeypatch.setattr(limits, "rows_copy_launch", recording_copy)
    bench = script("bench_l2_policy")
    argv = ["--device", "cpu", "--quick", "--rounds", "1", "--visit", "1", "--arms",
            "copy-warps", "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    (entry,) = json.loads((tmp_path / "bench_l2_policy.json").read_text())["shapes"]
    assert set(entry["us"]) == {"default", "default-again",
                                *(f"rows-copy-{b}-w{w}" for b, w in bench.COPY_WARPS)}
    assert launched == set(bench.COPY_WARPS) and all(entry["checks_passed"].values())


@interpreter_only
def test_l2_policy_bench_passes_an_arms_call_options_to_the_call_not_the_plan(
        tmp_path, monkeypatch):
    from qkbench.kernels import fused

    pdl_seen = []
    check = fused.check_pdl
    monkeypatch.setattr(fused, "check_pdl",
                        lambda pdl, device: pdl_seen.append(pdl) or check(pdl, device))
    bench = script("bench_l2_policy")
    argv = ["--device", "cpu", "--quick", "--rounds", "1", "--visit", "1", "--arms", "pdl",
            "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    (entry,) = json.loads((tmp_path / "bench_l2_policy.json").read_text())["shapes"]
    assert set(entry["us"]) == set(bench.ARM_SETS["pdl"]) and all(entry["checks_passed"].values())
    assert True in pdl_seen and False in pdl_seen


@interpreter_only
def test_l2_policy_bench_fails_loudly_when_a_rows_copy_misses_an_element(
        tmp_path, monkeypatch, capsys):
    from qkbench import limits

    copy = limits.rows_copy_launch
    monkeypatch.setattr(limits, "rows_copy_launch", lambda q, k, qo, ko, block, warps=None:
                        copy(q, k[:-1], qo, ko[:-1], block, warps))
    bench = script("bench_l2_policy")
    argv = ["--device", "cpu", "--quick", "--rounds", "1", "--visit", "1", "--arms", "copies",
            "--out", str(tmp_path)]
    assert bench.main(argv) == 1
    assert "CHECK FAILED: rows-copy-" in capsys.readouterr().out


@interpreter_only
def test_l2_policy_bench_cold_cycles_each_arm_over_sets_sweeping_twice_the_l2():
    from qkbench.backends import backend_for

    bench = script("bench_l2_policy")
    backend = backend_for(torch.device("cpu"))
    backend.l2_bytes = 40_000  # the tiny shape's rows: 25,600 bytes, so 4 sets
    (shape,) = bench.shapes(quick=True, tokens=[])
    arms = {"default": {"l2_bytes": 1}}
    entry = bench.measure_shape(backend, shape, arms, {"rows-copy-2048": (2048, None)}, 1, 1,
                                2, cold=True, copy_gbps=1.0)
    assert entry["cold_sets"] == 4 and entry["launches_per_replay"] == 4
    assert all(entry["checks_passed"].values())


CUDA_TOOLS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"

# Compiles every ``kernel_ir`` case for sm_90 in a process of its own (kernel_ir answers
# the plan's device queries as an H200's for the whole process), beside two controls: a
# kernel that divides by a run-time value, and one whose tile cannot fit under its register
# cap. Prints, per case, its divisions by a run-time value and its spilled accesses.
KERNEL_IR_COUNTS = """
import json, sys
sys.path.insert(0, sys.argv[1])
import kernel_ir
import triton
import triton.language as tl


@triton.jit
def divides_by_a_run_time_value(x_ptr, n):
    pid = tl.program_id(0)
    tl.store(x_ptr + pid, pid // n)


@triton.jit
def holds_a_tile_past_its_cap(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(x_ptr + offs, x / tl.sum(x * x, axis=0))


def row(kernel, args, warps, **options):
    compiled = kernel_ir.compile_for_sm90(kernel, args, warps, **options)
    sass = kernel_ir.counts(compiled)
    return {"divisions": sass["divisions"], "spills": sass["spills"]}


rows = {label: row(k, a, w) for label, k, a, w in kernel_ir.CASES}
rows["control: divides"] = row(divides_by_a_run_time_value, dict(x_ptr="*i32", n=3), 1)
rows["control: capped"] = row(holds_a_tile_past_its_cap, dict(x_ptr="*fp32", BLOCK=4096), 1,
                              maxnreg=32)
print(json.dumps(rows))
"""

needs_ptxas = pytest.mark.skipif(not (CUDA_TOOLS / "ptxas").exists(),
                                 reason="needs Triton's CUDA backend")


@pytest.fixture(scope="module")
def sm90_counts(tmp_path_factory, sm90_cache) -> dict[str, dict[str, int]]:
    """``KERNEL_IR_COUNTS``'s rows, compiled once for the module's tests."""
    return kernel_ir_program(tmp_path_factory.mktemp("counts"), sm90_cache, KERNEL_IR_COUNTS)


@needs_ptxas
def test_no_kernel_divides_by_a_run_time_value_before_it_finds_its_tile(sm90_counts):
    """A tile of fewer heads than its tensor found its token block by dividing by a
    run-time head-block count (some 20 dependent instructions and a reciprocal before the
    first load; 3-7 % of a decode launch on the H200): every divisor is now a constant."""
    rows = {label: c["divisions"] for label, c in sm90_counts.items()}
    assert rows.pop("control: divides") > 0  # the count sees a division by a run-time value
    rows.pop("control: capped")
    assert any(label.startswith("fused DiT") for label in rows)  # a tile of 8 heads of 24
    assert rows == dict.fromkeys(rows, 0)


@needs_ptxas
def test_no_shipped_kernel_spills_registers_under_this_triton(sm90_counts):
    """Under Triton 3.9 the D = 256 / rotary 64 launches once compiled with some 1,800
    spilled accesses a program (a layout pass took the pair tiles into the row tree's
    layouts; docs/kernel-notes.md, the twenty-fourth session), where the devices' Triton 3.6
    spilled none: whatever Triton this suite runs, no shipped launch spills. The rebuilt
    tree (``Settings.whole_pass_tile`` off) is not shipped."""
    rows = {label: c["spills"] for label, c in sm90_counts.items()
            if "tree rebuilt" not in label}
    assert rows.pop("control: capped") > 0  # the count sees a tile spilled past its cap
    rows.pop("control: divides")
    assert any("x256/r64 T=8192" in label for label in rows)
    assert rows == dict.fromkeys(rows, 0)


# Compiles the kernels the layer bench twins (the fused kernel with and without PDL, at
# decode and at T = 8192; rms_norm; rope) at each twin's num_stages and at Triton's default,
# beside a control whose loop of loads Triton pipelines by num_stages, and prints for each
# whether the PTX is the same.
KERNEL_IR_TWINS = """
import json, sys
sys.path.insert(0, sys.argv[1])
import bench_layer
import kernel_ir
import triton
import triton.language as tl


@triton.jit
def pipelined_by_num_stages(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK, BLOCK], dtype=tl.float32)
    offs = tl.arange(0, BLOCK)
    for i in tl.range(0, n, BLOCK):
        a = tl.load(x_ptr + (i + offs)[:, None] * BLOCK + offs[None, :])
        b = tl.load(y_ptr + (i + offs)[:, None] * BLOCK + offs[None, :])
        acc += tl.dot(a, b)
    tl.store(x_ptr + offs[:, None] * BLOCK + offs[None, :], acc.to(tl.bfloat16))


def same_ptx(kernel, args, warps):
    own = kernel_ir.compile_for_sm90(kernel, args, warps).asm["ptx"]
    return all(kernel_ir.compile_for_sm90(kernel, args, warps, num_stages=stages).asm["ptx"]
               == own for stages, _ in bench_layer.TWINS.values())


wanted = ("fused (32,8)x128 T=1", "fused (32,8)x128 T=8 pdl", "fused (32,8)x128 T=8192",
          "fused (16,2)x256/r64 T=1", "rms_norm 32x128", "rope (32,8)x128")
rows = {label: same_ptx(k, a, w) for label, k, a, w in kernel_ir.CASES
        if label.startswith(wanted)}
rows["control"] = same_ptx(pipelined_by_num_stages,
                           dict(x_ptr="*bf16", y_ptr="*bf16", n=64, BLOCK=64), 4)
print(json.dumps(rows))
"""


@pytest.fixture(scope="module")
def sm90_cache(tmp_path_factory) -> Path:
    """A Triton cache for this module's sm_90 compiles alone: the kernels one program
    compiled, the next finds there."""
    return tmp_path_factory.mktemp("sm90-cache")


def kernel_ir_program(tmp_path, cache: Path, text: str) -> dict:
    """Run ``text`` (a program given the scripts' folder) in a process of its own, compiling
    for sm_90 into ``cache``; its JSON output."""
    program = tmp_path / "program.py"
    program.write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(cache)
    out = subprocess.run([sys.executable, str(program), str(SCRIPTS)], env=env,
                         capture_output=True, text=True, timeout=600, check=True).stdout
    return json.loads(out)


@needs_ptxas
def test_the_layer_benchs_twins_compile_to_the_kernels_own_ptx(tmp_path, sm90_cache):
    """A twin differs from the kernel it times only in being a compiled kernel of its own:
    num_stages, which tells them apart, changes none of the kernels' PTX (they have no
    loops), though it changes a loop's that Triton pipelines."""
    rows = kernel_ir_program(tmp_path, sm90_cache, KERNEL_IR_TWINS)
    assert rows.pop("control") is False
    assert len(rows) == 6 and all(rows.values())


def _pass(pid: int, cells: dict[str, dict[str, float]]) -> dict:
    """A pass record as ``run_context`` reads it: per cell in order, each route's us."""
    return {"pid": pid, "cases": [
        {"key": key, "comparisons": [{"status": "ok", "arms": [
            {"route": route, "samples": [us * 1e-6] * 3} for route, us in routes.items()]}]}
        for key, routes in cells.items()]}


def test_run_context_sets_a_process_first_cell_beside_the_same_cell_measured_later():
    """Planted: the first cell of each fresh process reads 1.0 us, the same cell 1.2 us
    whenever a process measures it after another; the report shows exactly that."""
    fast, slow = {"fused": 1.0, "split": 3.0}, {"fused": 1.2, "split": 3.3}
    archive = {"passes": [_pass(1, {"g/T1": fast, "g/T8": slow}),
                          _pass(1, {"g/T1": slow, "g/T8": slow}),
                          _pass(2, {"g/T1": fast, "g/T8": slow})]}
    (row,) = script("run_context").first_cell_rows(archive)
    assert (row["cell"], row["first"], row["later"]) == ("g/T1", 2, 1)
    assert row["routes"] == {"fused": pytest.approx((1.0, 1.2)),
                             "split": pytest.approx((3.0, 3.3))}


def test_run_context_finds_no_first_cell_pair_where_every_pass_starts_a_process_alike():
    cells = {"g/T1": {"fused": 1.0}, "g/T8": {"fused": 1.5}}
    archive = {"passes": [_pass(pid, cells) for pid in (1, 2, 3)]}
    assert script("run_context").first_cell_rows(archive) == []


def test_run_context_counts_the_level_baselines_and_which_are_a_process_first_cell():
    """Planted: beside fused-pdl the split arms read level with beside fused (4.0 us) in
    three of the six decode (pass, cell) pairs, 12 % faster in the rest; one of the three
    is a process's first cell. T = 128 is not counted."""
    def case(tokens: int, pdl_us: float) -> dict:
        return {"key": f"g/T{tokens}", "case": {"tokens": tokens}, "comparisons": [
            {"status": "ok", "candidate": cand, "arms": [
                {"label": label, "samples": [us * 1e-6] * 3} for label in ("A", "B", "A'")]}
            for cand, us in (("fused", 4.0), ("fused-pdl", pdl_us))]}

    def record(pid: int, t1_us: float, t8_us: float) -> dict:
        return {"pid": pid, "cases": [case(1, t1_us), case(8, t8_us), case(128, 4.0)]}

    archive = {"protocol": {"resolved": {"routes": ["split", "fused", "fused-pdl"]}},
               "passes": [record(1, 4.0, 4.0),     # first cell level, and a later one
                          record(1, 4.0, 3.52),    # the process's second pass: level, later
                          record(2, 3.52, 3.52)]}  # a new process, first cell not level
    assert script("run_context").level_pairs(archive) == {"fused-pdl": [6, 3, 1]}


@interpreter_only
def test_process_state_probe_times_every_probe_after_every_step(tmp_path):
    probe = script("probe_process_state")
    out = tmp_path / "probe.json"
    assert probe.main(["--device", "cpu", "--quick", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [row["step"] for row in rows] == list(probe.DEFAULT_STEPS)
    for row in rows:
        assert list(row["us"]) == list(probe.PROBES)
        assert all(us > 0 for us in row["us"].values())
    # The steps that replay a graph of their own report its per-call time.
    graphs = {"pdl", "gemm", "triton-smem", "torch-op", "copy-graph"}
    assert all((row["step_us"] is not None) == (row["step"] in graphs) for row in rows)


@interpreter_only
def test_process_state_probe_runs_its_allocation_and_eager_launch_steps(tmp_path):
    probe = script("probe_process_state")
    out = tmp_path / "probe.json"
    asked = ["malloc", "free", "alloc-bare", "sync", "eager-empty", "eager-empty-stream",
             "eager-torch", "eager-fused", "eager-pdl-empty", "pdl-empty", "fill",
             "eager-fused-8192", "inputs", "oracle", "h2d", "d2h", "oracle-fp64",
             "oracle-reduce32", "oracle-reduce64", "oracle-gather", "fill-cached",
             "fill8-cached", "oracle-cast64", "oracle-table64", "oracle-index", "oracle-cat"]
    argv = ["--device", "cpu", "--quick", "--steps", ",".join(asked), "--probes", "empty",
            "--out", str(out)]
    assert probe.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [row["step"] for row in rows] == asked
    assert all(row["us"]["empty"] > 0 for row in rows)
    assert [row["step"] for row in rows if row["step_us"] is not None] == ["pdl-empty"]


@interpreter_only
def test_process_state_probe_runs_the_steps_and_probes_asked_for_in_their_order(tmp_path):
    out = tmp_path / "probe.json"
    argv = ["--device", "cpu", "--quick", "--steps", "cell,start,cell", "--probes",
            "split,fused", "--out", str(out)]
    assert script("probe_process_state").main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [row["step"] for row in rows] == ["cell", "start", "cell"]
    assert all(list(row["us"]) == ["split", "fused"] for row in rows)


@interpreter_only
def test_process_state_probe_refuses_an_unknown_step_naming_the_known_ones(capsys):
    with pytest.raises(SystemExit) as exit_info:
        script("probe_process_state").main(["--device", "cpu", "--quick", "--steps", "nap"])
    assert exit_info.value.code == 2
    assert "unknown step(s) nap; known: start, again" in capsys.readouterr().err


@interpreter_only
def test_layer_bench_times_each_route_after_the_projection_and_back_to_back(tmp_path, capsys):
    bench = script("bench_layer")
    argv = ["--device", "cpu", "--quick", "--rounds", "2", "--visit", "1", "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    (entry,) = json.loads((tmp_path / "bench_layer.json").read_text())["shapes"]
    routes = {"fused", "fused-twin", "fused-l1", "fused-fit", "fused-again", "fused-pdl",
              "fused-pdl-l1", "fused-pdl-fit", "split", "split-l1", "split-fit"}
    assert set(entry["in_layer_us"]) == routes
    assert set(entry["us"]) == {"gemm", "floor", "fused", "fused-l1", "fused-fit",
                                *(f"gemm+{r}" for r in routes)}
    assert all(check["bits_equal_split"] for check in entry["checks"].values())
    assert all(len(v) == 2 for v in entry["us"].values())
    medians = entry["median_us"]
    assert entry["in_layer_us"]["split"] == medians["gemm+split"] - medians["gemm"]
    assert "CHECK FAILED" not in capsys.readouterr().out


@interpreter_only
def test_layer_bench_fails_loudly_when_a_route_differs_from_split(
        tmp_path, fused_off_by_one_ulp, capsys):
    bench = script("bench_layer")
    argv = ["--device", "cpu", "--quick", "--rounds", "1", "--visit", "1", "--out", str(tmp_path)]
    assert bench.main(argv) == 1
    failed = capsys.readouterr().out.split("CHECK FAILED: ")[1].split(", ")
    # The twins launch the kernels a call recorded, not the wrapper that spoils k.
    assert {"gemm+fused", "fused", "gemm+fused-again", "gemm+fused-pdl"} <= {
        f.strip() for f in failed}


def test_layer_bench_records_a_shape_that_raised_and_exits_1(tmp_path, monkeypatch, capsys):
    bench = script("bench_layer")

    def broken(*args, **kwargs):
        raise RuntimeError("capture failed")

    monkeypatch.setattr(bench, "measure_shape", broken)
    assert bench.main(["--device", "cpu", "--quick", "--out", str(tmp_path)]) == 1
    (entry,) = json.loads((tmp_path / "bench_layer.json").read_text())["shapes"]
    assert entry == {"shape": "tiny/T3", "error": "RuntimeError: capture failed"}
    assert "tiny/T3" in capsys.readouterr().out


def test_layer_benchs_fit_twin_asks_for_the_occupancy_carveout():
    carveout = script("carveout")

    assert script("bench_layer").TWINS["-fit"][1] == carveout.OCCUPANCY


def test_layer_bench_reports_an_arms_samples_by_the_arm_visited_before_it():
    bench = script("bench_layer")
    labels = ["a", "b", "c"]
    sequence = [1, 0, 1, 1, 2, 1]  # b at the start, after a (twice), after c
    us = {"a": [9.0], "b": [5.0, 1.0, 2.0, 7.0], "c": [9.0]}
    assert bench.by_arm_before(labels, sequence, us, "b") == {"start": 5.0, "a": 1.5, "c": 7.0}


def test_a_shuffled_schedule_puts_each_arm_after_several_others():
    bench = script("bench_kernels")

    class Clock:
        def run(self, graphs, sequence, sync_after):
            return type("Timed", (), {"seconds": [1e-6] * len(sequence)})

    sequence, us = bench.interleaved(Clock(), [None] * 4, list("abcd"), 12, 2, shuffle_seed=0)
    assert sorted(sequence) == sorted(list(range(4)) * 24)
    firsts = [n for n in range(1, len(sequence)) if sequence[n] == 0 and sequence[n - 1] != 0]
    assert len({sequence[n - 1] for n in firsts}) == 3
    assert {label: len(v) for label, v in us.items()} == dict.fromkeys("abcd", 24)


@interpreter_only
def test_carveout_sequence_runs_every_step_in_its_order():
    sequence = script("carveout_sequence")
    steps = sequence.launches(torch.device("cpu"), quick=True)
    assert set(steps) == set(sequence.SEQUENCE)
    sequence.run_sequence(torch.device("cpu"), quick=True)


NCU_HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
              '"Block Size","Grid Size","Device","CC","Section Name","Metric Name",'
              '"Metric Unit","Metric Value"')


def ncu_row(launch_id: int, name: str, unit: str, value: str) -> str:
    return (f'"{launch_id}","7","python","h","qk_norm_rope_kernel","1","7","(32, 1, 1)",'
            f'"(40, 1, 1)","0","9.0","Launch Statistics","{name}","{unit}","{value}"')


def test_carveout_sequence_reads_each_launchs_split_from_ncus_details_in_launch_order():
    sequence = script("carveout_sequence")
    text = "\n".join(["==PROF== Disconnected from process 7", NCU_HEADER,
                      ncu_row(1, "Shared Memory Configuration Size", "Kbyte", "233.47"),
                      ncu_row(0, "Shared Memory Configuration Size", "Kbyte", "16.38"),
                      ncu_row(0, "Function Cache Configuration", "", "CachePreferNone"),
                      ncu_row(0, "Grid Size", "", "40")])
    assert sequence.read_details(text) == [
        {"kernel": "qk_norm_rope_kernel", "Shared Memory Configuration Size": "16.38 Kbyte",
         "Function Cache Configuration": "CachePreferNone"},
        {"kernel": "qk_norm_rope_kernel", "Shared Memory Configuration Size": "233.47 Kbyte"}]


def test_carveout_sequence_names_each_launch_of_ours_by_the_step_before_it():
    sequence = script("carveout_sequence")
    names = sequence.labels()
    assert names[:3] == ["fused after start", "fused after fused", "fused after gemm"]
    assert "fused-l1 after gemm" in names and "fused after fused-l1" in names
    assert len(names) == sum(step in sequence.OURS for step in sequence.SEQUENCE)


def test_carveout_sequence_refuses_a_profile_of_another_count_of_launches():
    sequence = script("carveout_sequence")
    with pytest.raises(SystemExit, match="profiled 1 launches of the fused kernel; the "
                                         "sequence has 2"):
        sequence.table(["a", "b"], [{"kernel": "qk_norm_rope_kernel"}])


def test_carveout_sequence_names_a_report_that_profiled_nothing():
    sequence = script("carveout_sequence")
    with pytest.raises(SystemExit, match="ncu's report holds no profiled launch"):
        sequence.read_details("==PROF== No kernels were profiled.\n")


@interpreter_only
def test_ncu_goal_cells_records_each_arm_with_the_ops_bytes_and_launches_it(tmp_path):
    cells = script("ncu_goal_cells")
    record = tmp_path / "launches.json"
    assert cells.main(["--launch", "--device", "cpu", "--quick", "--record", str(record)]) == 0
    made = json.loads(record.read_text())
    assert [label for label, _ in made] == [f"tiny/T40 {arm}" for arm in cells.ARMS]
    # 40 tokens of 3 rows of 64 bf16 read and written, and each token's table row (64
    # fp32), position (int64) and the two weights: the same yardstick for every arm.
    assert {model for _, model in made} == {40 * 3 * 64 * 2 * 2 + 40 * (64 * 4 + 8) + 2 * 64 * 2}


NCU_RAW_COLUMNS = ("ID", "Kernel Name", "gpu__time_duration.sum", "dram__bytes_read.sum",
                   "dram__bytes_write.sum", "sm__cycles_active.avg", "sm__cycles_elapsed.avg",
                   "lts__t_sector_hit_rate.pct",
                   "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
                   "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio",
                   "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio")
NCU_RAW = "\n".join([
    "==PROF== Disconnected from process 7",
    ",".join(f'"{c}"' for c in NCU_RAW_COLUMNS),
    '"","","usecond","Mbyte","Kbyte","cycle","cycle","%","inst","inst","inst"',
    '"1","rows_copy_kernel","40.0","0.095","95","950","1,000","10","15","1","2"',
    '"0","qk_norm_rope_kernel","46.32","0.11","90","900","1,000","12.5","20.1","3.2","30"',
])


def test_ncu_goal_cells_reads_bytes_busy_share_and_stalls_per_launch_in_launch_order():
    cells = script("ncu_goal_cells")
    (first, second), units = cells.read_raw(NCU_RAW)
    assert first["Kernel Name"] == "qk_norm_rope_kernel"
    fused = cells.summary("cell fused", first, units, 200_000)
    # Each column scaled by its unit: us, and Mbyte and Kbyte to bytes.
    assert fused["us"] == pytest.approx(46.32) and fused["L2 hit %"] == 12.5
    assert fused["dram bytes / model"] == pytest.approx(1.0) and fused["sm busy %"] == 90.0
    # The largest stalls first, as shares of them all; an issued warp is no stall.
    assert fused["stall %"] == pytest.approx({"long_scoreboard": 100 * 20.1 / 23.3,
                                              "lg_throttle": 100 * 3.2 / 23.3})
    assert cells.summary("cell copy", second, units, 200_000)["dram bytes / model"] == \
        pytest.approx(0.95)


def test_ncu_goal_cells_reads_an_archived_report_again_under_its_launches_labels(tmp_path):
    cells = script("ncu_goal_cells")
    report = tmp_path / "goal-cells-all"
    report.with_suffix(".csv").write_text(NCU_RAW)
    report.with_suffix(".launches.json").write_text(
        json.dumps([["cell fused", 200_000], ["cell copy", 200_000]]))
    assert cells.main(["--read", str(report)]) == 0
    fused, copy = json.loads(report.with_suffix(".json").read_text())
    assert (fused["launch"], copy["launch"]) == ("cell fused", "cell copy")
    assert fused["us"] == pytest.approx(46.32) and copy["us"] == pytest.approx(40.0)


def test_ncu_goal_cells_refuses_a_report_of_other_launches_than_were_made(tmp_path):
    cells = script("ncu_goal_cells")
    report = tmp_path / "goal-cells-all"
    report.with_suffix(".csv").write_text(NCU_RAW)
    report.with_suffix(".launches.json").write_text(json.dumps([["cell fused", 200_000]]))
    with pytest.raises(SystemExit, match="ncu profiled 2 launches; 1 were made"):
        cells.main(["--read", str(report)])


def test_ncu_goal_cells_names_a_report_that_profiled_nothing():
    cells = script("ncu_goal_cells")
    with pytest.raises(SystemExit, match="no \"ID\" header in its raw page"):
        cells.read_raw("==PROF== No kernels were profiled.\n")


def _l2_run(copy_gbps: float, fixed_us: float, rate: float, tokens: list[int]) -> dict:
    """An L2-bench record whose one arm takes exactly ``fixed_us + bytes_us / rate``."""
    shapes = []
    for t in tokens:
        nbytes = t * 40 * 128 * 4
        us = fixed_us + nbytes / copy_gbps / 1e3 / rate
        shapes.append({"shape": f"g/T{t}", "bytes": {"arm": nbytes},
                       "us": {"arm": [us * 1.001, us, us * 0.999]}})
    return {"copy_gbps": copy_gbps, "shapes": shapes}


def test_fixed_cost_recovers_a_planted_fixed_cost_and_rate():
    fixed_cost = script("fixed_cost")
    run = _l2_run(4000.0, fixed_us=3.5, rate=0.97, tokens=[8192, 32768])
    more = _l2_run(4000.0, fixed_us=3.5, rate=0.97, tokens=[16384, 65536])
    (row,) = fixed_cost.fits(fixed_cost.points([run, more], skip=set()))
    assert row["tokens"] == [8192, 16384, 32768, 65536]
    assert abs(row["fixed_us"] - 3.5) < 1e-9 and abs(row["rate"] - 0.97) < 1e-12
    assert row["worst"] < 1e-12


def test_fixed_cost_leaves_out_skipped_shapes_and_an_arm_of_one_token_count():
    fixed_cost = script("fixed_cost")
    run = _l2_run(4000.0, fixed_us=1.0, rate=1.0, tokens=[8192, 32768])
    assert fixed_cost.fits(fixed_cost.points([run], skip={"g/T8192"})) == []


def test_fixed_cost_refuses_a_skip_that_names_no_shape(tmp_path, capsys):
    fixed_cost = script("fixed_cost")
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_l2_run(4000.0, fixed_us=1.0, rate=1.0, tokens=[8192, 32768])))
    with pytest.raises(SystemExit) as e:
        fixed_cost.main([str(path), "--skip", "g/T8193"])
    assert e.value.code == 2
    assert "--skip g/T8193: no such shape in the runs given" in capsys.readouterr().err
