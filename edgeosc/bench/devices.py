"""Device profiles (core, clock, active power) that turn estimated cycles into latency and energy ESTIMATES.

Energy = active power x time: it assumes the device draws the power its source measured for a comparable
workload while it runs ours, so it ranks models on one device well and compares devices only roughly.
Microcontroller powers are MLPerf Tiny measurements of int8 keyword spotting (the DUT supply, measured by
EEMBC EnergyRunner). Raspberry Pi powers are the whole board's typical active draw, not a per-core figure:
measure a Pi with edgeosc.bench.power for real numbers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .cycles import CORES, cycles as _cycles

_MLPERF = ("MLPerf Tiny v1.0 results (github.com/mlcommons/tiny_results_v1.0), closed division, "
           "STMicroelectronics, keyword spotting energy run: results/{board}/kws/energy/results.txt (median "
           "of five 11 s windows) and systems/{board}/*system_description.json")
_RPI_DOC = ("Raspberry Pi documentation, 'Power supply' section, table 'Typical power requirements': typical "
            "bare-board active current consumption {ma} mA (desktop configuration) at the 5 V supply")


@dataclass(frozen=True)
class Device:
    """One board: its core (a key of cycles.CORES), clock, active power and where the power comes from."""
    name: str
    core: str
    clock_mhz: float
    active_mw: float
    source: str
    notes: str = ""

    def __post_init__(self):
        if self.core not in CORES:
            raise ValueError(f"{self.name}: unknown core {self.core!r}")


DEVICES: dict[str, Device] = {
    "stm32l4r5": Device(
        "STM32L4R5ZI (NUCLEO-L4R5ZI)", "cortex-m4", 120.0, 44.893,
        _MLPERF.format(board="NUCLEO_L4R5ZI"),
        "120 MHz, 1.8 V; 44.88-44.91 mW, median 3371.7 uJ/inference (75 ms) with X-CUBE-AI 7.3.0. OctoML's "
        "microTVM+CMSIS-NN run on the same board (v1.0) drew 52.3 mW, 5230 uJ/inference."),
    "stm32h7a3": Device(
        "STM32H7A3ZI (NUCLEO-H7A3ZI-Q)", "cortex-m7", 280.0, 162.737,
        _MLPERF.format(board="NUCLEO-H7A3ZI-Q"),
        "280 MHz, 3.3 V with SMPS; 162.5-162.8 mW, median 2721.8 uJ/inference (16.7 ms)."),
    "stm32u575": Device(
        "STM32U575ZI (NUCLEO-U575ZI-Q)", "cortex-m33", 160.0, 25.837,
        _MLPERF.format(board="NUCLEO-U575ZI-Q"),
        "160 MHz, 1.8 V with SMPS; 25.82-25.87 mW, median 1138.5 uJ/inference (44 ms)."),
    "rpi3b": Device(
        "Raspberry Pi 3 Model B (BCM2837)", "cortex-a53", 1200.0, 5.0 * 400,
        _RPI_DOC.format(ma=400), "Whole board at 5 V x 400 mA; one core busy draws more, four cores far more."),
    "rpi4b": Device(
        "Raspberry Pi 4 Model B (BCM2711)", "cortex-a72", 1500.0, 5.0 * 600,
        _RPI_DOC.format(ma=600), "Whole board at 5 V x 600 mA; 1.5 GHz, the launch clock."),
    "rpi4b-1.8": Device(
        "Raspberry Pi 4 Model B (BCM2711, 1.8 GHz)", "cortex-a72", 1800.0, 5.0 * 600,
        _RPI_DOC.format(ma=600), "Later board revisions run at 1.8 GHz; the typical current is the 4B's."),
}


def device(key: str | Device) -> Device:
    """A profile by key of DEVICES (or the Device itself)."""
    if isinstance(key, Device):
        return key
    if key not in DEVICES:
        raise KeyError(f"unknown device {key!r}; known: {', '.join(DEVICES)}")
    return DEVICES[key]


def latency_ms(cycles: float, dev: str | Device) -> float:
    """Milliseconds that `cycles` take at the device's clock."""
    return float(cycles) / (device(dev).clock_mhz * 1e3)


def energy_uj(cycles: float, dev: str | Device) -> float:
    """Microjoules: active power (mW) x latency (ms)."""
    d = device(dev)
    return d.active_mw * latency_ms(cycles, d)


def cycles_per_mac(cycles: float, macs: float) -> float:
    """Cycles per multiply-accumulate, the caller counting the model's MACs per inference."""
    if macs <= 0:
        raise ValueError(f"macs must be positive, got {macs}")
    return float(cycles) / macs


def macs_per_second(cycles: float, macs: float, dev: str | Device) -> float:
    """Sustained MAC rate at the device's clock."""
    return macs / (latency_ms(cycles, dev) * 1e-3)


@dataclass(frozen=True)
class Estimate:
    """One inference on one device: cycles, latency, energy, and per-MAC figures when MACs are given."""
    device: str
    core: str
    cycles: float
    latency_ms: float
    energy_uj: float
    macs: float | None = None
    cycles_per_mac: float | None = None
    nj_per_mac: float | None = None


def estimate(counts: Mapping[str, float], dev: str | Device, macs: float | None = None) -> Estimate:
    """Latency and energy of an emulated run (its counts_by_class) on a device, pricing the counts with
    the device's core table; the counts must come from code built for that core's ISA."""
    d = device(dev)
    c = _cycles(counts, d.core)
    e = energy_uj(c, d)
    per_mac = cycles_per_mac(c, macs) if macs else None
    return Estimate(d.name, d.core, c, latency_ms(c, d), e, macs, per_mac, e * 1e3 / macs if macs else None)
