"""The EdgeOscAttention TFLite custom op: build, register with tflite-runtime, and write its options.

    from tflite_runtime.interpreter import InterpreterWithCustomOps
    it = InterpreterWithCustomOps(model_path=p, custom_op_registerers=[tflite_op.register])

The kernel (export/tflite_op/edgeosc_tflite_op.c around firmware_models/kernels) is bit-exact with the
builtin decomposition run by the interpreter named in the "rounding" option (default tflite-runtime).
"""
from __future__ import annotations

import ctypes
from functools import lru_cache
from pathlib import Path

import numpy as np

from .ckernels import CORE_SOURCES, ROOT, build_shared

OP_NAME = "EdgeOscAttention"
GLUE = ROOT / "export" / "tflite_op" / "edgeosc_tflite_op.c"
POINTS = ("qk", "w", "h", "zr", "c", "sum", "inv", "a")  # the core's internal quantization points
ADD_CUSTOM = "_ZN6tflite17MutableOpResolver9AddCustomEPKcPK18TfLiteRegistrationi"
_NAME = OP_NAME.encode()  # AddCustom copies it, but keep the bytes alive anyway


def build() -> Path:
    """Path of the op's shared library (compiled on first use, cached by source hash)."""
    return build_shared([*CORE_SOURCES, GLUE], "edgeosc_tflite_op", libs=("-lm",))


@lru_cache(maxsize=None)
def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(build()))
    lib.edgeosc_tflite_registration.restype = ctypes.c_void_p
    return lib


@lru_cache(maxsize=None)
def _add_custom():
    import tflite_runtime.interpreter as tfl

    wrapper = next(Path(tfl.__file__).parent.glob("_pywrap_tensorflow_interpreter_wrapper*.so"))
    f = getattr(ctypes.CDLL(str(wrapper)), ADD_CUSTOM)
    f.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int]
    f.restype = None
    return f


def register(resolver_address: int) -> None:
    """Custom-op registerer for tflite-runtime: adds EdgeOscAttention (version 1) to the op resolver."""
    _add_custom()(ctypes.c_void_p(resolver_address), _NAME, _library().edgeosc_tflite_registration(), 1)


def _flex_value(v):
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(np.float32(v))  # TFLite scales are float32: store exactly that value
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    a = np.asarray(v)
    if a.dtype.kind in "iu" and a.shape == (256,):
        return np.asarray(a, np.int8).tobytes()  # a table: an int8 blob
    raise TypeError(f"unsupported custom option value {v!r}")


def custom_options(**attrs) -> bytes:
    """The op's flexbuffer map of options.

    Required: <point>_scale for qk w h zr c sum inv a ("sum" is the point the model names "csum"; w's
    scale is checked but unused: h reads wn = L2_NORMALIZATION(w) at its fixed 1/128); optional
    <point>_zero_point (default 0; the non-negative points w c sum inv a use -128). Optional: table_w, table_c, table_inv (256 int8 each,
    else the op's inputs 4-6), ones / ones_scale (step 7's int8 ones constant, default 1 / 1.0),
    sum_op ("batch_matmul" or "fully_connected": whose multiplier arithmetic step 7 reproduces),
    rounding (the integer_ref target whose builtin kernels to reproduce: "tflite-runtime" (default),
    "reference", "tflite-micro" or "ai-edge-litert-nodelegate"; the float-requantizing targets are refused),
    and the descriptive p, eps, positive, heads, d_osc (heads and d_osc are checked against the tensors).
    The key gate: gated_scale / gated_zero_point (its MUL's output) and pow_scale / pow_zero_point (table_c's
    output, which the MUL reads); the op then takes the unit gates g [.., H, 1, T] as its last input.
    """
    from flatbuffers import flexbuffers

    missing = [f"{p}_scale" for p in POINTS if f"{p}_scale" not in attrs]
    if missing:
        raise ValueError(f"custom_options needs {missing}")
    return bytes(flexbuffers.Dumps({k: _flex_value(v) for k, v in attrs.items()}))


def options_from_quant(scales: dict, tables=None, zero_points: dict | None = None, **extra) -> bytes:
    """custom_options from the per-point scales/zero points (integer_ref naming) and optional tables."""
    from ..integer_ref import ZP_DEFAULT

    zp = {**ZP_DEFAULT, **(zero_points or {})}
    attrs = {f"{p}_scale": scales[p] for p in POINTS}
    attrs.update({f"{p}_zero_point": zp[p] for p in POINTS})
    if tables is not None:
        attrs.update(dict(zip(("table_w", "table_c", "table_inv"), tables)))
    return custom_options(**attrs, **extra)
