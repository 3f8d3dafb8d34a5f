"""The fused route is bit-identical to the split route, and both are accurate."""

from dataclasses import replace

import pytest
import torch

from qkbench.accuracy import differing_share
from qkbench.case import Case, Geometry, make_inputs
from qkbench.kernels import launch, plan, qk_norm_rope, qk_norm_rope_split, rms_norm, rope

from conftest import gpu_only
from helpers import assert_bit_identical, assert_matches_oracle, oracle_of

BASE = Geometry("base", heads_q=4, heads_k=2, head_dim=64)


def case(tokens: int = 7, dtype: str = "bfloat16", table: str = "float32",
         pos: str = "int64", **geometry) -> Case:
    return Case(replace(BASE, **geometry), tokens, dtype, table, pos, max_position=512)


def case_id(c: Case) -> str:
    g = c.geometry
    parts = [f"T{c.tokens}", f"Hq{g.heads_q}", f"Hk{g.heads_k}", f"D{g.head_dim}",
             f"r{g.rotary}", g.style, g.weight_mode, c.dtype.replace("float", "fp")
             .replace("bfp16", "bf16"), f"tab-{c.table_dtype}", c.positions_dtype]
    if g.mrope_section:
        parts.append(f"mrope-{g.mrope_layout}")
    if not g.inplace:
        parts.append("outofplace")
    if g.packed:
        parts.append("packed")
    if g.batch:
        parts.append(f"B{g.batch}")
    return "-".join(parts)


# Every option of the contract, each varied from a small base case.
CPU_CASES = [
    case(),
    case(head_dim=128),
    case(head_dim=256, rotary_dim=64),
    case(head_dim=128, rotary_dim=32),
    case(head_dim=80, rotary_dim=16),
    # Rotary halves that are not powers of two (padded pair tiles beside the whole row in the
    # fused kernel): Phi-3's full 96, GPT-NeoX's 24 of 96, StableLM's 20 of 80.
    case(head_dim=96),
    case(head_dim=96, rotary_dim=24, style="gptj"),
    case(head_dim=80, rotary_dim=20, inplace=False, weight_mode="offset"),
    case(head_dim=96, mrope_section=(16, 16, 16), mrope_layout="interleaved"),
    case(style="gptj"),
    case(style="gptj", head_dim=256, rotary_dim=64),
    case(weight_mode="offset"),
    case(weight_mode="offset", head_dim=256, rotary_dim=64, inplace=False),
    case(inplace=False),
    case(inplace=False, head_dim=128, rotary_dim=32, style="gptj"),
    case(dtype="float16"),
    case(dtype="float32"),
    case(dtype="float16", table="activation"),
    case(table="activation"),
    case(pos="int32"),
    case(mrope_section=(8, 12, 12)),
    case(mrope_section=(8, 12, 12), mrope_layout="interleaved"),
    case(mrope_section=(8, 12, 12), mrope_layout="glm-interleaved", style="gptj"),
    case(head_dim=128, mrope_section=(24, 20, 20), mrope_layout="interleaved", inplace=False),
    case(tokens=6, batch=2),
    case(tokens=6, batch=3, head_dim=128, heads_q=3, heads_k=3),
    case(packed=True),
    case(packed=True, inplace=False, head_dim=256, rotary_dim=64),
    case(heads_q=8, heads_k=1),
    case(heads_q=3, heads_k=3),
    case(tokens=1),
    case(tokens=33, heads_q=2, heads_k=1),
]

