"""The fused attention cores alone, one call at a time through firmware_models/harness/core_driver.c: the direct
oscillator core against softmax's as T and d_osc vary (core_scaling), a hop of the streaming linear core
(linear_hop_cycles). Every output is checked against the integer reference (the computation counted is the right
one)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Sequence

import numpy as np

from ...cbuild import CORE_SOURCES, HARNESS
from .. import cycles as C
from .. import devices as D
from .build import ATTENTION, CFLAGS, build, work_folder
from .pricing import first_device
from .structs import for_target
from .workloads import layer_inputs


def _core_elf(core: str, work: Path, flags: Sequence[str]) -> Path:
    return build([*CORE_SOURCES, HARNESS / "core_driver.c"], core, work, flags=flags)


def core_scaling(T_values: Sequence[int] = (25, 49, 98, 196), d_osc_values: Sequence[int] = (2, 4, 8, 16),
                 core: str = "cortex-m4", heads: int = 4, d_head: int = 8, work_dir: str | Path | None = None,
                 seed: int = 0, flags: Sequence[str] = CFLAGS, linear_heads: tuple[int, int] | None = None
                 ) -> list[dict]:
    """Cycles of one call of the fused oscillator cores vs the fused softmax core ([H, T, d_head] q, k, v; the linear
    core's heads and d_head: linear_heads, else the same).

    One row per (T, d_osc): the direct oscillator core's cycles, the softmax core's with its exp table (what the
    generated firmware runs) and with the fixed-point exp per element, their ratios, MACs (qk, h, zr, the
    row sum, out; softmax: qk, out) and latency and energy on the first device of `core` in DEVICES. Each row
    also has the linear core's at that T (d_osc 2, p 4, with the key gate, as the linear models run it):
    oscillator_linear_cycles and ratio_linear (over the softmax core with its exp table); its MACs are the
    state updates' and the queries' contractions, 2 (2 C + (2p + 1)(d_v + 1)) per token and head with
    C = 1 + d_head + d_head (d_head + 1) / 2 coupling features.
    Each output is checked against the integer reference (the computation counted is the right one). `flags`:
    the compiler's (add "-DEDGEOSC_PORTABLE" for the portable loops instead of the DSP or NEON paths).
    """
    from ...integer import linear as L
    from ...integer import reference as R
    elf = _core_elf(core, work_folder(work_dir), flags)
    dev_key, dev = first_device(core)

    def run(fn, scope, args, bufs, want):
        r = C.emulate(elf, fn, args, bufs, core=core, scopes=(scope,))
        if r.return_value != 0 or not np.array_equal(r.outputs["out"], want):
            raise RuntimeError(f"{scope} on {core}: the emulated output differs from the integer reference")
        return C.cycles(r.scoped[scope], core)

    rows = []
    for T in T_values:
        x = layer_inputs(T, 1, heads, d_head, seed)
        want = R.softmax_core_int8(x["sm"], x["q"], x["k"], x["v"])
        bufs = dict(p=for_target(x["sm_p"], core), lut=x["lut"], q=x["q"], k=x["k"], v=x["v"],
                    out=np.zeros_like(x["v"]), scratch=np.zeros(T, np.int8))
        args = ["p", "lut", "q", "k", "v", "out", "scratch"]
        sm_lut = run("edgeosc_bench_softmax", ATTENTION[1], [*args, 1], bufs, want)
        sm_fixed = run("edgeosc_bench_softmax", ATTENTION[1], [*args, 0], bufs, want)
        sm_macs = heads * T * T * 2 * d_head
        lh, ld = linear_heads or (heads, d_head)
        x = layer_inputs(T, 1, lh, ld, seed)
        want = L.linear_core_int8(x["lin"], x["q"], x["k"], x["v"], x["r2"], x["g"])
        lin_words = L.linear_state_words(ld, ld, 4)
        bufs = dict(p=for_target(x["lin_p"], core), q=x["q"], k=x["k"], v=x["v"], r=x["r2"], g=x["g"],
                    out=np.zeros_like(x["v"]), state=np.zeros(lin_words, np.int32))
        lin = run("edgeosc_bench_linear", ATTENTION[3], ["p", "q", "k", "v", "r", "g", "out", "state"], bufs, want)
        lin_macs = lh * T * 2 * lin_words  # a MAC per state word and key (update), and per query
        for d_osc in d_osc_values:
            x = layer_inputs(T, d_osc, heads, d_head, seed)
            want = R.oscillator_core_int8(x["osc"], x["q"], x["k"], x["v"], x["r"])
            bufs = dict(p=for_target(x["osc_p"], core), tables=x["tables"], q=x["q"], k=x["k"], v=x["v"], r=x["r"],
                        out=np.zeros_like(x["v"]), scratch=np.zeros(T + 2 * d_osc, np.int8))
            osc = run("edgeosc_bench_osc", ATTENTION[0], ["p", "tables", "q", "k", "v", "r", "out", "scratch"],
                      bufs, want)
            osc_macs = heads * T * T * (2 * d_head + 2 * d_osc + 1)
            rows.append(dict(
                T=T, d_osc=d_osc, heads=heads, d_head=d_head, d_value=d_head, core=core, device=dev_key,
                oscillator_cycles=osc, softmax_cycles=sm_lut, softmax_fixedpoint_cycles=sm_fixed,
                ratio=osc / sm_lut, ratio_fixedpoint=osc / sm_fixed,
                oscillator_linear_cycles=lin, ratio_linear=lin / sm_lut, oscillator_linear_macs=lin_macs,
                linear_heads=lh, linear_d_head=ld,
                oscillator_macs=osc_macs, softmax_macs=sm_macs,
                oscillator_cycles_per_mac=osc / osc_macs, softmax_cycles_per_mac=sm_lut / sm_macs,
                oscillator_latency_ms=D.latency_ms(osc, dev), softmax_latency_ms=D.latency_ms(sm_lut, dev),
                oscillator_energy_uj=D.energy_uj(osc, dev), softmax_energy_uj=D.energy_uj(sm_lut, dev)))
    return rows


def linear_hop_cycles(core: str = "cortex-m4", heads: int = 4, d_head: int = 8, p: int = 4,
                      work_dir: str | Path | None = None, seed: int = 0, flags: Sequence[str] = CFLAGS,
                      gated: bool = True, out_shift: int | None = None) -> float:
    """Cycles of one hop of the streaming linear core for the heads of one block, an ESTIMATE by emulation on
    `core`: each head's anchor turns, its window slides by a frame (the new key added, the expired one removed and
    the query read in one edgeosc_linear_step; edgeosc_linear_stream_int8). The work does not depend on the window:
    streams of 16 and 24 frames through a window of 4 (random int8 inputs, d_value = d_head, the key gate on unless
    not `gated`), each output checked against the integer reference, and the hop is the difference over the 8 extra
    frames. `flags`: as core_scaling's; `out_shift`: the output requantization's shift instead of the layer's
    (-10..20, the division's extremes)."""
    from ...integer import ckernels as K
    from ...integer import linear as L
    from ...integer import reference as R
    elf = _core_elf(core, work_folder(work_dir), flags)
    fn, window, total = "edgeosc_bench_linear_stream", 4, {}
    for T in (16, 24):
        x = layer_inputs(T, 2, heads, d_head, seed, p)
        g = x["g"] if gated else None
        pq = dataclasses.replace(x["lin"], causal=True, window=window, turn=L.turn_steps(np.linspace(0.05, 0.5, heads)))
        if out_shift is not None:
            pq = dataclasses.replace(pq, rq_out=R.Requant(pq.rq_out.multiplier, out_shift))
        ins = [x[n] for n in ("q", "k", "v", "r2")]
        want = L.linear_core_int8(pq, *ins, g)
        state = L.LinearStream.zeros(heads, d_head, d_head, p, window)
        bufs = dict(p=for_target(K.linear_params(pq, heads, T, d_head, d_head)[0], core),
                    turn=np.array(pq.turn, np.int32), q=x["q"], k=x["k"], v=x["v"], r=x["r2"], g=x["g"],
                    out=np.zeros_like(x["v"]), clock=state.clock, sums=state.sums, kept=state.kept)
        run = C.emulate(elf, fn, ["p", "turn", "q", "k", "v", "r", "g" if gated else 0, "out", "clock", "sums", "kept"],
                        bufs, core=core, scopes=(fn,))
        if run.return_value != 0 or not np.array_equal(run.outputs["out"], want):
            raise RuntimeError(f"the streaming linear core on {core}: an output differs from the integer reference")
        total[T] = C.cycles(run.scoped[fn], core)
    return (total[24] - total[16]) / 8
