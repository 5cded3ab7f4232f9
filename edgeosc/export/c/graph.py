"""The .tflite graph as the lowering reads it: tensors (shape, dtype, quantization, constant data), ops and the
streaming model's state pairs, and the error for what the firmware kernels do not implement."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...runtime.custom_op import OP_NAME
from ...runtime.tflite_file import NP_OF, OP_NAMES, schema

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
