"""The builtin kernels one at a time (kernel_cycles): each on its fast path and on the portable reference path,
emulated on the same core with the same random int8 data (workloads.kernel_case), through
firmware_models/harness/kernel_driver.c."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ...cbuild import HARNESS, KERNEL_SOURCES
from .. import cycles as C
from .build import CFLAGS, build, work_folder
from .workloads import default_kernel_shapes, kernel_case


def kernel_cycles(core: str = "cortex-m4", shapes: Sequence[dict] | None = None, work_dir: str | Path | None = None,
                  seed: int = 0, flags: Sequence[str] = CFLAGS) -> list[dict]:
    """Cycles of each builtin kernel alone, on its fast path (EDGEOSC_DSP on cores with the DSP extension) and on
    the portable reference path (-DEDGEOSC_PORTABLE), both emulated on `core` with the same random int8 data.

    One row per kernel (default_kernel_shapes() unless given): op, name, shape, macs, cycles and cycles_per_mac
    (the fast path), reference_cycles and reference_cycles_per_mac (None for ADD / SUB and L2_NORMALIZATION, which
    have no MACs), cycles_per_output, speedup. The fast path's output must equal the reference path's, bit for bit, or
    RuntimeError is raised. `flags`: the fast build's (e.g. -DEDGEOSC_NO_ASM for its loops in C).
    """
    work = work_folder(work_dir)
    sources = [*KERNEL_SOURCES, HARNESS / "kernel_driver.c"]
    fast = build(sources, core, work, flags=flags)
    portable = build(sources, core, work / "portable", flags=(*CFLAGS, "-DEDGEOSC_PORTABLE"))
    rng = np.random.default_rng(seed)
    rows = []
    for spec in shapes or default_kernel_shapes():
        fn, args, bufs, macs = kernel_case(spec, rng)
        runs = [C.emulate(elf, fn, args, bufs, core=core, scopes=(fn,)) for elf in (fast, portable)]
        if not np.array_equal(runs[0].outputs["out"], runs[1].outputs["out"]):
            raise RuntimeError(f"{spec['op']} {spec['name']} on {core}: the fast path differs from the portable path")
        cyc, ref = (C.cycles(r.scoped[fn], core) for r in runs)
        shape = {k: v for k, v in spec.items() if k not in ("op", "name")}
        per_mac = (lambda c: c / macs) if macs else (lambda c: None)  # noqa: E731  (ADD / SUB: no MACs)
        n_out = runs[0].outputs["out"].size
        rows.append(dict(op=spec["op"], name=spec["name"], shape=shape, core=core, macs=macs, cycles=cyc,
                         cycles_per_mac=per_mac(cyc), reference_cycles=ref, reference_cycles_per_mac=per_mac(ref),
                         cycles_per_output=cyc / n_out, speedup=ref / cyc, output=runs[0].outputs["out"]))
    return rows
