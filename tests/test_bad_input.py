"""Bad input raises an error that names the argument and what was expected."""

import os
import subprocess
import sys

import pytest
import torch

from qkbench.case import Case, Geometry, make_inputs
from qkbench.kernels import qk_norm_rope, qk_norm_rope_split, reference, rms_norm, rope

from conftest import gpu_only

ROUTES = [qk_norm_rope, qk_norm_rope_split]


@pytest.fixture
def inputs(device):
    return make_inputs(Case(Geometry("g", 4, 2, 64), 5, max_position=64), 0, device)


def _mrope(inputs):
    return {"mrope_section": (8, 12, 12), "positions": inputs.positions.expand(3, -1)}


# (id, overrides from the inputs, error type, message pattern)
BAD = [
    ("q-not-a-tensor", lambda i: {"q": [1.0]}, TypeError, r"q must be a torch.Tensor"),
    ("q-nested", lambda i: {"q": torch.nested.nested_tensor([i.q[:2], i.q[2:3]])}, TypeError,
     r"q must be a dense \(strided\) tensor, got a nested one"),
    ("k-sparse", lambda i: {"k": i.k.to_sparse()}, TypeError,
     r"k must be a dense \(strided\) tensor, got a sparse_coo one"),
    ("weight-sparse-csr", lambda i: {"q_weight": i.q_weight[None].to_sparse_csr()}, TypeError,
     r"q_weight must be a dense \(strided\) tensor, got a sparse_csr one"),
    ("q-rank", lambda i: {"q": i.q[0]}, ValueError, r"q must be \[\.\.\., H, D\]"),
    ("q-int-dtype", lambda i: {"q": i.q.to(torch.int32)}, TypeError, r"q.dtype must be one of"),
    ("k-dtype-mismatch", lambda i: {"k": i.k.half()}, TypeError, r"k.dtype .* must equal q"),
    ("tokens-mismatch", lambda i: {"k": i.k[:3]}, ValueError, r"token dims .* must equal k"),
    ("head-dim-mismatch", lambda i: {"k": i.k[..., :32]}, ValueError,
     r"k.shape\[-1\] \(32\) must equal q.shape\[-1\] \(64\)"),
    ("odd-head-dim", lambda i: {"q": i.q[..., :63], "k": i.k[..., :63]}, ValueError,
     r"q.shape\[-1\] must be even and in \[2, 512\], got 63"),
    ("channel-stride", lambda i: {"q": i.q.transpose(1, 2).contiguous().transpose(1, 2)},
     ValueError, r"q.stride\(-1\) must be 1"),
    ("weight-length", lambda i: {"q_weight": i.q_weight[:32]}, ValueError,
     r"q_weight.shape \(32,\) must be \(64,\)"),
    ("weight-dtype", lambda i: {"k_weight": i.k_weight.long()}, TypeError,
     r"k_weight.dtype must be one of"),
    ("odd-rotary", lambda i: {"rotary_dim": 31}, ValueError, r"rotary_dim \(31\) must be even"),
    ("rotary-too-large", lambda i: {"rotary_dim": 128}, ValueError,
     r"rotary_dim \(128\) must be even and in \[2, head_dim=64\]"),
    ("cache-width", lambda i: {"cos_sin_cache": i.cos_sin_cache[:, :32]}, ValueError,
     r"cos_sin_cache must be \[max_pos, rotary_dim=64\]"),
    ("cache-dtype", lambda i: {"cos_sin_cache": i.cos_sin_cache.double()}, TypeError,
     r"cos_sin_cache.dtype must be float32 or q.dtype"),
    ("positions-dtype", lambda i: {"positions": i.positions.float()}, TypeError,
     r"positions.dtype must be int32 or int64"),
    ("positions-shape", lambda i: {"positions": i.positions[:4]}, ValueError,
     r"positions must have shape \[5\]"),
    ("positions-negative", lambda i: {"positions": i.positions - 100, "check_positions": True},
     ValueError, r"positions must lie in \[0, 64\)"),
    ("positions-past-table", lambda i: {"positions": i.positions + 64, "check_positions": True},
     ValueError, r"positions must lie in \[0, 64\)"),
    ("check-positions-type", lambda i: {"check_positions": None}, TypeError,
     r"check_positions must be a bool"),
    ("mrope-section-sum", lambda i: {**_mrope(i), "mrope_section": (8, 8, 8)}, ValueError,
     r"mrope_section \[8, 8, 8\] sums to 24, expected rotary_dim / 2 = 32"),
    ("mrope-section-length", lambda i: {**_mrope(i), "mrope_section": (16, 16)}, ValueError,
     r"mrope_section must be 3 non-negative ints"),
    ("mrope-section-set", lambda i: {**_mrope(i), "mrope_section": {8, 12, 4 + 8}}, TypeError,
     r"mrope_section must be an ordered sequence of 3 ints, got set"),
    ("mrope-section-dict", lambda i: {**_mrope(i), "mrope_section": {8: "t", 12: "h", 13: "w"}},
     TypeError, r"mrope_section must be an ordered sequence of 3 ints, got dict"),
    ("mrope-positions-1d", lambda i: {"mrope_section": (8, 12, 12)}, ValueError,
     r"MRoPE positions .* must have shape \[3, 5\]"),
    ("mrope-layout", lambda i: {**_mrope(i), "mrope_layout": "zigzag"}, ValueError,
     r"mrope_layout must be one of"),
    ("style", lambda i: {"style": "llama"}, ValueError, r"style must be one of"),
    ("weight-mode", lambda i: {"weight_mode": "gemma"}, ValueError, r"weight_mode must be one of"),
    ("eps-negative", lambda i: {"eps": -1.0}, ValueError,
     r"eps must be >= 0 and finite in float32"),
    ("eps-past-float32", lambda i: {"eps": 1e300}, ValueError,
     r"eps must be >= 0 and finite in float32 \(at most 3.403e\+38\), got 1e\+300"),
    ("eps-past-float64", lambda i: {"eps": 10**400}, ValueError,
     r"eps must be >= 0 and finite in float32"),
    ("q-requires-grad", lambda i: {"q": i.q.clone().requires_grad_()}, ValueError,
     r"q requires grad: the kernels are for inference and compute no gradient; call them "
     r"under torch.no_grad\(\)"),
    ("weight-requires-grad", lambda i: {"k_weight": i.k_weight.clone().requires_grad_()},
     ValueError, r"k_weight requires grad"),
    ("out-with-inplace", lambda i: {"q_out": torch.empty_like(i.q)}, ValueError,
     r"q_out must be None when inplace=True"),
    ("out-shape", lambda i: {"inplace": False, "k_out": torch.empty_like(i.q)}, ValueError,
     r"k_out.shape .* must equal"),
    ("out-dtype", lambda i: {"inplace": False, "q_out": torch.empty_like(i.q, dtype=torch.half)},
     TypeError, r"q_out.dtype .* must equal q.dtype"),
    ("no-heads", lambda i: {"q": i.q[:, :0]}, ValueError,
     r"q must have at least one head, got shape \(5, 0, 64\)"),
    ("inplace-type", lambda i: {"inplace": "no"}, TypeError, r"inplace must be a bool, got str"),
    ("k-is-q", lambda i: {"k": i.q}, ValueError, r"q and k are the same tensor"),
    ("q-out-is-k", lambda i: _apart(i, q_out="k"), ValueError,
     r"q_out is k: an output must not be another argument \(only q may be given as q_out\)"),
    ("outputs-swapped", lambda i: _apart(i, q_out="k", k_out="q"), ValueError, r"q_out is k"),
    ("one-output-twice", lambda i: _apart(i, q_out="out", k_out="out"), ValueError,
     r"q_out is k_out"),
    # Views that share memory without being one another: a route would read what it wrote.
    ("k-inside-q", lambda i: {"k": i.q[:, 2:]}, ValueError,
     r"^q shares memory with k and is written, so the result would depend on the order"),
    ("q-out-inside-k", lambda i: _in_one_buffer(i, q_out=slice(4, 8)), ValueError,
     r"^q_out shares memory with k and is written"),
    ("q-out-a-token-past-q", lambda i: _in_one_buffer(i, q_out=slice(0, 4), shift=1),
     ValueError, r"^q_out shares memory with q but is not q element for element; pass q "
                 r"itself as q_out, or memory apart from it$"),
    ("q-out-overlapping-k-out", lambda i: _in_one_buffer(i, q_out=slice(6, 10),
                                                          k_out=slice(8, 10)),
     ValueError, r"^q_out shares memory with k_out"),
    ("weight-inside-q", lambda i: {"k_weight": i.q[1, 2]}, ValueError,
     r"^q shares memory with k_weight"),
    ("table-inside-q", lambda i: {"cos_sin_cache": i.q.view(-1, i.q.shape[-1])}, ValueError,
     r"^q shares memory with cos_sin_cache"),
    ("in-place-expanded", lambda i: {"q": i.q[:1].expand(5, -1, -1)}, ValueError,
     r"q is written but repeats its memory along tokens \(stride 0"),
    ("output-expanded", lambda i: {"inplace": False, "k_out": i.k[:, :1].expand(-1, 2, -1)},
     ValueError, r"k_out is written but repeats its memory along heads"),
    # Heads 32 channels apart, each 64 wide: every head shares half of its neighbour's.
    ("in-place-overlapping-heads", lambda i: {"q": torch.randn(
        5, (i.q.shape[1] + 1) * 32, dtype=i.q.dtype, device=i.q.device).unfold(-1, 64, 32)},
     ValueError, r"q is written but its heads overlap in memory \(shape \(5, \d+, 64\), "
                 r"strides \(\d+, 32, 1\)\)"),
    ("output-overlapping-tokens", lambda i: {"inplace": False, "k_out": torch.empty(
        i.k.numel(), dtype=i.k.dtype, device=i.k.device).as_strided(i.k.shape, (64, 64, 1))},
     ValueError, r"k_out is written but its (tokens|heads) overlap in memory"),
]


