"""The device limits' probe kernels do the work they are timed for."""

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
