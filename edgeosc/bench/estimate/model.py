"""One inference of a generated firmware model emulated on each target core and priced (estimate_model)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

from ...cbuild import compiler_version
from .. import cycles as C
from .build import ATTENTION, CFLAGS, ENTRY, host_logits, io_bytes, model_elf, work_folder
from .macs import count_macs, find_tflite
from .pricing import PEAK_MACS_PER_CYCLE, priced

DEFAULT_TARGETS = ("cortex-m4", "cortex-m7", "cortex-m33", "cortex-a53", "cortex-a72")


def estimate_model(firmware_dir: str | Path, name: str, input_int8, targets: Sequence[str] = DEFAULT_TARGETS,
                   work_dir: str | Path | None = None, tflite: str | Path | None = None,
                   expected=None, flags: Sequence[str] = CFLAGS) -> dict:
    """Emulate one inference of a generated firmware model on each target core; estimate its cost.

    Returns {"model", "macs" (count_macs; None without the .tflite), "logits", "verified_against",
    "targets": {core: {"isa", "compiler", "flags", "core_source" (of the timing table), "model": the
    priced inference (<name>_run), "attention": the priced fused attention core calls (None for a model
    generated without fuse), "share" of attention in the model's cycles, "by_function": exclusive
    cycles per function, "stack_bytes": the inference's deepest stack, measured, "peak_macs_per_cycle"}}}.
    A priced entry holds instructions, cycles, counts by
    class, macs, cycles_per_mac, mac_efficiency (floor / achieved cycles per MAC) and, per device of
    that core in devices.DEVICES, latency_ms, energy_uj and nj_per_mac.
    The logits must equal `expected` if given, else the host build's (when a host compiler exists), and
    agree across targets; a mismatch raises RuntimeError.
    """
    fw = Path(firmware_dir)
    work = work_folder(work_dir)
    n_in, n_out = io_bytes(fw, name)
    x = np.ascontiguousarray(input_int8, np.int8).ravel()
    if x.size != n_in:
        raise ValueError(f"{name} takes {n_in} int8 inputs, got {x.size}")
    info_path = fw / "firmware.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    graph = find_tflite(fw, info, tflite)
    macs = count_macs(graph) if graph else None
    if expected is not None:
        want, against = np.ravel(np.asarray(expected)).astype(np.int8), "expected"
    else:
        try:
            want, against = host_logits(fw, name, x[None], work)[0], "host build"
        except RuntimeError as e:
            if "no C compiler" not in str(e):
                raise
            want, against = None, "targets agree (no host compiler)"

    run_fn = f"{name}_run"
    result = dict(model=name, macs=macs, logits=None, verified_against=against, targets={})
    for core in targets:
        elf = model_elf(fw, name, core, work, flags)
        run = C.emulate(elf, ENTRY, ["input", "output"], {"input": x, "output": np.zeros(n_out, np.int8)},
                        core=core, scopes=(run_fn, *ATTENTION))
        logits = run.outputs["output"]
        if run.return_value != n_out:
            raise RuntimeError(f"{name} on {core}: the inference failed (returned {run.return_value})")
        if want is None:
            want = logits
        if not np.array_equal(logits, want):
            raise RuntimeError(f"{name} on {core}: emulated logits {logits.tolist()} != {against} {want.tolist()}")
        result["logits"] = logits.tolist()
        model = priced(run.scoped[run_fn], core, macs and macs["total"])
        att, attention = [f for f in ATTENTION if run.scope_calls.get(f)], None
        if att:
            counts = {k: sum(run.scoped[f].get(k, 0) for f in att) for k in run.scoped[run_fn]}
            attention = dict(priced(counts, core, macs and macs["attention"]), functions=att,
                             calls=sum(run.scope_calls[f] for f in att))
        by_fn = {f: C.cycles(c, core) for f, c in run.by_function.items()}
        result["targets"][core] = dict(
            isa=C.CORES[core].isa, compiler=compiler_version(tuple(C.compiler(core))), flags=list(flags),
            core_source=C.CORES[core].source,
            model=model, attention=attention, share=attention and attention["cycles"] / model["cycles"],
            by_function=dict(sorted(by_fn.items(), key=lambda kv: -kv[1])),
            stack_bytes=run.stack_bytes, peak_macs_per_cycle=PEAK_MACS_PER_CYCLE[core])
    return result