@pytest.mark.parametrize("definition", [reference.qk_norm_rope_reference,
                                        reference.qk_norm_rope_oracle],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize(("overrides", "error", "pattern"), [
    (lambda i: {"style": "gpt-j"}, ValueError, r"style must be one of"),
    (lambda i: {"weight_mode": "gemma"}, ValueError, r"weight_mode must be one of"),
    (lambda i: {"rotary_dim": 0}, ValueError, r"rotary_dim \(0\) must be an even int"),
    (lambda i: {"rotary_dim": 32}, ValueError,
     r"cos_sin_cache must be \[max_pos, rotary_dim=32\], got \[\d+, 64\]"),
], ids=["style", "weight-mode", "rotary-0", "table-wider-than-rotary"])
def test_the_definitions_refuse_what_the_kernels_refuse(inputs, definition, overrides, error,
                                                        pattern):
    with pytest.raises(error, match=pattern):
        inputs.call(definition, **overrides(inputs))


def _apart(inputs, **outputs: str) -> dict:
    """Out of place, q and k of the same shape, each output named by what it is: "q",
    "k", or "out" (one buffer of their shape)."""
    tensors = {"q": inputs.q.clone(), "k": inputs.q.clone(), "out": torch.empty_like(inputs.q)}
    return {"q": tensors["q"], "k": tensors["k"], "inplace": False,
            **{name: tensors[what] for name, what in outputs.items()}}


def _in_one_buffer(inputs, shift: int = 0, **outputs: slice) -> dict:
    """Out of place, q and k packed as heads 0-3 and 4-5 of one buffer of 12 heads, each
    output the heads ``outputs`` names of that buffer, ``shift`` tokens on."""
    buf = torch.zeros(6, 12, inputs.q.shape[-1], dtype=inputs.q.dtype, device=inputs.q.device)
    q, k = buf[:5, :4], buf[:5, 4:6]
    q.copy_(inputs.q)
    k.copy_(inputs.k)
    return {"q": q, "k": k, "inplace": False,
            **{name: buf[shift:shift + 5, heads] for name, heads in outputs.items()}}


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state")
@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
@pytest.mark.parametrize(("overrides", "error", "pattern"),
                         [pytest.param(o, e, p, id=name) for name, o, e, p in BAD])
def test_bad_input_raises_a_named_error(inputs, route, overrides, error, pattern):
    with pytest.raises(error, match=pattern):
        inputs.call(route, **overrides(inputs))


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_an_mrope_section_refused_once_is_refused_after_an_equal_valid_one(inputs, route):
    """(8.0, 12, 12) compares and hashes equal to (8, 12, 12): a call of the valid one
    must not let the other past the validation."""
    inputs.call(route, **_mrope(inputs))
    with pytest.raises(ValueError, match=r"mrope_section must be 3 non-negative ints"):
        inputs.call(route, **{**_mrope(inputs), "mrope_section": (8.0, 12, 12)})


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_an_expanded_input_read_out_of_place_is_taken(inputs, route):
    k = inputs.k[:1].expand(5, -1, -1)
    got = inputs.call(route, k=k, inplace=False)
    expected = inputs.call(route, k=k.contiguous(), inplace=False)
    assert torch.equal(got[1].view(torch.int16), expected[1].view(torch.int16))


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_out_of_place_into_q_and_k_themselves_is_the_in_place_call(inputs, route):
    q, k = inputs.q.clone(), inputs.k.clone()
    got = inputs.with_qk(q, k).call(route, inplace=False, q_out=q, k_out=k)
    expected = inputs.with_qk(inputs.q.clone(), inputs.k.clone()).call(route)
    assert got[0] is q and got[1] is k
    assert all(torch.equal(g.view(torch.int16), e.view(torch.int16))
               for g, e in zip(got, expected, strict=True))


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_positions_on_another_device_are_named(inputs, route):
    # The meta device stands in for a second GPU: the check compares devices, not kinds.
    with pytest.raises(ValueError, match=rf"positions is on meta, expected {inputs.q.device}"):
        inputs.call(route, positions=inputs.positions.to("meta"))


def test_tensors_on_the_meta_device_are_refused_under_the_interpreter_too():
    x = torch.ones(2, 1, 64, device="meta")
    with pytest.raises(ValueError, match=r"x is on meta: the Triton kernels run on a CUDA"):
        rms_norm(x, torch.ones(64, device="meta"))


def test_tensors_on_the_cpu_without_the_interpreter_are_refused(monkeypatch, inputs):
    from qkbench.kernels import checks

    monkeypatch.setattr(checks, "_INTERPRETING", False)
    if inputs.q.is_cuda:
        pytest.skip("the inputs are on a GPU")
    with pytest.raises(ValueError, match=r"q is on cpu: the Triton kernels run on a CUDA"):
        inputs.call(qk_norm_rope)


def test_the_interpreter_set_after_the_kernels_were_imported_is_not_taken_for_them():
    # Triton compiled the kernels' decorators for a GPU: CPU tensors are refused by name,
    # not handed to a driver that is not there (or to a compiled kernel as CPU pointers).
    code = ("import os, torch\n"
            "from qkbench.kernels import rms_norm\n"
            "os.environ['TRITON_INTERPRET'] = '1'\n"
            "x = torch.ones(2, 1, 64)\n"
            "try:\n"
            "    rms_norm(x, torch.ones(64))\n"
            "except ValueError as e:\n"
            "    print(e)\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.stdout.startswith("x is on cpu: the Triton kernels run on a CUDA device, or on "
                                  "the CPU only under the interpreter (set TRITON_INTERPRET=1 "
                                  "before importing)"), (done.stdout, done.stderr)


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_a_tensor_that_requires_grad_is_taken_where_autograd_does_not_record(inputs, route):
    q = inputs.q.clone().requires_grad_()
    with torch.no_grad():
        got = inputs.call(route, q=q, inplace=False)
    expected = inputs.call(route, q=q.detach(), inplace=False)
    assert torch.equal(got[0].view(torch.int16), expected[0].view(torch.int16))


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_an_in_place_write_under_what_autograd_saved_is_refused_at_backward(inputs, route):
    # w * q saves q for w's gradient; the op then overwrites q, as torch's own in-place ops
    # would, and must count it so that backward refuses rather than use the new values.
    w = torch.ones_like(inputs.q, requires_grad=True)
    q = inputs.q.clone()
    saved = (w * q).sum()
    version = q._version
    with torch.no_grad():
        inputs.call(route, q=q)
    assert q._version > version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.backward()


@pytest.mark.parametrize("written", [{}, {"inplace": False, "k_out": "k"}],
                         ids=["in-place", "into-k_out"])
@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_an_inference_tensor_is_written_only_inside_inference_mode(inputs, route, written):
    with torch.inference_mode():
        q, k = inputs.q.clone(), inputs.k.clone()
    options = {**written, "k_out": k} if written else {}
    name = "k_out" if written else "q"
    before = (q.clone(), k.clone())
    with pytest.raises(ValueError, match=rf"{name} is an inference tensor, which is not "
                                         r"written in place outside torch.inference_mode"):
        inputs.with_qk(q, k).call(route, **options)
    assert torch.equal(q, before[0]) and torch.equal(k, before[1])
    with torch.inference_mode():
        got = inputs.with_qk(q, k).call(route, **options)
    assert got[1] is k and not torch.equal(k, before[1])


def test_rms_norm_writes_an_inference_out_only_inside_inference_mode(inputs):
    with torch.inference_mode():
        out = torch.empty_like(inputs.q)
    with pytest.raises(ValueError, match=r"out is an inference tensor"):
        rms_norm(inputs.q, inputs.q_weight, out=out)
    with torch.inference_mode():
        assert rms_norm(inputs.q, inputs.q_weight, out=out) is out


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_a_given_output_counts_its_write_and_a_new_one_is_fresh(inputs, route):
    out = torch.empty_like(inputs.k)
    q_out, k_out = inputs.call(route, inplace=False, k_out=out)
    assert k_out is out and out._version == 1 and q_out._version == 0


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_numpy_scalars_are_taken_as_the_numbers_they_hold(inputs, route):
    np = pytest.importorskip("numpy")
    expected = inputs.call(route, inplace=False, rotary_dim=64, eps=1e-5)
    got = inputs.call(route, inplace=False, rotary_dim=np.int64(64), eps=np.float64(1e-5))
    assert all(torch.equal(g.view(torch.int16), e.view(torch.int16))
               for g, e in zip(got, expected, strict=True))
    mrope = _mrope(inputs)
    sectioned = inputs.call(route, inplace=False, **mrope)
    from_array = inputs.call(route, inplace=False, **{**mrope, "mrope_section": np.array(
        mrope["mrope_section"])})
    assert torch.equal(from_array[0].view(torch.int16), sectioned[0].view(torch.int16))


def test_rms_norm_refuses_grad_and_counts_a_write_into_out(inputs):
    with pytest.raises(ValueError, match=r"x requires grad"):
        rms_norm(inputs.q.clone().requires_grad_(), inputs.q_weight)
    out = torch.empty_like(inputs.q)
    rms_norm(inputs.q, inputs.q_weight, out=out)
    assert out._version == 1


def test_a_pdl_flag_that_is_not_a_bool_is_named(inputs):
    with pytest.raises(TypeError, match=r"pdl must be a bool, got str"):
        inputs.call(qk_norm_rope, pdl="yes")


def test_rope_alone_validates_like_the_fused_op(inputs):
    with pytest.raises(ValueError, match=r"rotary_dim \(31\) must be even"):
        rope(inputs.q, inputs.k, inputs.positions, inputs.cos_sin_cache, rotary_dim=31)


def test_rms_norm_names_x_as_what_out_and_weight_must_match(inputs):
    with pytest.raises(TypeError, match=r"out.dtype \(torch.float32\) must equal x.dtype "
                                        r"\(torch.bfloat16\)"):
        rms_norm(inputs.q, inputs.q_weight, out=torch.empty_like(inputs.q, dtype=torch.float32))
    with pytest.raises(ValueError, match=rf"weight is on meta, expected {inputs.q.device} "
                                         r"\(the device of x\)"):
        rms_norm(inputs.q, inputs.q_weight.to("meta"))


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_numpy_bools_are_taken_as_the_flags_they_hold(inputs, route):
    np = pytest.importorskip("numpy")
    got = inputs.call(route, inplace=np.bool_(False), check_positions=np.bool_(True))
    expected = inputs.call(route, inplace=False, check_positions=True)
    assert all(torch.equal(g.view(torch.int16), e.view(torch.int16))
               for g, e in zip(got, expected, strict=True))


def test_rms_norm_names_a_bad_weight(inputs):
    with pytest.raises(ValueError, match=r"weight.shape \(63,\) must be \(64,\)"):
        rms_norm(inputs.q, inputs.q_weight[:63])


def test_rms_norm_refuses_to_write_an_expanded_output(inputs):
    out = torch.empty_like(inputs.q[:1]).expand_as(inputs.q)
    with pytest.raises(ValueError, match=r"out is written but repeats its memory along tokens"):
        rms_norm(inputs.q, inputs.q_weight, out=out)


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_an_empty_expanded_output_is_taken_since_nothing_is_written(inputs, route):
    q = inputs.q[:0]
    k = inputs.k[:0]
    # Its channels repeat one element (stride 0), but it has no token to write.
    k_out = torch.empty(1, k.shape[1], 1, dtype=k.dtype, device=k.device).expand(k.shape)
    got = inputs.call(route, q=q, k=k, positions=inputs.positions[:0], inplace=False,
                      k_out=k_out)
    assert got[1] is k_out and got[0].shape == q.shape


def test_an_mrope_section_namedtuple_keeps_its_elements_types_in_the_cache_key():
    from collections import namedtuple

    from qkbench.kernels import calls

    section = namedtuple("Section", "t h w")
    assert calls.section_key(section(8, 12, 12)) != calls.section_key(section(8.0, 12, 12))


def test_unmergeable_token_dims_are_named(device):
    x = torch.randn(4, 6, 2, 64, device=device)[:, ::2]  # [4, 3, 2, 64], token dims strided
    x = x.transpose(0, 1)  # [3, 4, 2, 64]: no single token stride
    w = torch.ones(64, device=device)
    with pytest.raises(ValueError, match=r"x's token dims \(3, 4\) .* cannot be merged"):
        rms_norm(x, w)


def _captured(inputs, route, **options):
    """Capture one out-of-place call of ``route`` in a CUDA graph; returns graph and outputs."""
    q_out, k_out = torch.empty_like(inputs.q), torch.empty_like(inputs.k)
    inputs.call(route, inplace=False, q_out=q_out, k_out=k_out)  # compile before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        inputs.call(route, inplace=False, q_out=q_out, k_out=k_out, **options)
    return graph, q_out, k_out


@gpu_only
@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_position_check_is_off_by_default_inside_graph_capture(inputs, route):
    graph, q_out, k_out = _captured(inputs, route)
    q_out.fill_(float("nan"))
    graph.replay()
    expected = inputs.call(route, inplace=False)
    assert torch.equal(q_out, expected[0]) and torch.equal(k_out, expected[1])


@gpu_only
@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_position_check_asked_for_inside_graph_capture_is_refused(inputs, route):
    with pytest.raises(ValueError, match=r"check_positions=True reads the positions back"):
        _captured(inputs, route, check_positions=True)
