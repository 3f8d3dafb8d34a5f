"""Safe at any input without a host synchronisation: out-of-range positions read nothing and
give NaN rotary channels (the same bits in both routes); offsets are 64-bit; the position
check is opt-in."""

import pytest
import torch

from qkbench.accuracy import bits
from qkbench.case import Case, Geometry, make_inputs
from qkbench.kernels import qk_norm_rope, qk_norm_rope_split, reference, rope

from conftest import gpu_only
from helpers import assert_bit_identical

ROUTES = [qk_norm_rope, qk_norm_rope_split]
MAX_POS = 64
# Negative, one past the table, far past it, and int64 values no table could hold.
BAD = [-1, MAX_POS, 1000, 2**40, -(2**62)]

GEOMETRIES = [
    Geometry("neox", 4, 2, 64, inplace=False),
    Geometry("gptj-partial", 3, 1, 128, rotary_dim=32, style="gptj", inplace=False),
    Geometry("neox-partial-inplace", 2, 2, 256, rotary_dim=64, weight_mode="offset"),
]


def bad_positions(inputs, tokens: int) -> torch.Tensor:
    """The inputs' positions with the odd tokens' replaced by out-of-range values."""
    pos = inputs.positions.clone().long()
    for i, t in enumerate(range(1, tokens, 2)):
        pos[t] = BAD[i % len(BAD)]
    return pos


def run(route, inputs, geometry, **options):
    q, k = inputs.q.clone(), inputs.k.clone()
    return inputs.with_qk(q, k).call(route, inplace=geometry.inplace, **options)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: g.name)
def test_out_of_range_positions_give_nan_rotary_channels_in_both_routes(geometry, device):
    tokens = 2 * len(BAD) + 1
    inputs = make_inputs(Case(geometry, tokens, max_position=MAX_POS), 0, device)
    pos = bad_positions(inputs, tokens)
    fused = run(qk_norm_rope, inputs, geometry, positions=pos)
    split = run(qk_norm_rope_split, inputs, geometry, positions=pos)
    clean = run(qk_norm_rope, inputs, geometry)
    bad = torch.zeros(tokens, dtype=torch.bool)
    bad[1::2] = True
    r = geometry.rotary
    for name, f, s, c in zip("qk", fused, split, clean, strict=True):
        assert torch.equal(bits(f), bits(s)), f"{name}: the routes differ in their bits"
        f = f.cpu()
        assert f[bad][..., :r].isnan().all(), name
        # The pass-through channels and every other token are what a clean call gives.
        assert_bit_identical(f[bad][..., r:], c.cpu()[bad][..., r:], f"{name} pass-through")
        assert_bit_identical(f[~bad], c.cpu()[~bad], f"{name} good tokens")


def test_an_out_of_range_mrope_axis_gives_nan_in_its_own_lanes_only(device):
    geometry = Geometry("mrope", 2, 1, 64, mrope_section=(8, 12, 12), inplace=False)
    inputs = make_inputs(Case(geometry, 3, max_position=MAX_POS), 0, device)
    pos = inputs.positions.clone()
    pos[2, 1] = MAX_POS  # token 1's width axis: sectioned, lanes 20..31
    fused = run(qk_norm_rope, inputs, geometry, positions=pos)
    split = run(qk_norm_rope_split, inputs, geometry, positions=pos)
    assert torch.equal(bits(fused[0]), bits(split[0]))
    q = fused[0].cpu()
    lanes = torch.zeros(64, dtype=torch.bool)
    lanes[20:32] = lanes[52:64] = True
    assert q[1][:, lanes].isnan().all() and not q[1][:, ~lanes].isnan().any()
    assert not q[0].isnan().any() and not q[2].isnan().any()


@pytest.mark.parametrize("layout", ["sectioned", "interleaved", "glm-interleaved"])
@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_check_positions_judges_only_the_mrope_axes_a_lane_reads(device, route, layout):
    geometry = Geometry("mrope", 2, 1, 64, mrope_section=(24, 8, 0), mrope_layout=layout,
                        inplace=False)
    inputs = make_inputs(Case(geometry, 3, max_position=MAX_POS), 0, device)
    pos = inputs.positions.clone()
    pos[2, 1] = -1  # the width axis, which has no lane: never read
    clean = run(route, inputs, geometry, positions=inputs.positions)
    for got, want in zip(run(route, inputs, geometry, positions=pos, check_positions=True),
                         clean, strict=True):
        assert torch.equal(bits(got), bits(want))
    pos[1, 1] = -1  # the height axis, which eight lanes read
    with pytest.raises(ValueError, match=r"positions must lie in \[0, 64\)"):
        run(route, inputs, geometry, positions=pos, check_positions=True)


@pytest.mark.parametrize("geometry", [*GEOMETRIES, Geometry(
    "mrope", 2, 1, 64, mrope_section=(8, 12, 12), inplace=False)], ids=lambda g: g.name)
@pytest.mark.parametrize("definition", [reference.qk_norm_rope_reference,
                                        reference.qk_norm_rope_oracle],
                         ids=lambda f: f.__name__)
