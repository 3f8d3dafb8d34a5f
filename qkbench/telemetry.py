"""GPU clocks, temperature, power and throttle reasons through NVML (nvidia-ml-py).

Read-only: nothing here changes a setting of the card.
"""

from functools import cache

try:
    import pynvml
except ImportError:  # the CPU-only install may lack it
    pynvml = None

# NVML's clock-event (throttle) reason bits, by the names NVML gives them.
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def throttle_names(mask: int) -> list[str]:
    """The named reasons set in an NVML throttle-reason bit mask."""
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


@cache
def _nvml_ready() -> bool:
    if pynvml is None:
        return False
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    return True


class Monitor:
    """Reads one GPU's state; every read returns None where NVML is not available."""

    def __init__(self, index: int):
        self.handle = None
        if _nvml_ready():
            try:
                self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            except pynvml.NVMLError:
                self.handle = None

    def read(self, after_sample: int) -> dict | None:
        """The card's state now, tagged with how many samples had been taken."""
        if self.handle is None:
            return None
        h = self.handle
        reasons = (getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                   or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)
        try:
            mask = reasons(h)
            return {
                "after_sample": after_sample,
                "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                "temperature_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                "throttle_mask": mask,
                "throttle": throttle_names(mask),
            }
        except (pynvml.NVMLError, AttributeError):
            return None

    def describe(self) -> dict:
        """Static facts about the card: name, driver, memory."""
        if self.handle is None:
            return {}
        h = self.handle
        return {
            "name": pynvml.nvmlDeviceGetName(h),
            "driver": pynvml.nvmlSystemGetDriverVersion(),
            "memory_total_bytes": pynvml.nvmlDeviceGetMemoryInfo(h).total,
        }
