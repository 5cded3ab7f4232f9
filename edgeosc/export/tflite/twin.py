"""int8.tflite of a whole-clip linear-form oscillator: its linear core's builtin twin (docs/maths.md#builtin-twin).

The integer linear core (int8_custom.tflite, the C firmware) sums over keys in int32/int64, which no builtin op does.
The twin computes the same function over T x T as the direct form does, in int8 builtin ops that ai-edge-litert,
tflite-runtime 2.14, TFLite Micro and the Ethos-U NPUs take, every row normalised by a SOFTMAX of logarithms:

    w_ij / sum_l w_il = softmax_j(log w_ij),      a_ij = softmax_j(p log|1 + z_i.r_j| + log gn_j)

so no row is rounded at a scale set by the clip's largest weight (the direct core's int8 w kept a row's largest
weights and rounded its small ones to zero). Per head:

    qk  = BATCH_MATMUL(q, k^T)           the QAT point qk
    lw  = log taylor2(qk / sqrt(d_h))    a 256-entry table (CAST, ADD 128, GATHER); int8_npu.tflite: npu_log_taylor2
    wr  = SOFTMAX(lw)                    1/256: the rows of w over their sums
    h   = BATCH_MATMUL(wr, r)            1/128: a weighted mean of unit vectors lies in the unit ball
    z   = unit vectors of h              1/128, the QAT point z (L2_NORMALIZATION; int8_npu.tflite: Graph.unit's passes)
    zr  = BATCH_MATMUL(z, r^T)           the QAT point zr
    lc  = p log|1 + zr|                  a table, floored at FLOOR; int8_npu.tflite: p LOG(ABS(zr + 1))
    lg  = log gn                         a table of the unit gates [H, 1, T], floored at FLOOR (key gate only);
                                         int8_npu.tflite: log g, npu_log_taylor2 of the gate's logits (a taylor2
                                         gate map): log gn = log g - log ||g||, the same for every key of a row
    a   = SOFTMAX(ADD(lc, lg))           1/256; the ADD spans the sum of the two tables' ranges
    out = BATCH_MATMUL(a, v)             the QAT point out

int8_npu.tflite computes the tables in int8 operators the Ethos-U55 and U85 run (ADD, ABS, LOG, LOGISTIC, RELU, SUB,
MUL), since Vela leaves GATHER and CAST (and on the gate, L2_NORMALIZATION) to their CPU.

Only qk and zr are the twin's own QAT points (quant.TWIN_POINTS), calibrated with the others; every other scale
follows from them or is fixed: a table spans its function's values over its input's 256 codes.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ...models.attention import coupling

# Logarithms below FLOOR count as FLOOR: a key whose unit gate rounds to 0 or whose shifted cosine vanishes then
# weighs e^-10 of a term of 1 instead of nothing, below int8 SOFTMAX's output step (1/256 = e^-5.5) unless its row
# holds nothing larger; the floor also keeps the tables' steps fine (0.05 at p = 4: 5% of a weight).
FLOOR = -10.0


def log_table(s_in: float, zp_in: int, fn) -> tuple[np.ndarray, float, int]:
    """max(fn(x), FLOOR) over an int8 input's 256 codes as an int8 table spanning the values' range: (table, scale,
    zero point)."""
    x = s_in * (np.arange(-128, 128, dtype=np.float64) - zp_in)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.nan_to_num(fn(x), nan=FLOOR, neginf=FLOOR)
    y = np.maximum(y, FLOOR)
    scale, zp = _int8(float(y.min()), float(y.max()))
    return np.clip(np.round(y / scale) + zp, -128, 127).astype(np.int8), scale, zp


def log_coupling(d_h: int, positive: str):
    """x -> log positive(x / sqrt(d_h)), the coupling weights' logarithm (taylor2 >= 1/2: finite everywhere)."""
    return lambda x: np.log(coupling(torch.from_numpy(x), d_h, positive).numpy())


def log_power(p: int):
    """x -> p log|1 + x|, the logarithm of the shifted cosine's power (|.|: int8 z.r may pass -1 by a step)."""
    return lambda x: p * np.log(np.abs(1.0 + x))


