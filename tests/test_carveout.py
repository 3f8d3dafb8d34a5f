"""The carveout a kernel asks the driver for: the attribute set, the occupancy-keeping
share, and the errors named (a fake driver), and on a GPU what the driver reads back."""

import ctypes

import pytest
import torch

from qkbench.case import Case, Geometry, make_inputs
from qkbench.kernels import launch, qk_norm_rope, qk_norm_rope_split

from conftest import gpu_only
from helpers import assert_bit_identical, out_of_place, script

carveout = script("carveout")

# An H200's multiprocessor, as cuDeviceGetAttribute reports it.
H200 = {"threads": 2048, "shared": 233472, "blocks": 32, "reserved": 1024}


class FakeDriver:
    """libcuda's cuFuncSetAttribute, recording its calls and returning ``rc``."""

    def __init__(self, rc: int = 0):
        self.rc, self.calls = rc, []

    def cuFuncSetAttribute(self, function, attribute, value) -> int:
        self.calls.append((function.value, attribute.value, value.value))
        return self.rc


class FakeCompiled:
    function = 0x7F00

    class metadata:  # a CompiledKernel's attribute
        shared = 512


@pytest.fixture
def driver(monkeypatch) -> FakeDriver:
    fake = FakeDriver()
    monkeypatch.setattr(carveout, "_libcuda", lambda: fake)
    return fake


def test_set_carveout_sets_the_preferred_carveout_attribute_of_the_kernels_function(driver):
    carveout.set_carveout(FakeCompiled(), 0)
    # 9: CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT in cuda.h.
    assert driver.calls == [(0x7F00, 9, 0)]


def test_set_carveout_raises_naming_the_drivers_error(monkeypatch):
    monkeypatch.setattr(carveout, "_libcuda", lambda: FakeDriver(rc=1))
    with pytest.raises(RuntimeError, match=r"carveout 0\).*CUresult 1"):
        carveout.set_carveout(FakeCompiled(), 0)


@pytest.mark.parametrize("percent", [-2, 101])
def test_set_carveout_refuses_a_share_outside_the_drivers_range(percent, driver):
    with pytest.raises(ValueError, match=f"got {percent}"):
        carveout.set_carveout(FakeCompiled(), percent)
    assert driver.calls == []


def test_one_warp_programs_keep_their_32_a_multiprocessor():
    # 32 programs of 512 + 1024 bytes: 49,152 of 233,472 bytes, 21.05 % rounded up.
    assert carveout.occupancy_carveout(512, 1, H200) == 22


def test_larger_programs_need_less_shared_memory_for_their_fewer_programs():
    # 4 warps: 16 programs of 1,024 bytes, 7.02 % rounded up.
    assert carveout.occupancy_carveout(0, 4, H200) == 8


def test_a_share_that_would_pass_the_whole_is_capped_at_100():
    assert carveout.occupancy_carveout(64 * 1024, 1, H200) == 100


def test_apply_sets_the_occupancy_share_of_the_kernels_own_shared_memory(driver, monkeypatch):
    monkeypatch.setattr(carveout, "device_limits", lambda device: H200)
    assert carveout.apply(FakeCompiled(), carveout.OCCUPANCY, 1, 0) == 22
    assert driver.calls == [(0x7F00, 9, 22)]


def test_apply_sets_a_fixed_share_as_given(driver):
    assert carveout.apply(FakeCompiled(), 0, 4, 0) == 0
    assert driver.calls == [(0x7F00, 9, 0)]


@pytest.mark.parametrize("preference", ["l1", True, 2.5])
def test_apply_refuses_a_preference_that_is_neither_a_share_nor_occupancy(preference, driver):
    with pytest.raises(ValueError, match="a carveout preference is a share in per cent or "
                                         "'occupancy'"):
        carveout.apply(FakeCompiled(), preference, 1, 0)
    assert driver.calls == []


def carveout_of(compiled) -> int:
    value = ctypes.c_int(-2)
    rc = ctypes.CDLL("libcuda.so.1").cuFuncGetAttribute(
        ctypes.byref(value), ctypes.c_int(9), ctypes.c_void_p(compiled.function))
    assert rc == 0
    return value.value


@gpu_only
@pytest.mark.parametrize("preference", [0, carveout.OCCUPANCY])
@pytest.mark.parametrize("op", [qk_norm_rope, qk_norm_rope_split])
def test_a_carveout_applied_to_a_calls_kernels_is_what_the_driver_reads_back(op, preference):
    geometry = Geometry("qwen3-32x8", 32, 8, 128, inplace=False)
    inputs = make_inputs(Case(geometry, 64), 0, torch.device("cuda"))
    expected = out_of_place(op, inputs)
    with launch.recording() as launches:
        out_of_place(op, inputs)
    device = torch.cuda.current_device()
    pairs = [(kl.compiled[device], kl.options["num_warps"]) for kl, _ in launches]
    asked = [carveout.apply(c, preference, warps, device) for c, warps in pairs]
    read = [carveout_of(c) for c, _ in pairs]
    got = out_of_place(op, inputs)
    for c, _ in pairs:  # the driver's default again, for the tests after this one
        carveout.set_carveout(c, -1)
    assert pairs and read == asked
    if preference == carveout.OCCUPANCY:
        limits = carveout.device_limits(device)
        assert asked == [carveout.occupancy_carveout(c.metadata.shared, warps, limits)
                         for c, warps in pairs]
    else:
        assert asked == [0] * len(pairs)
    for e, g in zip(expected, got, strict=True):
        assert_bit_identical(e, g, "after the carveout")
