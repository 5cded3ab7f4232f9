"""Op-by-op .tflite writer on the TFLite schema object API, plus a pure-Python structural check."""
from __future__ import annotations

import copy
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
DESCRIPTION = "edgeosc"
QUANTIZED = (np.int8, np.int16, np.uint8)
MAX_TENSOR_BYTES = 1 << 30  # larger tensors mean a corrupt shape on any edge model

_T = schema.TensorType
DTYPES = {np.dtype(np.float32): _T.FLOAT32, np.dtype(np.int8): _T.INT8, np.dtype(np.int16): _T.INT16,
          np.dtype(np.int32): _T.INT32, np.dtype(np.uint8): _T.UINT8, np.dtype(np.int64): _T.INT64,
          np.dtype(np.bool_): _T.BOOL}
NP_OF = {v: k for k, v in DTYPES.items()}
_ACT = {None: 0, "relu": schema.ActivationFunctionType.RELU, "relu6": schema.ActivationFunctionType.RELU6,
        "relu_n1_to_1": schema.ActivationFunctionType.RELU_N1_TO_1}
OP_NAMES = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
TYPE_NAMES = {v: k for k, v in vars(_T).items() if not k.startswith("_")}


class ModelFileError(ValueError):
    """A .tflite file (or byte string) that is not a well-formed model."""


class _AlignedBufferT(schema.BufferT):
    """BufferT whose data vector starts 16-byte aligned, so int32/float data is aligned in place."""

    def Pack(self, builder):
        data = None
        if self.data is not None:
            raw = np.ascontiguousarray(self.data, dtype=np.uint8).tobytes()
            builder.StartVector(1, len(raw), 16)
            builder.head -= len(raw)
            builder.Bytes[builder.head:builder.head + len(raw)] = raw
            data = builder.EndVector()
        schema.BufferStart(builder)
        if data is not None:
            schema.BufferAddData(builder, data)
        return schema.BufferEnd(builder)


def quantize(x, scale, zero_point=0, dtype=np.int8, axis=None) -> np.ndarray:
    """Float -> integer with round-half-to-even and clipping; per-channel along axis when scale is a vector."""
    x = np.asarray(x, np.float64)
    scale, zp = np.asarray(scale, np.float64), np.asarray(zero_point, np.float64)
    if axis is not None and scale.ndim:  # per-channel: broadcast scale (and zero point) along axis
        shape = [-1 if i == axis % x.ndim else 1 for i in range(x.ndim)]
        scale = scale.reshape(shape)
        zp = zp.reshape(shape) if zp.ndim else zp
    info = np.iinfo(dtype)
    return np.clip(np.round(x / scale) + zp, info.min, info.max).astype(dtype)


def _broadcast(*shapes):
    return list(np.broadcast_shapes(*(tuple(s) for s in shapes)))


