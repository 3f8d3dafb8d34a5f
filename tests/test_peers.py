"""Peer kernels as routes (``peer:NAME``): each adapter maps the op's contract onto an
installed package, meets the FP64 oracle like any route, and declares what it cannot do
("n/s"), which the harness reports without calling it an error."""

import importlib.util
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from qkbench import archive as archives
from qkbench import peers, report, runner
from qkbench.audit import audit
from qkbench.case import Case, Geometry, make_inputs
from qkbench.errors import RouteError
from qkbench.gate import regressions
from qkbench.protocol import load
from qkbench.routes import NotSupported, Route, resolve
from qkbench.summary import summarize, wrong_routes
from qkbench.verify import verify

from conftest import gpu_only, interpreter_only

FIXTURES = Path(__file__).parent / "fixtures"
HAS_LIGER = importlib.util.find_spec("liger_kernel") is not None
needs_liger = pytest.mark.skipif(not HAS_LIGER, reason='liger-kernel is not installed '
                                 '(pip install "qkbench[peers]")')

BASE = Geometry("base", heads_q=4, heads_k=2, head_dim=64)
# What an adapter maps: partial rotary, offset weights, out of place, MRoPE lanes, the DiT
# batch layout and packed views.
GEOMETRIES = [
    BASE,
    replace(BASE, name="partial-offset-outofplace", head_dim=128, rotary_dim=32,
            weight_mode="offset", inplace=False),
    replace(BASE, name="mrope-interleaved", mrope_section=(8, 12, 12),
            mrope_layout="interleaved"),
    replace(BASE, name="mrope-sectioned-outofplace", mrope_section=(8, 12, 12),
            inplace=False),
    replace(BASE, name="dit-batch2", batch=2),
    replace(BASE, name="packed", packed=True),
]


def inputs_for(geometry: Geometry, tokens: int = 6, device="cpu", **case):
    return make_inputs(Case(geometry, tokens, max_position=64, **case), 0, device)


def checked(route: Route, geometry: Geometry, device="cpu", **case) -> dict:
    return verify([route], inputs_for(geometry, device=device, **case), geometry.inplace)[
        route.name]


# -- names ------------------------------------------------------------------------------------


def test_an_unknown_peer_is_a_route_error_naming_the_known_ones():
    with pytest.raises(RouteError, match="unknown peer route 'peer:nosuch': use one of "
                                         "peer:liger, peer:vllm, peer:sglang, peer:flashinfer"):
        resolve("peer:nosuch")


@pytest.mark.parametrize("name", ["vllm", "sglang", "flashinfer"])
def test_a_peer_whose_package_is_missing_says_what_to_install(name):
    if importlib.util.find_spec(peers.PEERS[name].module.split(".")[0]) is not None:
        pytest.skip(f"{name} is installed here")
    with pytest.raises(RouteError, match=f"route 'peer:{name}' needs "
                                         f"{peers.PEERS[name].package} \\(pip install"):
        resolve(f"peer:{name}")


@needs_liger
def test_peer_liger_resolves_to_a_route_of_that_name():
    route = resolve("peer:liger")
    assert (route.name, route.op, route.exact_group) == ("peer:liger", peers.liger_op, None)


# -- the liger adapter against the oracle ---------------------------------------------------


def _liger_runs_here() -> str | None:
    """Why liger's kernels cannot run here, or None."""
    if not HAS_LIGER:
        return "liger-kernel is not installed"
    if torch.cuda.is_available():
        return None
    from liger_kernel.transformers.functional import liger_rms_norm

    try:
        liger_rms_norm(torch.ones(2, 64), torch.ones(64), 1e-6, 0.0, "gemma")
    except Exception as e:
        return (f"liger-kernel's rms_norm does not run under the Triton interpreter "
                f"({type(e).__name__}: {str(e)[:80]})")
    return None


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: g.name)
def test_the_liger_adapter_meets_the_oracle(geometry, device):
    reason = _liger_runs_here()
    if reason:
        pytest.skip(reason)
    check = checked(resolve("peer:liger"), geometry, device)
    assert check["ok"], check


