"""A tensor the kernels write shares no memory with another of the call's tensors."""

import itertools
import random

import pytest
import torch

from qkbench.case import Case, Geometry, make_inputs
from qkbench.kernels import overlap, qk_norm_rope, qk_norm_rope_split, rms_norm, rope
from qkbench.kernels.calls import SLOTS, written
from qkbench.kernels.overlap import Footprint, layouts_overlap

ROUTES = [qk_norm_rope, qk_norm_rope_split]


def bytes_of(layout: overlap.Layout, start: int) -> set[int]:
    """Every byte a tensor of ``layout`` at ``start`` holds, counted one by one."""
    shape, strides, size = layout
    return {start + sum(i * s for i, s in zip(index, strides, strict=True)) * size + b
            for index in itertools.product(*map(range, shape)) for b in range(size)}


def random_layout(rng: random.Random, outer: int | None = None) -> overlap.Layout:
    """Any strides (expanded and overlapping ones too), or nested rows ``[T, H, D]`` of unit
    channel stride whose token stride is ``outer`` (as views of one packed buffer)."""
    size = rng.choice([1, 2, 4])
    if outer is None:
        shape = tuple(rng.randint(0, 4) for _ in range(rng.randint(1, 3)))
        return shape, tuple(rng.choice([0, 1, 2, 3, 5, 8, 12]) for _ in shape), size
    d = rng.randint(1, 4)
    head_stride = d + rng.randint(0, 3)
    heads = max(1, min(rng.randint(1, 3), (outer - d) // head_stride + 1))
    return (rng.randint(1, 4), heads, d), (outer, head_stride, 1), size


@pytest.mark.parametrize("family", ["any-strides", "rows-of-one-buffer"])
def test_the_overlap_verdict_is_the_byte_count(family):
    rng = random.Random(family)
    met = 0
    for _ in range(3000):
        outer = rng.randint(4, 24) if family == "rows-of-one-buffer" else None
        a, b = random_layout(rng, outer), random_layout(rng, outer)
        delta = rng.randint(-48, 48)
        shared = bool(bytes_of(a, 0) & bytes_of(b, delta))
        met += shared
        assert layouts_overlap(a, b, delta) == shared, (a, b, delta)
    assert 300 < met < 2700  # both answers drawn often


def test_a_pair_too_finely_strided_to_count_counts_as_overlapping(monkeypatch):
    # Token strides 7 and 5 elements: no common outer stride to reduce by.
    a, b = ((6, 1), (7, 1), 1), ((6, 1), (5, 1), 1)
    assert not layouts_overlap(a, b, 100)
    monkeypatch.setattr(overlap, "MAX_RUNS", 5)
    assert layouts_overlap(a, b, 100)


def test_an_empty_tensor_shares_nothing():
    assert not layouts_overlap(((0, 4), (4, 1), 2), ((3, 4), (4, 1), 2), 0)


@pytest.fixture
def inputs(device):
    return make_inputs(Case(Geometry("g", 4, 2, 64, packed=True), 5, max_position=64), 0,
                       device)


def test_q_and_k_packed_in_one_qkv_buffer_are_apart(inputs):
    token = inputs.q.stride(0) * inputs.q.element_size()
    assert inputs.q.data_ptr() < inputs.k.data_ptr() < inputs.q.data_ptr() + token  # interleaved
    tensors = (inputs.q, inputs.k, None, None, inputs.q_weight, inputs.k_weight,
               inputs.cos_sin_cache, inputs.positions)
    Footprint(tensors, written(True, tensors)).check(SLOTS, tensors)


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_a_packed_buffer_settles_its_views_distance_once(monkeypatch, inputs, route):
    settled = []
    monkeypatch.setattr(overlap, "layouts_overlap",
                        lambda *args: settled.append(args) or layouts_overlap(*args))
    for _ in range(3):
        inputs.call(route)
    assert len(settled) == 1


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_one_tensor_read_as_q_and_k_out_of_place_is_read_twice(device, route):
    square = make_inputs(Case(Geometry("g", 2, 2, 64), 5, max_position=64), 0, device)
    got = square.call(route, k=square.q, inplace=False)
    expected = square.call(route, k=square.q.clone(), inplace=False)
    assert all(torch.equal(g.view(torch.int16), e.view(torch.int16))
               for g, e in zip(got, expected, strict=True))


def test_rms_norm_refuses_an_out_a_token_past_x(inputs):
    buf = torch.zeros(6, 4, 64, dtype=inputs.q.dtype, device=inputs.q.device)
    with pytest.raises(ValueError, match=r"^out shares memory with x but is not x element for "
                                         r"element; pass x itself as out"):
        rms_norm(buf[:5], inputs.q_weight, out=buf[1:])


def test_rms_norm_takes_a_view_of_x_itself_as_out(inputs):
    x = inputs.q.clone()
    expected = rms_norm(x.clone(), inputs.q_weight)
    assert torch.equal(rms_norm(x, inputs.q_weight, out=x[:]).view(torch.int16),
                       expected.view(torch.int16))


def test_rms_norm_refuses_an_out_over_its_weight(inputs):
    x = torch.zeros(2, 1, 64, dtype=inputs.q.dtype, device=inputs.q.device)
    with pytest.raises(ValueError, match=r"^out shares memory with weight and is written"):
        rms_norm(inputs.q[:2, :1], x[0, 0], out=x)


def test_rope_alone_refuses_k_inside_q(inputs):
    q = inputs.q.clone()
    with pytest.raises(ValueError, match=r"^q shares memory with k and is written"):
        rope(q, q[:, 1:3], inputs.positions, inputs.cos_sin_cache)


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_q_itself_as_q_out_is_taken_whatever_stride_a_dim_of_one_element_holds(device, route):
    one = make_inputs(Case(Geometry("g", 4, 2, 64, packed=True), 1, max_position=64), 0,
                      device)
    q, k = one.q.clone(), one.k.clone()
    q_out = q.squeeze(0).unsqueeze(0)  # the very elements of q; its token stride differs
    assert q_out.data_ptr() == q.data_ptr() and q_out.stride() != q.stride()
    got = one.with_qk(q, k).call(route, inplace=False, q_out=q_out)
    expected = one.with_qk(one.q.clone(), one.k.clone()).call(route)
    assert torch.equal(got[0].view(torch.int16), expected[0].view(torch.int16))
