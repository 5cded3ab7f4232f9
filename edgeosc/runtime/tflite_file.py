"""The .tflite file format: its schema, and a pure-Python structural check of a model file (torch-free)."""
from __future__ import annotations

import importlib.util
import math
import threading
from pathlib import Path

import flatbuffers
import numpy as np

try:  # the same generated schema ships in both packages
    from ai_edge_litert import schema_py_generated as schema
except ImportError:  # pragma: no cover - depends on what is installed
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema

IDENTIFIER = b"TFL3"
NPU_FILE = "int8_npu.tflite"  # int8.tflite with its unit vectors as passes an Ethos-U runs (export/tflite)
MAX_TENSOR_BYTES = 1 << 30  # larger tensors mean a corrupt shape on any edge model

_T = schema.TensorType
DTYPES = {np.dtype(np.float32): _T.FLOAT32, np.dtype(np.int8): _T.INT8, np.dtype(np.int16): _T.INT16,
          np.dtype(np.int32): _T.INT32, np.dtype(np.uint8): _T.UINT8, np.dtype(np.int64): _T.INT64,
          np.dtype(np.bool_): _T.BOOL}
NP_OF = {v: k for k, v in DTYPES.items()}
OP_NAMES = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
TYPE_NAMES = {v: k for k, v in vars(_T).items() if not k.startswith("_")}


def broadcast(*shapes) -> list:
    return list(np.broadcast_shapes(*(tuple(s) for s in shapes)))


class ModelFileError(ValueError):
    """A .tflite file (or byte string) that is not a well-formed model."""


# ---- structural check --------------------------------------------------------------------------
class _CheckedTable(flatbuffers.table.Table):
    """flatbuffers Table that bounds-checks every read the way the C++ Verifier does, raising ModelFileError.

    Python's struct reads wrap negative offsets and never check a vtable against its table, so garbage
    that parses here can still crash a native interpreter; these checks close that gap.
    """

    __slots__ = ()

    def _at(self, off: int, n: int) -> int:
        if off < 0 or off + n > len(self.Bytes):
            raise ModelFileError(f"offset {off} (+{n}) outside the {len(self.Bytes)}-byte file")
        return off

    def Get(self, flags, off):
        return super().Get(flags, self._at(off, flags.bytewidth))

    def Offset(self, vtableOffset):
        vt = self._at(self.Pos - self.Get(flatbuffers.number_types.SOffsetTFlags, self._at(self.Pos, 4)), 4)
        vt_size = self.Get(flatbuffers.number_types.VOffsetTFlags, vt)
        table_size = self.Get(flatbuffers.number_types.VOffsetTFlags, vt + 2)
        if vt % 2 or vt_size < 4 or vt_size % 2 or table_size < 4:
            raise ModelFileError(f"table at {self.Pos}: malformed vtable at {vt}")
        self._at(vt, vt_size)
        self._at(self.Pos, table_size)
        off = super().Offset(vtableOffset)
        if off and not 4 <= off < table_size:
            raise ModelFileError(f"table at {self.Pos}: field offset {off} outside its {table_size}-byte table")
        return off

    def Indirect(self, off):
        return self._at(super().Indirect(self._at(off, 4)), 4)

    def String(self, off):
        start = self.Indirect(off)
        n = self.Get(flatbuffers.number_types.UOffsetTFlags, start)
        self._at(start + 4, n + 1)
        if self.Bytes[start + 4 + n] != 0:
            raise ModelFileError(f"string at {start} is not NUL-terminated")
        return super().String(off)

    def VectorLen(self, off):
        start = self.Vector(off)
        n = self.Get(flatbuffers.number_types.UOffsetTFlags, start - 4)
        self._at(start, n)  # every element takes at least one byte
        return n

    def Vector(self, off):
        start = self.Indirect(self._at(self.Pos + off, 4))
        if start % 4:
            raise ModelFileError(f"vector at {start} is misaligned")
        return start + 4

    def Union(self, t2, off):
        t2.Pos, t2.Bytes = self.Indirect(self._at(self.Pos + off, 4)), self.Bytes


