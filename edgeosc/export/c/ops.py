"""Lowers an int8 .tflite graph to calls of the firmware_models kernels, with TFLite Micro's parameters.

Every multiplier is computed from the float32 scales exactly as the TFLite Micro kernel's Prepare does
(read from tensorflow/tflite-micro: add/sub/mul/fully_connected/conv common.cc, kernel_util.cc):
  CONV_2D, per-channel FULLY_CONNECTED  s_in * s_w[c] / s_out in double (PopulateConvolutionQuantizationParams)
  per-tensor FULLY_CONNECTED, BATCH_MATMUL  float32(s_in * s_w) / s_out (GetQuantizedConvolutionMultipler)
  MUL  s_a * s_b / s_out in double;  ADD / SUB  each input over 2 max(s_a, s_b), left shift 20
  SOFTMAX  PreprocessSoftmaxScaling (integer.reference.softmax_params); L2_NORMALIZATION, GATHER: none.
Patterns become one call: CAST + ADD 128 + GATHER is a table lookup; TRANSPOSE + FULLY_CONNECTED with one
weight value is a sum pool over time; with fuse=True the oscillator core (qk .. out) and the softmax core
(qk, SOFTMAX, out) become edgeosc_oscillator_core_int8 (edgeosc_oscillator_gated_core_int8 with the key
gate) / edgeosc_softmax_core_int8, which work one query row at a time (scratch of T + 2 d_osc or T bytes
instead of [H, T, T] tensors) with the same integers.
EdgeOscAttention with option form "linear" becomes edgeosc_linear_core_int8 (docs/maths.md#integer-linear-core),
its int32 state in the arena's scratch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ...integer import linear as L, reference as R
from ...integer import schema as S
from ...runtime.custom_op import OP_NAME
from ...runtime.tflite_file import NP_OF, OP_NAMES, schema

ACT_RANGES = {schema.ActivationFunctionType.NONE: (None, None), schema.ActivationFunctionType.RELU: (0.0, None),
              schema.ActivationFunctionType.RELU6: (0.0, 6.0), schema.ActivationFunctionType.RELU_N1_TO_1: (-1.0, 1.0)}
CUSTOM_OSC = OP_NAME  # lowered to the fused oscillator core


class UnsupportedGraph(ValueError):
    """The graph holds an op (or an op configuration) the firmware kernels do not implement."""


@dataclass
class Tensor:
    index: int
    name: str
    shape: tuple
    dtype: np.dtype
    scale: np.ndarray  # float32, one per channel or one
    zp: np.ndarray
    data: np.ndarray | None  # constant tensors

    @property
    def s(self) -> float:
        return float(self.scale[0])

    @property
    def z(self) -> int:
        return int(self.zp[0])

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


@dataclass
class Op:
    index: int
    kind: str
    inputs: list
    outputs: list
    options: object = None
    custom: bytes = b""


@dataclass
class Graph:
    tensors: list
    ops: list
    inputs: list
    outputs: list
    states: list = field(default_factory=list)  # (input, output) pairs a streaming model carries between runs

    def consumers(self, t: int) -> list:
        return [op for op in self.ops if t in op.inputs]

    def sole_consumer(self, t: int, kind: str | None = None) -> Op | None:
        """The one op reading t (of the given kind), if t is no graph output; else None."""
        users = self.consumers(t)
        if t in self.outputs or len(users) != 1 or (kind and users[0].kind != kind):
            return None
        return users[0]


def read_graph(data: bytes) -> Graph:
    """The first subgraph of a .tflite flatbuffer, with constant data as numpy arrays."""
    m = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    sg = m.subgraphs[0]
    tensors = []
    for i, t in enumerate(sg.tensors):
        q, dtype = t.quantization, np.dtype(NP_OF[t.type])
        scale = np.asarray(q.scale if q is not None and q.scale is not None else [0.0], np.float32)
        zp = np.asarray(q.zeroPoint if q is not None and q.zeroPoint is not None else [0], np.int64)
        buf = m.buffers[t.buffer].data
        shape = tuple(int(d) for d in (t.shape if t.shape is not None else ()))
        const = None if buf is None else np.frombuffer(bytes(buf), dtype).reshape(shape)
        tensors.append(Tensor(i, t.name.decode(), shape, dtype, scale, zp, const))
    ops = []
    for i, op in enumerate(sg.operators):
        oc = m.operatorCodes[op.opcodeIndex]
        kind = OP_NAMES[max(oc.builtinCode, oc.deprecatedBuiltinCode)]
        if kind == "CUSTOM":
            kind = oc.customCode.decode()
        custom = bytes(op.customOptions) if op.customOptions is not None else b""
        ops.append(Op(i, kind, [int(x) for x in op.inputs], [int(x) for x in op.outputs], op.builtinOptions, custom))
    return with_states(Graph(tensors, ops, [int(x) for x in sg.inputs], [int(x) for x in sg.outputs]))


def with_states(g: Graph) -> Graph:
    """A stream export's state (inputs "state:<name>", outputs "state_next:<name>", export/tflite/stream.py) set
    apart from its inputs and outputs: the firmware keeps each pair in one arena buffer between runs."""
    from ...runtime import STATE_IN, STATE_OUT
    ins = {g.tensors[t].name[len(STATE_IN):]: t for t in g.inputs if g.tensors[t].name.startswith(STATE_IN)}
    outs = {g.tensors[t].name[len(STATE_OUT):]: t for t in g.outputs if g.tensors[t].name.startswith(STATE_OUT)}
    if set(ins) != set(outs):
        raise UnsupportedGraph(f"state inputs {sorted(ins)} and outputs {sorted(outs)} do not pair up")
    for n in ins:
        a, b = g.tensors[ins[n]], g.tensors[outs[n]]
        if (a.shape, a.dtype, a.s, a.z) != (b.shape, b.dtype, b.s, b.z):
            raise UnsupportedGraph(f"state {n}: input {a.shape} {a.dtype} and output {b.shape} {b.dtype} differ")
    g.states = [(ins[n], outs[n]) for n in ins]
    g.inputs = [t for t in g.inputs if t not in ins.values()]
    g.outputs = [t for t in g.outputs if t not in outs.values()]
    return g


# ---- what the emitter consumes ------------------------------------------------------------------------

@dataclass
class Array:
    """A constant array in flash (multipliers, shifts, exp tables); its C name is made from name."""
    values: np.ndarray
    name: str


@dataclass
class Struct:
    """A kernel's parameter struct: emitted static const in the settings header, passed by address; label: its
    name there when it is one of a group's (else the call's)."""
    ctype: str
    fields: dict
    label: str = ""


@dataclass
class Ref:
    """A tensor's data: a constant array, or its place in the arena; offset: bytes into it."""
    tensor: int
    offset: int = 0


@dataclass
class Only:
    """A parameter one kind of build reads: those that read packed weights (packed, EDGEOSC_PACKED: the DSP path)
    or the others; the other kind gets NULL, and an array only it reads is left out of its build."""
    value: Array | Ref | None
    packed: bool


@dataclass
class Slot:
    """A ring's next slot: an int32 in the arena, kept between runs (a streaming model's)."""
    ring: int


@dataclass
class Sums:
    """A summed ring's running sums (Lowering.ring): `count` int32 in the arena, kept between runs, reset to `start`
    (the ring's slots times its zero point: the sum of a ring at its zero point)."""
    ring: int
    count: int
    start: int


@dataclass
class Call:
    """One kernel call fn(args...); args are Struct, Ref, Array, int, "scratch" (bytes) or "scratch32" (int32 words)."""
    fn: str
    args: list
    label: str
    scratch: int = 0
    ops: list = field(default_factory=list)  # the TFLite op indices it replaces


# ---- multipliers and ranges, as TFLite Micro's Prepare computes them ---------------------------------

