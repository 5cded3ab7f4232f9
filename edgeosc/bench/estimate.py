"""Board-free, deterministic estimates of generated firmware: emulate one inference per core, price it.

estimate_model() builds a firmware_models-style folder (export/c) for each target core, Thumb-2
for Cortex-M4/M7/M33 (one build per -mcpu) and freestanding AArch64 for Cortex-A53/A72, calls one
inference through the harness (th_init, th_load_tensor, th_infer, th_results) under unicorn, checks the
logits against the host build of the same C (so the counted computation is the right one), and turns the
instruction classes into cycles (cycles.CORES), latency and energy (devices.DEVICES) and cycles per MAC,
for the whole model (<name>_run) and for the fused attention cores alone (their calls, callees included).
core_scaling() does the same for the two attention cores alone as T and d_osc vary.

Estimates, not measurements: cycles.py states what each core table models (no caches, no wait states);
the counts depend on the compiler (arm-none-eabi-gcc / aarch64-linux-gnu-gcc when on PATH, else zig's
clang), which each result names. Builds are cached by the hash of their sources, flags and compiler.
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import tempfile
from functools import reduce
from pathlib import Path
from typing import Sequence

import numpy as np

from . import cycles as C
from . import devices as D
from ..cbuild import CORE_SOURCES, FRONTEND, HARNESS, KERNEL_SOURCES, KERNELS, compiler_version

DEFAULT_TARGETS = ("cortex-m4", "cortex-m7", "cortex-m33", "cortex-a53", "cortex-a72")
CFLAGS = ("-std=c99", "-O2", "-fno-math-errno")
ATTENTION = ("edgeosc_oscillator_core_int8", "edgeosc_softmax_core_int8", "edgeosc_oscillator_gated_core_int8",
             "edgeosc_linear_core_int8", "edgeosc_linear_stream_int8")
ENTRY, STREAM_ENTRY = "edgeosc_estimate_infer", "edgeosc_estimate_stream"

# Int8 MACs per cycle of the widest multiply-accumulate each core has: the floor of cycles per MAC.
# M cores: SMLAD, two 16 x 16 MACs in one cycle (M4 TRM Table 3-1; the M7's single MAC pipe in LLVM's
# model). A53: SMLAL/SMLAL2 (8 int8 lanes into int16) as a 128-bit ASIMD op at half rate (cycles.CORES).
# A72: SMLAL on the F0 pipe only, 1 per cycle (Cortex-A72 Software Optimization Guide, ASIMD integer
# multiply-accumulate long). Practical kernels need wider accumulators, so they stay above this floor.
PEAK_MACS_PER_CYCLE = {"cortex-m4": 2, "cortex-m7": 2, "cortex-m33": 2, "cortex-a53": 4, "cortex-a72": 8}
MACS_COUNTED = ("multiply-accumulates of CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED and BATCH_MATMUL as the "
                ".tflite states them (and of the EdgeOscAttention custom op's matmuls, or its linear core's state "
                "updates and queries), including the oscillator's ones-column "
                "row sum and the mean pool's one-valued FULLY_CONNECTED; not counted: elementwise MUL/ADD/SUB, "
                "L2 normalisation, softmax, table lookups, requantization")

INCLUDES = [KERNELS, HARNESS, FRONTEND]



# ---- builds ----------------------------------------------------------------------------------------------

def cache_dir() -> Path:
    """Where builds live without a work_dir: next to cbuild's cache."""
    from ..cbuild import cache_dir as ck
    return ck().parent / "estimate"


def _text(work: Path, stem: str, text: str) -> Path:
    """A generated source under work, named by its content (written aside, then renamed into place)."""
    out = Path(work) / f"{stem}_{hashlib.sha256(text.encode()).hexdigest()[:12]}.c"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".c", dir=out.parent)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, out)
    return out


def build(sources: Sequence[Path], core: str, work: Path, includes: Sequence[Path] = (),
          flags: Sequence[str] = CFLAGS) -> Path:
    """A bare ELF for `core` (cycles.build_elf), cached under work by the hash of what goes into it."""
    includes = [*INCLUDES, *map(Path, includes)]
    return C.build_elf(sources, core, [*flags, *(f"-I{d}" for d in includes)], name=f"{core}.elf", cache=work)


def model_elf(firmware_dir: str | Path, name: str, core: str, work: str | Path | None = None,
              flags: Sequence[str] = CFLAGS) -> Path:
    """A generated model with the kernels, the harness and its entry points (harness/estimate_driver.c), for core."""
    fw, work = Path(firmware_dir), Path(work or cache_dir())
    sources = [*KERNEL_SOURCES, HARNESS / "edgeosc_harness.c", fw / f"{name}_model.c", HARNESS / "estimate_driver.c"]
    return build(sources, core, work, [fw], [*flags, f"-DEDGEOSC_MODEL={name}_model"])