def npu_log_taylor2(b, x: int, factor: float, label: str) -> int:
    """log(1 + u^2) of u = factor x + 1, that is log taylor2(factor x) + log 2, from an int8 x in int8 operators the
    Ethos-U NPUs run: softplus(t) of t = log u^2 as relu(t) - log sigma(|t|), whose logistic lies in [1/2, 1) where
    int8 holds its logarithm finely. The log 2 is the same for every key of a row, which the softmax drops. About
    0.02 of a logarithm per step: the table's (its whole range over 255 steps) within 2x."""
    lo, hi = _range(b, x)
    shift = 1 / factor
    v = b.add(x, _scalar(b, shift, f"{label}/shift"), q=_int8(lo + shift, hi + shift), name=f"{label}/u")  # u / factor
    top = max(abs(lo + shift), abs(hi + shift))
    a = b.abs(v, q=(top / 255, -128), name=f"{label}/abs_u")
    lo_l, hi_l = math.log(top / 510), math.log(top)  # |u| = 0 counts as half a step
    la = b.log(a, q=_int8(lo_l, hi_l), name=f"{label}/log_abs_u")
    c = math.log(factor)
    y = b.add(la, _scalar(b, c, f"{label}/log_factor"), q=_int8(lo_l + c, hi_l + c), name=f"{label}/log_u")
    t = b.add(y, y, q=_int8(2 * (lo_l + c), 2 * (hi_l + c)), name=f"{label}/log_u2")
    t_lo, t_hi = _range(b, t)
    sig = b.logistic(b.abs(t, q=(max(-t_lo, t_hi) / 255, -128), name=f"{label}/abs_t"), name=f"{label}/sigma")
    log_sig = b.log(sig, q=_int8(math.log(0.5) - 0.01, 0.0), name=f"{label}/log_sigma")
    relu = b.relu(t, q=(max(t_hi, 1e-3) / 255, -128), name=f"{label}/relu_t")
    return b.sub(relu, log_sig, q=_int8(0.0, max(t_hi, 0.0) + math.log(2)), name=label)


def npu_log_power(b, zr: int, p: int, label: str) -> int:
    """p log|1 + zr|, floored at FLOOR: ADD, ABS, LOG (which clamps 0 to its range's floor), MUL."""
    lo, hi = _range(b, zr)
    one = b.add(zr, _scalar(b, 1.0, f"{label}/one"), q=_int8(lo + 1, hi + 1), name=f"{label}/1+zr")
    top = max(abs(lo + 1), abs(hi + 1))
    la = b.log(b.abs(one, q=(top / 255, -128), name=f"{label}/abs"), q=_int8(FLOOR / p, math.log(top)),
               name=f"{label}/log")
    return b.mul(la, _scalar(b, float(p), f"{label}/p"), q=_int8(FLOOR, p * math.log(top)), name=label)


def _scalar(b, value: float, name: str) -> int:
    """A one-element int8 constant holding `value` exactly at 127 steps."""
    scale = max(abs(value), 1e-6) / 127
    return b.const(name, np.array([round(value / scale)], np.int8), np.int8, scale, 0)


def core(graph, qh: int, kh: int, vh: int, r: int, attn, label: str, gn: int | None = None,
         log_gate: int | None = None) -> int:
    """The twin of attn's linear core from q, k, v [H, T, d], unit anchors r [H, T, 2] and unit gates gn [H, 1, T]
    (or None; int8_npu.tflite may give log_gate instead, npu_log_taylor2 of the gates' logits) to out [H, T, d_v]
    at the QAT point out."""
    b, hook, npu = graph.b, attn.quant, graph.npu_units

    def lookup(x: int, fn, name: str) -> int:
        (s_in,), (zp_in,) = b.quant(x)
        table, scale, zp = log_table(s_in, zp_in, fn)
        return graph.lookup(x, table, scale, zp, f"{label}/{name}")

    qk = b.batch_matmul(qh, kh, adj_y=True, q=graph.q(hook, "qk"), name=f"{label}/qk")
    if npu and attn.positive == "taylor2":
        log_w = npu_log_taylor2(b, qk, 1 / math.sqrt(attn.d_h), f"{label}/log_w")
    else:
        log_w = lookup(qk, log_coupling(attn.d_h, attn.positive), "log_w")
    rows = b.softmax(log_w, name=f"{label}/w_rows")
    h = b.batch_matmul(rows, r, q=(1 / 128, 0), name=f"{label}/h")
    z = graph.unit(h, f"{label}/z")
    zr = b.batch_matmul(z, r, adj_y=True, q=graph.q(hook, "zr"), name=f"{label}/zr")
    logits = npu_log_power(b, zr, attn.p, f"{label}/log_c") if npu else lookup(zr, log_power(attn.p), "log_c")
    if gn is not None or log_gate is not None:
        lg = log_gate if log_gate is not None else lookup(gn, lambda x: np.log(np.maximum(x, 0.0)), "log_g")
        (lo, hi) = (sum(v) for v in zip(*(_range(b, t) for t in (logits, lg))))
        logits = b.add(logits, lg, q=_int8(lo, hi), name=f"{label}/log_a")
    a = b.softmax(logits, name=f"{label}/a")
    return b.batch_matmul(a, vh, q=graph.q(hook, "out"), name=f"{label}/out")


def _range(b, t: int) -> tuple[float, float]:
    """The real values an int8 tensor's codes span."""
    (scale,), (zp,) = b.quant(t)
    return scale * (-128 - zp), scale * (127 - zp)


def _int8(lo: float, hi: float) -> tuple[float, int]:
    """(scale, zero point) of int8 codes spanning [lo, hi]."""
    scale = max(hi - lo, 1e-3) / 255
    return scale, int(np.clip(round(-128 - lo / scale), -128, 127))