def rq(real: float) -> dict:
    m, s = R.quantize_multiplier(real)
    return dict(multiplier=m, shift=s)


def product_rq(s_a: float, s_b: float, s_out: float) -> dict:
    """BATCH_MATMUL, per-tensor FULLY_CONNECTED: float32 product over the output scale in double."""
    return rq(R.matmul_multiplier(s_a, s_b, s_out))


def double_rq(s_a: float, s_b: float, s_out: float) -> dict:
    """MUL, CONV_2D and per-channel FULLY_CONNECTED: everything in double."""
    return rq(R.fc_multiplier(s_a, s_b, s_out))


def osc_rqs(scales: dict, ones_scale: float) -> dict:
    """The oscillator core's rq_* fields as TFLite Micro computes them (step 7 a BATCH_MATMUL or a per-tensor
    FULLY_CONNECTED: both float32(s_c * s_ones) / s_sum there; MUL in double)."""
    return {n: dict(multiplier=r.multiplier, shift=r.shift)
            for n, r in R.osc_requants(scales, ones_scale, "batch_matmul", "tflite-micro").items()}


def act_range(out: Tensor, act: int) -> tuple[int, int]:
    """CalculateActivationRangeQuantized: zero point + round(f / scale) (float32, half away), clamped to int8."""
    if act not in ACT_RANGES:
        raise UnsupportedGraph(f"{out.name}: fused activation {act} is not supported")
    lo, hi = ACT_RANGES[act]

    def q(f):
        v = float(np.float32(f) / np.float32(out.s))
        return out.z + int(math.copysign(math.floor(abs(v) + 0.5), v))

    return max(-128, q(lo)) if lo is not None else -128, min(127, q(hi)) if hi is not None else 127


def dsp_requant(multipliers, shifts) -> np.ndarray | None:
    """EdgeoscChannelRequant.dsp: per entry 2 multiplier (as int32) and -shift, what edgeosc_dsp_requant_init
    (edgeosc_simd.h) prepares, or None where some entry is outside its exact range (multiplier < 2^30, or a shift
    outside -23..-1)."""
    m, s = np.asarray(multipliers, np.int64), np.asarray(shifts, np.int64)
    if np.any(m < 1 << 30) or np.any(s > -1) or np.any(s < -23):
        return None
    return np.stack([(2 * m).astype(np.uint32).view(np.int32), (-s).astype(np.int32)], 1).ravel()


def channel_rq(x: Tensor, w: Tensor, out: Tensor, label: str, conv: bool = False) -> Struct:
    """Multipliers of CONV_2D / DEPTHWISE_CONV_2D (always the per-channel formula) / FULLY_CONNECTED (per-tensor:
    float product), and the DSP path's constants where they are exact."""
    reals = [double_rq(x.s, float(s), out.s) for s in w.scale] if conv or len(w.scale) > 1 \
        else [product_rq(x.s, w.s, out.s)]
    mult, shift = (np.array([r[k] for r in reals], np.int32) for k in ("multiplier", "shift"))
    fast = dsp_requant(mult, shift)
    return Struct("EdgeoscChannelRequant", dict(
        multiplier=Array(mult, f"{label}_mult"), shift=Array(shift, f"{label}_shift"), per_channel=int(len(reals) > 1),
        dsp=None if fast is None else Array(fast, f"{label}_dsp")))