def host_logits(firmware_dir: str | Path, name: str, inputs: np.ndarray, work: str | Path | None = None) -> np.ndarray:
    """The host build's (gcc, firmware_models/harness/main_host.c) outputs for rows of int8 inputs."""
    from ..cbuild import build as build_host
    fw = Path(firmware_dir)
    sources = [*KERNEL_SOURCES, *(HARNESS / f for f in ("edgeosc_harness.c", "platform_host.c", "main_host.c")),
               fw / f"{name}_model.c"]
    exe = build_host(sources, f"host-{name}", flags=[*CFLAGS, f"-DEDGEOSC_MODEL={name}_model"],
                     include_dirs=[*INCLUDES, fw], cache=work or cache_dir())
    x = np.ascontiguousarray(inputs, np.int8)
    out = subprocess.run([str(exe)], input=x.tobytes(), capture_output=True, check=True).stdout.decode()
    return np.array([[int(v) for v in line.split()] for line in out.splitlines()], np.int8)


# ---- MACs ------------------------------------------------------------------------------------------------

def count_macs(tflite: str | Path) -> dict:
    """MACs of one inference (see MACS_COUNTED): total, inside the fused attention cores, by op kind."""
    from ..export.c.ops import CUSTOM_OSC, lower, read_graph
    g = read_graph(Path(tflite).read_bytes())
    fused = {o for call in lower(g)[0] if call.fn in ATTENTION for o in call.ops}
    total, attention, by_kind = 0, 0, {}
    for op in g.ops:
        t = lambda i: g.tensors[op.inputs[i]]  # noqa: E731
        out = g.tensors[op.outputs[0]]
        if op.kind == "CONV_2D":
            n = out.size * int(np.prod(t(1).shape[1:]))  # per output: k_h k_w in_c
        elif op.kind == "DEPTHWISE_CONV_2D":
            n = out.size * t(1).shape[1] * t(1).shape[2]  # per output: k_h k_w
        elif op.kind == "FULLY_CONNECTED":
            n = out.size * t(1).shape[1]  # per output: depth
        elif op.kind == "BATCH_MATMUL":
            n = out.size * t(0).shape[-1]
        elif op.kind == CUSTOM_OSC:
            from flatbuffers import flexbuffers
            from ..integer.linear import linear_state_words
            q, v, r = t(0), t(2), t(3)
            H, T = int(np.prod(q.shape[:-2])), q.shape[-2]
            o = flexbuffers.Loads(op.custom) if op.custom else {}
            if o.get("form") == "linear":  # a MAC per state word and key (update), and per query
                n = H * T * 2 * linear_state_words(q.shape[-1], v.shape[-1], int(o["p"]))
            else:  # qk, h = wn r, zr, the row sum, a v: per (head, query, key)
                n = H * T * T * (q.shape[-1] + 2 * r.shape[-1] + 1 + v.shape[-1])
        else:
            continue
        total += n
        attention += n if op.index in fused else 0
        by_kind[op.kind] = by_kind.get(op.kind, 0) + n
    return dict(total=int(total), attention=int(attention), by_kind=by_kind, counted=MACS_COUNTED)


def _find_tflite(fw: Path, info: dict, given) -> Path | None:
    """The .tflite the folder was generated from (its sha256 in firmware.json must match)."""
    for p in [given, fw / "int8.tflite", fw / "int8_custom.tflite", info.get("source")]:
        if p and Path(p).is_file():
            digest = hashlib.sha256(Path(p).read_bytes()).hexdigest()
            if given is None and info.get("sha256") not in (None, digest):
                continue
            return Path(p)
    return None


# ---- pricing ---------------------------------------------------------------------------------------------

def _nonzero(counts: dict) -> dict:
    return {k: int(v) for k, v in counts.items() if v}


def _priced(counts: dict, core: str, macs: int | None) -> dict:
    """Instructions, cycles, cycles per MAC and each matching device's latency and energy for one histogram."""
    cyc = C.cycles(counts, core)
    out = dict(instructions=C.instructions_in(counts), cycles=cyc, counts=_nonzero(counts))
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


