"""A repeated call launches through the compiled kernel's handle, given the tensors'
addresses and the current stream: the same bits as Triton's own dispatch, on the stream
the caller is on."""

import pytest
import torch
import triton

from qkbench.case import Case, Geometry, make_inputs
from qkbench.kernels import launch, qk_norm_rope, qk_norm_rope_split

from conftest import gpu_only
from helpers import out_of_place

GEOMETRY = Geometry("qwen3-32x8", 32, 8, 128, inplace=False)


@gpu_only
@pytest.mark.parametrize("op", [qk_norm_rope, qk_norm_rope_split])
def test_a_launch_through_the_handle_writes_what_triton_dispatch_writes(op, monkeypatch):
    inputs = make_inputs(Case(GEOMETRY, 64), 0, torch.device("cuda"))
    monkeypatch.setattr(launch, "DIRECT", False)
    expected = out_of_place(op, inputs)
    monkeypatch.setattr(launch, "DIRECT", True)
    out_of_place(op, inputs)  # the first direct call finds the handle through the JIT
    with launch.recording() as launches:
        got = out_of_place(op, inputs)
    assert launches and all(kernel_launch.runners for kernel_launch, _ in launches)
    for e, g in zip(expected, got, strict=True):
        assert torch.equal(e.view(torch.int16), g.view(torch.int16))


@gpu_only
def test_a_launch_through_the_handle_runs_on_the_callers_stream():
    inputs = make_inputs(Case(GEOMETRY, 64), 0, torch.device("cuda"))
    expected = out_of_place(qk_norm_rope, inputs)  # compiled, cached, handle found
    q_late = inputs.q.clone()
    inputs.q.zero_()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        # On the side stream q gets its values back only after a long sleep: a launch that
        # went to the default stream instead would read the zeros.
        torch.cuda._sleep(50_000_000)
        inputs.q.copy_(q_late)
        got = out_of_place(qk_norm_rope, inputs)
    side.synchronize()
    assert torch.equal(expected[0].view(torch.int16), got[0].view(torch.int16))


@gpu_only
def test_a_launch_hook_sees_every_launch_of_a_cached_call():
    inputs = make_inputs(Case(GEOMETRY, 64), 0, torch.device("cuda"))
    out_of_place(qk_norm_rope_split, inputs)  # compiled, cached, handle found
    seen = []
    hooks = triton.knobs.runtime.launch_enter_hook
    hooks.add(seen.append)
    try:
        out_of_place(qk_norm_rope_split, inputs)
    finally:
        hooks.remove(seen.append)
    assert [m.get()["name"] for m in seen] == ["rms_norm_kernel", "rms_norm_kernel", "rope_kernel"]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
@pytest.mark.parametrize("op", [qk_norm_rope, qk_norm_rope_split])
def test_a_call_runs_on_its_tensors_device_whichever_device_is_current(op):
    first, second = torch.device("cuda", 0), torch.device("cuda", 1)
    expected = out_of_place(op, make_inputs(Case(GEOMETRY, 64), 0, first))
    inputs = make_inputs(Case(GEOMETRY, 64), 0, second)
    with torch.cuda.device(first):
        got = [out_of_place(op, inputs) for _ in range(2)]  # Triton's dispatch, the handle
    torch.cuda.synchronize(second)
    for outputs in got:
        assert all(o.device == second for o in outputs)
        for e, g in zip(expected, outputs, strict=True):
            assert torch.equal(e.cpu().view(torch.int16), g.cpu().view(torch.int16))
