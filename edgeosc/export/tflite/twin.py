"""int8.tflite of a whole-clip linear-form oscillator: its linear core's builtin twin (docs/maths.md#builtin-twin).

The integer linear core (int8_custom.tflite, the C firmware) sums over keys in int32/int64, which no builtin op does.
The twin computes the same function over T x T as the direct form does, in int8 builtin ops that ai-edge-litert,
tflite-runtime 2.14, TFLite Micro and the Ethos-U NPUs take, every row normalised by a SOFTMAX of logarithms:

    w_ij / sum_l w_il = softmax_j(log w_ij),      a_ij = softmax_j(p log|1 + z_i.r_j| + log gn_j)

so no row is rounded at a scale set by the clip's largest weight (the direct core's int8 w kept a row's largest
weights and rounded its small ones to zero). Per head:

    qk  = BATCH_MATMUL(q, k^T)           the QAT point qk
    lw  = log taylor2(qk / sqrt(d_h))    a 256-entry table (CAST, ADD 128, GATHER)
    wr  = SOFTMAX(lw)                    1/256: the rows of w over their sums
    h   = BATCH_MATMUL(wr, r)            1/128: a weighted mean of unit vectors lies in the unit ball
    z   = unit vectors of h              1/128, the QAT point z (L2_NORMALIZATION; int8_npu.tflite: Graph.unit's passes)
    zr  = BATCH_MATMUL(z, r^T)           the QAT point zr
    lc  = p log|1 + zr|                  a table, floored at FLOOR
    lg  = log gn                         a table of the unit gates [H, 1, T], floored at FLOOR (key gate only)
    a   = SOFTMAX(ADD(lc, lg))           1/256; the ADD spans the sum of the two tables' ranges
    out = BATCH_MATMUL(a, v)             the QAT point out

Only qk and zr are the twin's own QAT points (quant.TWIN_POINTS), calibrated with the others; every other scale
follows from them or is fixed: a table spans its function's values over its input's 256 codes.
"""
from __future__ import annotations

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


def core(graph, qh: int, kh: int, vh: int, r: int, attn, label: str, gn: int | None = None) -> int:
    """The twin of attn's linear core from q, k, v [H, T, d], unit anchors r [H, T, 2] and unit gates gn [H, 1, T]
    (or None) to out [H, T, d_v] at the QAT point out."""
    b, hook = graph.b, attn.quant

    def lookup(x: int, fn, name: str) -> int:
        (s_in,), (zp_in,) = b.quant(x)
        table, scale, zp = log_table(s_in, zp_in, fn)
        return graph.lookup(x, table, scale, zp, f"{label}/{name}")

    qk = b.batch_matmul(qh, kh, adj_y=True, q=graph.q(hook, "qk"), name=f"{label}/qk")
    rows = b.softmax(lookup(qk, log_coupling(attn.d_h, attn.positive), "log_w"), name=f"{label}/w_rows")
    h = b.batch_matmul(rows, r, q=(1 / 128, 0), name=f"{label}/h")
    z = graph.unit(h, f"{label}/z")
    zr = b.batch_matmul(z, r, adj_y=True, q=graph.q(hook, "zr"), name=f"{label}/zr")
    logits = lookup(zr, log_power(attn.p), "log_c")
    if gn is not None:
        lg = lookup(gn, lambda x: np.log(np.maximum(x, 0.0)), "log_g")
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