class _CheckedFlatbuffers:
    """Stands in for the flatbuffers package inside a private copy of the schema module."""

    table = type("table", (), {"Table": _CheckedTable})

    def __getattr__(self, name):
        return getattr(flatbuffers, name)


_checked_schema, _lock = None, threading.Lock()


def _checking_schema():
    """A second instance of the generated schema whose tables verify each read (global flatbuffers untouched)."""
    global _checked_schema
    with _lock:
        if _checked_schema is None:
            spec = importlib.util.find_spec(schema.__name__)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            mod.flatbuffers = _CheckedFlatbuffers()
            _checked_schema = mod
    return _checked_schema


_BITS = {"FLOAT32": 32, "FLOAT16": 16, "INT32": 32, "UINT8": 8, "INT64": 64, "BOOL": 8, "INT16": 16,
         "COMPLEX64": 64, "INT8": 8, "FLOAT64": 64, "COMPLEX128": 128, "UINT64": 64, "UINT32": 32, "UINT16": 16,
         "INT4": 4, "BFLOAT16": 16, "INT2": 2, "UINT4": 4, "FLOAT8_E4M3FN": 8, "FLOAT8_E5M2": 8}
_SAME_SHAPE = {"RELU", "RELU6", "RELU_N1_TO_1", "TANH", "LOGISTIC", "RSQRT", "SQRT", "EXP", "LOG", "ABS", "NEG",
               "SOFTMAX", "LOG_SOFTMAX", "L2_NORMALIZATION", "CAST", "QUANTIZE", "DEQUANTIZE", "HARD_SWISH", "ELU",
               "LEAKY_RELU", "GELU", "SQUARE", "SIN", "COS", "FLOOR", "CEIL", "ROUND"}