# The seeds' geometries at the widths that matter, on the GPU only.
GPU_CASES = [
    case(tokens=t, head_dim=256, rotary_dim=64, heads_q=hq, heads_k=hk,
         weight_mode="offset", inplace=False)
    for t in (1, 8, 320, 8192) for hq, hk in ((16, 2), (24, 4))
] + [
    case(tokens=t, head_dim=128, heads_q=hq, heads_k=hk, packed=packed)
    for t in (1, 64, 512, 8192) for hq, hk in ((32, 8), (64, 8)) for packed in (False, True)
] + [
    case(tokens=t, head_dim=128, heads_q=32, heads_k=8, mrope_section=(24, 20, 20),
         mrope_layout=layout, table="activation")
    for t in (1, 256) for layout in ("sectioned", "interleaved", "glm-interleaved")
] + [
    case(tokens=3973, batch=1, heads_q=24, heads_k=24, head_dim=128),
    case(tokens=2 * 4096, batch=2, heads_q=24, heads_k=24, head_dim=128, dtype="float16"),
    case(tokens=4096, head_dim=128, heads_q=32, heads_k=8, dtype="float32", style="gptj"),
] + [
    case(tokens=t, head_dim=d, rotary_dim=r, heads_q=32, heads_k=32)
    for t in (1, 8192) for d, r in ((96, 96), (80, 20))
]

ALL_CASES = [pytest.param(c, id=case_id(c)) for c in CPU_CASES] + [
    pytest.param(c, id="gpu-" + case_id(c), marks=gpu_only) for c in GPU_CASES
]


def poisoned(like: torch.Tensor) -> torch.Tensor:
    """An output buffer of NaN, so that an element a kernel skips cannot pass for written."""
    return torch.full(like.shape, float("nan"), dtype=like.dtype, device=like.device)


def routes_on(c: Case, seed: int, device: str, **fused_options):
    """Run both routes on one set of inputs (out of place: into poisoned buffers);
    returns (inputs, fused, split)."""
    inputs = make_inputs(c, seed, device)
    inplace = c.geometry.inplace
    results = []
    for op, options in ((qk_norm_rope, fused_options), (qk_norm_rope_split, {})):
        q, k = inputs.q.clone(), inputs.k.clone()
        outs = {} if inplace else {"q_out": poisoned(q), "k_out": poisoned(k)}
        results.append(inputs.with_qk(q, k).call(op, inplace=inplace, **outs, **options))
    return inputs, results[0], results[1]


