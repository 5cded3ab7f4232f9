"""The Kuramoto network (models/kws.py KWSKuramoto) as a float32 TFLite graph of builtin ops:

    input [1, T, C]   -> RESHAPE [1, 1, T, C]; CONV_2D 1 x 3 (the Conv1d), RESHAPE [1, T, .]
    phases            -> as is / TANH, MUL pi / ATAN2 of the two halves (two CONV_2D)
    block             -> COS, SIN; FULLY_CONNECTED gates; softplus as LOG(1 + EXP); DIV by the MEAN
                         scores: one BATCH_MATMUL of [gq cos, gq sin] by [gk cos, gk sin] (rotary phase added
                         first), MUL tau / sqrt(k); SOFTMAX; two BATCH_MATMUL for the circular mean
                         norm cap: x * c / MAXIMUM(SQRT(SUM x^2), c); SwiGLU as FULLY_CONNECTED, LOGISTIC, MUL
    readout           -> MEAN of COS and SIN over time; FULLY_CONNECTED (prototypes: scale * cos / sin folded in)

No int8 graph: phases need wrapping integer arithmetic and cos/sin tables that no builtin int8 op provides
(docs/results.md#kuramoto-attention says what an int8 path would take).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .builder import TFLiteBuilder

INPUT, OUTPUT = "features", "logits"  # as the transformers' graphs (export/tflite/__init__.py)


def _np(t: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach().numpy().astype(np.float32))


def build(net) -> bytes:
    """The float graph of a KWSKuramoto in eval mode."""
    b, cfg = TFLiteBuilder(), net.cfg
    t, k = cfg.n_frames, cfg.d_model
    x = b.reshape(b.input(INPUT, [1, t, cfg.n_coeffs]), [1, 1, t, cfg.n_coeffs], name="input/nhwc")

    if any(block.causal for block in net.blocks):
        raise ValueError("the Kuramoto TFLite graph attends over the whole clip; causal blocks are not exported")

    def conv(rows: slice, name: str) -> int:
        w, bias = net.to_phase.weight[rows].permute(0, 2, 1)[:, None], net.to_phase.bias[rows]  # OHWI
        out = b.conv_2d(x, b.const(f"{name}/weight", _np(w)), b.const(f"{name}/bias", _np(bias)), name=name)
        return b.reshape(out, [1, t, -1], name=f"{name}/tokens")

    def fc(v: int, w: torch.Tensor, bias: torch.Tensor, name: str) -> int:
        return b.fully_connected(v, b.const(f"{name}/weight", _np(w)), b.const(f"{name}/bias", _np(bias)),
                                 keep_num_dims=True, name=name)

    if cfg.phase_map == "angle":
        theta = b.atan2(conv(slice(k, 2 * k), "phase/y"), conv(slice(0, k), "phase/x"), name="theta0")
    elif cfg.phase_map == "tanh":
        theta = b.mul(b.tanh(conv(slice(None), "phase")), b.const("pi", np.float32([math.pi])), name="theta0")
    else:
        theta = conv(slice(None), "phase")
    positions = torch.arange(t, dtype=torch.float32)[:, None]
    for i, block in enumerate(net.blocks):
        theta = _block(b, fc, theta, block, positions, f"block{i}")
    m_re = b.mean(b.cos(theta, name="readout/cos"), 1, keep_dims=False, name="readout/mean_cos")
    m_im = b.mean(b.sin(theta, name="readout/sin"), 1, keep_dims=False, name="readout/mean_sin")
    if cfg.phase_readout == "prototype":  # scale * (m_re cos P^T + m_im sin P^T) + bias
        w = net.scale * torch.cat([net.prototypes.cos(), net.prototypes.sin()], 1)
        bias = net.bias
    else:
        w, bias = net.head.weight, net.head.bias
    m = b.concatenation([m_re, m_im], -1, name="readout/mean")
    logits = b.fully_connected(m, b.const("head/weight", _np(w)), b.const("head/bias", _np(bias)), name=OUTPUT)
    b.mark_output(logits)
    return b.to_bytes()


def _cap(b: TFLiteBuilder, x: int, max_norm: float, name: str) -> int:
    """attention.cap_norm: rows longer than max_norm scaled back onto the ball."""
    norm = b.sqrt(b.sum(b.mul(x, x, name=f"{name}/square"), -1, name=f"{name}/sum"), name=f"{name}/norm")
    c = b.const(f"{name}/max", np.float32([max_norm]))
    return b.mul(x, b.div(c, b.maximum(norm, c, name=f"{name}/clamp"), name=f"{name}/factor"), name=name)


def _positive_gate(b: TFLiteBuilder, g: int, name: str) -> int:
    """softplus, divided by its mean over the coordinates."""
    sp = b.log(b.add(b.exp(g, name=f"{name}/exp"), b.const(f"{name}/one", np.float32([1.0])), name=f"{name}/1p"),
               name=f"{name}/softplus")
    return b.div(sp, b.mean(sp, -1, name=f"{name}/mean"), name=name)


def _block(b: TFLiteBuilder, fc, theta: int, block, positions: torch.Tensor, name: str) -> int:
    k = block.omega.numel()
    cos, sin = b.cos(theta, name=f"{name}/cos"), b.sin(theta, name=f"{name}/sin")
    feats = b.concatenation([cos, sin], -1, name=f"{name}/features")
    w, bias = block.gates.weight, block.gates.bias
    gq, gk, gv = (fc(feats, w[j * k:(j + 1) * k], bias[j * k:(j + 1) * k], f"{name}/gate_{n}")
                  for j, n in enumerate("qkv"))
    gq, gk = _positive_gate(b, gq, f"{name}/gq"), _positive_gate(b, gk, f"{name}/gk")
    phase = b.add(theta, b.const(f"{name}/rotary", _np(positions * block.omega)), name=f"{name}/phase")
    pc, ps = b.cos(phase, name=f"{name}/phase_cos"), b.sin(phase, name=f"{name}/phase_sin")
    query = b.concatenation([b.mul(gq, pc, name=f"{name}/q_cos"), b.mul(gq, ps, name=f"{name}/q_sin")], -1,
                            name=f"{name}/query")
    key = b.concatenation([b.mul(gk, pc, name=f"{name}/k_cos"), b.mul(gk, ps, name=f"{name}/k_sin")], -1,
                          name=f"{name}/key")
    tau = block.log_tau.exp() / math.sqrt(k)
    scores = b.mul(b.batch_matmul(query, key, adj_y=True, name=f"{name}/qk"),
                   b.const(f"{name}/tau", _np(tau.reshape(1))), name=f"{name}/scores")
    attn = b.softmax(scores, name=f"{name}/attn")
    g_re = b.batch_matmul(attn, cos, name=f"{name}/g_re")
    g_im = b.batch_matmul(attn, sin, name=f"{name}/g_im")
    coupling = b.sub(b.mul(cos, g_im, name=f"{name}/cos_g_im"), b.mul(sin, g_re, name=f"{name}/sin_g_re"),
                     name=f"{name}/coupling")
    delta = _cap(b, b.mul(gv, coupling, name=f"{name}/gated"), block.max_step, f"{name}/delta")
    theta = b.add(theta, delta, name=f"{name}/theta_attn")
    if block.ff is None:
        return theta
    d_ff = block.ff.down.in_features
    w, bias = block.ff.gate_up.weight, block.ff.gate_up.bias
    gate = fc(theta, w[:d_ff], bias[:d_ff], f"{name}/ff_gate")
    up = fc(theta, w[d_ff:], bias[d_ff:], f"{name}/ff_up")
    silu = b.mul(gate, b.logistic(gate, name=f"{name}/ff_sigmoid"), name=f"{name}/ff_silu")
    hidden = b.mul(silu, up, name=f"{name}/ff_hidden")
    out = fc(hidden, block.ff.down.weight, block.ff.down.bias, f"{name}/ff_down")
    return b.add(theta, _cap(b, out, block.max_step, f"{name}/ff_delta"), name=f"{name}/theta")