class TFLiteBuilder:
    """One subgraph: tensors, constant buffers, deduplicated opcodes, operators and graph inputs/outputs."""

    def __init__(self, description: str = DESCRIPTION):
        self.description = description
        self.tensors: list = []
        self.buffers: list = [_AlignedBufferT()]  # buffer 0 is the empty sentinel, as converters write it
        self.opcodes: list = []
        self._opcode_index: dict = {}
        self.operators: list = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.metadata: dict[str, bytes] = {}

    # ---- tensors -------------------------------------------------------------------------------
    def tensor(self, name, shape, dtype=np.float32, data=None, scale=None, zero_point=None,
               quantized_dimension: int = 0) -> int:
        """Add a tensor (constant when data is given); scale/zero_point are scalars or per-channel lists."""
        dtype = np.dtype(dtype)
        shape = [int(d) for d in shape]
        if dtype.type in QUANTIZED and scale is None:
            raise ValueError(f"tensor {name!r}: {dtype} tensors need a quantization scale")
        buf = 0
        if data is not None:
            arr = np.ascontiguousarray(data, dtype=dtype)
            if list(arr.shape) != shape:
                raise ValueError(f"tensor {name!r}: data shape {arr.shape} != {shape}")
            self.buffers.append(_AlignedBufferT(data=np.frombuffer(arr.tobytes(), np.uint8)))
            buf = len(self.buffers) - 1
        t = schema.TensorT()
        t.name, t.shape, t.type, t.buffer = name, shape, DTYPES[dtype], buf
        if scale is not None:
            scales = np.atleast_1d(np.asarray(scale, np.float64)).astype(np.float32).tolist()
            zps = np.atleast_1d(np.asarray(0 if zero_point is None else zero_point, np.int64)).tolist()
            if len(zps) == 1 and len(scales) > 1:
                zps = zps * len(scales)
            q = schema.QuantizationParametersT()
            q.scale, q.zeroPoint, q.quantizedDimension = scales, zps, int(quantized_dimension)
            t.quantization = q
        self.tensors.append(t)
        return len(self.tensors) - 1

    def const(self, name, array, dtype=None, scale=None, zero_point=None, quantized_dimension=0) -> int:
        """Add a constant tensor holding array as-is (already quantized when dtype is integer)."""
        array = np.asarray(array, dtype)
        return self.tensor(name, array.shape, array.dtype, array, scale, zero_point, quantized_dimension)

    def int8_const(self, name, values, scale, zero_point=0, axis=None) -> int:
        """Quantize float values to an int8 constant (per-channel along axis when scale is a vector)."""
        scale = np.asarray(scale, np.float32)  # quantize with the scale as stored (float32)
        q = quantize(values, scale, zero_point, np.int8, axis)
        return self.const(name, q, np.int8, scale, zero_point, axis or 0)

    def int8_weights(self, name, w, axis=0) -> int:
        """Symmetric per-channel int8 weights (zero point 0, scale max|w|/127 per slice along axis)."""
        w = np.asarray(w, np.float64)
        red = tuple(i for i in range(w.ndim) if i != axis)
        scale = np.maximum(np.abs(w).max(axis=red), 1e-12) / 127.0
        return self.int8_const(name, w, scale.astype(np.float32), 0, axis)

    def int32_bias(self, name, bias, input_scale, weight_scale) -> int:
        """Bias quantized to int32 with scale input_scale * weight_scale (per channel), zero point 0."""
        # kernels check bias scale == input scale * weight scale, both as stored (float32)
        scale = (np.float64(np.float32(input_scale)) * np.asarray(weight_scale, np.float32)).astype(np.float32)
        q = quantize(bias, scale, 0, np.int32, 0 if scale.ndim else None)
        return self.const(name, q, np.int32, scale, 0, 0)

    def quant(self, t: int):
        """(scales, zero_points) of tensor t, or None when it has none."""
        q = self.tensors[t].quantization
        return None if q is None or not q.scale else (list(q.scale), list(q.zeroPoint))

    def shape(self, t: int) -> list[int]:
        return list(self.tensors[t].shape)

    def dtype(self, t: int) -> np.dtype:
        return NP_OF[self.tensors[t].type]

    def _out(self, name, shape, dtype, q, like=None) -> int:
        """Output tensor; quantized outputs take q=(scale, zp), else copy like's quantization."""
        dtype = np.dtype(dtype)
        if dtype.type in QUANTIZED and q is None:
            if like is None or self.quant(like) is None:
                raise ValueError(f"{name}: quantized output needs q=(scale, zero_point)")
            s, z = self.quant(like)
            q = (s[0], z[0])
        scale, zp = q if q is not None else (None, None)
        return self.tensor(name, shape, dtype, scale=scale, zero_point=zp)

    # ---- graph ---------------------------------------------------------------------------------
    def input(self, name, shape, dtype=np.float32, scale=None, zero_point=None) -> int:
        t = self.tensor(name, shape, dtype, scale=scale, zero_point=zero_point)
        self.inputs.append(t)
        return t

    def mark_output(self, *ts: int) -> None:
        self.outputs.extend(ts)

    def _opcode(self, code: int, custom: str | None = None, version: int = 1) -> int:
        key = (code, custom, version)
        if key not in self._opcode_index:
            oc = schema.OperatorCodeT()
            # codes above 127 live in builtinCode; deprecatedBuiltinCode then holds the placeholder
            oc.builtinCode, oc.deprecatedBuiltinCode = code, min(code, 127)
            oc.customCode, oc.version = custom, version
            self.opcodes.append(oc)
            self._opcode_index[key] = len(self.opcodes) - 1
        return self._opcode_index[key]

    def op(self, name: str, inputs, outputs, options=None, version: int = 1) -> None:
        """Append a builtin operator by its schema name (e.g. 'FULLY_CONNECTED') with an options object."""
        o = schema.OperatorT()
        o.opcodeIndex = self._opcode(getattr(schema.BuiltinOperator, name), None, version)
        o.inputs, o.outputs = [int(i) for i in inputs], [int(i) for i in outputs]
        if options is not None:
            o.builtinOptionsType = getattr(schema.BuiltinOptions, type(options).__name__[:-1])
            o.builtinOptions = options
        self.operators.append(o)

    def custom(self, name: str, inputs, outputs, custom_options: bytes = b"") -> list[int]:
        """Append a CUSTOM operator (custom_options usually a flexbuffer map); outputs are existing tensors."""
        o = schema.OperatorT()
        o.opcodeIndex = self._opcode(schema.BuiltinOperator.CUSTOM, name)
        o.inputs, o.outputs = list(inputs), list(outputs)
        o.customOptions = list(custom_options)
        o.customOptionsFormat = schema.CustomOptionsFormat.FLEXBUFFERS
        self.operators.append(o)
        return list(outputs)

    def to_model(self):
        """A fresh ModelT (deep copy: editing it leaves the builder untouched)."""
        sg = schema.SubGraphT()
        sg.tensors, sg.inputs, sg.outputs, sg.operators, sg.name = copy.deepcopy(
            (self.tensors, self.inputs, self.outputs, self.operators, "main"))
        m = schema.ModelT()
        m.version, m.operatorCodes, m.subgraphs = 3, copy.deepcopy(self.opcodes), [sg]
        m.description, m.buffers = self.description, copy.deepcopy(self.buffers)
        m.metadata = []
        for key, value in {"edgeosc": self.description.encode(), **self.metadata}.items():
            m.buffers.append(_AlignedBufferT(data=np.frombuffer(bytes(value), np.uint8)))
            md = schema.MetadataT()
            md.name, md.buffer = key, len(m.buffers) - 1
            m.metadata.append(md)
        return m

    def to_bytes(self) -> bytes:
        b = flatbuffers.Builder(1024)
        b.Finish(self.to_model().Pack(b), file_identifier=IDENTIFIER)
        return bytes(b.Output())

    def save(self, path) -> Path:
        path = Path(path)
        path.write_bytes(self.to_bytes())
        return path

    # ---- ops -----------------------------------------------------------------------------------
    def conv_2d(self, x, w, bias=None, stride=1, padding="SAME", dilation=1, act=None, q=None, name="conv"):
        """NHWC input, OHWI weights; SAME/VALID padding."""
        n, h, wd, _ = self.shape(x)
        o, kh, kw, _ = self.shape(w)
        sh, sw = (stride, stride) if isinstance(stride, int) else stride
        dh, dw = (dilation, dilation) if isinstance(dilation, int) else dilation
        if padding == "SAME":
            oh, ow = math.ceil(h / sh), math.ceil(wd / sw)
        else:
            oh, ow = (h - (kh - 1) * dh - 1) // sh + 1, (wd - (kw - 1) * dw - 1) // sw + 1
        out = self._out(name, [n, oh, ow, o], self.dtype(x), q)
        opt = schema.Conv2DOptionsT()
        opt.padding = getattr(schema.Padding, padding)
        opt.strideH, opt.strideW, opt.dilationHFactor, opt.dilationWFactor = sh, sw, dh, dw
        opt.fusedActivationFunction = _ACT[act]
        self.op("CONV_2D", [x, w, -1 if bias is None else bias], [out], opt)
        return out

    def fully_connected(self, x, w, bias=None, keep_num_dims=False, act=None, q=None, name="fc"):
        """y = x @ w.T + bias with w [out, in]; keep_num_dims keeps x's leading dims."""
        xs, (o, k) = self.shape(x), self.shape(w)
        shape = xs[:-1] + [o] if keep_num_dims else [int(np.prod(xs)) // k, o]
        out = self._out(name, shape, self.dtype(x), q)
        opt = schema.FullyConnectedOptionsT()
        opt.fusedActivationFunction, opt.keepNumDims = _ACT[act], bool(keep_num_dims)
        self.op("FULLY_CONNECTED", [x, w, -1 if bias is None else bias], [out], opt)
        return out

    def batch_matmul(self, a, b, adj_x=False, adj_y=False, q=None, name="bmm"):
        """Batched a @ b (optionally transposing the last two dims of either) with broadcast batch dims."""
        sa, sb = self.shape(a), self.shape(b)
        m = sa[-1] if adj_x else sa[-2]
        n = sb[-2] if adj_y else sb[-1]
        out = self._out(name, _broadcast(sa[:-2], sb[:-2]) + [m, n], self.dtype(a), q)
        opt = schema.BatchMatMulOptionsT()
        opt.adjX, opt.adjY = bool(adj_x), bool(adj_y)
        self.op("BATCH_MATMUL", [a, b], [out], opt)
        return out

    def _binary(self, kind, a, b, act, q, name):
        out = self._out(name, _broadcast(self.shape(a), self.shape(b)), self.dtype(a), q)
        opt = getattr(schema, kind.capitalize() + "OptionsT")()
        opt.fusedActivationFunction = _ACT[act]
        self.op(kind.upper(), [a, b], [out], opt)
        return out

    def add(self, a, b, act=None, q=None, name="add"):
        return self._binary("add", a, b, act, q, name)

    def sub(self, a, b, act=None, q=None, name="sub"):
        return self._binary("sub", a, b, act, q, name)

    def mul(self, a, b, act=None, q=None, name="mul"):
        return self._binary("mul", a, b, act, q, name)

    def div(self, a, b, act=None, q=None, name="div"):
        return self._binary("div", a, b, act, q, name)

    def _reduce(self, kind, x, axes, keep_dims, q, name):
        xs = self.shape(x)
        axes = sorted(a % len(xs) for a in np.atleast_1d(axes))
        shape = [1 if i in axes else d for i, d in enumerate(xs)] if keep_dims else \
            [d for i, d in enumerate(xs) if i not in axes]
        ax = self.const(f"{name}/axes", np.array(axes, np.int32))
        out = self._out(name, shape, self.dtype(x), q, like=None)
        opt = schema.ReducerOptionsT()
        opt.keepDims = bool(keep_dims)
        self.op(kind, [x, ax], [out], opt)
        return out

    def mean(self, x, axes, keep_dims=True, q=None, name="mean"):
        return self._reduce("MEAN", x, axes, keep_dims, q, name)

    def sum(self, x, axes, keep_dims=True, q=None, name="sum"):
        return self._reduce("SUM", x, axes, keep_dims, q, name)

    def gather(self, params, indices, axis=0, name="gather"):
        """Output takes params' quantization (gather copies values)."""
        ps, ix = self.shape(params), self.shape(indices)
        axis %= len(ps)
        out = self._out(name, ps[:axis] + ix + ps[axis + 1:], self.dtype(params), None, like=params)
        opt = schema.GatherOptionsT()
        opt.axis = axis
        self.op("GATHER", [params, indices], [out], opt)
        return out

    def cast(self, x, dtype, q=None, name="cast"):
        out = self._out(name, self.shape(x), dtype, q)
        opt = schema.CastOptionsT()
        opt.inDataType, opt.outDataType = self.tensors[x].type, DTYPES[np.dtype(dtype)]
        self.op("CAST", [x], [out], opt)
        return out

    def _unary(self, kind, x, q, name, options=None, like=True):
        out = self._out(name, self.shape(x), self.dtype(x), q, like=x if like else None)
        self.op(kind, [x], [out], options)
        return out

    def l2_normalization(self, x, q=None, name="l2norm"):
        """Normalizes the last axis; int8 output must be scale 1/128, zero point 0."""
        if q is None and self.dtype(x) == np.int8:
            q = (1 / 128, 0)
        return self._unary("L2_NORMALIZATION", x, q, name, schema.L2NormOptionsT(), like=False)

    def softmax(self, x, beta=1.0, q=None, name="softmax"):
        """Softmax over the last axis; int8 output must be scale 1/256, zero point -128."""
        if q is None and self.dtype(x) == np.int8:
            q = (1 / 256, -128)
        opt = schema.SoftmaxOptionsT()
        opt.beta = float(beta)
        return self._unary("SOFTMAX", x, q, name, opt, like=False)

    def relu(self, x, q=None, name="relu"):
        return self._unary("RELU", x, q, name)

    def rsqrt(self, x, q=None, name="rsqrt"):
        return self._unary("RSQRT", x, q, name, like=False)

    def exp(self, x, q=None, name="exp"):
        return self._unary("EXP", x, q, name, like=False)

    def log(self, x, q=None, name="log"):
        return self._unary("LOG", x, q, name, like=False)

    def reshape(self, x, shape, name="reshape"):
        """Shape may hold one -1; the target shape goes in both the shape input and the options."""
        shape = list(np.empty(self.shape(x), np.bool_).reshape(shape).shape)
        s = self.const(f"{name}/shape", np.array(shape, np.int32))
        out = self._out(name, shape, self.dtype(x), None, like=x)
        opt = schema.ReshapeOptionsT()
        opt.newShape = shape
        self.op("RESHAPE", [x, s], [out], opt)
        return out

    def transpose(self, x, perm, name="transpose"):
        xs = self.shape(x)
        p = self.const(f"{name}/perm", np.array(perm, np.int32))
        out = self._out(name, [xs[i] for i in perm], self.dtype(x), None, like=x)
        self.op("TRANSPOSE", [x, p], [out], schema.TransposeOptionsT())
        return out

    def concatenation(self, xs, axis, q=None, name="concat"):
        shapes = [self.shape(t) for t in xs]
        axis %= len(shapes[0])
        shape = list(shapes[0])
        shape[axis] = sum(s[axis] for s in shapes)
        out = self._out(name, shape, self.dtype(xs[0]), q, like=xs[0])
        opt = schema.ConcatenationOptionsT()
        opt.axis = axis
        self.op("CONCATENATION", list(xs), [out], opt)
        return out


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
            want = _broadcast(x, ins[1])
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
            batch = _broadcast(a[:-2], b[:-2])
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
