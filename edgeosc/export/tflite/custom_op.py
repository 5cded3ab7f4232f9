"""The EdgeOscAttention TFLite custom op's options: the flexbuffer map the kernel (runtime.custom_op) reads."""
from __future__ import annotations

import numpy as np

from ...integer.reference import ZP_DEFAULT

from ...integer.linear import LINEAR_P
from ...integer.schema import GATE_POINTS, OSC, POINTS  # noqa: F401  (the core's internal quantization points)
from ...runtime.custom_op import OP_NAME  # noqa: F401  (the op's name, with its options)

MODEL_POINTS = {"sum": "csum"}  # option point -> the model's quantization point, where the names differ


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
    rounding (the integer reference target whose builtin kernels to reproduce: "tflite-runtime" (default),
    "reference", "tflite-micro" or "ai-edge-litert-nodelegate"; the float-requantizing targets are refused),
    and the descriptive p, eps, positive, heads, d_osc (heads and d_osc are checked against the tensors).
    The key gate: gated_scale / gated_zero_point (its MUL's output) and pow_scale / pow_zero_point (table_c's
    output, which the MUL reads); the op then takes the unit gates g [.., H, 1, T] as its last input.
    form="linear" (the linear core, d_osc 2) takes p and optionally causal, window (a causal sliding window: query
    i reads keys i - window < j <= i), turn (per head, the anchors' turn a frame in steps of 2^-16 turns),
    stream (1: one step of a stream, its state in and out; with a window), heads, d_osc, and no points or tables.
    """
    from flatbuffers import flexbuffers

    linear = attrs.get("form", "direct") == "linear"
    if linear and not LINEAR_P[0] <= attrs.get("p", 0) <= LINEAR_P[1]:
        raise ValueError(f"custom_options: form 'linear' needs p in {LINEAR_P[0]}..{LINEAR_P[1]}, not {attrs.get('p')}")
    if attrs.get("turn") is not None:  # one uint16 a head, a blob
        turn = np.asarray(attrs["turn"])
        if not linear or turn.ndim != 1 or not 1 <= len(turn) <= 64 or turn.min() < 0 or turn.max() >= 1 << 16:
            raise ValueError(f"custom_options: turn is the linear form's rates, one a head in [0, 2^16): {turn}")
        attrs["turn"] = turn.astype("<u2").tobytes()
    if attrs.get("stream") and not (linear and attrs.get("window", 0) > 0):
        raise ValueError("custom_options: stream is a step of the linear form's window (form 'linear', window > 0)")
    missing = [] if linear else [f"{p}_scale" for p in POINTS if f"{p}_scale" not in attrs]
    if missing:
        raise ValueError(f"custom_options needs {missing}")
    return bytes(flexbuffers.Dumps({k: _flex_value(v) for k, v in attrs.items()}))


def options_from_quant(scales: dict, tables=None, zero_points: dict | None = None, **extra) -> bytes:
    """custom_options from the per-point scales/zero points (the integer reference naming) and optional tables."""
    zp = {**ZP_DEFAULT, **(zero_points or {})}
    attrs = {f"{p}_scale": scales[p] for p in POINTS}
    attrs.update({f"{p}_zero_point": zp[p] for p in POINTS})
    if tables is not None:
        attrs.update(dict(zip(OSC.role("table"), tables)))
    return custom_options(**attrs, **extra)