def _io_bytes(fw: Path, name: str) -> tuple[int, int]:
    text = (fw / f"{name}_model.h").read_text()
    get = lambda what: int(re.search(rf"#define {name.upper()}_{what}_BYTES (\d+)", text).group(1))  # noqa: E731
    return get("INPUT"), get("OUTPUT")


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
    work = Path(work_dir) if work_dir else cache_dir()
    n_in, n_out = _io_bytes(fw, name)
    x = np.ascontiguousarray(input_int8, np.int8).ravel()
    if x.size != n_in:
        raise ValueError(f"{name} takes {n_in} int8 inputs, got {x.size}")
    info_path = fw / "firmware.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    graph = _find_tflite(fw, info, tflite)
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
        model = _priced(run.scoped[run_fn], core, macs and macs["total"])
        att, attention = [f for f in ATTENTION if run.scope_calls.get(f)], None
        if att:
            counts = {k: sum(run.scoped[f].get(k, 0) for f in att) for k in run.scoped[run_fn]}
            attention = dict(_priced(counts, core, macs and macs["attention"]), functions=att,
                             calls=sum(run.scope_calls[f] for f in att))
        by_fn = {f: C.cycles(c, core) for f, c in run.by_function.items()}
        result["targets"][core] = dict(
            isa=C.CORES[core].isa, compiler=compiler_version(tuple(C.compiler(core))), flags=list(flags),
            core_source=C.CORES[core].source,
            model=model, attention=attention, share=attention and attention["cycles"] / model["cycles"],
            by_function=dict(sorted(by_fn.items(), key=lambda kv: -kv[1])),
            stack_bytes=run.stack_bytes, peak_macs_per_cycle=PEAK_MACS_PER_CYCLE[core])
    return result


# ---- the two attention cores alone -------------------------------------------------------------------------

def _int_fields(struct) -> list[tuple[str, ...]]:
    """Attribute paths of a ckernels ctypes mirror's int fields, in order (pointers are set apart)."""
    out = []
    for name, ctype in struct._fields_:
        if issubclass(ctype, ctypes.Structure):
            out += [(name, sub) for sub, _ in ctype._fields_]
        elif not issubclass(ctype, ctypes._Pointer):
            out.append((name,))
    return out


def _assign(struct, var: str) -> list[str]:
    """C statements setting a struct's int fields from f[], in _int_fields order."""
    return [f"  {var}.{'.'.join(path)} = f[{i}];" for i, path in enumerate(_int_fields(struct))]


def _values(params) -> np.ndarray:
    """A mirror instance's int fields, in _int_fields order."""
    return np.array([reduce(getattr, path, params) for path in _int_fields(type(params))], np.int32)


def _core_driver(work: Path) -> Path:
    """C entry points that fill the cores' parameter structs from int32 arrays, then call the core."""
    from ..integer.ckernels import LinearParams, OscParams, SoftmaxParams
    text = "\n".join([
        "/* Generated by edgeosc/bench/estimate.py: the attention cores with parameters from f[]. */",
        '#include "edgeosc_attention.h"', "",
        "int edgeosc_bench_osc(const int32_t *f, const int8_t *tables, const int8_t *q, const int8_t *k,",
        "                      const int8_t *v, const int8_t *r, int8_t *out, int8_t *scratch) {",
        "  EdgeoscOscParams p;", *_assign(OscParams, "p"),
        "  p.table_w = tables;", "  p.table_c = tables + 256;", "  p.table_inv = tables + 512;",
        "  return edgeosc_oscillator_core_int8(&p, q, k, v, r, out, scratch);", "}", "",
        "int edgeosc_bench_softmax(const int32_t *f, const int32_t *lut, const int8_t *q, const int8_t *k,",
        "                          const int8_t *v, int8_t *out, int8_t *scratch, int use_lut) {",
        "  EdgeoscSoftmaxParams p;", *_assign(SoftmaxParams, "p"),
        "  p.exp_lut = use_lut ? lut : 0; /* 0: the fixed-point exp per element */",
        "  return edgeosc_softmax_core_int8(&p, q, k, v, out, scratch);", "}", "",
        "int edgeosc_bench_linear(const int32_t *f, const int8_t *q, const int8_t *k, const int8_t *v,",
        "                         const int8_t *r, const int8_t *g, int8_t *out, int32_t *state) {",
        "  EdgeoscLinearParams p;", *_assign(LinearParams, "p"),
        "  p.turn = 0;",
        "  return edgeosc_linear_core_int8(&p, q, k, v, r, g, out, state);", "}", "",
        "/* A stream through the windowed linear core, its anchors turning (the firmware's per-hop work). */",
        "int edgeosc_bench_linear_stream(const int32_t *f, const int32_t *turn, const int8_t *q, const int8_t *k,",
        "                                const int8_t *v, const int8_t *r, const int8_t *g, int8_t *out,",
        "                                int32_t *clock, int32_t *sums, int8_t *kept) {",
        "  EdgeoscLinearParams p;", *_assign(LinearParams, "p"),
        "  p.turn = turn;",
        "  return edgeosc_linear_stream_int8(&p, q, k, v, r, g, out, clock, sums, kept);", "}", ""])
    return _text(work, "cores", text)


