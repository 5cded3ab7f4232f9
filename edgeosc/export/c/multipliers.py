"""Multipliers, shifts and activation ranges, as TFLite Micro's Prepare computes them."""
from __future__ import annotations

import math

import numpy as np

from ...integer import reference as R
from ...runtime.tflite_file import schema
from .calls import Array, Struct
from .graph import Op, Tensor, UnsupportedGraph

ACT_RANGES = {schema.ActivationFunctionType.NONE: (None, None), schema.ActivationFunctionType.RELU: (0.0, None),
              schema.ActivationFunctionType.RELU6: (0.0, 6.0), schema.ActivationFunctionType.RELU_N1_TO_1: (-1.0, 1.0)}


def rq(real: float) -> dict:
    m, s = R.quantize_multiplier(real)
    return dict(multiplier=m, shift=s)


def product_rq(s_a: float, s_b: float, s_out: float) -> dict:
    """BATCH_MATMUL, per-tensor FULLY_CONNECTED: float32 product over the output scale in double."""
    return rq(R.matmul_multiplier(s_a, s_b, s_out))


def double_rq(s_a: float, s_b: float, s_out: float) -> dict:
    """MUL, CONV_2D and per-channel FULLY_CONNECTED: everything in double."""
    return rq(R.fc_multiplier(s_a, s_b, s_out))


def act_range(out: Tensor, act: int) -> tuple[int, int]:
    """CalculateActivationRangeQuantized: zero point + round(f / scale) (float32, half away), clamped to int8."""
    if act not in ACT_RANGES:
        raise UnsupportedGraph(f"{out.name}: fused activation {act} is not supported")
    lo, hi = ACT_RANGES[act]

    def q(f):
        v = float(np.float32(f) / np.float32(out.s))
        return out.z + int(math.copysign(math.floor(abs(v) + 0.5), v))

    return max(-128, q(lo)) if lo is not None else -128, min(127, q(hi)) if hi is not None else 127


def dsp_requant(multipliers, shifts, highest_shift: int = -1) -> np.ndarray | None:
    """EdgeoscChannelRequant.dsp: per entry 2 multiplier (as int32) and -shift, what edgeosc_dsp_requant_init
    (edgeosc_simd.h) prepares, or None where some entry is outside its exact range (multiplier < 2^30, or a shift
    outside -23..-1; the depthwise 3 x 3 planes take shift 0 too: highest_shift 0)."""
    m, s = np.asarray(multipliers, np.int64), np.asarray(shifts, np.int64)
    if np.any(m < 1 << 30) or np.any(s > highest_shift) or np.any(s < -23):
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


def softmax_params(x: Tensor, out: Tensor, op: Op) -> tuple[int, int, int]:
    """SOFTMAX's beta multiplier, left shift and diff_min (int8 in, output (1/256, -128))."""
    if (out.s, out.z) != (np.float32(1 / 256), -128) or x.dtype != np.int8:
        raise UnsupportedGraph(f"{out.name}: int8 SOFTMAX needs output (1/256, -128)")
    return R.softmax_params(x.s, float(np.float32(op.options.beta)))