def test_the_eager_definition_and_the_oracle_give_nan_where_the_kernels_do(geometry,
                                                                          definition, device):
    tokens = 2 * len(BAD) + 1
    inputs = make_inputs(Case(geometry, tokens, max_position=MAX_POS), 0, device)
    pos = inputs.positions.clone().long()
    if geometry.mrope_section:
        pos[:, 1::2] = torch.tensor(BAD, device=device)[None, :]  # every axis of odd tokens
        pos[2, 2] = MAX_POS  # and one axis of an even one
    else:
        pos = bad_positions(inputs, tokens)
    fused = run(qk_norm_rope, inputs, geometry, positions=pos)
    expected = inputs.call(definition, positions=pos)
    for name, f, e in zip("qk", fused, expected, strict=True):
        assert torch.equal(f.isnan(), e.isnan()), name
        assert f.isnan().any(), name


def test_the_eager_definition_gives_nan_with_a_table_of_no_rows():
    geometry = Geometry("g", 2, 1, 64, inplace=False)
    inputs = make_inputs(Case(geometry, 2, max_position=MAX_POS), 0, "cpu")
    q, _ = inputs.call(reference.qk_norm_rope_reference,
                       cos_sin_cache=inputs.cos_sin_cache[:0])
    assert q.isnan().all()


def test_rope_alone_gives_nan_for_an_out_of_range_position(device):
    geometry = Geometry("g", 2, 1, 64, rotary_dim=32)
    inputs = make_inputs(Case(geometry, 2, max_position=MAX_POS), 0, device)
    pos = inputs.positions.clone()
    pos[0] = -5
    q, _ = rope(inputs.q.clone(), inputs.k.clone(), pos, inputs.cos_sin_cache, rotary_dim=32)
    assert q[0, :, :32].isnan().all() and not q[0, :, 32:].isnan().any()
    assert not q[1].isnan().any()


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_a_default_call_never_reads_positions_back(route, monkeypatch, device):
    geometry = Geometry("g", 2, 1, 64)
    inputs = make_inputs(Case(geometry, 3, max_position=MAX_POS), 0, device)
    past_table = inputs.positions + MAX_POS
    run(route, inputs, geometry, positions=past_table)  # validated and compiled here

    def forbidden(name):
        def hook(*args, **kwargs):
            raise AssertionError(f"{name} called")
        return hook

    # The ways a check could read device values back, or ask whether a graph is captured.
    monkeypatch.setattr(torch, "aminmax", forbidden("aminmax"))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", forbidden("capturing"))
    for method in ("item", "tolist", "cpu", "__int__", "__bool__"):
        monkeypatch.setattr(torch.Tensor, method, forbidden(method))
    run(route, inputs, geometry, positions=past_table)
    # Asked for, the check reads them back (after asking whether a graph is being captured,
    # which a GPU does first: the read-back is refused there).
    with pytest.raises(AssertionError, match=r"(aminmax|capturing) called"):
        run(route, inputs, geometry, positions=past_table, check_positions=True)


@gpu_only
@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_out_of_range_positions_inside_a_cuda_graph_give_nan(route):
    geometry = Geometry("g", 4, 2, 128, inplace=False)
    inputs = make_inputs(Case(geometry, 9, max_position=MAX_POS), 0, "cuda")
    pos = bad_positions(inputs, 9)
    expected = run(route, inputs, geometry, positions=pos)
    q_out, k_out = torch.empty_like(inputs.q), torch.empty_like(inputs.k)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        inputs.call(route, inplace=False, q_out=q_out, k_out=k_out, positions=pos)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(bits(q_out), bits(expected[0]))
    assert torch.equal(bits(k_out), bits(expected[1]))


def head_strided(tokens: int, heads: int, head_dim: int, stride_h: int,
                 dtype=torch.bfloat16) -> torch.Tensor:
    """A ``[T, H, D]`` view whose heads lie ``stride_h`` elements apart, in one allocation."""
    span = (heads - 1) * stride_h + tokens * head_dim
    base = torch.empty(span, dtype=dtype, device="cuda")
    view = base.as_strided((tokens, heads, head_dim), (head_dim, stride_h, 1))
    view.copy_(torch.randn(tokens, heads, head_dim, device="cuda").to(dtype))
    return view


@gpu_only
@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_a_head_offset_past_two_to_the_31_elements_is_addressed_in_64_bits(route):
    # stride_h fits in int32, h * stride_h does not: 2 * (2**30 + 256) > 2**31.
    stride_h = 2**30 + 256
    q = head_strided(2, 3, 128, stride_h)
    inputs = make_inputs(Case(Geometry("g", 3, 1, 128, inplace=False), 2), 0, "cuda")
    expected = inputs.call(route, q=q.contiguous(), inplace=False)
    got = inputs.call(route, q=q, inplace=False)
    assert_bit_identical(got[0], expected[0], "q")
    del q
    torch.cuda.empty_cache()