def _layer_inputs(T: int, d_osc: int, heads: int, d_head: int, seed: int, p: int = 4):
    """Plausible integer parameters (callgrind's layer scales, TFLite Micro's multipliers) and random inputs; the
    linear core's readout power p."""
    from ..integer import linear as L, reference as R
    from ..integer import ckernels as K
    from .callgrind import _layer
    s, tables = _layer(T, d_head, 4)
    osc = R.osc_quant_from_scales(s, *tables, sum_op="fully_connected", ones=127, ones_scale=1 / 127,
                                  target_name="tflite-micro")
    sm = R.softmax_quant_from_scales(dict(q=s["q"], k=s["k"], v=s["v"], qk=0.5, out=s["out"]),
                                     beta=1 / np.sqrt(d_head), target_name="tflite-micro")
    rng = np.random.default_rng(seed)
    q, k, v = (rng.integers(-128, 128, (heads, T, d_head)).astype(np.int8) for _ in range(3))
    r = rng.standard_normal((heads, T, d_osc))
    r = np.clip(np.round(127 * r / np.linalg.norm(r, axis=-1, keepdims=True)), -128, 127).astype(np.int8)
    osc_f = _values(K.osc_params(osc, heads, T, d_head, d_osc, d_head)[0])
    sm_f = _values(K.softmax_params(sm, heads, T, d_head, d_head))
    lut = R.softmax_exp_table(sm.beta_multiplier, sm.beta_left_shift, sm.diff_min).astype(np.int32)
    lin = L.linear_quant_from_scales(s, d_head, p, zp=dict(g=-128))  # gates >= 0
    r2 = rng.standard_normal((heads, T, 2))
    r2 = np.clip(np.round(128 * r2 / np.linalg.norm(r2, axis=-1, keepdims=True)), -128, 127).astype(np.int8)
    if T > 5:  # anchors at int8's -1: ungated, their readouts pass int16 (the DSP pass leaves them to the portable)
        r2[:, 3:6:2] = [[-128, 0], [0, -128]]
    g = rng.integers(-128, 128, (heads, T)).astype(np.int8)
    return dict(osc=osc, sm=sm, lin=lin, r2=r2, g=g, lin_f=_values(K.linear_params(lin, heads, T, d_head, d_head)[0]),
                q=q, k=k, v=v, r=r, osc_f=osc_f, sm_f=sm_f, lut=lut,
                tables=np.concatenate([osc.table_w, osc.table_c, osc.table_inv]).astype(np.int8))


