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

The lowering is this module (Lowering walks the ops, group_siblings merges sibling one-row layers, lower); what it
reads and hands on, and its parts, each a module by what it emits:
  graph.py        the .tflite graph (read_graph), UnsupportedGraph
  calls.py        what the emitter consumes: Call and its arguments (Struct, Ref, Array, Only, Slot, Sums)
  multipliers.py  multipliers, shifts and activation ranges as TFLite Micro's Prepare computes them
  packing.py      the DSP path's packed weights and the fast paths' scratch sizes
  patterns.py     table lookups, sum pools, a stream's rings (Patterns)
  cores.py        the attention cores' fused calls (AttentionCores)
  builtins.py     one builtin op, one call (BuiltinOps)
"""
from __future__ import annotations

from dataclasses import replace

from .builtins import BuiltinOps
from .calls import Call, Sums
from .cores import AttentionCores
from .graph import Graph, Op, Tensor
from .patterns import Patterns


class Lowering(Patterns, AttentionCores, BuiltinOps):
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
