"""The host-cost benchmark runs every row (on the CPU the figures only exercise the code)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from qkbench import hostcost
from qkbench.case import Geometry

from conftest import interpreter_only

SMALL = Geometry("small", 2, 1, 64, rotary_dim=32, inplace=False)
ROWS = {"bare_jit", "bare_handle", "bare_addresses", "bare_launcher", "fused",
        "fused_check_positions", "fused_jit_dispatch", "split"}


def test_measure_times_every_way_to_make_the_call(device):
    result = hostcost.measure(torch.device(device), calls=1, geometry=SMALL)
    us = result["us_per_call"]
    assert set(us) == ROWS
    cuda = device == "cuda"
    handle = {"bare_handle", "bare_addresses", "bare_launcher"}
    assert all(v is not None and v > 0 for k, v in us.items() if cuda or k not in handle)
    assert all((us[k] is None) == (not cuda) for k in handle)
    assert result["direct_launch"] is True


@interpreter_only
def test_the_script_prints_a_row_per_way(tmp_path):
    out = tmp_path / "host.json"
    script = Path(__file__).parent.parent / "scripts" / "host_cost.py"
    run = subprocess.run([sys.executable, str(script), "--calls", "1", "--json", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert all(name in run.stdout for name in ROWS)
    assert set(json.loads(out.read_text())["us_per_call"]) == ROWS


@pytest.mark.parametrize(("option", "value"), [("--calls", "0"), ("--calls", "-3"),
                                               ("--tokens", "0"), ("--tokens", "x")])
def test_the_script_refuses_a_count_below_one_naming_the_option(option, value):
    script = Path(__file__).parent.parent / "scripts" / "host_cost.py"
    run = subprocess.run([sys.executable, str(script), option, value], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert f"argument {option}: " in run.stderr.strip().splitlines()[-1]