def core_scaling(T_values: Sequence[int] = (25, 49, 98, 196), d_osc_values: Sequence[int] = (2, 4, 8, 16),
                 core: str = "cortex-m4", heads: int = 4, d_head: int = 8, work_dir: str | Path | None = None,
                 seed: int = 0, flags: Sequence[str] = CFLAGS) -> list[dict]:
    """Cycles of one call of the fused oscillator cores vs the fused softmax core ([H, T, d_head] q, k, v).

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
    from ..integer import linear as L, reference as R
    work = Path(work_dir) if work_dir else cache_dir()
    elf = build([*CORE_SOURCES, _core_driver(work)], core, work, flags=flags)
    dev_key, dev = next((k, d) for k, d in D.DEVICES.items() if d.core == core)

    def run(fn, scope, args, bufs, want):
        r = C.emulate(elf, fn, args, bufs, core=core, scopes=(scope,))
        if r.return_value != 0 or not np.array_equal(r.outputs["out"], want):
            raise RuntimeError(f"{scope} on {core}: the emulated output differs from the integer reference")
        return C.cycles(r.scoped[scope], core)

    rows = []
    for T in T_values:
        x = _layer_inputs(T, 1, heads, d_head, seed)
        want = R.softmax_core_int8(x["sm"], x["q"], x["k"], x["v"])
        bufs = dict(f=x["sm_f"], lut=x["lut"], q=x["q"], k=x["k"], v=x["v"], out=np.zeros_like(x["v"]),
                    scratch=np.zeros(T, np.int8))
        args = ["f", "lut", "q", "k", "v", "out", "scratch"]
        sm_lut = run("edgeosc_bench_softmax", ATTENTION[1], [*args, 1], bufs, want)
        sm_fixed = run("edgeosc_bench_softmax", ATTENTION[1], [*args, 0], bufs, want)
        sm_macs = heads * T * T * 2 * d_head
        want = L.linear_core_int8(x["lin"], x["q"], x["k"], x["v"], x["r2"], x["g"])
        lin_words = L.linear_state_words(d_head, d_head, 4)
        bufs = dict(f=x["lin_f"], q=x["q"], k=x["k"], v=x["v"], r=x["r2"], g=x["g"], out=np.zeros_like(x["v"]),
                    state=np.zeros(lin_words, np.int32))
        lin = run("edgeosc_bench_linear", ATTENTION[3], ["f", "q", "k", "v", "r", "g", "out", "state"], bufs, want)
        lin_macs = heads * T * 2 * lin_words  # a MAC per state word and key (update), and per query
        for d_osc in d_osc_values:
            x = _layer_inputs(T, d_osc, heads, d_head, seed)
            want = R.oscillator_core_int8(x["osc"], x["q"], x["k"], x["v"], x["r"])
            bufs = dict(f=x["osc_f"], tables=x["tables"], q=x["q"], k=x["k"], v=x["v"], r=x["r"],
                        out=np.zeros_like(x["v"]), scratch=np.zeros(T + 2 * d_osc, np.int8))
            osc = run("edgeosc_bench_osc", ATTENTION[0], ["f", "tables", "q", "k", "v", "r", "out", "scratch"],
                      bufs, want)
            osc_macs = heads * T * T * (2 * d_head + 2 * d_osc + 1)
            rows.append(dict(
                T=T, d_osc=d_osc, heads=heads, d_head=d_head, d_value=d_head, core=core, device=dev_key,
                oscillator_cycles=osc, softmax_cycles=sm_lut, softmax_fixedpoint_cycles=sm_fixed,
                ratio=osc / sm_lut, ratio_fixedpoint=osc / sm_fixed,
                oscillator_linear_cycles=lin, ratio_linear=lin / sm_lut, oscillator_linear_macs=lin_macs,
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
    from ..integer import ckernels as K
    from ..integer import linear as L, reference as R
    work = Path(work_dir) if work_dir else cache_dir()
    elf = build([*CORE_SOURCES, _core_driver(work)], core, work, flags=flags)
    fn, window, total = "edgeosc_bench_linear_stream", 4, {}
    for T in (16, 24):
        x = _layer_inputs(T, 2, heads, d_head, seed, p)
        g = x["g"] if gated else None
        pq = dataclasses.replace(x["lin"], causal=True, window=window, turn=L.turn_steps(np.linspace(0.05, 0.5, heads)))
        if out_shift is not None:
            pq = dataclasses.replace(pq, rq_out=R.Requant(pq.rq_out.multiplier, out_shift))
        ins = [x[n] for n in ("q", "k", "v", "r2")]
        want = L.linear_core_int8(pq, *ins, g)
        state = L.LinearStream.zeros(heads, d_head, d_head, p, window)
        bufs = dict(f=_values(K.linear_params(pq, heads, T, d_head, d_head)[0]), turn=np.array(pq.turn, np.int32),
                    q=x["q"], k=x["k"], v=x["v"], r=x["r2"], g=x["g"], out=np.zeros_like(x["v"]),
                    clock=state.clock, sums=state.sums, kept=state.kept)
        run = C.emulate(elf, fn, ["f", "turn", "q", "k", "v", "r", "g" if gated else 0, "out", "clock", "sums", "kept"],
                        bufs, core=core, scopes=(fn,))
        if run.return_value != 0 or not np.array_equal(run.outputs["out"], want):
            raise RuntimeError(f"the streaming linear core on {core}: an output differs from the integer reference")
        total[T] = C.cycles(run.scoped[fn], core)
    return (total[24] - total[16]) / 8


# ---- one kernel at a time: the fast path against the portable reference --------------------------------------



def default_kernel_shapes() -> list[dict]:
    """The builtin kernels of the default small model (models/kws.py SIZES["small"], 49 frames x 40 coefficients)
    at their shapes: the stem, the attention projections, the feed-forward pair, the classifier, a residual ADD,
    the layer norm's SUB of the row mean and its L2 normalisation."""
    from ..config import ModelConfig
    from ..models.kws import resolve
    m = resolve(ModelConfig())
    T, C, d = m.n_frames, m.n_coeffs, m.d_model
    return [dict(op="CONV_2D", name="stem", in_h=1, in_w=T, in_c=C, k_h=1, k_w=3, out_c=d),
            dict(op="FULLY_CONNECTED", name="projection", rows=T, depth=d, units=d),
            dict(op="FULLY_CONNECTED", name="feed-forward up", rows=T, depth=d, units=2 * d),
            dict(op="FULLY_CONNECTED", name="feed-forward down", rows=T, depth=2 * d, units=d),
            dict(op="FULLY_CONNECTED", name="layer-norm mean", rows=T, depth=d, units=1),
            dict(op="FULLY_CONNECTED", name="classifier", rows=1, depth=d, units=m.n_classes),
            dict(op="ADD", name="residual", rows=T, cols=d),
            dict(op="SUB", name="layer-norm center", rows=T, cols=d, row_broadcast=1),
            dict(op="L2_NORMALIZATION", name="layer norm", rows=T, depth=d)]


