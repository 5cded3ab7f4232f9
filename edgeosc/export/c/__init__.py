"""C firmware export: an int8 .tflite (or a QAT model) -> firmware_models/<name>/ (portable C99, no malloc).

generate() writes these files, and firmware.json (source hash, sizes; firmware_models/README.md):
  <name>_model.h     the API: <name>_run(), the EdgeoscModel descriptor (harness/edgeosc_model.h), I/O sizes
  <name>_weights.h   constant tensors the kernels read (int8 weights and tables, int32 biases)
  <name>_settings.h  every multiplier, shift, zero point, shape and exp table, computed here as TFLite
                     Micro's Prepare does (export/c/ops.py): nothing is copied by hand
  <name>_model.c     the static arena and the inference function: one kernel call per op or pattern
  <name>_frontend.c  the log-mel front end's tables (window, twiddles, mel filters) for a FeatureConfig
The arena holds every activation, the input, the output and kernel scratch. Its size comes from a
liveness plan made here: a buffer lives from the call that writes it to the last call that reads it
(graph inputs from the start, outputs to the end), and buffers are placed largest first at the lowest
4-byte aligned offset free of every buffer whose lifetime overlaps (the greedy planner of TFLite Micro).
RESHAPE is free: its output shares its input's buffer. Bit-exact target: TFLite Micro's int8 kernels.
"""
from __future__ import annotations

import hashlib
import re
import tempfile
from pathlib import Path

import numpy as np

from ...checkpoint import Checkpoint
from ...config import NORMALIZE_MODES, ExportConfig, FeatureConfig
from ...frontend import ACTIVE_DB, mfcc_constants, nats
from ...io import write_json
from .calls import Array, Call, Only, Ref, Slot, Struct, Sums
from .graph import Graph, read_graph
from .ops import lower

ALIGN = 4
POINTER_BYTES = 4  # on Cortex-M: every parameter struct field is an int32_t or a pointer
INFO = "firmware.json"  # what generate() wrote: source, sizes, options


def c_name(s: str) -> str:
    """A C identifier from a tensor or model name."""
    s = re.sub(r"\W+", "_", s).strip("_") or "x"
    return f"_{s}" if s[0].isdigit() else s


# ---- arena planning ----------------------------------------------------------------------------------