_BROADCAST = {"ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "POW", "FLOOR_DIV"}
_COMPARE = {"LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL"}
_CONVERT = {"CAST", "QUANTIZE", "DEQUANTIZE", "SOFTMAX", "LOG_SOFTMAX"}  # may change dtype (softmax int8->int16)
_OPTIONS = {"CONV_2D": "Conv2DOptions", "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions", "FULLY_CONNECTED":
            "FullyConnectedOptions", "SOFTMAX": "SoftmaxOptions", "ADD": "AddOptions", "SUB": "SubOptions",
            "MUL": "MulOptions", "DIV": "DivOptions", "MEAN": "ReducerOptions", "SUM": "ReducerOptions",
            "GATHER": "GatherOptions", "CAST": "CastOptions", "L2_NORMALIZATION": "L2NormOptions",
            "RESHAPE": "ReshapeOptions", "TRANSPOSE": "TransposeOptions", "CONCATENATION": "ConcatenationOptions",
            "BATCH_MATMUL": "BatchMatMulOptions"}


def check_tflite(data_or_path, name: str | None = None) -> dict:
    """Parse a .tflite in pure Python and check its structure; raises ModelFileError naming the file (or name)."""
    if isinstance(data_or_path, (bytes, bytearray, memoryview)):
        label, data = name or "<bytes>", bytes(data_or_path)
    else:
        label = name or str(data_or_path)
        try:
            data = Path(data_or_path).read_bytes()
        except OSError as e:
            raise ModelFileError(f"{label}: cannot read: {e}") from None
    try:
        return _check(data)
    except ModelFileError as e:
        raise ModelFileError(f"{label}: {e}") from None
    except Exception as e:  # any other parse failure on garbage bytes (struct.error, UnicodeDecodeError, ...)
        raise ModelFileError(f"{label}: malformed flatbuffer ({type(e).__name__}: {e})") from None


def _text(b) -> str:
    return b.decode() if isinstance(b, bytes) else (b or "")  # strict UTF-8: interpreters decode names too


def _check(data: bytes) -> dict:
    size = len(data)
    if size < 8:
        raise ModelFileError(f"too short ({size} bytes) to be a .tflite")
    if data[4:8] != IDENTIFIER:
        raise ModelFileError(f"file identifier {data[4:8]!r} is not {IDENTIFIER!r}")
    root = int.from_bytes(data[:4], "little")
    if root % 4 or root + 4 > size:
        raise ModelFileError(f"root table offset {root} misaligned or past end of file ({size} bytes)")
    sc = _checking_schema()
    m = sc.ModelT.InitFromObj(sc.Model.GetRootAs(data, 0))  # every read bounds-checked by _CheckedTable
    if m.version != 3:
        raise ModelFileError(f"schema version {m.version} is not 3")
    buffers = []
    for i, b in enumerate(m.buffers or []):
        if b.offset > 1:  # data stored after the flatbuffer
            if b.offset + b.size > size:
                raise ModelFileError(f"buffer {i}: external data [{b.offset}, +{b.size}) past end of file")
            buffers.append(b.size)
        else:
            buffers.append(0 if b.data is None else len(b.data))
    opcodes = []
    for i, oc in enumerate(m.operatorCodes or []):
        code = max(oc.builtinCode, oc.deprecatedBuiltinCode)
        if code not in OP_NAMES:
            raise ModelFileError(f"operator code {i}: unknown builtin code {code}")
        opcodes.append(f"CUSTOM:{_text(oc.customCode) or '?'}" if OP_NAMES[code] == "CUSTOM" else OP_NAMES[code])
    if not m.subgraphs:
        raise ModelFileError("model has no subgraph")
    subgraphs = [_check_subgraph(s, sg, buffers, opcodes) for s, sg in enumerate(m.subgraphs)]
    metadata = []
    for i, md in enumerate(m.metadata or []):
        if not 0 <= md.buffer < len(buffers):
            raise ModelFileError(f"metadata {i}: buffer index {md.buffer} out of range")
        metadata.append(_text(md.name))
    return dict(version=m.version, description=_text(m.description) or None, opcodes=opcodes,
                builtin_ops=sorted({o for o in opcodes if not o.startswith("CUSTOM:")}),
                custom_ops=sorted(o[7:] for o in opcodes if o.startswith("CUSTOM:")),
                subgraphs=subgraphs, buffers=len(buffers),
                quantized_tensors=sum(sg.pop("_quantized") for sg in subgraphs), metadata=sorted(metadata), bytes=size)


def _check_tensor(where: str, t, buffers) -> dict:
    tname = TYPE_NAMES.get(t.type)
    if tname is None:
        raise ModelFileError(f"{where}: unknown tensor type {t.type}")
    shape = [int(d) for d in (t.shape if t.shape is not None else [])]
    if any(d < 0 for d in shape):
        raise ModelFileError(f"{where}: negative dimension in shape {shape}")
    n = int(np.prod(shape, dtype=np.float64))
    bits = _BITS.get(tname)
    if bits and n * bits / 8 > MAX_TENSOR_BYTES:
        raise ModelFileError(f"{where}: implausible size, shape {shape} x {tname}")
    if not 0 <= t.buffer < len(buffers):
        raise ModelFileError(f"{where}: buffer index {t.buffer} out of range ({len(buffers)} buffers)")
    held = buffers[t.buffer]
    if held and bits:
        want = {math.ceil(n * bits / 8), n} if bits < 8 else {n * bits // 8}  # sub-byte: packed or not
        if held not in want:
            raise ModelFileError(f"{where}: constant buffer {t.buffer} holds {held} bytes, "
                                 f"shape {shape} x {tname} needs {min(want)}")
    q = t.quantization
    scale = [float(v) for v in (q.scale if q is not None and q.scale is not None else [])]
    zero = [int(v) for v in (q.zeroPoint if q is not None and q.zeroPoint is not None else [])]
    qdim = q.quantizedDimension if q is not None else 0
    if not all(math.isfinite(v) for v in scale) or any(abs(z) > 2 ** 31 - 1 for z in zero):
        raise ModelFileError(f"{where}: quantization parameters out of range")
    dt = NP_OF.get(t.type)
    if tname in ("INT8", "INT16"):
        if not scale or not zero:
            raise ModelFileError(f"{where}: {tname} tensor without quantization scale/zero point")
        if not all(v > 0 for v in scale):
            raise ModelFileError(f"{where}: non-positive scale")
        if not all(np.iinfo(dt).min <= z <= np.iinfo(dt).max for z in zero):
            raise ModelFileError(f"{where}: zero point outside the {tname} range")
    if len(zero) not in (0, 1, len(scale)):
        raise ModelFileError(f"{where}: {len(scale)} scales but {len(zero)} zero points")
    if len(scale) > 1 and not (0 <= qdim < len(shape) and shape[qdim] == len(scale)):
        raise ModelFileError(f"{where}: {len(scale)} per-channel scales do not match shape {shape} "
                             f"at quantized_dimension {qdim}")
    return dict(name=_text(t.name), shape=shape, type=tname, dtype=dt and dt.name, scale=scale, zero_point=zero,
                quantized_dimension=qdim, constant=bool(held),
                dynamic=(t.shapeSignature is not None and -1 in list(t.shapeSignature)) or (not shape and not t.hasRank))


def _check_subgraph(s: int, sg, buffers, opcodes) -> dict:
    tensors = [_check_tensor(f"subgraph {s} tensor {i} ({_text(t.name)!r})", t, buffers)
               for i, t in enumerate(sg.tensors or [])]
    nt = len(tensors)

    def ids(values, what, optional=False):
        out = [int(i) for i in (values if values is not None else [])]
        bad = [i for i in out if not (-1 if optional else 0) <= i < nt]
        if bad:
            raise ModelFileError(f"subgraph {s} {what}: tensor index {bad[0]} out of range ({nt} tensors)")
        return out

    ins, outs = ids(sg.inputs, "inputs"), ids(sg.outputs, "outputs")
    ops = []
    for k, op in enumerate(sg.operators or []):
        if not 0 <= op.opcodeIndex < len(opcodes):
            raise ModelFileError(f"subgraph {s} operator {k}: opcode index {op.opcodeIndex} out of range")
        o_in = ids(op.inputs, f"operator {k} inputs", optional=True)
        o_out = ids(op.outputs, f"operator {k} outputs")
        if set(o_out) & set(o_in):
            raise ModelFileError(f"subgraph {s} operator {k}: a tensor is both its input and output")
        _check_op(f"subgraph {s} operator {k} ({opcodes[op.opcodeIndex]})", opcodes[op.opcodeIndex],
                      op, [tensors[i] if i >= 0 else None for i in o_in], [tensors[i] for i in o_out])
        ops.append(opcodes[op.opcodeIndex])
    act = sum(math.ceil(int(np.prod(t["shape"], dtype=np.int64)) * _BITS.get(t["type"], 8) / 8)
              for t in tensors if not t["constant"])
    return dict(tensors=nt, activation_bytes=act, inputs=[tensors[i] for i in ins],
                outputs=[tensors[i] for i in outs], operators=ops,
                _quantized=sum(t["type"] in ("INT8", "INT16") for t in tensors))


def _check_op(where: str, kind: str, op, in_t, out_t) -> None:
    """Shapes, types, options and scales of common ops: kernels trust them and can crash or abort otherwise."""
    ins = [t and t["shape"] for t in in_t]
    outs = [t["shape"] for t in out_t]

    def need(cond, what):
        if not cond:
            raise ModelFileError(f"{where}: {what} (inputs {ins}, outputs {outs})")

    if not outs or not ins or ins[0] is None or any(t is not None and t["dynamic"] for t in [*in_t, *out_t]):
        return  # shapes only known at run time
    x, y, opt = ins[0], outs[0], op.builtinOptions
    types = [t and t["type"] for t in in_t]
    if kind in _OPTIONS:  # a kernel reads its options blindly as the type it expects
        need(op.builtinOptionsType in (0, getattr(schema.BuiltinOptions, _OPTIONS[kind])), "wrong options type")
    _check_multipliers(kind, in_t, out_t, need)
    if kind == "SOFTMAX" and opt is not None:
        need(math.isfinite(opt.beta), "beta not finite")
        if in_t[0]["scale"]:  # quantized kernels build a fixed-point multiplier from beta * scale
            need(opt.beta > 0 and opt.beta * in_t[0]["scale"][0] > 2.0 ** -26, "beta * input scale too small")
    if kind in _BROADCAST | _COMPARE:
        need(len(ins) == 2 and None not in types and types[0] == types[1], "operand types differ")
        need(out_t[0]["type"] == ("BOOL" if kind in _COMPARE else types[0]), "output type wrong")
    elif kind in _SAME_SHAPE - _CONVERT:
        need(out_t[0]["type"] == types[0], "output type differs from input type")
    size = lambda sh: int(np.prod(sh, dtype=np.int64))
    if kind in _SAME_SHAPE:
        need(y == x, "output shape differs from input shape")
    elif kind in _BROADCAST | _COMPARE:
        try:
            want = broadcast(x, ins[1])
        except ValueError:
            want = None
        need(y == want, "shapes do not broadcast to the output shape")
    elif kind == "FULLY_CONNECTED" and len(ins) >= 2 and ins[1] is not None and len(ins[1]) == 2:
        o, k = ins[1]
        need(k > 0 and size(x) % k == 0 and y and y[-1] == o and size(y) == size(x) // k * o,
             "output shape does not match input x weights")
    elif kind == "CONV_2D" and len(ins) >= 2 and ins[1] is not None:
        w = ins[1]
        need(len(x) == len(w) == len(y) == 4 and y[0] == x[0] and y[3] == w[0] and w[3] > 0 and x[3] % w[3] == 0,
             "NHWC/OHWI shapes inconsistent")
        if opt is not None:
            for d, stride, dil, k in ((1, opt.strideH, opt.dilationHFactor, w[1]),
                                      (2, opt.strideW, opt.dilationWFactor, w[2])):
                need(stride > 0 and dil > 0, "stride and dilation must be positive")
                same = -(-x[d] // stride)
                valid = (x[d] - (k - 1) * dil - 1) // stride + 1
                need(y[d] == (same if opt.padding == schema.Padding.SAME else valid), "spatial output size wrong")
    elif kind == "BATCH_MATMUL" and len(ins) >= 2 and ins[1] is not None:
        a, b = x, ins[1]
        need(len(a) >= 2 and len(b) >= 2, "operands need rank >= 2")
        ax, ay = (bool(opt.adjX), bool(opt.adjY)) if opt is not None else (False, False)
        (m, ka), (kb, n) = (a[-1:-3:-1] if ax else a[-2:]), (b[-1:-3:-1] if ay else b[-2:])
        try:
            batch = broadcast(a[:-2], b[:-2])
        except ValueError:
            batch = None
        need(ka == kb and batch is not None and y == batch + [m, n], "matmul shapes inconsistent")
    elif kind in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS"):
        need(size(y) == size(x), "element count changes")
    elif kind in ("TRANSPOSE", "CONCATENATION", "MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "GATHER"):
        need(len(y) <= 8, "rank above 8")
        if kind == "TRANSPOSE":
            need(sorted(y) == sorted(x), "transpose changes dimensions")
        elif kind == "CONCATENATION":
            need(size(y) == sum(size(i) for i in ins if i is not None), "element count differs from inputs")
        elif kind == "GATHER" and len(ins) >= 2 and ins[1] is not None and opt is not None and not opt.batchDims:
            ax = opt.axis % len(x) if x else 0
            need(x and size(y) == size(x) // max(x[ax], 1) * size(ins[1]), "output size wrong")
        elif kind != "GATHER":
            need(size(y) <= size(x), "reduction output larger than input")


def _check_multipliers(kind, in_t, out_t, need) -> None:
    """Quantized kernels turn scale ratios into fixed-point multipliers and abort when one is out of range."""
    q_in = [t["scale"] for t in in_t if t is not None and t["scale"] and t["type"] in ("INT8", "INT16")]
    out = out_t[0]
    if not q_in or not out["scale"] or out["type"] not in ("INT8", "INT16"):
        return
    so = out["scale"][0]
    if kind in ("ADD", "SUB"):  # the reference kernels need 2 * max(in) / (2**20 * out) < 1
        need(max(max(sc) for sc in q_in) < so * 2.0 ** 19, "output scale too small for its inputs")
        return
    if kind in ("MUL", "FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D", "BATCH_MATMUL"):
        ws = [t["scale"] for t in in_t[1:2] if t is not None and t["scale"]]
        ratios = [q_in[0][0] * w / so for w in (ws[0] if ws else [1.0])]
    else:
        ratios = [q_in[0][0] / so]
    need(all(2.0 ** -31 < r < 2.0 ** 30 for r in ratios), "scale ratio outside the fixed-point multiplier range")