def _kernel_case(spec: dict, rng) -> tuple[str, list, dict, int]:
    """(driver function, its arguments, buffers, MACs) for one kernel spec with random int8 data. Optional keys:
    "act" (act_min, act_max), "per_channel" (FULLY_CONNECTED), "runtime_requant" (FULLY_CONNECTED, CONV_2D: the
    DSP requantization constants prepared on each call, not given as code generation writes them), "stride" and
    "dil" (CONV_2D and DEPTHWISE_CONV_2D, SAME padding; "MACs" counts the taps inside and outside the image
    alike), "scales" (ADD / SUB: the scales of a, b and the output; random otherwise)."""
    from ..export.c.ops import (depthwise3x3_packs, depthwise_scratch_words, dsp_requant, pack_depthwise3x3,
                                pack_weights, wide_words)
    from ..integer import reference as R
    i8 = lambda *shape: rng.integers(-128, 128, shape).astype(np.int8)  # noqa: E731
    if spec["op"] == "L2_NORMALIZATION":  # "rows" x "depth", zero point "zp" (random otherwise)
        rows, depth = spec["rows"], spec["depth"]
        zp = int(spec.get("zp", rng.integers(-128, 128)))
        x = i8(rows, depth)
        if spec.get("zero_rows"):  # rows at the zero point: no norm (TFLite's output 0)
            x[::2] = zp
        bufs = dict(f=np.array([rows, depth, zp], np.int32), x=x, out=np.zeros(rows * depth, np.int8))
        return "edgeosc_bench_l2norm", ["f", "x", "out"], bufs, 0
    if spec["op"] in ("ADD", "SUB"):  # "rows" x "cols", b broadcast along the row when "row_broadcast"
        rows, cols, lo, hi = spec["rows"], spec["cols"], *spec.get("act", (-128, 127))
        row_b = int(spec.get("row_broadcast", 0))
        scales = spec.get("scales", rng.uniform(0.01, 0.2, 3))
        mult, shift = zip(*(R.quantize_multiplier(m) for m in R.add_multipliers(*scales)))
        f = np.array([1, 1, rows, cols, 0, 0, cols, 1, 0, 0, 1 if row_b else cols, 0 if row_b else 1,
                      *rng.integers(-128, 128, 3), lo, hi, int(spec["op"] == "SUB")], np.int32)
        bufs = dict(f=f, w=i8(rows, 1 if row_b else cols), bias=np.zeros(1, np.int32),
                    mult=np.array(mult, np.int32), shift=np.array(shift, np.int32), x=i8(rows, cols),
                    out=np.zeros(rows * cols, np.int8), scratch=np.zeros(1, np.int32))
        return "edgeosc_bench_add", ["f", "w", "bias", "mult", "shift", "x", "out", "scratch"], bufs, 0
    if spec["op"] == "FULLY_CONNECTED":
        rows, depth, units = spec["rows"], spec["depth"], spec["units"]
        lo, hi = spec.get("act", (-128, 127))
        f = np.array([rows, depth, units, int(rng.integers(-128, 128)), int(rng.integers(-128, 128)), lo, hi,
                      int(spec.get("per_channel", 0))], np.int32)
        w, x, macs, n_out, n_bias = i8(units, depth), i8(rows, depth), rows * depth * units, rows * units, units
        channels = units if spec.get("per_channel", 0) else 1
        fn, words = "edgeosc_bench_fc", wide_words(depth) + 2 * units  # EDGEOSC_FC_SCRATCH_WORDS
    else:
        depthwise = spec["op"] == "DEPTHWISE_CONV_2D"
        h, wd, c, kh, kw, oc = (spec[k] for k in ("in_h", "in_w", "in_c", "k_h", "k_w", "out_c"))
        st, dil, (lo, hi) = spec.get("stride", 1), spec.get("dil", 1), spec.get("act", (-128, 127))
        oh, ow = -(-h // st), -(-wd // st)  # SAME padding (ComputePaddingWithOffset)
        pads = [max((o - 1) * st + (k - 1) * dil + 1 - n, 0) // 2 for o, k, n in ((oh, kh, h), (ow, kw, wd))]
        f = np.array([h, wd, c, oh, ow, oc, kh, kw, st, st, dil, dil, *pads,
                      int(rng.integers(-128, 128)), int(rng.integers(-128, 128)), lo, hi, depthwise], np.int32)
        w, x, n_out = i8(1, kh, kw, oc) if depthwise else i8(oc, kh, kw, c), i8(h, wd, c), oh * ow * oc
        n_bias = channels = oc
        macs = oh * ow * kh * kw * oc * (1 if depthwise else c)
        K = kh * kw * c
        fn, words = "edgeosc_bench_conv", wide_words(K) + 2 * oc + K  # EDGEOSC_CONV_SCRATCH_WORDS
        if depthwise:
            words = depthwise_scratch_words(oh, ow)
    mult, shift = zip(*(R.quantize_multiplier(float(s)) for s in rng.uniform(2e-4, 4e-3, channels)))
    bufs = dict(f=f, w=w, bias=rng.integers(-5000, 5000, n_bias).astype(np.int32), mult=np.array(mult, np.int32),
                shift=np.array(shift, np.int32), x=x, out=np.zeros(n_out, np.int8), scratch=np.zeros(words, np.int32))
    dsp = None if spec.get("runtime_requant") else dsp_requant(mult, shift)
    if dsp is not None:  # as generated firmware has them (spec "runtime_requant": prepared on each call instead)
        bufs["dsp"] = dsp
    packs = spec["op"] != "DEPTHWISE_CONV_2D" and w.shape[0] > 1  # as code generation packs them
    if spec["op"] == "DEPTHWISE_CONV_2D":
        geo = dict(zip(("in_h", "in_w", "in_c", "out_h", "out_w", "out_c", "k_h", "k_w", "stride_h", "stride_w",
                        "dil_h", "dil_w", "pad_top", "pad_left"), (int(v) for v in f[:14])))
        packs = depthwise3x3_packs(geo, c, oc, lo, hi, dsp, w, bufs["bias"], int(f[14]))
        if packs:
            bufs["packed"] = pack_depthwise3x3(w, bufs["bias"], int(f[14]))
    elif packs:
        zp_in = int(f[3] if fn == "edgeosc_bench_fc" else f[14])
        one_row = n_out == channels if fn == "edgeosc_bench_conv" else spec["rows"] == 1  # unpacked (edgeosc_ops.h)
        bufs["packed"] = pack_weights(w.reshape(w.shape[0], -1), bufs["bias"], zp_in, w16=one_row)
    return fn, ["f", "w", "bias", "mult", "shift", "x", "out", "scratch", "dsp" if dsp is not None else 0,
                "packed" if packs else 0], bufs, macs


def kernel_cycles(core: str = "cortex-m4", shapes: Sequence[dict] | None = None, work_dir: str | Path | None = None,
                  seed: int = 0, flags: Sequence[str] = CFLAGS) -> list[dict]:
    """Cycles of each builtin kernel alone, on its fast path (EDGEOSC_DSP on cores with the DSP extension) and on
    the portable reference path (-DEDGEOSC_PORTABLE), both emulated on `core` with the same random int8 data.

    One row per kernel (default_kernel_shapes() unless given): op, name, shape, macs, cycles and cycles_per_mac
    (the fast path), reference_cycles and reference_cycles_per_mac (None for ADD / SUB and L2_NORMALIZATION, which
    have no MACs), cycles_per_output, speedup. The fast path's output must equal the reference path's, bit for bit, or
    RuntimeError is raised. `flags`: the fast build's (e.g. -DEDGEOSC_NO_ASM for its loops in C).
    """
    work = Path(work_dir) if work_dir else cache_dir()
    sources = [*KERNEL_SOURCES, HARNESS / "kernel_driver.c"]
    fast = build(sources, core, work, flags=flags)
    portable = build(sources, core, work / "portable", flags=(*CFLAGS, "-DEDGEOSC_PORTABLE"))
    rng = np.random.default_rng(seed)
    rows = []
    for spec in shapes or default_kernel_shapes():
        fn, args, bufs, macs = _kernel_case(spec, rng)
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


# ---- always-on: one frame per hop against the window recomputed --------------------------------------------

STREAM_KINDS = ("oscillator", "softmax")


def random_firmware(cfg, n_frames: int, out_dir: str | Path, window: int = 0) -> tuple[Path, str]:
    """An untrained, calibrated int8 network of ModelConfig cfg (any kind, DS-CNN included) as generated C firmware
    (folder, name): over n_frames frames, or with window > 0 the streaming variant's stream_int8.tflite
    (export/tflite/stream.py: one frame a run, its state in the arena). What the estimates count depends on the
    shapes; the values only move a few data-dependent branches (the linear core's, requantization's), so random
    weights price a model as a trained one does."""
    import torch

    from ..config import QuantConfig
    from ..export.c import generate
    from ..export.tflite import firmware_int8
    from ..models.kws import build_model
    from ..quant import calibrate, quantize_model
    cfg = dataclasses.replace(cfg, dropout=0.0, window=window, **({} if window else dict(n_frames=n_frames)))
    torch.manual_seed(0)
    qat = quantize_model(build_model(cfg).eval(), QuantConfig())
    frames = 2 * window if window else n_frames  # a stream's calibration: a window's keys and as many to follow
    calibrate(qat, [(torch.randn(8 if window else 16, frames, cfg.n_coeffs), None)], 1)
    kind = cfg.attention.replace("-", "_")
    out, name = Path(out_dir), f"{kind}_stream_w{window}" if window else f"{kind}_t{n_frames}"
    out.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        (out / f"{name}.tflite").write_bytes(firmware_int8(qat.eval())[1])
    generate(out / f"{name}.tflite", out / name, name=name, features=None)
    return out / name, name


def stream_hop(fw: str | Path, name: str, window: int, core: str = "cortex-m4", work_dir: str | Path | None = None,
               hops: int = 4) -> dict:
    """Cycles of one hop of a stream firmware (random_firmware with a window) once its window is full, an ESTIMATE by
    emulation: streams of window + 1 and window + 1 + hops frames, the difference over the extra hops, each
    stream's last logits checked against the host build's. {"cycles", "attention_cycles", "calls" (the attention
    cores' calls a hop), "stack_bytes" (the stream's deepest stack, measured)}."""
    fw, work = Path(fw), Path(work_dir) if work_dir else cache_dir()
    n_in, n_out = _io_bytes(fw, name)
    frames = np.random.default_rng(1).integers(-128, 128, (window + 1 + hops, n_in)).astype(np.int8)
    want = host_logits(fw, name, frames, work)
    elf, run_fn, runs = model_elf(fw, name, core, work), f"{name}_run", []
    for n in (window + 1, window + 1 + hops):
        run = C.emulate(elf, STREAM_ENTRY, ["frames", n, "output"], {"frames": frames, "output": np.zeros(n_out, np.int8)},
                        core=core, scopes=(run_fn, *ATTENTION))
        if run.return_value != n_out or not np.array_equal(run.outputs["output"], want[n - 1]):
            raise RuntimeError(f"{name} on {core}: a stream's logits differ from the host build's")
        att = [f for f in ATTENTION if run.scope_calls.get(f)]
        runs.append((C.cycles(run.scoped[run_fn], core), sum(C.cycles(run.scoped[f], core) for f in att),
                     sum(run.scope_calls[f] for f in att), run.stack_bytes))
    (c1, a1, n1, s1), (c2, a2, n2, s2) = runs
    return dict(cycles=(c2 - c1) / hops, attention_cycles=(a2 - a1) / hops, calls=(n2 - n1) // hops,
                stack_bytes=max(s1, s2))


def stream_cycles(core: str = "cortex-m4", windows: Sequence[int] = (49, 98, 196), hop_ms: float = 20.0,
                  work_dir: str | Path | None = None, model=None) -> list[dict]:
    """Always-on cost ESTIMATES, per (kind, window W), of the oscillator network `model` (a ModelConfig with the linear
    core; default the pipeline's) and the softmax baseline of its size, on `core` (cycles.CORES) and its first
    device in DEVICES.

    per_hop_cycles: one new frame through the streaming network's own firmware (stream_int8.tflite -> C, its state
    in the arena; stream_hop), once the window is full: the oscillator's linear core adds the new key, subtracts the
    expired one and queries its sums (O(1) whatever W); softmax's query reads its W cached keys (O(W)); both pool
    the last W frames' outputs by a running sum (O(1), the same for both). per_hop_attention_cycles: the attention
    cores' share.
    recompute_cycles: the whole-clip network over W frames, which a non-streaming spotter runs on every hop. Each
    row also has their ratio, latency_ms and energy_uj per hop, and energy per second of audio (uj_per_s) at one
    hop per hop_ms, for both. Emulated logits are checked against the host build.
    """
    from ..config import ModelConfig
    model = model or ModelConfig()
    if model.attention != "oscillator" or model.form != "linear":
        raise ValueError("stream_cycles prices the linear oscillator core (model.form 'linear') against softmax")
    configs = {"oscillator": model, "softmax": dataclasses.replace(
        model, attention="softmax", d_osc=8, positive="relu2", key_gate=False, form="direct")}
    dev_key, dev = next((k, d) for k, d in D.DEVICES.items() if d.core == core)
    hops = 1000.0 / hop_ms
    work = Path(work_dir) if work_dir else cache_dir()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in STREAM_KINDS:
            for W in windows:
                hop = stream_hop(*random_firmware(configs[kind], W, tmp, window=W), W, core, work)
                fw, name = random_firmware(configs[kind], W, tmp)
                x = np.random.default_rng(1).integers(-128, 128, _io_bytes(fw, name)[0]).astype(np.int8)
                recompute = estimate_model(fw, name, x, (core,), work)["targets"][core]["model"]["cycles"]
                per_hop = hop["cycles"]
                rows.append(dict(
                    kind=kind, window=W, core=core, device=dev_key, blocks=hop["calls"], per_hop_cycles=per_hop,
                    per_hop_attention_cycles=hop["attention_cycles"], recompute_cycles=recompute,
                    recompute_ratio=recompute / per_hop,
                    per_hop_latency_ms=D.latency_ms(per_hop, dev), recompute_latency_ms=D.latency_ms(recompute, dev),
                    per_hop_energy_uj=D.energy_uj(per_hop, dev), recompute_energy_uj=D.energy_uj(recompute, dev),
                    stream_uj_per_s=hops * D.energy_uj(per_hop, dev),
                    recompute_uj_per_s=hops * D.energy_uj(recompute, dev),
                    recompute_keeps_up=D.latency_ms(recompute, dev) <= hop_ms))
    return rows