def wide_words(depth: int) -> int:
    """EDGEOSC_WIDE_WORDS: four rows of depth values widened, in an even number of groups of four."""
    return 16 * -(-depth // 8)


def depthwise_scratch_words(out_h: int, out_w: int) -> int:
    """EDGEOSC_DEPTHWISE_SCRATCH_WORDS: four channels' planes (256 bytes a column, 63 words to align), records."""
    return 63 + 64 * (out_w + 2) + 4 + 2 * -(-out_h // 2) * out_w


def fast_scratch_words(depth: int, units: int, rq: Struct) -> int:
    """EDGEOSC_FC_SCRATCH_WORDS less the constants' 2 words per channel where code generation wrote them."""
    return wide_words(depth) + (0 if rq.fields["dsp"] is not None else 2 * units)


def pack_weights(w: np.ndarray, bias: np.ndarray | None, zp_in: int, w16: bool = False) -> np.ndarray:
    """The packed weights of EDGEOSC_PACKED builds (edgeosc_ops.h) from int8 weights [units, depth] and their int32
    bias (or None), as bytes: per pair of units (zero-padded) its two biases less zp_in sum_d w[u][d] (int32, little
    endian), then per group of four depth values (an even number of groups, zero-padded) the words A (w[u][d],
    w[u+1][d], w[u][d+2], w[u+1][d+2]) and B (the same at d + 1). w16 (a FULLY_CONNECTED of one row): each word as
    its two SXTB16 halves, (bytes 0, 2) then (bytes 1, 3), int16 pairs."""
    w = np.asarray(w, np.int8)
    units, depth = w.shape
    pairs, groups = -(-units // 2), 2 * -(-depth // 8)
    full = np.zeros((2 * pairs, 4 * groups), np.int8)
    full[:units, :depth] = w
    # [pair, unit of the pair, group, half (d, d+1 | d+2, d+3), parity] -> [pair, group, parity (word), half, unit]
    words = full.reshape(pairs, 2, groups, 2, 2).transpose(0, 2, 4, 3, 1).reshape(pairs, -1)
    folded = np.zeros(2 * pairs, np.int64)
    folded[:units] = (0 if bias is None else np.asarray(bias, np.int64)) - zp_in * w.astype(np.int64).sum(1)
    if np.any(np.abs(folded) >= 1 << 31):
        raise UnsupportedGraph(f"a bias with the input zero point folded in passes int32 ({folded.min()}..{folded.max()})")
    biases = folded.astype("<i4").view(np.int8).reshape(pairs, 8)
    if w16:  # [pair, word, byte] -> [pair, word, half (bytes 0 2 | 1 3), lane] as int16
        b = words.reshape(pairs, -1, 4).astype("<i2")
        words = np.stack([b[..., 0::2], b[..., 1::2]], 2).view(np.int8).reshape(pairs, -1)
    return np.concatenate([biases, words], 1).ravel()


def pack_depthwise3x3(w: np.ndarray, bias: np.ndarray | None, zp_in: int) -> np.ndarray:
    """The packed weights of a 3 x 3 DEPTHWISE_CONV_2D for EDGEOSC_PACKED builds (edgeosc_ops.h), from int8 weights
    [1, 3, 3, C] and int32 bias (or None), as bytes: per channel seven int32 words, the int16 pairs W_kx = (w[0][kx],
    w[1][kx]) for kx = 0, 1, 2, V_kx = (w[1][kx], w[2][kx]), then the bias less zp_in sum w (the planes hold zp_in)."""
    w = np.asarray(w, np.int64).reshape(3, 3, -1)
    pair = lambda lo, hi: (lo & 0xFFFF) | ((hi & 0xFFFF) << 16)  # noqa: E731
    folded = (0 if bias is None else np.asarray(bias, np.int64)) - zp_in * w.sum((0, 1))
    if np.any(np.abs(folded) >= 1 << 31):
        raise UnsupportedGraph(f"a bias with the input zero point folded in passes int32 ({folded.min()}..{folded.max()})")
    words = [pair(w[0, kx], w[1, kx]) for kx in range(3)] + [pair(w[1, kx], w[2, kx]) for kx in range(3)]
    return np.stack(words + [folded & 0xFFFFFFFF], 1).astype("<u4").view(np.int8).ravel()


def depthwise3x3_packs(g: dict, c_in: int, c_out: int, lo: int, hi: int, dsp, w, bias, zp_in: int) -> bool:
    """Whether the DSP build runs a DEPTHWISE_CONV_2D (geometry g) on its 3 x 3 planes (dsp/edgeosc_depthwise_dsp.c):
    stride 1, no dilation, multiplier 1, channels 4k, int8's whole output range, out_h <= 30, padding at most 1 before,
    every channel on the DSP constants (dsp) with a shift right r >= 2 where SMMLAR by 2^(32 - r) + 1 rounds by 2^r
    exactly: r <= 12, or its accumulators (|bias - zp_in sum w| + 128 sum |w|, w [1, 3, 3, C]) below 2^(32 - r)."""
    w, right = np.asarray(w, np.int64).reshape(-1, c_out), np.asarray([0, 0] if dsp is None else dsp)[1::2]
    acc = np.abs((0 if bias is None else np.asarray(bias, np.int64)) - zp_in * w.sum(0)) + 128 * np.abs(w).sum(0)
    return (g["k_h"], g["k_w"], g["stride_h"], g["stride_w"], g["dil_h"], g["dil_w"]) == (3, 3, 1, 1, 1, 1) \
        and c_in == c_out and c_in % 4 == 0 and (lo, hi) == (-128, 127) and g["out_h"] <= 30 and g["pad_top"] <= 1 \
        and g["pad_left"] <= 1 and g["pad_top"] + g["in_h"] <= 2 * -(-g["out_h"] // 2) + 2 and g["pad_left"] + g["in_w"] \
        <= g["out_w"] + 2 and bool(np.all(right >= 2) and np.all((right <= 12) | (acc < 2.0 ** (32 - right))))


def weight_fields(w: Tensor, bias: int | None, zp_in: int, label: str, g_tensors, pack: bool = True,
                  w16: bool = False) -> dict:
    """The weights and bias fields of a FULLY_CONNECTED / CONV_2D / DEPTHWISE_CONV_2D parameter struct, and with pack
    its packed field: the packed form for the DSP path's builds (w16: unpacked, for one row or one output pixel) and
    TFLite's for the others (a single unit keeps TFLite's in both: the DSP path reads it so)."""
    units = w.shape[0]
    plain = dict(weights=Ref(w.index), bias=Ref(bias) if bias is not None else None)
    if not pack:
        return plain
    if units == 1:
        return dict(**plain, packed=None)
    packed = pack_weights(w.data.reshape(units, -1), None if bias is None else g_tensors[bias].data, zp_in, w16)
    return dict(weights=Only(plain["weights"], False), bias=Only(plain["bias"], False),
                packed=Only(Array(packed, f"{label}_packed"), True))


def broadcast(a: tuple, b: tuple, out: tuple) -> dict:
    """EdgeoscBroadcast of two shapes onto out (right-aligned, padded to 4 dims)."""
    if len(out) > 4:
        raise UnsupportedGraph(f"broadcast of rank {len(out)} > 4")

    def strides(shape):
        shape = (1,) * (4 - len(shape)) + tuple(shape)
        dense = np.cumprod((1,) + shape[:0:-1])[::-1]
        return [0 if d == 1 else int(s) for d, s in zip(shape, dense)]

    return dict(dims=[1] * (4 - len(out)) + list(out), stride_a=strides(a), stride_b=strides(b))


def gate_params(g: Tensor, s_pow: float, zp_pow: int, s_gated: float, zp_gated: int) -> tuple[Struct, Tensor]:
    """The key gate's part of a fused oscillator call: EdgeoscGateParams of MUL(pow, g) -> gated, and g."""
    return Struct(S.GATE.struct, S.GATE.ordered(dict(zp_pow=zp_pow, zp_gated=zp_gated,
                                                     rq_gate=double_rq(s_pow, g.s, s_gated)))), g


def same_heads(q: Tensor, k: Tensor, *others: Tensor) -> bool:
    """The fused cores' layout: q and k [.., H, T, d], the others [.., H, T, *] with the same leading dims."""
    return len(q.shape) >= 3 and k.shape == q.shape and all(t.shape[:-1] == q.shape[:-1] for t in others)


# ---- the lowering -------------------------------------------------------------------------------------

class Lowering:
    """Walks the ops in order and turns each (or each recognised pattern) into one Call."""

    def __init__(self, g: Graph, fuse: bool = True):
        self.g, self.fuse = g, fuse
        self.calls: list[Call] = []
        # storage shared: a RESHAPE's output is its input's; a state's next value overwrites it in place
        self.alias: dict[int, int] = {t_out: t_in for t_in, t_out in g.states}
        self.done: set[int] = set()
        self.folded_pad: dict[int, tuple] = {}  # PAD output -> (its input, rows on top, columns on the left)
        self.rings = 0  # shift-register states kept as rings (Slot)
        self.summed: dict[int, Sums] = {}  # a summed ring's reader (its op index) -> the ring's running sums

    def t(self, i: int) -> Tensor:
        return self.g.tensors[i]

    def label(self, op: Op) -> str:
        return self.t(op.outputs[0]).name

    def run(self) -> list[Call]:
        for op in self.g.ops:
            if op.index in self.done:
                continue
            call = ((self.fuse and (self.oscillator_core(op) or self.softmax_core(op))) or self.lut(op)
                    or self.pool(op) or self.ring(op) or self.ring_pool(op) or self.single(op))
            self.calls.extend([] if call is None else call if isinstance(call, list) else [call])
        return self.calls

    def emit(self, fn, args, ops, label, scratch=0) -> Call:
        self.done.update(o.index for o in ops)
        return Call(fn, args, label, scratch, [o.index for o in ops])

    # ---- patterns ---------------------------------------------------------------------------------
    def lut_chain(self, x: int):
        """CAST(x) -> ADD(+128) -> GATHER(table[256]), x read by nothing else: (ops, table, output) or None."""
        cast = self.g.sole_consumer(x, "CAST")
        return None if cast is None else self.lut_from_cast(cast)

    def lut_from_cast(self, cast: Op):
        """The table lookup a CAST int8 -> int32 starts: (ops, table tensor, output) or None."""
        if self.t(cast.inputs[0]).dtype != np.int8:
            return None
        add = self.g.sole_consumer(cast.outputs[0], "ADD")
        if add is None:
            return None
        other = self.t(add.inputs[1] if add.inputs[0] == cast.outputs[0] else add.inputs[0])
        gather = self.g.sole_consumer(add.outputs[0], "GATHER")
        if other.data is None or other.size != 1 or int(other.data.ravel()[0]) != 128 or gather is None:
            return None
        table = self.t(gather.inputs[0])
        if gather.inputs[1] != add.outputs[0] or table.data is None or table.shape != (256,) \
                or table.dtype != np.int8 or getattr(gather.options, "axis", 0) != 0:
            return None
        return [cast, add, gather], table, gather.outputs[0]

    def ring(self, op: Op):
        """A state shifted by a frame, CONCATENATION([state, new], axis) then SLICE(1:) into the next state, read
        only where the order along the axis does not count: kept as a ring instead, the new entry written over the
        oldest (O(entry) a run, not O(state)). Order-free readers: a fused softmax core's keys and values (both
        rings advance together; its integer sums do not depend on the keys' order) and a FULLY_CONNECTED whose
        weights are the same along the axis (the pooling's sum). A ring read by such a FULLY_CONNECTED alone, one
        unit without a bias summing its slots, also keeps each entry's running sum, which the write updates by the
        new value less the one it overwrites: the pooling then costs O(entry) a run too (ring_pool)."""
        if op.kind != "CONCATENATION" or len(op.inputs) != 2 or op.options.fusedActivationFunction:
            return None
        pair = dict(self.g.states)
        s_in, x = (self.t(i) for i in op.inputs)
        sl = self.g.sole_consumer(op.outputs[0], "SLICE")
        if s_in.index not in pair or sl is None or sl.outputs[0] != pair[s_in.index] or \
                [c.index for c in self.g.consumers(s_in.index)] != [op.index]:
            return None
        axis = op.options.axis % len(s_in.shape)
        begin, size = (self.t(i).data for i in sl.inputs[1:])
        if begin is None or size is None or list(begin) != [int(i == axis) for i in range(len(s_in.shape))] or \
                tuple(size) != s_in.shape or x.shape[axis] != 1 or \
                any((t.s, t.z) != (s_in.s, s_in.z) for t in (x, self.t(op.outputs[0]))):
            return None
        if not all(self.order_free(c, sl.outputs[0], axis) for c in self.g.consumers(sl.outputs[0])):
            return None
        rows, n = int(np.prod(s_in.shape[:axis])), int(np.prod(s_in.shape[axis + 1:]))
        self.rings += 1
        args = [rows, s_in.shape[axis], n, Ref(x.index), Ref(s_in.index), Slot(self.rings - 1)]
        readers = self.g.consumers(sl.outputs[0])
        if len(readers) == 1 and readers[0].kind == "FULLY_CONNECTED" and self.t(readers[0].inputs[1]).shape[0] == 1 \
                and not (len(readers[0].inputs) > 2 and readers[0].inputs[2] >= 0):
            sums = self.summed[readers[0].index] = Sums(self.rings - 1, rows * n, s_in.shape[axis] * s_in.z)
            return self.emit("edgeosc_ring_sum_write_int8", [*args, sums], [op, sl], s_in.name)
        return self.emit("edgeosc_ring_write_int8", args, [op, sl], s_in.name)

    def ring_pool(self, op: Op):
        """The FULLY_CONNECTED that sums a summed ring (see ring): the pool from its running sums."""
        sums = self.summed.get(op.index)
        if sums is None:
            return None
        x, w, out = self.t(op.inputs[0]), self.t(op.inputs[1]), self.t(op.outputs[0])
        lo, hi = act_range(out, op.options.fusedActivationFunction)
        p = Struct("EdgeoscPoolParams", dict(rows=w.shape[1], cols=x.size // w.shape[1], zp_in=x.z,
                                             weight=int(w.data.flat[0]), zp_out=out.z, act_min=lo, act_max=hi,
                                             rq=product_rq(x.s, w.s, out.s)))
        return self.emit("edgeosc_sum_pool_sums_int8", [p, sums, Ref(out.index)], [op], out.name)

    def order_free(self, op: Op, t: int, axis: int) -> bool:
        """Whether op's result does not depend on the order of t's entries along axis (see ring)."""
        rank = len(self.t(t).shape)
        if op.kind == "FULLY_CONNECTED" and op.inputs[0] == t and axis == rank - 1:
            w = self.t(op.inputs[1]).data
            return w is not None and bool(np.all(w == w[:, :1]))
        if op.kind == "BATCH_MATMUL" and op.inputs[1] == t and axis == rank - 2:
            producer = {o: p for p in self.g.ops for o in p.outputs}
            if op.options.adjY:  # keys: their scores through SOFTMAX into the values' matmul
                sm = self.g.sole_consumer(op.outputs[0], "SOFTMAX")
                other = sm and self.g.sole_consumer(sm.outputs[0], "BATCH_MATMUL")
            else:  # values: after SOFTMAX of the keys' scores
                sm = producer.get(op.inputs[0])
                other = producer.get(sm.inputs[0]) if sm is not None and sm.kind == "SOFTMAX" else None
            if other is None or other.kind != "BATCH_MATMUL":
                return False
            partner = other.inputs[1]  # the other cache: a state shifted the same way, read by that matmul only,
            shifted = partner in self.alias and producer.get(partner) is not None \
                and producer[partner].kind == "SLICE"  # so the two rings turn together
            return shifted and [c.index for c in self.g.consumers(partner)] == [other.index]
        return False

    def lut(self, op: Op):
        chain = self.lut_from_cast(op) if op.kind == "CAST" else None
        if chain is None:
            return None
        ops, table, out = chain
        return self.emit("edgeosc_lut_int8", [self.t(out).size, Ref(table.index), Ref(op.inputs[0]), Ref(out)],
                         ops, self.t(out).name)

    def pool(self, op: Op):
        """TRANSPOSE [1, T, C] -> [1, C, T], FULLY_CONNECTED with one weight value: a sum over T."""
        if op.kind != "TRANSPOSE" or len(self.t(op.inputs[0]).shape) != 3 or self.t(op.inputs[0]).shape[0] != 1:
            return None
        perm = self.t(op.inputs[1]).data
        fc = self.g.sole_consumer(op.outputs[0], "FULLY_CONNECTED")
        if perm is None or list(perm) != [0, 2, 1] or fc is None or fc.inputs[0] != op.outputs[0]:
            return None
        w = self.t(fc.inputs[1])
        if (len(fc.inputs) > 2 and fc.inputs[2] >= 0) or w.data is None or w.shape[0] != 1 \
                or np.any(w.data != w.data.flat[0]):
            return None
        x, out = self.t(op.inputs[0]), self.t(fc.outputs[0])
        lo, hi = act_range(out, fc.options.fusedActivationFunction)
        p = Struct("EdgeoscPoolParams", dict(rows=x.shape[1], cols=x.shape[2], zp_in=x.z, weight=int(w.data.flat[0]),
                                             zp_out=out.z, act_min=lo, act_max=hi, rq=product_rq(x.s, w.s, out.s)))
        return self.emit("edgeosc_sum_pool_int8", [p, Ref(x.index), Ref(out.index)], [op, fc], out.name)

    def sum_step(self, c: int):
        """Step 7: FULLY_CONNECTED(c, ones [1, T]) or BATCH_MATMUL(c, ones [T, 1]): (op, ones) or None."""
        users = [u for u in self.g.consumers(c) if u.kind in ("FULLY_CONNECTED", "BATCH_MATMUL")]
        if c in self.g.outputs or len(users) != 1 or users[0].inputs[0] != c:
            return None
        op = users[0]
        ones = self.t(op.inputs[1])
        if ones.data is None or np.any(ones.data != ones.data.flat[0]) or (len(op.inputs) > 2 and op.inputs[2] >= 0):
            return None
        if op.kind == "BATCH_MATMUL" and (op.options.adjX or op.options.adjY or ones.shape[-1] != 1):
            return None
        if op.kind == "FULLY_CONNECTED" and (ones.shape[0] != 1 or op.options.fusedActivationFunction):
            return None
        return op, ones

    def gate_step(self, c: int):
        """The key gate after the (1 + zr)^p table c: MUL(c, g [.., 1, T] at (1/128, 0)), then unit rows
        (L2_NORMALIZATION): (mul, l2, g) or None."""
        mul = self.g.sole_consumer(c, "MUL")
        l2 = mul and self.g.sole_consumer(mul.outputs[0], "L2_NORMALIZATION")
        if l2 is None or mul.options.fusedActivationFunction:
            return None
        gate, pw = self.t(mul.inputs[1] if mul.inputs[0] == c else mul.inputs[0]), self.t(c)
        if gate.shape != pw.shape[:-2] + (1, pw.shape[-1]) or (gate.s, gate.z) != (np.float32(R.SCALE_UNIT), 0):
            return None
        return mul, l2, gate

    def oscillator_core(self, op: Op):
        """qk = BMM(q, k^T), w = table, wn = L2, h = BMM(wn, r), z = L2, zr = BMM(z, r^T), c = table,
        [key gate: c = L2(MUL(c, g))], sum = ones, inv = table, a = MUL(c, inv), out = BMM(a, v), or the
        EdgeOscAttention custom op."""
        if op.kind == CUSTOM_OSC:
            return self.custom_core(op)
        g = self.g
        if op.kind != "BATCH_MATMUL" or not op.options.adjY or op.options.adjX:
            return None
        plain = lambda o: o is not None and not o.options.adjX and not o.options.adjY  # noqa: E731
        w_chain = self.lut_chain(op.outputs[0])
        if w_chain is None:
            return None
        wn_op = g.sole_consumer(w_chain[2], "L2_NORMALIZATION")
        h_op = wn_op and g.sole_consumer(wn_op.outputs[0], "BATCH_MATMUL")
        if not plain(h_op) or h_op.inputs[0] != wn_op.outputs[0]:
            return None
        z_op = g.sole_consumer(h_op.outputs[0], "L2_NORMALIZATION")
        zr_op = z_op and g.sole_consumer(z_op.outputs[0], "BATCH_MATMUL")
        r = h_op.inputs[1]
        if zr_op is None or zr_op.inputs != [z_op.outputs[0], r] or not zr_op.options.adjY or zr_op.options.adjX:
            return None
        c_chain = self.lut_chain(zr_op.outputs[0])
        if c_chain is None:
            return None
        gate = self.gate_step(c_chain[2])
        c = gate[1].outputs[0] if gate else c_chain[2]
        mul = next((u for u in g.consumers(c) if u.kind == "MUL"), None)
        summ = self.sum_step(c)
        if mul is None or summ is None or c in g.outputs or len(g.consumers(c)) != 2:
            return None
        inv_chain = self.lut_chain(summ[0].outputs[0])
        if inv_chain is None or sorted(mul.inputs) != sorted([c, inv_chain[2]]):
            return None
        out_op = g.sole_consumer(mul.outputs[0], "BATCH_MATMUL")
        if not plain(out_op) or out_op.inputs[0] != mul.outputs[0] or mul.options.fusedActivationFunction:
            return None
        T = self.t
        q, k, v, rt = T(op.inputs[0]), T(op.inputs[1]), T(out_op.inputs[1]), T(r)
        if not same_heads(q, k, v, rt):
            return None
        pts = {n: T(i) for n, i in dict(qk=op.outputs[0], w=w_chain[2], wn=wn_op.outputs[0], h=h_op.outputs[0],
                                        z=z_op.outputs[0], zr=zr_op.outputs[0], c=c, sum=summ[0].outputs[0],
                                        inv=inv_chain[2], a=mul.outputs[0], out=out_op.outputs[0]).items()}
        ops = [op, *w_chain[0], wn_op, h_op, z_op, zr_op, *c_chain[0], *(gate[:2] if gate else ()), summ[0],
               *inv_chain[0], mul, out_op]
        tables = [w_chain[1].index, c_chain[1].index, inv_chain[1].index]
        for n in ("wn", "z", *(("c",) if gate else ())):
            if (pts[n].s, pts[n].z) != (np.float32(R.SCALE_UNIT), 0):
                raise UnsupportedGraph(f"{pts[n].name}: L2_NORMALIZATION output must be (1/128, 0)")
        s = {**{n: t.s for n, t in pts.items()}, **dict(q=q.s, k=k.s, v=v.s, r=rt.s)}
        rqs = osc_rqs(s, summ[1].s)
        zps = {n: pts[n].z for n in (*S.POINTS, "out")}
        gated = None
        if gate:
            pw, prod = T(c_chain[2]), T(gate[0].outputs[0])
            gated = gate_params(gate[2], pw.s, pw.z, prod.s, prod.z)
        return self.core_call(ops, q, k, v, rt, zps, tables, rqs, int(summ[1].data.flat[0]), pts["out"].name, gated)

    def core_call(self, ops, q, k, v, r, zps, tables, rqs, ones, label, gate=None) -> Call:
        """The fused core's call; gate: (its EdgeoscGateParams, the unit gates' tensor) or None."""
        H, T = int(np.prod(q.shape[:-2])), q.shape[-2]
        dr = r.shape[-1]
        fields = dict(heads=H, tokens=T, d_head=q.shape[-1], d_osc=dr, d_value=v.shape[-1],
                      **dict(zip(S.OSC.role("table"), map(Ref, tables))),
                      zp_q=q.z, zp_k=k.z, zp_v=v.z, zp_r=r.z, **{f"zp_{n}": zps[n] for n in zps}, ones=ones,
                      **rqs, **dict.fromkeys(S.OSC.role("rounding"), 0))  # EDGEOSC_ROUND_AWAY (TFLite Micro)
        out = [o for o in ops if o.kind in ("BATCH_MATMUL", CUSTOM_OSC)][-1].outputs[0]
        params = Struct(S.OSC.struct, S.OSC.ordered(fields))
        if gate:
            args = [params, gate[0], *(Ref(t.index) for t in (q, k, v, r, gate[1])), Ref(out), "scratch"]
            return self.emit("edgeosc_oscillator_gated_core_int8", args, ops, label, scratch=T + 2 * dr)
        args = [params, *(Ref(t.index) for t in (q, k, v, r)), Ref(out), "scratch"]
        return self.emit("edgeosc_oscillator_core_int8", args, ops, label, scratch=T + 2 * dr)

    def custom_core(self, op: Op) -> Call:
        """EdgeOscAttention (export/tflite_op): multipliers from its options' scales as the builtin chain's in
        TFLite Micro (the op's "rounding" option names the TFLite interpreter it mimics; firmware follows TFLM)."""
        from flatbuffers import flexbuffers

        o = flexbuffers.Loads(op.custom)
        q, k, v, r = (self.t(i) for i in op.inputs[:4])
        out = self.t(op.outputs[0])
        if o.get("form") == "linear":
            return self.linear_core(op, o, q, k, v, r, out)
        has_gate = "gated_scale" in o  # the key gate: the unit gates are the last input
        points = S.POINTS + (S.GATE_POINTS if has_gate else ())
        s = {p: float(np.float32(o[f"{p}_scale"])) for p in points}
        zp = {p: int(o.get(f"{p}_zero_point", 0)) for p in points}
        zps = {**{p: zp[p] for p in S.POINTS}, "out": out.z}  # the core's own: EdgeoscOscParams fields
        if len(op.inputs) - has_gate == 7:
            tables = op.inputs[4:7]
        else:  # tables in the options: add them as constant tensors
            tables = []
            for name in S.OSC.role("table"):
                data = np.frombuffer(bytes(o[name]), np.int8)
                tables.append(len(self.g.tensors))
                self.g.tensors.append(Tensor(len(self.g.tensors), f"{out.name}/{name}", (256,), np.dtype(np.int8),
                                             np.ones(1, np.float32), np.zeros(1, np.int64), data))
        ones, ones_scale = int(o.get("ones", 1)), float(np.float32(o.get("ones_scale", 1.0)))
        rqs = osc_rqs({**s, **dict(q=q.s, k=k.s, v=v.s, r=r.s, out=out.s)}, ones_scale)
        gated = gate_params(self.t(op.inputs[-1]), s["pow"], zp["pow"], s["gated"], zp["gated"]) if has_gate else None
        return self.core_call([op], q, k, v, r, zps, tables, rqs, ones, out.name, gated)

    def linear_core(self, op: Op, o: dict, q: Tensor, k: Tensor, v: Tensor, r: Tensor, out: Tensor) -> Call:
        """EdgeOscAttention form "linear": the constants the op's Prepare derives (integer.linear.linear_quant_from_scales)."""
        if not same_heads(q, k, v, r) or r.shape[-1] != 2 or (r.s, r.z) != (np.float32(R.SCALE_UNIT), 0):
            raise UnsupportedGraph(f"{out.name}: the linear core needs r [.., H, T, 2] at (1/128, 0)")
        stream = bool(o.get("stream"))
        n_in = len(op.inputs) - 3 * stream
        g = self.t(op.inputs[4]) if n_in == 5 else None
        H, T, dh, dv = int(np.prod(q.shape[:-2])), q.shape[-2], q.shape[-1], v.shape[-1]
        turn = np.frombuffer(bytes(o["turn"]), "<u2") if "turn" in o else None
        if turn is not None and H % len(turn):
            raise UnsupportedGraph(f"{out.name}: {len(turn)} turn rates for {H} heads")
        pq = L.linear_quant_from_scales(dict(q=q.s, k=k.s, v=v.s, out=out.s), dh, int(o["p"]),
                                        dict(q=q.z, k=k.z, v=v.z, g=0 if g is None else g.z, out=out.z),
                                        bool(o.get("causal", False)), int(o.get("window", 0)),
                                        None if turn is None else np.resize(turn, H))
        fields = pq.fields(H, T, dh, dv)
        fields["turn"] = None if turn is None else Array(np.array(pq.turn, np.int32), f"{out.name}/turn")
        params = Struct(S.LINEAR.struct, dict(fields, rq_out=dict(multiplier=pq.rq_out.multiplier, shift=pq.rq_out.shift)))
        args = [params, *(Ref(t.index) for t in (q, k, v, r)), None if g is None else Ref(g.index), Ref(out.index)]
        if stream:  # the state in place: each output is its input's buffer (a graph state pair)
            state = op.inputs[-3:]
            if [self.alias.get(t) for t in op.outputs[1:]] != state:
                raise UnsupportedGraph(f"{out.name}: a stream step's state outputs must be the graph's state outputs "
                                       "of its state inputs (state:<name> -> state_next:<name>)")
            return self.emit("edgeosc_linear_stream_int8", args + [Ref(t) for t in state], [op], out.name)
        return self.emit("edgeosc_linear_core_int8", args + ["scratch32"], [op], out.name,
                         scratch=4 * L.linear_state_words(dh, dv, pq.p))

    def softmax_core(self, op: Op):
        """qk = BMM(q, k^T), a = SOFTMAX(qk), out = BMM(a, v)."""
        if op.kind != "BATCH_MATMUL" or not op.options.adjY or op.options.adjX:
            return None
        sm = self.g.sole_consumer(op.outputs[0], "SOFTMAX")
        out_op = sm and self.g.sole_consumer(sm.outputs[0], "BATCH_MATMUL")
        if not out_op or out_op.inputs[0] != sm.outputs[0] or out_op.options.adjY or out_op.options.adjX:
            return None
        q, k, qk, a, v, out = (self.t(i) for i in (*op.inputs, op.outputs[0], sm.outputs[0], out_op.inputs[1],
                                                    out_op.outputs[0]))
        if not (same_heads(k, k, v) and len(q.shape) == len(k.shape) and q.shape[:-2] == k.shape[:-2]
                and q.shape[-1] == k.shape[-1]):
            return None
        mult, shift, diff_min = self.softmax_params(qk, a, sm)
        queries = q.shape[-2] if q.shape[-2] != k.shape[-2] else 0  # a stream's query against its cache
        fields = dict(heads=int(np.prod(q.shape[:-2])), tokens=k.shape[-2], d_head=q.shape[-1], d_value=v.shape[-1],
                      queries=queries,
                      zp_q=q.z, zp_k=k.z, zp_v=v.z, zp_qk=qk.z, zp_out=out.z, rq_qk=product_rq(q.s, k.s, qk.s),
                      rq_out=product_rq(a.s, v.s, out.s), beta_multiplier=mult, beta_left_shift=shift,
                      diff_min=diff_min, round_matmul=0,
                      exp_lut=Array(R.softmax_exp_table(mult, shift, diff_min), f"{out.name}_exp"))
        args = [Struct(S.SOFTMAX.struct, S.SOFTMAX.ordered(fields)), Ref(q.index), Ref(k.index), Ref(v.index), Ref(out.index),
                "scratch"]
        return self.emit("edgeosc_softmax_core_int8", args, [op, sm, out_op], out.name, scratch=k.shape[-2])

    def softmax_params(self, x: Tensor, out: Tensor, op: Op):
        if (out.s, out.z) != (np.float32(1 / 256), -128) or x.dtype != np.int8:
            raise UnsupportedGraph(f"{out.name}: int8 SOFTMAX needs output (1/256, -128)")
        return R.softmax_params(x.s, float(np.float32(op.options.beta)))

    # ---- one op, one call ---------------------------------------------------------------------------
    def single(self, op: Op):
        handler = getattr(self, f"op_{op.kind.lower()}", None)
        if handler is None:
            raise UnsupportedGraph(f"op {op.index} {op.kind} ({self.label(op)}) has no firmware kernel")
        for i in op.outputs:
            if self.t(i).dtype != np.int8:
                raise UnsupportedGraph(f"op {op.index} {op.kind}: only int8 outputs are supported, "
                                       f"{self.t(i).name} is {self.t(i).dtype}")
        return handler(op)

    def op_reshape(self, op: Op):
        self.alias[op.outputs[0]] = self.alias.get(op.inputs[0], op.inputs[0])
        self.done.add(op.index)
        return None

    def window(self, op: Op, x: Tensor, out: Tensor, k_h: int, k_w: int, dilation: bool = True) -> dict:
        """Geometry of a windowed op on one NHWC image (CONV_2D, DEPTHWISE_CONV_2D, AVERAGE_POOL_2D): sizes,
        strides, dilations and TFLite's padding (ComputePaddingWithOffset), the output shape checked."""
        o, kind = op.options, op.kind
        if len(x.shape) != 4 or len(out.shape) != 4 or x.shape[0] != 1 or out.shape[0] != 1:
            raise UnsupportedGraph(f"{out.name}: {kind} needs one NHWC image (batch 1), got {x.shape} -> {out.shape}")
        if o.padding not in (schema.Padding.SAME, schema.Padding.VALID):
            raise UnsupportedGraph(f"{out.name}: {kind} padding {o.padding} is neither SAME nor VALID")
        dil = (o.dilationHFactor, o.dilationWFactor) if dilation else (1, 1)
        if min(o.strideH, o.strideW, *dil, k_h, k_w) < 1:
            raise UnsupportedGraph(f"{out.name}: {kind} strides, dilations and kernel sizes must be >= 1")
        pads = []
        for size, k, stride, d, osize in ((x.shape[1], k_h, o.strideH, dil[0], out.shape[1]),
                                          (x.shape[2], k_w, o.strideW, dil[1], out.shape[2])):
            want = -(-size // stride) if o.padding == schema.Padding.SAME else (size - (k - 1) * d - 1) // stride + 1
            if osize != want or want < 1:
                raise UnsupportedGraph(f"{out.name}: {kind} output size {osize} does not follow from input {size}, "
                                       f"kernel {k}, stride {stride}, dilation {d} and its padding (expected {want})")
            total = (osize - 1) * stride + (k - 1) * d + 1 - size
            pads.append(max(total, 0) // 2 if o.padding == schema.Padding.SAME else 0)
        return dict(in_h=x.shape[1], in_w=x.shape[2], out_h=out.shape[1], out_w=out.shape[2], k_h=k_h, k_w=k_w,
                    stride_h=o.strideH, stride_w=o.strideW, pad_top=pads[0], pad_left=pads[1],
                    **(dict(dil_h=dil[0], dil_w=dil[1]) if dilation else {}))

    def conv_params(self, op: Op, k_h: int, k_w: int, pack: bool) -> tuple[Tensor, Tensor, Struct]:
        """EdgeoscConvParams of CONV_2D / DEPTHWISE_CONV_2D (constant symmetric weights); pack: weight_fields'."""
        x, w, out = self.t(op.inputs[0]), self.t(op.inputs[1]), self.t(op.outputs[0])
        bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
        if w.data is None or np.any(w.zp) or len(w.shape) != 4:
            raise UnsupportedGraph(f"{out.name}: {op.kind} needs constant symmetric 4-D weights")
        lo, hi = act_range(out, op.options.fusedActivationFunction)
        geo = self.window(op, x, out, k_h, k_w)
        if x.index in self.folded_pad:  # read the PAD's input, its zero rows as the convolution's padding
            src, top, left = self.folded_pad[x.index]
            x = self.t(src)
            geo.update(in_h=x.shape[1], in_w=x.shape[2], pad_top=top, pad_left=left)
        p = Struct("EdgeoscConvParams", dict(
            **geo, in_c=x.shape[3], out_c=out.shape[3], zp_in=x.z, zp_out=out.z,
            act_min=lo, act_max=hi, **weight_fields(w, bias, x.z, out.name, self.g.tensors, pack=pack,
                                                    w16=out.shape[1] * out.shape[2] == 1),
            rq=channel_rq(x, w, out, out.name, conv=True)))
        return x, out, p

    def op_conv_2d(self, op: Op):
        w = self.t(op.inputs[1])
        x, out, p = self.conv_params(op, *w.shape[1:3], pack=True)
        if w.shape[0] != out.shape[3] or w.shape[3] != x.shape[3]:
            raise UnsupportedGraph(f"{out.name}: CONV_2D weights {w.shape} do not map {x.shape} to {out.shape}")
        K = w.shape[1] * w.shape[2] * w.shape[3]  # EDGEOSC_CONV_SCRATCH_WORDS: the fast paths' scratch
        return self.emit("edgeosc_conv2d_int8", [p, Ref(x.index), Ref(out.index), "scratch32"], [op], out.name,
                         scratch=4 * (fast_scratch_words(K, w.shape[0], p.fields["rq"]) + K))

    def op_depthwise_conv_2d(self, op: Op):
        w, out = self.t(op.inputs[1]), self.t(op.outputs[0])
        if len(w.shape) != 4 or w.shape[0] != 1:
            raise UnsupportedGraph(f"{out.name}: DEPTHWISE_CONV_2D weights must be [1, kh, kw, out_c], got {w.shape}")
        x, out, p = self.conv_params(op, *w.shape[1:3], pack=False)
        c_in, c_out = x.shape[3], out.shape[3]
        if w.shape[3] != c_out or c_out % c_in or op.options.depthMultiplier not in (0, c_out // c_in):
            raise UnsupportedGraph(f"{out.name}: DEPTHWISE_CONV_2D maps {c_in} channels to {c_out} with weights "
                                   f"{w.shape} and depth multiplier {op.options.depthMultiplier}: out_c must be the "
                                   "weights' last dim and a multiple of in_c")
        f = p.fields
        bias = None if f["bias"] is None else self.g.tensors[f["bias"].tensor].data
        dsp = f["rq"].fields["dsp"]
        if depthwise3x3_packs(f, c_in, c_out, f["act_min"], f["act_max"], dsp and dsp.values, w.data, bias, x.z):
            f.update(weights=Only(f["weights"], False), bias=Only(f["bias"], False),
                     packed=Only(Array(pack_depthwise3x3(w.data, bias, x.z), f"{out.name}_packed"), True))
        return self.emit("edgeosc_depthwise_conv_int8", [p, Ref(x.index), Ref(out.index), "scratch32"], [op],
                         out.name, scratch=4 * depthwise_scratch_words(*out.shape[1:3]))

    def op_average_pool_2d(self, op: Op):
        x, out, o = self.t(op.inputs[0]), self.t(op.outputs[0]), op.options
        if (x.s, x.z) != (out.s, out.z) or x.dtype != np.int8:
            raise UnsupportedGraph(f"{out.name}: int8 AVERAGE_POOL_2D needs the input's scale and zero point on its "
                                   "output")
        if x.shape[3] != out.shape[3]:
            raise UnsupportedGraph(f"{out.name}: AVERAGE_POOL_2D changes the channels {x.shape} -> {out.shape}")
        geo = self.window(op, x, out, o.filterHeight, o.filterWidth, dilation=False)
        if o.padding == schema.Padding.SAME and (geo["pad_top"] >= o.filterHeight or geo["pad_left"] >= o.filterWidth):
            raise UnsupportedGraph(f"{out.name}: AVERAGE_POOL_2D has windows wholly in the padding")
        lo, hi = act_range(out, o.fusedActivationFunction)
        p = Struct("EdgeoscAvgPoolParams", dict(**{k: v for k, v in geo.items()}, channels=x.shape[3], act_min=lo,
                                                act_max=hi))
        return self.emit("edgeosc_avg_pool_int8", [p, Ref(x.index), Ref(out.index)], [op], out.name)

    def op_fully_connected(self, op: Op):
        x, w, out = self.t(op.inputs[0]), self.t(op.inputs[1]), self.t(op.outputs[0])
        bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
        if w.data is None or np.any(w.zp) or w.data.ndim != 2:
            raise UnsupportedGraph(f"{out.name}: FULLY_CONNECTED needs constant symmetric 2-D weights")
        lo, hi = act_range(out, op.options.fusedActivationFunction)
        rows = x.size // w.shape[1]
        p = Struct("EdgeoscFcParams", dict(
            rows=rows, depth=w.shape[1], units=w.shape[0], zp_in=x.z, zp_out=out.z, act_min=lo, act_max=hi,
            **weight_fields(w, bias, x.z, out.name, self.g.tensors, w16=rows == 1), rq=channel_rq(x, w, out, out.name)))
        return self.emit("edgeosc_fc_int8", [p, Ref(x.index), Ref(out.index), "scratch32"], [op], out.name,
                         scratch=4 * fast_scratch_words(w.shape[1], w.shape[0], p.fields["rq"]))

    def binary(self, op: Op):
        a, b, out = self.t(op.inputs[0]), self.t(op.inputs[1]), self.t(op.outputs[0])
        if a.dtype != np.int8 or b.dtype != np.int8:
            raise UnsupportedGraph(f"{out.name}: {op.kind} needs int8 inputs")
        lo, hi = act_range(out, op.options.fusedActivationFunction)
        return a, b, out, dict(shape=broadcast(a.shape, b.shape, out.shape), zp_a=a.z, zp_b=b.z, zp_out=out.z,
                               act_min=lo, act_max=hi)

    def op_add(self, op: Op, subtract: int = 0):
        a, b, out, f = self.binary(op)
        left_shift = 20
        real_a, real_b, real_out = R.add_multipliers(a.s, b.s, out.s, left_shift)
        p = Struct("EdgeoscAddParams", dict(
            **f, left_shift=left_shift, subtract=subtract, rq_a=rq(real_a), rq_b=rq(real_b), rq_out=rq(real_out)))
        return self.emit("edgeosc_add_int8", [p, Ref(a.index), Ref(b.index), Ref(out.index)], [op], out.name)

    def op_sub(self, op: Op):
        return self.op_add(op, subtract=1)

    def op_mul(self, op: Op):
        a, b, out, f = self.binary(op)
        p = Struct("EdgeoscMulParams", dict(**f, rq=double_rq(a.s, b.s, out.s)))
        return self.emit("edgeosc_mul_int8", [p, Ref(a.index), Ref(b.index), Ref(out.index)], [op], out.name)

    def op_batch_matmul(self, op: Op):
        a, b, out = self.t(op.inputs[0]), self.t(op.inputs[1]), self.t(op.outputs[0])
        adj_y = int(op.options.adjY)
        if op.options.adjX:
            raise UnsupportedGraph(f"{out.name}: BATCH_MATMUL with adj_x")
        ba, bb = int(np.prod(a.shape[:-2])), int(np.prod(b.shape[:-2]))
        if ba != bb and 1 not in (ba, bb):
            raise UnsupportedGraph(f"{out.name}: BATCH_MATMUL batch shapes {a.shape}, {b.shape}")
        p = Struct("EdgeoscBatchMatmulParams", dict(
            batch=max(ba, bb), batch_a=ba, batch_b=bb, rows=a.shape[-2], depth=a.shape[-1],
            cols=b.shape[-2] if adj_y else b.shape[-1], adj_y=adj_y, zp_a=a.z, zp_b=b.z, zp_out=out.z,
            rq=product_rq(a.s, b.s, out.s)))
        return self.emit("edgeosc_batch_matmul_int8", [p, Ref(a.index), Ref(b.index), Ref(out.index)], [op], out.name)

    def op_l2_normalization(self, op: Op):
        x, out = self.t(op.inputs[0]), self.t(op.outputs[0])
        if (out.s, out.z) != (np.float32(R.SCALE_UNIT), 0):
            raise UnsupportedGraph(f"{out.name}: int8 L2_NORMALIZATION needs output (1/128, 0)")
        d = x.shape[-1]
        return self.emit("edgeosc_l2norm_int8", [x.size // d, d, x.z, Ref(x.index), Ref(out.index)], [op], out.name)

    def op_softmax(self, op: Op):
        x, out = self.t(op.inputs[0]), self.t(op.outputs[0])
        table = Array(R.softmax_exp_table(*self.softmax_params(x, out, op)), f"{out.name}_exp")
        d = x.shape[-1]
        return self.emit("edgeosc_softmax_int8", [x.size // d, d, table, Ref(x.index), Ref(out.index)], [op], out.name)

    def op_concatenation(self, op: Op):
        """A copy of each input into its part of the output (the same quantization throughout)."""
        out, ins = self.t(op.outputs[0]), [self.t(i) for i in op.inputs]
        axis = op.options.axis % len(out.shape)
        if any((x.s, x.z, x.dtype) != (out.s, out.z, out.dtype) for x in ins) or op.options.fusedActivationFunction:
            raise UnsupportedGraph(f"{out.name}: CONCATENATION needs every input quantized as its output, no activation")
        rows, inner = int(np.prod(out.shape[:axis])), int(np.prod(out.shape[axis + 1:]))
        calls, at = [], 0
        for x in ins:
            n = x.shape[axis] * inner
            calls.append(self.emit("edgeosc_copy_rows_int8", [rows, n, n, out.shape[axis] * inner, Ref(x.index),
                                                              Ref(out.index, at)], [op], out.name))
            at += n
        return calls

    def op_gather(self, op: Op):
        """GATHER with constant indices in range (the lookup tables are their own pattern, lut): row copies."""
        x, index, out = self.t(op.inputs[0]), self.t(op.inputs[1]), self.t(op.outputs[0])
        axis = getattr(op.options, "axis", 0) % len(x.shape)
        if index.data is None or (x.s, x.z) != (out.s, out.z) or np.any(index.data < 0) or \
                np.any(index.data >= x.shape[axis]) or getattr(op.options, "batchDims", 0):
            raise UnsupportedGraph(f"{out.name}: GATHER needs constant indices within the axis, no batch dims")
        outer, inner = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis + 1:]))
        return self.emit("edgeosc_gather_int8", [outer, x.shape[axis], inner, index.size,
                                                 Array(index.data.astype(np.int32).ravel(), f"{out.name}_index"),
                                                 Ref(x.index), Ref(out.index)], [op], out.name)

    def op_slice(self, op: Op):
        """x[begin : begin + size] as the TRANSPOSE kernel's strided copy from the box's first element."""
        x, begin, size, out = (self.t(i) for i in (*op.inputs, op.outputs[0]))
        if begin.data is None or size.data is None or len(x.shape) > 4:
            raise UnsupportedGraph(f"{out.name}: SLICE needs a constant begin and size, <= 4 dims")
        if (x.s, x.z) != (out.s, out.z):
            raise UnsupportedGraph(f"{out.name}: SLICE changes the quantization")
        dense = np.cumprod((1,) + x.shape[:0:-1])[::-1]
        pad = 4 - len(x.shape)
        p = Struct("EdgeoscTransposeParams", dict(out_dims=[1] * pad + list(out.shape),
                                                  in_strides=[0] * pad + [int(d) for d in dense]))
        start = int(np.dot(begin.data.astype(np.int64), dense))
        return self.emit("edgeosc_transpose_int8", [p, Ref(x.index, start), Ref(out.index)], [op], out.name)

    def op_pad(self, op: Op):
        """PAD of an NHWC image's height or width with its zero point, read by one VALID CONV_2D: folded into the
        convolution's padding (op_conv_2d); no call of its own."""
        x, pads, out = self.t(op.inputs[0]), self.t(op.inputs[1]), self.t(op.outputs[0])
        conv = self.g.sole_consumer(op.outputs[0], "CONV_2D")
        p = None if pads.data is None else pads.data.reshape(-1, 2)
        if conv is None or conv.inputs[0] != op.outputs[0] or conv.options.padding != schema.Padding.VALID or \
                p is None or len(x.shape) != 4 or p[0].any() or p[3].any() or (x.s, x.z) != (out.s, out.z):
            raise UnsupportedGraph(f"{out.name}: PAD is lowered only into a VALID CONV_2D that alone reads it, on "
                                   "the image's height and width")
        self.folded_pad[op.outputs[0]] = (op.inputs[0], int(p[1][0]), int(p[2][0]))
        self.done.add(op.index)
        return None

    def op_transpose(self, op: Op):
        x, perm, out = self.t(op.inputs[0]), self.t(op.inputs[1]), self.t(op.outputs[0])
        if perm.data is None or len(x.shape) > 4:
            raise UnsupportedGraph(f"{out.name}: TRANSPOSE needs a constant permutation of <= 4 dims")
        moved = [int(d) for d in perm.data if x.shape[int(d)] > 1]
        if moved == sorted(moved) and op.outputs[0] not in self.alias:  # only size-1 dims move: the same bytes
            return self.op_reshape(op)
        pad = 4 - len(x.shape)
        dense = np.cumprod((1,) + x.shape[:0:-1])[::-1]
        p = Struct("EdgeoscTransposeParams", dict(out_dims=[1] * pad + list(out.shape),
                                                  in_strides=[0] * pad + [int(dense[i]) for i in perm.data]))
        return self.emit("edgeosc_transpose_int8", [p, Ref(x.index), Ref(out.index)], [op], out.name)


def group_siblings(g: Graph, calls: list[Call]) -> list[Call]:
    """One-row FULLY_CONNECTED calls with packed weights that read the same input (sibling projections: a
    stream's q, k, v, anchors and gate) as one edgeosc_fc_group_int8 call where the first of them was: the input is
    widened once, and each layer's fixed cost shrinks to its product's. Moving a later sibling up is safe: it reads
    only that input and constants, and nothing between reads its output (every tensor but a state is written once)."""
    states = {t for pair in g.states for t in pair}

    def key(c: Call):
        if c.fn != "edgeosc_fc_int8":
            return None
        p, x = c.args[0], c.args[1]
        if p.fields["rows"] != 1 or p.fields["units"] < 2 or x.tensor in states:
            return None
        return x.tensor, p.fields["depth"]
    keys = [key(c) for c in calls]
    members: dict = {}
    for c, k in zip(calls, keys):
        if k is not None:
            members.setdefault(k, []).append(c)
    out = []
    for c, k in zip(calls, keys):
        group = members.get(k) if k is not None else None
        if not group or len(group) < 2:
            out.append(c)
        elif c is group[0]:
            structs = [replace(m.args[0], label=m.label) for m in group]
            out.append(Call("edgeosc_fc_group_int8", [len(group), structs, c.args[1], [m.args[2] for m in group],
                                                      "scratch32"], "+".join(m.label for m in group),
                            max(m.scratch for m in group), [o for m in group for o in m.ops]))
    return out


def lower(g: Graph, fuse: bool = True) -> tuple[list[Call], dict]:
    """Kernel calls in execution order, and the RESHAPE aliases (tensor -> tensor whose storage it shares)."""
    low = Lowering(g, fuse)
    calls = low.run()
    return (group_siblings(g, calls) if fuse else calls), low.alias