def plan_arena(g: Graph, calls: list[Call], alias: dict) -> tuple[dict, int]:
    """Arena offsets of every activation tensor and ("scratch", call index), and the arena size.

    The graph inputs form one block (concatenated, in order), and so do the outputs: the harness loads
    the input and reads the output in place.
    """
    root = lambda t: alias.get(t, t)  # noqa: E731
    block: dict = {}  # tensor -> (block key, position)
    for key, ts in (("inputs", g.inputs), ("outputs", g.outputs)):
        pos = 0
        for t in ts:
            if root(t) in block:
                raise ValueError(f"{g.tensors[t].name} is both a graph input and an output (or twice an output)")
            block[root(t)] = (key, pos)
            pos += g.tensors[t].nbytes
    sizes = {"inputs": sum(g.tensors[t].nbytes for t in g.inputs),
             "outputs": sum(g.tensors[t].nbytes for t in g.outputs)}
    live: dict = {}  # buffer key -> (first step, last step)

    def use(key, step: int) -> None:
        key = block[key][0] if key in block else key
        sizes.setdefault(key, g.tensors[key].nbytes if isinstance(key, int) else 0)
        first, last = live.get(key, (step, step))
        live[key] = (min(first, step), max(last, step))

    for t in g.inputs:
        use(root(t), -1)
    for t, _ in g.states:  # kept between runs: live from before the first call to after the last
        use(t, -1), use(t, len(calls))
    for call in calls:
        for a in call.args:
            if isinstance(a, (Slot, Sums)):  # kept between runs
                key = ("ring", a.ring) if isinstance(a, Slot) else ("sums", a.ring)
                sizes[key] = 4 if isinstance(a, Slot) else 4 * a.count
                use(key, -1), use(key, len(calls))
    for i, call in enumerate(calls):
        for a in [x for a in call.args for x in (a if isinstance(a, list) else [a])]:  # a group's lists too
            if isinstance(a, Ref) and g.tensors[root(a.tensor)].data is None:
                use(root(a.tensor), i)
        if call.scratch:
            sizes[("scratch", i)] = call.scratch
            use(("scratch", i), i)
    for t in g.outputs:
        use(root(t), len(calls))
    placed, offsets = [], {}
    for key, (first, last) in sorted(live.items(), key=lambda kv: (-sizes[kv[0]], kv[1][0])):
        size = sizes[key]
        clash = sorted((o, o + s) for f, l, o, s in placed if not (l < first or last < f))
        offset = 0
        for lo, hi in clash:
            if offset + size <= lo:
                break
            offset = max(offset, -(-hi // ALIGN) * ALIGN)
        placed.append((first, last, offset, size))
        offsets[key] = offset
    for t, (key, pos) in block.items():
        offsets[t] = offsets[key] + pos
    arena = max((o + s for _, _, o, s in placed), default=0)
    return offsets, -(-arena // ALIGN) * ALIGN


# ---- C text --------------------------------------------------------------------------------------------

def c_float(v: float) -> str:
    """A float32 literal that parses back to the same float32 (9 significant digits)."""
    s = "%.9g" % float(np.float32(v))
    return s + ("f" if any(c in s for c in ".en") else ".0f")


def c_array(ctype: str, name: str, values, aligned: bool = False) -> str:
    """aligned: on a word boundary (an int8 array read by words)."""
    v = np.asarray(values).ravel()
    per = 20 if ctype == "int8_t" else 6 if ctype == "float" else 8
    fmt = c_float if ctype == "float" else lambda x: str(int(x))
    rows = [", ".join(fmt(x) for x in v[i:i + per]) for i in range(0, len(v), per)]
    attr = " __attribute__((aligned(4)))" if aligned else ""
    return f"static const {ctype} {name}[{len(v)}]{attr} = {{\n  " + ",\n  ".join(rows) + "};\n"


def frontend_source(cfg: FeatureConfig, name: str, head: str) -> str:
    """C tables and the EdgeoscFrontend <name>_frontend of a FeatureConfig (features.mfcc_constants)."""
    c, n = mfcc_constants(cfg), cfg.frame_length
    k = np.arange(n // 2) * 2 * np.pi / n
    arrays = dict(window=("float", c["window"]), cos_table=("float", np.cos(k)), sin_table=("float", np.sin(k)),
                  filter_pos=("uint16_t", c["filter_pos"]), filter_len=("uint16_t", c["filter_lengths"]),
                  filter_coefs=("float", c["filter_coefs"]))
    if cfg.n_mfcc:
        arrays["dct"] = ("float", c["dct"])
    body = "".join(c_array(t, f"{name}_{k}", v) for k, (t, v) in arrays.items())
    fields = dict(frame_length=n, hop_length=cfg.hop_length, n_frames=cfg.n_frames, n_mels=cfg.n_mels,
                  n_mfcc=cfg.n_mfcc, normalize=NORMALIZE_MODES.index(cfg.normalize),
                  floor=c_float(nats(cfg.floor_db)), active=c_float(nats(ACTIVE_DB)), dct="NULL")
    fields.update({k: f"{name}_{k}" for k in arrays})
    return (f"{head}/* Front end tables of {cfg} (edgeosc/features.py). */\n#include <stddef.h>\n\n"
            f"#include \"edgeosc_frontend.h\"\n\n{body}\nconst EdgeoscFrontend {name}_frontend = {{\n  "
            + ",\n  ".join(f".{k} = {v}" for k, v in fields.items()) + "};\n")


def fields(v) -> int:
    """Scalar and pointer fields of a parameter struct."""
    if isinstance(v, Struct):
        v = v.fields
    if isinstance(v, dict):
        v = list(v.values())
    return sum(fields(x) for x in v) if isinstance(v, list) else 1


CTYPES = {np.dtype(np.int8): "int8_t", np.dtype(np.int32): "int32_t", np.dtype(np.int64): "int64_t"}


class Emitter:
    """Names and writes the constants, parameter structs and calls of one model."""

    def __init__(self, name: str, g: Graph, calls: list[Call], alias: dict):
        self.name, self.g, self.calls, self.alias = name, g, calls, alias
        self.offsets, self.arena = plan_arena(g, calls, alias)
        self.weights: dict[int, str] = {}  # const tensor -> symbol
        self.everywhere: set[int] = set()  # const tensors every build reads (the others: ops.Only's)
        self.arrays: list[str] = []  # settings arrays, C text
        self.structs: list[str] = []
        self.symbols: set[str] = set()
        self.const_bytes = 0  # weights and settings arrays
        self.param_fields = 0

    def symbol(self, hint: str) -> str:
        base = c_name(hint)
        s, i = base, 1
        while s in self.symbols:
            s, i = f"{base}_{i}", i + 1
        self.symbols.add(s)
        return s

    def tensor(self, t: int, offset: int = 0, plain_only: bool = False) -> str:
        """Pointer expression of a tensor's data (offset bytes into it: an activation's); plain_only: a constant
        only the builds without packed weights read."""
        tensor = self.g.tensors[self.alias.get(t, t)]
        if tensor.data is None:
            at = f"a + {self.offsets[tensor.index] + offset}"
            return f"({CTYPES[tensor.dtype]} *)(void *)({at})" if tensor.dtype != np.int8 else at
        if not plain_only:
            self.everywhere.add(tensor.index)
        if tensor.index not in self.weights:
            self.weights[tensor.index] = self.symbol(tensor.name)
            self.const_bytes += tensor.data.nbytes
        return self.weights[tensor.index]

    def value(self, v) -> str:
        if v is None:
            return "NULL"
        if isinstance(v, Ref):
            if self.g.tensors[v.tensor].data is None:
                raise ValueError("parameter structs can only point at constant tensors")
            return self.tensor(v.tensor)
        if isinstance(v, Only):  # EDGEOSC_PACKED_OR (edgeosc_ops.h): NULL in the other kind of build
            if v.value is None:
                return "NULL"
            if isinstance(v.value, Ref):
                sym = self.tensor(v.value.tensor, plain_only=not v.packed)
            else:  # an array only the packed builds read, left out of the others
                sym = self.symbol(v.value.name)
                self.const_bytes += np.asarray(v.value.values).nbytes
                self.arrays.append("#if EDGEOSC_PACKED\n" + c_array(CTYPES[np.asarray(v.value.values).dtype], sym,
                                                                    v.value.values, aligned=True) + "#endif\n")
            return f"EDGEOSC_PACKED_OR({sym}, NULL)" if v.packed else f"EDGEOSC_PACKED_OR(NULL, {sym})"
        if isinstance(v, Array):
            sym = self.symbol(v.name)
            self.arrays.append(c_array(CTYPES[np.asarray(v.values).dtype], sym, v.values))
            self.const_bytes += np.asarray(v.values).nbytes
            return sym
        if isinstance(v, Struct):
            return self.value(v.fields)
        if isinstance(v, dict):
            return "{" + ", ".join(f".{k} = {self.value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, (list, tuple)):
            return "{" + ", ".join(self.value(x) for x in v) + "}"
        return str(int(v))

    def call(self, i: int, call: Call) -> str:
        args = []
        for a in call.args:
            if isinstance(a, list) and a and isinstance(a[0], Struct):  # a group's parameters: an array of pointers
                args.append(f"(const {a[0].ctype} *const[]){{{', '.join(self.param_struct(i, s) for s in a)}}}")
            elif isinstance(a, list) and a and isinstance(a[0], Ref):  # a group's outputs (int8, as its layers')
                args.append(f"(int8_t *const[]){{{', '.join(self.tensor(r.tensor, r.offset) for r in a)}}}")
            elif isinstance(a, Struct):
                args.append(self.param_struct(i, a, call.label))
            elif isinstance(a, Ref):
                args.append(self.tensor(a.tensor, a.offset))
            elif a == "scratch":
                args.append(f"a + {self.offsets[('scratch', i)]}")
            elif isinstance(a, Slot):  # a ring's next slot, kept between runs
                args.append(f"(int32_t *)(void *)(a + {self.offsets[('ring', a.ring)]})")
            elif isinstance(a, Sums):  # a summed ring's running sums, kept between runs
                args.append(f"(int32_t *)(void *)(a + {self.offsets[('sums', a.ring)]})")
            elif a == "scratch32":  # int32 scratch (offsets are ALIGN-aligned)
                args.append(f"(int32_t *)(void *)(a + {self.offsets[('scratch', i)]})")
            else:
                args.append(self.value(a))
        kinds = " + ".join(dict.fromkeys(self.g.ops[o].kind for o in call.ops))
        text = f"{call.fn}({', '.join(args)})"
        if call.fn.endswith("_core_int8"):  # the cores validate their parameters
            return f"  if ({text}) return -1; /* {call.label}: {kinds} */\n"
        return f"  {text}; /* {call.label}: {kinds} */\n"

    def param_struct(self, i: int, a: Struct, label: str | None = None) -> str:
        """A call's parameter struct, written once as a static const: its address."""
        sym = self.symbol(f"p{i}_{label or a.label}")
        self.param_fields += fields(a)
        self.structs.append(f"static const {a.ctype} {sym} = {self.value(a)};\n")
        return f"&{sym}"

    def place(self, t: int) -> int:
        """Arena offset of an activation tensor (through RESHAPE aliases)."""
        return self.offsets[self.alias.get(t, t)]

    def files(self, source: str, frontend: bool) -> dict[str, str]:
        n = self.name
        head = f"/* Generated by edgeosc/export/c from {source}; do not edit. */\n"
        body = "".join(self.call(i, c) for i, c in enumerate(self.calls))  # names the constants, so first
        # const_bytes: what a build with packed weights (the Cortex-M DSP path) holds, less TFLite's layout of them
        self.const_bytes -= sum(self.g.tensors[i].data.nbytes for i in self.weights if i not in self.everywhere)
        return {f"{n}_model.h": head + self.model_h(frontend), f"{n}_weights.h": head + self.weights_h(),
                f"{n}_settings.h": head + self.settings_h(), f"{n}_model.c": head + self.model_c(body)}

    def model_h(self, frontend: bool) -> str:
        n, N, g = self.name, self.name.upper(), self.g
        io = "".join(f"/* {kind} {g.tensors[t].name}: {list(g.tensors[t].shape)} at arena + {self.place(t)}, "
                     f"scale {g.tensors[t].s!r}, zero point {g.tensors[t].z} */\n"
                     for kind, ts in (("input", g.inputs), ("output", g.outputs), ("state", [a for a, _ in g.states]))
                     for t in ts)
        size = lambda ts: sum(g.tensors[t].size for t in ts)  # noqa: E731
        front = (f'\n#include "edgeosc_frontend.h"\n\n/* The features this model reads ({n}_frontend.c). */\n'
                 f"extern const EdgeoscFrontend {n}_frontend;\n") if frontend else ""
        return (f'#ifndef {N}_MODEL_H_\n#define {N}_MODEL_H_\n\n#include "edgeosc_model.h"\n\n{io}'
                f"#define {N}_INPUT_BYTES {size(g.inputs)}\n#define {N}_OUTPUT_BYTES {size(g.outputs)}\n"
                f"#define {N}_ARENA_BYTES {self.arena} /* activations, input, output and scratch */\n\n"
                f"/** Runs the model on its input block (in the arena); 0, or -1 if a kernel rejects its "
                f"parameters. */\nint {n}_run(void);\n\n" + (
                    f"/** A new stream: each state buffer at its zero point (th_init calls it). */\n"
                    f"void {n}_reset(void);\n\n" if g.states else "") + f"extern const EdgeoscModel {n}_model;\n{front}"
                f"\n#endif /* {N}_MODEL_H_ */\n")

    def weights_h(self) -> str:
        n, N, t = self.name, self.name.upper(), self.g.tensors
        def array(i, sym):  # a tensor only the builds without packed weights read is left out of the others
            text = c_array(CTYPES[t[i].dtype], sym, t[i].data)
            return f"#if !EDGEOSC_PACKED\n{text}#endif\n" if i not in self.everywhere else text

        arrays = "".join(array(i, sym) for i, sym in self.weights.items())
        return (f"/* Constant tensors of {n} (flash). */\n#ifndef {N}_WEIGHTS_H_\n#define {N}_WEIGHTS_H_\n\n"
                f"#include <stdint.h>\n\n#include \"edgeosc_ops.h\"\n\n{arrays}\n#endif /* {N}_WEIGHTS_H_ */\n")

    def settings_h(self) -> str:
        n, N = self.name, self.name.upper()
        return (f"/* Kernel parameters of {n} as TFLite Micro's Prepare computes them (edgeosc/export/"
                f"export/c/ops.py). */\n#ifndef {N}_SETTINGS_H_\n#define {N}_SETTINGS_H_\n\n"
                + "".join(self.arrays) + "\n" + "".join(self.structs) + f"\n#endif /* {N}_SETTINGS_H_ */\n")

    def model_c(self, body: str) -> str:
        n, N, g = self.name, self.name.upper(), self.g
        x, y = g.tensors[g.inputs[0]], g.tensors[g.outputs[0]]
        return (f'#include "{n}_model.h"\n\n#include <stddef.h>\n\n#include "edgeosc_attention.h"\n'
                f'#include "edgeosc_ops.h"\n#include "{n}_weights.h"\n#include "{n}_settings.h"\n\n'
                f"static union {{\n  int32_t align;\n  int8_t bytes[{N}_ARENA_BYTES];\n}} arena;\n\n"
                f"int {n}_run(void) {{\n  int8_t *const a = arena.bytes;\n{body}  return 0;\n}}\n\n"
                + self.reset_c() +
                f'const EdgeoscModel {n}_model = {{"{n}", arena.bytes + {self.place(x.index)}, {N}_INPUT_BYTES,\n'
                f"  arena.bytes + {self.place(y.index)}, {N}_OUTPUT_BYTES, {N}_ARENA_BYTES, {c_float(x.s)}, {x.z},\n"
                f"  {c_float(y.s)}, {y.z}, {n}_run, {f'{n}_reset' if g.states else 'NULL'}}};\n")

    def reset_c(self) -> str:
        """A streaming model's <name>_reset: every state buffer at its zero point (int32 ones at 0)."""
        if not self.g.states:
            return ""
        lines = [f"  *(int32_t *)(void *)(arena.bytes + {o}) = 0; /* ring {key[1]}'s next slot */\n"
                 for key, o in self.offsets.items() if isinstance(key, tuple) and key[0] == "ring"]
        sums = {a.ring: a for c in self.calls for a in c.args if isinstance(a, Sums)}
        lines += [f"  for (i = 0; i < {a.count}; ++i) ((int32_t *)(void *)(arena.bytes + "
                  f"{self.offsets[('sums', k)]}))[i] = {a.start}; /* ring {k}'s running sums */\n"
                  for k, a in sums.items()]
        for t, _ in self.g.states:
            x = self.g.tensors[t]
            ctype = CTYPES[x.dtype]
            lines.append(f"  for (i = 0; i < {x.size}; ++i) (({ctype} *)(void *)(arena.bytes + {self.place(t)}))[i] = "
                         f"{x.z if x.dtype == np.int8 else 0}; /* {x.name} */\n")
        return f"void {self.name}_reset(void) {{\n  int32_t i;\n{''.join(lines)}}}\n\n"


# ---- entry points -------------------------------------------------------------------------------------

def generate(tflite_path, out_dir, name: str | None = None, fuse: bool = True, *,
             features: FeatureConfig | None) -> dict:
    """Writes firmware_models-style C for an int8 .tflite into out_dir; returns names, files and sizes.

    fuse: run the attention cores as edgeosc_oscillator_core_int8 / edgeosc_softmax_core_int8 (row by
    row, same integers) instead of op by op. features: also write <name>_frontend.c, the front end's
    tables for the FeatureConfig the model was trained with (its input must be [1, frames, coefficients]);
    None: no front end. There is no default: a guessed front end computes other features than the model's.
    """
    path, out_dir = Path(tflite_path), Path(out_dir)
    data = path.read_bytes()
    name = c_name(name or out_dir.name)
    g = read_graph(data)
    for t in [*g.inputs, *g.outputs]:
        if g.tensors[t].dtype != np.int8:
            raise ValueError(f"{path}: graph input/output {g.tensors[t].name} is {g.tensors[t].dtype}, not int8")
    calls, alias = lower(g, fuse)
    em = Emitter(name, g, calls, alias)
    source = f"{path.name} (sha256 {hashlib.sha256(data).hexdigest()[:16]})"
    files = em.files(source, features is not None)
    if features is not None:
        shape = g.tensors[g.inputs[0]].shape
        if tuple(shape) not in ((1, features.n_frames, features.n_coeffs), (1, features.n_coeffs)):
            raise ValueError(f"{path}: input {shape} is neither the features' [1, {features.n_frames}, "
                             f"{features.n_coeffs}] nor one frame's [1, {features.n_coeffs}] (a stream export: "
                             "edgeosc_frontend_frame, less the running mean) (pass features=None for no front end)")
        files[f"{name}_frontend.c"] = frontend_source(features, name, f"/* Generated by edgeosc/export/c "
                                                                     f"for {source}; do not edit. */\n")
    out_dir.mkdir(parents=True, exist_ok=True)
    for fname, text in files.items():
        (out_dir / fname).write_text(text)
    params = em.param_fields * POINTER_BYTES
    info = dict(name=name, source=str(path), sha256=hashlib.sha256(data).hexdigest(), fuse=fuse,
                files=sorted(files), calls=len(calls), ops=len(g.ops), arena_bytes=em.arena,
                const_bytes=em.const_bytes, param_bytes=params, slow_layers=slow_layers(calls))
    write_json(out_dir / INFO, info)
    return dict(info, dir=out_dir)


def slow_layers(calls: list[Call]) -> dict[str, str]:
    """The layers that the trained scales keep off their fast kernels, label -> why: a per-channel requantization
    outside the DSP path's exact range (a channel's shift outside -23..-1 or its multiplier below 2^30:
    multipliers.dsp_requant) requantizes on the portable path; a depthwise layer off its 3 x 3 planes
    (packing.depthwise3x3_packs) takes the tap-by-tap loop. Such a model's estimate is above its kernels' full care."""
    slow = {}
    for c in calls:
        for a in c.args:
            if not isinstance(a, Struct):
                continue
            rq = a.fields.get("rq")
            if isinstance(rq, Struct) and "dsp" in rq.fields and rq.fields["dsp"] is None:
                slow[c.label] = "a channel's requantization outside the DSP path's exact range"
            elif c.fn == "edgeosc_depthwise_conv_int8" and "packed" not in a.fields:
                slow[c.label] = "off the depthwise 3 x 3 planes"
    return slow


def export(ckpt: Checkpoint, cfg: ExportConfig, out_dir: str | Path) -> Path:
    """A QAT checkpoint -> int8.tflite (export/tflite; int8_custom.tflite for a linear-form model) -> C firmware in
    out_dir, with the front end of the checkpoint's own features (<name>_frontend.c); returns out_dir."""
    import torch

    from ..tflite import firmware_int8

    model = ckpt.model
    if not hasattr(model, "quant_cfg"):
        raise ValueError("C firmware export needs a QAT (int8) checkpoint")
    out_dir = Path(out_dir)
    with torch.no_grad(), tempfile.TemporaryDirectory() as tmp:
        model.eval()
        name, data = firmware_int8(model)
        path = Path(tmp) / name
        path.write_bytes(data)
        generate(path, out_dir, features=ckpt.feature_cfg)
        (out_dir / path.name).write_bytes(path.read_bytes())
    return out_dir
