"""The device limits' probe kernels do the work they are timed for."""

import pytest
import torch

from qkbench import limits
from qkbench.backends import backend_for


def test_the_row_probe_copies_the_row_its_position_names(device):
    pos = torch.tensor([5], device=device)
    table = torch.rand(8, 16, device=device)
    out = torch.empty(16, device=device)
    limits._row_kernel[(1,)](pos, table, out, True, 16, num_warps=1)
    assert torch.equal(out, table[5])
    limits._row_kernel[(1,)](pos, table, out, False, 16, num_warps=1)
    assert torch.equal(out, table[0])


def test_the_row_floor_times_both_probes_on_the_rows_they_name(device):
    floor = limits.row_floor(backend_for(torch.device(device)), 1, 2, rows=8, width=16)
    assert set(floor) == {"fixed_row", "position_then_row"}
    assert all(r["row_copied"] and r["median_s"] > 0 for r in floor.values())


def test_the_row_floor_flags_a_probe_that_ignores_its_position(device, monkeypatch):
    row_zero = limits._row_kernel
    monkeypatch.setattr(limits, "_row_kernel", {
        (1,): lambda pos, table, out, at, width, **kw: row_zero[(1,)](pos, table, out, False,
                                                                     width, **kw)})
    floor = limits.row_floor(backend_for(torch.device(device)), 1, 2, rows=8, width=16)
    assert not floor["position_then_row"]["row_copied"]
    assert floor["fixed_row"]["row_copied"]


def test_the_rows_copy_moves_every_element_of_q_and_k_across_program_tails(device):
    q = torch.randn(3, 5, 16, device=device).to(torch.bfloat16)  # 240: a partial program
    k = torch.randn(3, 1, 16, device=device).to(torch.bfloat16)
    q_out, k_out = torch.full_like(q, float("nan")), torch.full_like(k, float("nan"))
    limits.rows_copy_launch(q, k, q_out, k_out, 64)()
    assert torch.equal(q_out, q) and torch.equal(k_out, k)


def test_the_rows_copy_in_warps_of_its_own_moves_every_element(device):
    q = torch.randn(3, 5, 16, device=device).to(torch.bfloat16)
    k = torch.randn(3, 1, 16, device=device).to(torch.bfloat16)
    assert all(limits.rows_copy_copies_all(q, k, 64, warps) for warps in (1, 2, 4))


def test_the_rows_copy_refuses_a_strided_view(device):
    q = torch.randn(4, 8, device=device)[:, :4]
    with pytest.raises(ValueError, match="contiguous"):
        limits.rows_copy_launch(q, q, q, q, 64)


def test_the_rows_copy_times_each_block_and_checks_what_it_copied(device):
    q, k = torch.randn(2, 4, 32, device=device), torch.randn(2, 1, 32, device=device)
    result = limits.rows_copy(backend_for(torch.device(device)), q, k, False, 1, 2,
                              blocks=(64, 128))
    assert set(result) == {64, 128}
    assert all(r["copied"] and r["median_s"] > 0 and r["bytes"] == 2 * 4 * 320
               for r in result.values())


def test_the_rows_copy_check_catches_a_copy_that_drops_a_tail(device, monkeypatch):
    launch = limits.rows_copy_launch
    monkeypatch.setattr(limits, "rows_copy_launch", lambda q, k, qo, ko, block, warps=None:
                        launch(q, k[:-1], qo, ko[:-1], block, warps))  # k's last token lost
    q, k = torch.randn(2, 4, 32, device=device), torch.randn(2, 1, 32, device=device)
    result = limits.rows_copy(backend_for(torch.device(device)), q, k, True, 1, 2,
                              blocks=(128,))
    assert not result[128]["copied"]


@pytest.mark.parametrize("change, message", [
    (lambda q: {"q_out": q[:, :2].contiguous()}, "shape, dtype and device"),
    (lambda q: {"q_out": q.double()}, "shape, dtype and device"),
    (lambda q: {"block": 96}, "block must be a power of two, got 96"),
    (lambda q: {"warps": 3}, "warps must be a power of two from 1 to 32, got 3"),
    (lambda q: {"warps": 0}, "warps must be a power of two from 1 to 32, got 0"),
    (lambda q: {"warps": 64}, "warps must be a power of two from 1 to 32, got 64"),
], ids=["shape", "dtype", "block", "warps", "no-warps", "too-many-warps"])
def test_the_rows_copy_refuses_outputs_unlike_their_inputs_and_odd_blocks_or_warps(
        device, change, message):
    q, k = torch.randn(2, 4, 32, device=device), torch.randn(2, 1, 32, device=device)
    args = {"q": q, "k": k, "q_out": torch.empty_like(q), "k_out": torch.empty_like(k),
            "block": 64, **change(q)}
    with pytest.raises(ValueError, match=message):
        limits.rows_copy_launch(**args)