@pytest.mark.parametrize("c", ALL_CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_fused_route_is_bit_identical_to_split_route(c, seed, device):
    _, (fq, fk), (sq, sk) = routes_on(c, seed, device)
    assert_bit_identical(fq, sq, "q")
    assert_bit_identical(fk, sk, "k")


# Plan settings that cut rows into other tiles: several tokens and heads per program, one
# row per program, more warps per row, fewer and larger programs.
# The settings of sizes turn off the rule for launches of few programs, which would swap the
# size for its own on a GPU.
OWN_SIZE = {"few_programs_per_sm": 0}
TILE_SETTINGS = {
    "tiny-tiles": {"elems_per_program": 256, "partial_elems_per_program": 256,
                   "rope_elems_per_program": 256, "min_bytes_per_thread": 0, **OWN_SIZE},
    "many-warps": {"elems_per_program": 2048, "elems_per_warp": 128, "rope_elems_per_warp": 128,
                   **OWN_SIZE},
    "large-tiles": {"elems_per_program": 16384, "partial_elems_per_program": 16384,
                    "rope_elems_per_program": 16384, **OWN_SIZE},
    "spread-thin": {"min_programs_per_sm": 16, "min_bytes_per_thread": 0, **OWN_SIZE},
    "spread-little": {"min_programs_per_sm": 0.25, **OWN_SIZE},
    "rebuilt-tree": {"whole_pass_tile": False},
    "q-then-k": {"interleave_qk_span_ratio": 0},
    "chunks-always": {"interleave_qk_span_ratio": 64},
    # Every launch past an L2 of one byte: GQA's k tiles cut to twice a q tile's tokens.
    "k-tiles-past-l2": {"l2_bytes": 1},
    # The table prefetch from the first tile program of every 128 tokens, past an L2 of one
    # byte whatever the table's share (chunked launches only).
    "table-prefetch": {"table_prefetch_per_sm": 2, "table_prefetch_min_share": 0, "l2_bytes": 1,
                       "interleave_qk_span_ratio": 64},
}
TILE_CASES = [
    case(tokens=9, heads_q=5, heads_k=3, head_dim=256, rotary_dim=64, weight_mode="offset",
         inplace=False),
    case(tokens=6, head_dim=128, rotary_dim=32, style="gptj"),
    case(tokens=5, mrope_section=(8, 12, 12), mrope_layout="interleaved"),
    case(tokens=4, head_dim=80, rotary_dim=16, dtype="float32", inplace=False),
    case(tokens=7, heads_q=5, heads_k=3, head_dim=96, rotary_dim=48, inplace=False),
    # q tiles of 4 tokens, k tiles of 16 ("chunks-always": two chunks, the second past T;
    # "k-tiles-past-l2": k tiles of 8 tokens, three chunks, the last past T).
    case(tokens=21, heads_q=8, heads_k=2, head_dim=128, inplace=False),
]
GPU_TILE_CASES = [
    case(tokens=t, head_dim=d, rotary_dim=r, heads_q=hq, heads_k=hk, weight_mode=w,
         inplace=inplace)
    for t in (1, 8, 64, 3000) for d, r, hq, hk, w, inplace in (
        (128, 128, 32, 8, "plain", True), (256, 64, 24, 4, "offset", False),
        # rotary halves of no power of two, padded: Phi-3's full 96, StableLM's 20 of 80
        (96, 96, 32, 32, "plain", True), (80, 20, 32, 8, "offset", False))
]


@pytest.mark.parametrize("settings", TILE_SETTINGS.values(), ids=TILE_SETTINGS.keys())
@pytest.mark.parametrize("c", [pytest.param(c, id=case_id(c)) for c in TILE_CASES] + [
    pytest.param(c, id="gpu-" + case_id(c), marks=gpu_only) for c in GPU_TILE_CASES])
def test_every_tile_shape_is_bit_identical_to_the_split_route(c, settings, device):
    with plan.use(**settings):
        _, (fq, fk), (sq, sk) = routes_on(c, 3, device)
    assert_bit_identical(fq, sq, "q")
    assert_bit_identical(fk, sk, "k")


def test_table_prefetches_from_tile_programs_leave_every_tile_bit_identical(device):
    # 300 tokens in chunks of a few tokens take three blocks of 128 tokens, the first
    # program of each prefetching (on the CPU: tiles of 4 q and 8 k tokens, 16 chunks of
    # 3 programs a block; a GPU spreads the rows thinner).
    c = case(tokens=300, heads_q=2, heads_k=1, head_dim=32, inplace=False)
    settings = {"table_prefetch_per_sm": 2, "table_prefetch_min_share": 0, "l2_bytes": 1,
                "elems_per_program": 256, "min_bytes_per_thread": 0}
    with plan.use(**settings), launch.recording() as launches:
        _, (fq, fk), (sq, sk) = routes_on(c, 4, device)
    fused, grid = launches[0][0].settings()["args"], launches[0][0].grid[0]
    assert fused["PREFETCH_PERIOD"] and 2 * fused["PREFETCH_PERIOD"] < grid
    if device == "cpu":
        assert (fused["PREFETCH_PERIOD"], grid) == (48, 114)
    assert_bit_identical(fq, sq, "q")
    assert_bit_identical(fk, sk, "k")


PDL_CASES = [*GPU_TILE_CASES,
             case(tokens=8, head_dim=128, mrope_section=(24, 20, 20), mrope_layout="interleaved",
                  style="gptj", table="activation")]


@gpu_only
@pytest.mark.parametrize("variant", [0, 1, 2], ids=["by-rule", "variant1", "variant2"])
@pytest.mark.parametrize("c", [pytest.param(c, id=case_id(c)) for c in PDL_CASES])
def test_programmatic_dependent_launch_is_bit_identical_to_the_split_route(c, variant, device):
    with plan.use(pdl_variant=variant):
        _, (fq, fk), (sq, sk) = routes_on(c, 4, device, pdl=True)
    assert_bit_identical(fq, sq, "q")
    assert_bit_identical(fk, sk, "k")


@gpu_only
@pytest.mark.parametrize("c", [pytest.param(c, id=case_id(c)) for c in (
    case(tokens=1024, head_dim=128, heads_q=32, heads_k=8, inplace=False),
    case(tokens=1024, head_dim=128, heads_q=16, heads_k=2, style="gptj"))])
def test_a_launch_of_few_programs_is_bit_identical_to_the_split_route(c, device):
    with launch.recording() as launches:
        _, (fq, fk), (sq, sk) = routes_on(c, 5, device)
    fused = launches[0][0]
    args, s = fused.settings()["args"], plan.SETTINGS
    assert args["BTQ"] * args["BHQ"] * c.geometry.head_dim == s.few_elems_per_program
    assert fused.options["num_warps"] == s.few_elems_per_program // s.few_elems_per_warp
    assert_bit_identical(fq, sq, "q")
    assert_bit_identical(fk, sk, "k")


@pytest.mark.parametrize("c", ALL_CASES)
def test_both_routes_agree_with_the_fp64_oracle(c, device):
    inputs, fused, split = routes_on(c, 2, device)
    oq, ok = oracle_of(inputs)
    for name, (q, k) in (("fused", fused), ("split", split)):
        assert_matches_oracle(q, oq, f"{name} q")
        assert_matches_oracle(k, ok, f"{name} k")


def test_split_route_is_rms_norm_then_rope(device):
    inputs = make_inputs(case(head_dim=256, rotary_dim=64, weight_mode="offset"), 3, device)
    opts = inputs.options
    norm = {"eps": opts["eps"], "weight_mode": "offset"}
    q = rms_norm(inputs.q, inputs.q_weight, **norm)
    k = rms_norm(inputs.k, inputs.k_weight, **norm)
    rope(q, k, inputs.positions, inputs.cos_sin_cache, rotary_dim=opts["rotary_dim"])
    sq, sk = inputs.call(qk_norm_rope_split, inplace=False)
    assert_bit_identical(sq, q, "q")
    assert_bit_identical(sk, k, "k")


# Each dtype the kernels take, with the integer type of its width (to step its bits).
INT_OF = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
FLOAT_DTYPES = pytest.mark.parametrize("dtype", INT_OF, ids=lambda d: str(d).split(".")[-1])


@FLOAT_DTYPES
def test_exactness_check_rejects_a_single_one_ulp_difference(dtype):
    # One element of 4096 (0.02 %) one ulp off: neither a tolerance nor an allowed share
    # of differing elements may let it through.
    x = torch.randn(4096, generator=torch.Generator().manual_seed(0)).to(dtype)
    y = x.clone()
    y.view(INT_OF[dtype])[1234] += 1  # the next representable value away from zero
    assert y[1234] != x[1234]
    assert_bit_identical(x, x.clone(), "copy")
    with pytest.raises(AssertionError):
        assert_bit_identical(x, y, "one ulp")


@FLOAT_DTYPES
def test_exactness_compares_bit_patterns_so_minus_zero_differs_from_zero(dtype):
    plus, minus = torch.tensor([0.0], dtype=dtype), torch.tensor([-0.0], dtype=dtype)
    assert plus == minus  # equal values, other bits
    assert differing_share(plus, minus) == 1.0


# 1 ppm is about 1/7800 of a bf16 ulp (2**-7 relative) and about 8 fp32 ulps.
PPM = 1e-6


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_exactness_check_sees_a_one_ppm_change_of_the_rotation(dtype, device):
    c = case(tokens=64, heads_q=8, heads_k=2, head_dim=128, dtype=dtype)
    inputs = make_inputs(c, 4, device)
    split = inputs.call(qk_norm_rope_split, inplace=False)
    nudged = inputs.call(qk_norm_rope, inplace=False,
                         cos_sin_cache=inputs.cos_sin_cache * (1 + PPM))
    restored = inputs.call(qk_norm_rope, inplace=False)
    shares = [differing_share(a, b) for a, b in zip(nudged, split, strict=False)]
    if dtype == "float32":
        assert min(shares) > 0.5, shares
    else:
        # Far below the output quantum a nudge moves only values already on a rounding
        # boundary: few, but the exact check must see them where a tolerance would not.
        assert min(shares) > 0.0, shares
        torch.testing.assert_close(nudged[0], split[0])
    for a, b in zip(restored, split, strict=False):
        assert_bit_identical(a, b, "restored")


OUT_OF_PLACE = [pytest.param(c, id=case_id(c)) for c in CPU_CASES if not c.geometry.inplace]


@pytest.mark.parametrize("c", OUT_OF_PLACE)
def test_both_routes_write_every_element_of_poisoned_outputs(c, device):
    _, fused, split = routes_on(c, 5, device)
    for name, (q, k) in (("fused", fused), ("split", split)):
        assert not q.isnan().any() and not k.isnan().any(), name


@pytest.mark.parametrize("rotary_dim", [64, 256], ids=["partial", "full"])
def test_rope_alone_writes_every_element_of_poisoned_outputs(rotary_dim, device):
    c = case(head_dim=256, rotary_dim=rotary_dim, inplace=False, packed=True)
    inputs = make_inputs(c, 5, device)
    q_out, k_out = poisoned(inputs.q), poisoned(inputs.k)
    q, k = rope(inputs.q, inputs.k, inputs.positions, inputs.cos_sin_cache,
                rotary_dim=rotary_dim, inplace=False, q_out=q_out, k_out=k_out)
    assert q is q_out and k is k_out
    assert not q.isnan().any() and not k.isnan().any()
    # The pass-through channels are copied, not left behind.
    assert_bit_identical(q[..., rotary_dim:], inputs.q[..., rotary_dim:], "q pass-through")


def test_rms_norm_alone_writes_every_element_of_a_poisoned_output(device):
    inputs = make_inputs(case(head_dim=128, packed=True), 5, device)
    out = poisoned(inputs.q)
    y = rms_norm(inputs.q, inputs.q_weight, out=out)
    assert y is out and not y.isnan().any()


def test_out_of_place_leaves_the_inputs_unchanged(device):
    inputs = make_inputs(case(inplace=False, head_dim=128, rotary_dim=32), 6, device)
    before = inputs.q.clone(), inputs.k.clone()
    for op in (qk_norm_rope, qk_norm_rope_split):
        q, _k = inputs.call(op, inplace=False)
        assert q.data_ptr() != inputs.q.data_ptr()
        assert_bit_identical(inputs.q, before[0], op.__name__)
        assert_bit_identical(inputs.k, before[1], op.__name__)


def test_in_place_returns_the_inputs_themselves(device):
    inputs = make_inputs(case(packed=True), 7, device)
    expected = inputs.call(qk_norm_rope, inplace=False)
    q, k = inputs.call(qk_norm_rope, inplace=True)
    assert q is inputs.q and k is inputs.k
    assert_bit_identical(q, expected[0], "q")
    assert_bit_identical(k, expected[1], "k")


def test_row_strided_mrope_positions_view_is_read_through_its_strides(device):
    c = case(mrope_section=(8, 12, 12), mrope_layout="interleaved")
    inputs = make_inputs(c, 8, device)
    wide = torch.zeros(3, 2 * c.tokens, dtype=inputs.positions.dtype, device=device)
    wide[:, : c.tokens] = inputs.positions
    strided = wide[:, : c.tokens]
    assert not strided.is_contiguous()
    expected = inputs.call(qk_norm_rope, inplace=False)
    for op in (qk_norm_rope, qk_norm_rope_split):
        got = inputs.call(op, inplace=False, positions=strided)
        assert_bit_identical(got[0], expected[0], op.__name__)


def test_mrope_with_equal_axes_is_plain_rope(device):
    c = case(mrope_section=(8, 12, 12), mrope_layout="glm-interleaved")
    inputs = make_inputs(c, 9, device)
    same = inputs.positions[0].expand(3, -1)
    mrope = inputs.call(qk_norm_rope, inplace=False, positions=same)
    plain = inputs.call(qk_norm_rope, inplace=False, positions=inputs.positions[0],
                        mrope_section=None)
    assert_bit_identical(mrope[0], plain[0], "q")
    assert_bit_identical(mrope[1], plain[1], "k")


def test_an_empty_token_batch_is_a_no_op(device):
    inputs = make_inputs(case(tokens=1), 10, device)
    q, k = inputs.q[:0], inputs.k[:0]
    with launch.recording() as launched:
        out = inputs.with_qk(q, k).call(qk_norm_rope, positions=inputs.positions[:0])
    assert launched == []
    assert out[0] is q and out[1] is k