def _torch_liger_rms_norm(x, w, eps, offset=0.0, casting_mode="llama", in_place=True):
    """Liger's RMSNorm in "gemma" casting mode, in torch: everything in fp32, rounded once."""
    assert casting_mode == "gemma"
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
            * (offset + w.float())).to(x.dtype)


@needs_liger
@interpreter_only
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: g.name)
def test_the_liger_adapter_with_liger_rope_and_a_torch_norm_meets_the_oracle(
        geometry, monkeypatch):
    # Liger's rms_norm cannot run in the interpreter (see the test above); its rope can. With
    # the norm replaced by its torch equivalent, the adapter's whole mapping (layouts, table
    # rows, MRoPE lanes, delivery into the outputs) is still checked on the CPU.
    from liger_kernel.transformers import functional

    monkeypatch.setattr(functional, "liger_rms_norm", _torch_liger_rms_norm)
    check = checked(resolve("peer:liger"), geometry)
    assert check["ok"], check


@needs_liger
@interpreter_only
def test_the_liger_adapter_leaves_its_inputs_alone_out_of_place(monkeypatch):
    from liger_kernel.transformers import functional

    monkeypatch.setattr(functional, "liger_rms_norm", _torch_liger_rms_norm)
    inputs = inputs_for(replace(BASE, inplace=False))
    q, k = inputs.q.clone(), inputs.k.clone()
    q_out, k_out = inputs.call(peers.liger_op, inplace=False)
    assert torch.equal(inputs.q, q) and torch.equal(inputs.k, k)
    assert q_out.data_ptr() != inputs.q.data_ptr() and k_out.data_ptr() != inputs.k.data_ptr()


def test_the_liger_adapter_declares_gptj_not_supported():
    check = checked(Route("peer:liger", peers.liger_op), replace(BASE, style="gptj"))
    assert check == {"ok": False,
                     "unsupported": "Liger's rope rotates NeoX halves only, not style 'gptj'"}


# -- what the other adapters declare, before they import anything ---------------------------


@pytest.mark.parametrize(("op", "geometry", "case", "reason"), [
    (peers.vllm_op, BASE, {}, "packed qkv projection; this case's q and k are separate"),
    (peers.vllm_op, replace(BASE, packed=True, mrope_section=(8, 12, 12)), {}, "no MRoPE"),
    (peers.vllm_op, replace(BASE, packed=True, inplace=False), {}, "in place only"),
    (peers.vllm_op, replace(BASE, packed=True, weight_mode="offset"), {}, "no offset"),
    (peers.vllm_op, replace(BASE, packed=True, head_dim=80), {}, "not 80"),
    (peers.vllm_op, replace(BASE, packed=True, batch=2), {}, "not a [B, S, H, D] batch"),
    (peers.sglang_op, replace(BASE, packed=True), {"dtype": "float16"}, "not torch.float16"),
    (peers.flashinfer_op, replace(BASE, mrope_section=(8, 12, 12)), {}, "no MRoPE"),
    (peers.flashinfer_op, BASE, {"table_dtype": "activation"}, "takes an fp32 table"),
], ids=["vllm-separate", "vllm-mrope", "vllm-outofplace", "vllm-offset", "vllm-D80",
        "vllm-batch", "sglang-fp16", "flashinfer-mrope", "flashinfer-bf16-table"])
def test_a_peer_declares_what_it_does_not_support(op, geometry, case, reason):
    check = checked(Route("peer", op), geometry, **case)
    assert not check["ok"] and reason in check["unsupported"], check


