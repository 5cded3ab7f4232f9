"""An emulated call's instruction classes priced: cycles on a core's timing table (cycles.CORES), latency and energy
on each device of that core (devices.DEVICES), cycles per MAC against the core's floor."""
from __future__ import annotations

from .. import cycles as C
from .. import devices as D

# Int8 MACs per cycle of the widest multiply-accumulate each core has: the floor of cycles per MAC.
# M cores: SMLAD, two 16 x 16 MACs in one cycle (M4 TRM Table 3-1; the M7's single MAC pipe in LLVM's
# model). A53: SMLAL/SMLAL2 (8 int8 lanes into int16) as a 128-bit ASIMD op at half rate (cycles.CORES).
# A72: SMLAL on the F0 pipe only, 1 per cycle (Cortex-A72 Software Optimization Guide, ASIMD integer
# multiply-accumulate long). Practical kernels need wider accumulators, so they stay above this floor.
PEAK_MACS_PER_CYCLE = {"cortex-m4": 2, "cortex-m7": 2, "cortex-m33": 2, "cortex-a53": 4, "cortex-a72": 8}


def priced(counts: dict, core: str, macs: int | None) -> dict:
    """Instructions, cycles, cycles per MAC and each matching device's latency and energy for one histogram."""
    cyc = C.cycles(counts, core)
    out = dict(instructions=C.instructions_in(counts), cycles=cyc, counts={k: int(v) for k, v in counts.items() if v})
    if macs:
        out.update(macs=int(macs), cycles_per_mac=cyc / macs,
                   mac_efficiency=(1 / PEAK_MACS_PER_CYCLE[core]) / (cyc / macs))
    out["devices"] = {}
    for key, dev in D.DEVICES.items():
        if dev.core == core:
            e = D.estimate(counts, dev, macs)
            out["devices"][key] = dict(clock_mhz=dev.clock_mhz, latency_ms=e.latency_ms, energy_uj=e.energy_uj,
                                       **({"nj_per_mac": e.nj_per_mac} if macs else {}))
    return out


def first_device(core: str) -> tuple[str, D.Device]:
    """The first device of devices.DEVICES with this core (its key and profile): where per-core rows are priced."""
    return next((k, d) for k, d in D.DEVICES.items() if d.core == core)