def test_packed_qkv_is_the_projection_q_and_k_are_views_of():
    inputs = inputs_for(replace(BASE, packed=True))
    qkv, heads_v = peers.packed_qkv(inputs.q, inputs.k, "peer")
    D = BASE.head_dim
    assert heads_v == BASE.heads_k
    assert torch.equal(qkv[:, : 4 * D].view(-1, 4, D), inputs.q)
    assert torch.equal(qkv[:, 4 * D : 6 * D].view(-1, 2, D), inputs.k)


@gpu_only
@pytest.mark.parametrize("name", ["vllm", "sglang", "flashinfer"])
def test_an_installed_serving_peer_meets_the_oracle_on_a_packed_qwen3_layout(name):
    try:
        route = resolve(f"peer:{name}")
    except RouteError as e:
        pytest.skip(str(e))
    geometry = Geometry("qwen3", heads_q=16, heads_k=2, head_dim=128, packed=True)
    check = checked(route, geometry, "cuda")
    assert check["ok"], check


# -- n/s through a sweep, its archive and its report -----------------------------------------


@pytest.fixture(scope="module")
def unsupported_run(tmp_path_factory) -> dict:
    """One in-process pass of the smoke protocol against a fake peer that supports nothing."""
    out = tmp_path_factory.mktemp("ns") / "run.json.gz"
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(FIXTURES))
        mp.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
        protocol = load("smoke").with_overrides(
            routes=["split", "fake_routes:supports_nothing"], samples=2, warmup=0,
            isolation="inprocess")
        runner.sweep(protocol, torch.device("cpu"), out)
    return archives.read(out)


@interpreter_only
def test_an_unsupported_case_is_recorded_with_its_reason_and_not_timed(unsupported_run):
    for case in unsupported_run["passes"][0]["cases"]:
        assert case["verification"]["fake_routes:supports_nothing"] == {
            "ok": False, "unsupported": "this fake peer supports no case"}
        (comp,) = case["comparisons"]
        assert comp["status"] == "invalid" and "arms" not in comp
        assert comp["unsupported"] == {
            "fake_routes:supports_nothing": "this fake peer supports no case"}


@interpreter_only
def test_the_report_shows_n_s_not_an_error_for_an_unsupported_case(unsupported_run):
    (cells,) = [t for t in report.tables(unsupported_run) if "per cell" in t.title]
    verdict = cells.headers.index("verdict")
    assert [row[verdict] for row in cells.rows] == ["n/s", "n/s"]
    assert report.failures(unsupported_run) == []
    assert report.not_supported(unsupported_run) == [
        f"n/s split -> fake_routes:supports_nothing tiny-4x2/T{t}: "
        "fake_routes:supports_nothing: this fake peer supports no case" for t in (1, 4)]


@interpreter_only
def test_an_archive_with_unsupported_cases_audits_clean(unsupported_run):
    assert audit(unsupported_run) == []


@interpreter_only  # a sweep on the CPU backend: the harness runs kernels there too
def test_a_wrong_route_is_not_hidden_by_the_other_declaring_the_case_unsupported(tmp_path):
    out = tmp_path / "run.json.gz"
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(FIXTURES))
        protocol = load("smoke").with_overrides(
            routes=["fake_routes:wrong_at_one_token", "fake_routes:unsupported_at_one_token"],
            samples=2, warmup=0, isolation="inprocess")
        runner.sweep(protocol, torch.device("cpu"), out)
    run = archives.read(out)
    verdicts = {c["tokens"]: c["effect"]["verdict"]
                for c in summarize(run)["comparisons"][0]["cases"]}
    assert verdicts[1] == "invalid route"
    assert [c.result for c in regressions(summarize(run), 0.02, wrong_routes(run))
            if c.tokens == 1] == [
        "inconclusive"]


def test_a_route_may_raise_not_supported_itself():
    def picky(*args, **options):
        raise NotSupported("only on Tuesdays")

    assert checked(Route("picky", picky), BASE) == {"ok": False, "unsupported": "only on Tuesdays"}
