"""TFLite export of a KWS transformer, written op by op (builder.py) from the QAT model's own scales.

Files (input "features" [1, frames, coeffs] -> output "logits" [1, classes]; runtimes loop over a batch):
  float.tflite         the float network (a QAT model's float weights), float32 builtin ops
  int8.tflite          full-integer: int8 activations, int8 per-channel weights, int32 biases, int8 input
                       and output; builtin ops only, chosen to run in tflite-runtime 2.14, ai-edge-litert
                       and TFLite Micro (measured op by op, see tests/test_tflite_builder.py):
                         Linear / Conv1d   FULLY_CONNECTED / CONV_2D (LayerNorm's affine and sqrt(d) folded in)
                         LayerNorm         FULLY_CONNECTED with 1/d weights (mean), SUB, L2_NORMALIZATION
                         a map y = f(x)    a 256-entry table: CAST to int32, ADD 128, GATHER
                         ||.|| normalising L2_NORMALIZATION (r, the unit rows of w, z, LayerNorm)
                         key gate          MUL of (1 + z.r)^p [H, T, T] by g [H, 1, T] (broadcast), then
                                           L2_NORMALIZATION of the rows before their sum
                         sums over keys    FULLY_CONNECTED with unit weights (one exact int32 sum)
                         softmax baseline  SOFTMAX
                       A linear-form oscillator's int8.tflite is its linear core's builtin twin (twin.py): the
                       same function over T x T, rows normalised by SOFTMAX of logarithms, through the twin's own
                       points (qk, zr), calibrated with QAT (quant.py). The file the CPU runtimes, the Pi bundle
                       and parity use.
  int8_npu.tflite      int8.tflite for the Ethos-U NPUs (Vela; `edgeosc bench npu`, the pipeline's npu stage), written
                       beside every transformer's int8.tflite: its LayerNorms' unit vectors, and the linear core twin's
                       r and z, are three int8 passes v * RSQRT(SUM(v * v)) (MUL, SUM, RSQRT, MUL:
                       builder.unit_vector), which the Ethos-U55 and U85 run and Vela leaves L2_NORMALIZATION to their
                       CPU for; the twin's tables are chains of ABS, LOG, LOGISTIC, RELU and arithmetic
                       (twin.npu_log_taylor2, npu_log_power) where int8.tflite GATHERs, and its key gate enters as
                       log g (log gn less a term the same for every key), with no unit vector. Int8 LOG runs in
                       ai-edge-litert alone among the CPU runtimes (runtime.interpreters_for). A direct core's
                       unit vectors stay L2_NORMALIZATION (not measured: no trained direct-form checkpoint). The
                       passes are about 1.2 output steps off the exact unit vector (L2_NORMALIZATION: 0.5) and QAT
                       simulates the exact one; accuracy against int8.tflite: docs/toolchain.md. DS-CNN has no unit
                       vectors and no such file: its int8.tflite is its NPU file (npu_file). The C kernels have no
                       SUM, RSQRT or LOG: the firmware is generated from int8.tflite (or int8_custom.tflite), never
                       from this file.
  int8_custom.tflite   int8.tflite with each oscillator core as one CUSTOM op EdgeOscAttention
                       (export/edgeosc_attention_tflite.md); oscillator networks only. A linear-form model's op
                       (option form "linear") is its integer linear core, sums over keys in int32/int64 as the
                       C firmware runs it; the firmware is generated from this file.
A streaming network (ModelConfig.window > 0) gets stream_int8.tflite (one frame, its state as extra inputs and
outputs) and window_int8.tflite (a recording, every frame's logits) instead: stream.py.
Every int8 tensor is one of the QAT model's quantization points (quant.py), so the files compute what
QAT simulated, up to rounding: TFLite requantizes with a fixed-point multiplier (round half away from
zero), Brevitas in float (round half to even); int8_npu.tflite's pass vectors are the exception.
"""
from __future__ import annotations

import copy
import math
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ...checkpoint import Checkpoint
from ...config import ExportConfig
from ...io import atomic_path
from ...models.attention import POSITIVE, RELU2_FLOOR, OscillatorAttention, SoftmaxAttention, coupling, \
    reciprocal, shifted_power
from ...models.kws import KWSKuramoto, KWSTransformer
from ...runtime.custom_op import OP_NAME
from ...runtime.tflite_file import NPU_FILE, check_tflite
from . import twin
from .builder import TFLiteBuilder

FILES = ("float.tflite", "int8.tflite", NPU_FILE, "int8_custom.tflite")
INPUT, OUTPUT = "features", "logits"
CUSTOM_OP = OP_NAME  # the custom op the kernel in runtime/custom_op.py registers


class Graph:
    """Emits one KWS transformer into a TFLiteBuilder, in float or int8; one method per layer kind."""

    def __init__(self, net: KWSTransformer, qat=None, custom_core: bool = False, npu: bool = False):
        self.net, self.qat, self.custom_core = net, qat, custom_core
        self.int8 = qat is not None
        self.npu_units = self.int8 and npu  # int8_npu.tflite's unit vectors (unit)
        self.b = TFLiteBuilder()

    # ---- quantization of a point -------------------------------------------------------------------
    @staticmethod
    def q(hook, name: str) -> tuple[float, int]:
        """(scale, zero point) of a quantization point as int8: unsigned points sit at zero point -128."""
        return _scale(hook.points[name])

    def lut(self, s_in: float, zp_in: int, fn, hook, name: str) -> np.ndarray:
        """The int8 table of y = fn(x) from an input point (s_in, zp_in) to point `name`, index x + 128."""
        real = torch.tensor(s_in * (np.arange(-128, 128) - zp_in), dtype=torch.float32)
        s, zp = self.q(hook, name)
        with torch.no_grad():  # the QAT point itself rounds fn's output: the table is what QAT computed
            y = hook.points[name](fn(real))
        return np.clip(np.round(y.numpy().astype(np.float64) / s) + zp, -128, 127).astype(np.int8)

    def table(self, x: int, fn, hook, name: str, label: str) -> int:
        """y = fn(x) between two quantized points as a lookup: CAST, ADD 128, GATHER (exact in every runtime)."""
        (s_in,), (zp_in,) = self.b.quant(x)
        return self.lookup(x, self.lut(s_in, zp_in, fn, hook, name), *self.q(hook, name), label)

    def lookup(self, x: int, table: np.ndarray, scale: float, zero_point: int, label: str) -> int:
        """table[x + 128] for int8 x: an int8 output at (scale, zero_point)."""
        b = self.b
        t = b.const(f"{label}/table", table, np.int8, scale, zero_point)
        idx = b.cast(x, np.int32, name=f"{label}/index")
        idx = b.add(idx, b.const(f"{label}/offset", np.array([128], np.int32)), name=f"{label}/index128")
        return b.gather(t, idx, name=label)

    def unit_sum(self, x: int, q, label: str, scale: float = 1.0) -> int:
        """scale * sum over the last axis [..., n] -> [..., 1]: FULLY_CONNECTED with constant weights."""
        n = self.b.shape(x)[-1]
        if self.int8:
            w = self.b.const(f"{label}/ones", np.full((1, n), 127, np.int8), np.int8, scale=scale / 127)
        else:
            w = self.b.const(f"{label}/ones", np.full((1, n), scale, np.float32))
        return self.b.fully_connected(x, w, keep_num_dims=True, q=q, name=label)

    def unit(self, x: int, name: str) -> int:
        """x / ||x|| over the last axis at (1/128, 0): L2_NORMALIZATION, or in int8_npu.tflite (npu=True) the
        builder's int8 passes (unit_vector), which the Ethos-U NPUs run and Vela leaves L2_NORMALIZATION on their CPU
        for."""
        return self.b.unit_vector(x, name) if self.npu_units else self.b.l2_normalization(x, name=name)

    # ---- layers --------------------------------------------------------------------------------------
    def linear(self, x: int, layer: nn.Module, q=None, act=None, label="fc", rows=slice(None), fold=1.0) -> int:
        """A (Quant)Linear on the last axis, or some of its output rows; `fold` scales rows (a score scale)."""
        b = self.b
        fold = torch.as_tensor(fold, dtype=torch.float32)
        bias = (layer.bias[rows] * fold.reshape(-1)).detach().numpy()
        if not self.int8:
            w = b.const(f"{label}/weight", (layer.weight[rows] * fold).detach().numpy())
            return b.fully_connected(x, w, b.const(f"{label}/bias", bias), keep_num_dims=True, act=act, name=label)
        qw = layer.quant_weight()
        ints = torch.round(qw.value / qw.scale)[rows].detach().numpy().astype(np.int8)
        w_scale = (qw.scale[rows] * fold).reshape(-1).detach().numpy()  # int8 values unchanged by a row scale
        w = b.const(f"{label}/weight", ints, np.int8, scale=w_scale, zero_point=0)
        (s_in,), _ = b.quant(x)
        return b.fully_connected(x, w, b.int32_bias(f"{label}/bias", bias, s_in, w_scale), keep_num_dims=True,
                                 act=act, q=q, name=label)

    def layer_norm(self, x: int, norm: nn.Module, label: str) -> int:
        """Unit vectors (x - mean) / ||x - mean|| as quant.IntegerLayerNorm (sqrt(d), affine folded away)."""
        b, d = self.b, self.b.shape(x)[-1]
        q = (lambda n: self.q(norm.quant, n)) if self.int8 else (lambda n: None)
        mean = self.unit_sum(x, q("mean"), f"{label}/mean", 1 / d)
        return self.unit(b.sub(x, mean, q=q("center"), name=f"{label}/center"), f"{label}/norm")

    def heads(self, x: int, heads: int, label: str) -> int:  # [1,T,H*d] -> [H,T,d]
        t = self.b.shape(x)[1]
        return self.b.transpose(self.b.reshape(x, [t, heads, -1], name=f"{label}/split"), [1, 0, 2],
                                name=f"{label}/heads")

    def attention(self, x: int, attn: nn.Module, label: str) -> int:
        b, hook = self.b, attn.quant if self.int8 else None
        q = (lambda n: self.q(hook, n)) if self.int8 else (lambda n: None)
        d = attn.out.in_features
        scale = attn.log_scale.detach().exp().reshape(-1).numpy()  # per head, folded into q's rows
        fold = np.repeat(scale, attn.d_h)[:, None]
        qh, kh, vh = (self.heads(self.linear(x, attn.qkv, q(n), label=f"{label}/{n}", rows=slice(i * d, (i + 1) * d),
                                             fold=fold if n == "q" else 1.0), attn.heads, f"{label}/{n}")
                      for i, n in enumerate("qkv"))
        if isinstance(attn, SoftmaxAttention):
            out = self.softmax_core(qh, kh, vh, attn, label)
        else:
            if attn.anchor is None:
                raise ValueError("TFLite export needs projected anchors (anchors='projected')")
            raw = self.heads(self.linear(x, attn.anchor, q("r_raw"), label=f"{label}/r_raw"), attn.heads,
                             f"{label}/r_raw")
            if self.custom_core:
                core = self.custom_oscillator_core
            elif self.int8 and attn.form == "linear":  # its integer core sums over keys: the builtin twin instead
                core = lambda *args, **kw: twin.core(self, *args, **kw)  # noqa: E731
            else:
                core = self.oscillator_core
            # the twin's anchors may take the NPU passes (measured harmless); the direct and custom cores' stay exact
            twin_core = self.int8 and not self.custom_core and attn.form == "linear"
            r = self.unit(raw, f"{label}/r") if twin_core else b.l2_normalization(raw, name=f"{label}/r")
            if twin_core and self.npu_units and attn.gate is not None and attn.gate_map == "taylor2":
                # log gn = log g - log ||g||, the same for every key of a row: the twin's softmax needs only log g
                log_gate = twin.npu_log_taylor2(b, self.gate_logits(x, attn, label), 1.0, f"{label}/log_g")
                out = core(qh, kh, vh, r, attn, label, log_gate=log_gate)
            else:
                out = core(qh, kh, vh, r, attn, label, self.key_gate(x, attn, label))
        t = b.shape(out)[1]
        merged = b.reshape(b.transpose(out, [1, 0, 2], name=f"{label}/merge"), [1, t, d], name=f"{label}/merged")
        return self.linear(merged, attn.out, q("proj"), label=f"{label}/proj")

    def softmax_core(self, qh: int, kh: int, vh: int, attn: SoftmaxAttention, label: str) -> int:
        """a = SOFTMAX(q k^T / sqrt(d_h)), out = a v."""
        b, q = self.b, (lambda n: self.q(attn.quant, n)) if self.int8 else (lambda n: None)
        qk = b.batch_matmul(qh, kh, adj_y=True, q=q("qk"), name=f"{label}/qk")
        a = b.softmax(qk, beta=1 / math.sqrt(attn.d_h), name=f"{label}/a")
        return b.batch_matmul(a, vh, q=q("out"), name=f"{label}/out")

    def key_gate(self, x: int, attn: OscillatorAttention, label: str) -> int | None:
        """The unit vector over keys of g = positive(K x), [H, 1, T] (attention.gates_of), or None."""
        if attn.gate is None:
            return None
        b, raw = self.b, self.gate_logits(x, attn, label)
        if self.int8:
            g = self.table(raw, POSITIVE[attn.gate_map], attn.quant, "g", f"{label}/g")
        else:
            g = self.float_positive(raw, attn.gate_map, f"{label}/g")
        return b.l2_normalization(g, name=f"{label}/gn")

    def gate_logits(self, x: int, attn: OscillatorAttention, label: str) -> int:
        """The key gate's logits K x, [H, 1, T]."""
        raw = self.linear(x, attn.gate, self.q(attn.quant, "g_raw") if self.int8 else None, label=f"{label}/g_raw")
        return self.b.transpose(raw, [2, 0, 1], name=f"{label}/g_keys")  # [1, T, H] -> [H, 1, T]

    def oscillator_core(self, qh: int, kh: int, vh: int, r: int, attn: OscillatorAttention, label: str,
                        g: int | None = None) -> int:
        """The core of attention.oscillator_attention: z = h / ||h||, a = g (1 + z.r)^p / sum, out = a v."""
        b, hook = self.b, attn.quant
        q = (lambda n: self.q(hook, n)) if self.int8 else (lambda n: None)
        qk = b.batch_matmul(qh, kh, adj_y=True, q=q("qk"), name=f"{label}/qk")
        if self.int8:
            w = self.table(qk, lambda v: coupling(v, attn.d_h, attn.positive), hook, "w", f"{label}/w")
        else:
            scores = b.mul(qk, b.const(f"{label}/inv_sqrt_dh", np.array([1 / math.sqrt(attn.d_h)], np.float32)),
                           name=f"{label}/scores")
            w = self.float_positive(scores, attn.positive, f"{label}/w")
        wn = b.l2_normalization(w, name=f"{label}/wn")
        h = b.batch_matmul(wn, r, q=q("h"), name=f"{label}/h")
        z = b.l2_normalization(h, name=f"{label}/z")
        zr = b.batch_matmul(z, r, adj_y=True, q=q("zr"), name=f"{label}/zr")
        if self.int8:
            c = self.table(zr, lambda v: shifted_power(v, attn.p), hook, "c" if g is None else "pow", f"{label}/c")
        else:
            c = self.float_power(b.add(zr, b.const(f"{label}/one", np.ones(1, np.float32)), name=f"{label}/1+zr"),
                                 attn.p, f"{label}/c")
        if g is not None:  # the key gate: key j's column times g_j (a broadcast MUL), then unit rows
            c = b.l2_normalization(b.mul(c, g, q=q("c"), name=f"{label}/gated"), name=f"{label}/cn")
        csum = self.unit_sum(c, q("csum"), f"{label}/csum")
        if self.int8:
            a = b.mul(c, self.table(csum, reciprocal, hook, "inv", f"{label}/inv"), q=q("a"), name=f"{label}/a")
        else:
            a = b.div(c, csum, name=f"{label}/a")
        return b.batch_matmul(a, vh, q=q("out"), name=f"{label}/out")

    def custom_oscillator_core(self, qh, kh, vh, r, attn: OscillatorAttention, label: str,
                               g: int | None = None) -> int:
        from . import custom_op
        b, hook = self.b, attn.quant
        out_scale, out_zp = self.q(hook, "out")
        shape = b.shape(qh)[:2] + [b.shape(vh)[-1]]
        out = b.tensor(f"{label}/out", shape, np.int8, scale=out_scale, zero_point=out_zp)
        if attn.form == "linear":  # the linear core: its constants come from the tensors' scales
            options = custom_op.custom_options(form="linear", p=attn.p, causal=False, eps=attn.eps, d_osc=attn.d_osc,
                                               positive=attn.positive, heads=attn.heads)
            b.custom(CUSTOM_OP, [qh, kh, vh, r] + ([g] if g is not None else []), [out], options)
            return out
        tables = dict(w=self.lut(*self.q(hook, "qk"), lambda v: coupling(v, attn.d_h, attn.positive), hook, "w"),
                      c=self.lut(*self.q(hook, "zr"), lambda v: shifted_power(v, attn.p), hook,
                                 "c" if g is None else "pow"),
                      inv=self.lut(*self.q(hook, "csum"), reciprocal, hook, "inv"))
        points = {p: custom_op.MODEL_POINTS.get(p, p) for p in custom_op.POINTS}  # option point -> model point
        if g is not None:  # the op's c is the unit rows cn; the key gate's MUL reads pow and writes "gated"
            points.update(c="cn", **dict(zip(custom_op.GATE_POINTS, ("pow", "c"))))
        options = custom_op.custom_options(
            p=attn.p, eps=attn.eps, d_osc=attn.d_osc, positive=attn.positive, heads=attn.heads,
            sum_op="fully_connected", ones=127, ones_scale=1 / 127,  # as unit_sum writes the sum over keys
            rounding="tflite-runtime",  # the kernel reproduces tflite-runtime's builtin rounding bit for bit
            **{f"{key}_{k}": v for key, n in points.items() for k, v in zip(("scale", "zero_point"), self.q(hook, n))},
            **{f"table_{n}": t for n, t in tables.items()})
        b.custom(CUSTOM_OP, [qh, kh, vh, r] + ([g] if g is not None else []), [out], options)
        return out

    def float_positive(self, x: int, positive: str, label: str) -> int:
        """positive(x) in float ops (attention.POSITIVE); the result is named `label`."""
        b = self.b
        if positive == "relu2":
            r = b.relu(x, name=f"{label}/relu")
            return b.add(b.mul(r, r, name=f"{label}/relu_sq"), b.const(f"{label}/floor", np.array([RELU2_FLOOR],
                         np.float32)), name=label)
        if positive == "taylor2":  # 1 + x (1 + x / 2)
            half = b.mul(x, b.const(f"{label}/half", np.array([0.5], np.float32)), name=f"{label}/half_x")
            one = b.const(f"{label}/one", np.ones(1, np.float32))
            inner = b.add(half, one, name=f"{label}/1+x/2")
            return b.add(b.mul(x, inner, name=f"{label}/x(1+x/2)"), one, name=label)
        neg = b.mul(x, b.const(f"{label}/minus1", np.array([-1.0], np.float32)), name=f"{label}/neg")
        if positive == "elu1":  # relu(x) + exp(-relu(-x)) = x + 1 for x > 0, exp(x) otherwise
            e = b.exp(b.mul(b.relu(neg, name=f"{label}/relu_neg"), b.const(f"{label}/m1", np.array([-1.0],
                      np.float32)), name=f"{label}/min0"), name=f"{label}/exp")
            return b.add(b.relu(x, name=f"{label}/relu"), e, name=label)
        # softplus, overflow-free: relu(x) + log(1 + exp(-|x|)), |x| = relu(x) + relu(-x)
        absx = b.add(b.relu(x, name=f"{label}/relu"), b.relu(neg, name=f"{label}/relu_neg"), name=f"{label}/abs")
        e = b.exp(b.mul(absx, b.const(f"{label}/m1", np.array([-1.0], np.float32)), name=f"{label}/nabs"),
                  name=f"{label}/exp")
        log = b.log(b.add(e, b.const(f"{label}/one_", np.ones(1, np.float32)), name=f"{label}/1+e"),
                    name=f"{label}/log")
        return b.add(b.relu(x, name=f"{label}/relu2"), log, name=label)

    def float_power(self, x: int, p: int, label: str) -> int:
        """x^p by repeated squaring (float MULs)."""
        result, base, i = None, x, 0
        while p:
            if p & 1:
                result = base if result is None else self.b.mul(result, base, name=f"{label}/pow{i}")
            p >>= 1
            if p:
                base = self.b.mul(base, base, name=f"{label}/sq{i}")
            i += 1
        return result

    # ---- the network -----------------------------------------------------------------------------
    def build(self) -> bytes:
        b, net, cfg = self.b, self.net, self.net.cfg
        stem = net.stem
        if self.int8:
            s_in, _ = _scale(self.qat.input_quant)
            x = b.input(INPUT, [1, cfg.n_frames, cfg.n_coeffs], np.int8, scale=s_in, zero_point=0)
        else:
            x = b.input(INPUT, [1, cfg.n_frames, cfg.n_coeffs])
        x = self.conv1d(b.reshape(x, [1, 1, cfg.n_frames, cfg.n_coeffs], name="stem/nhwc"), stem)
        x = b.reshape(x, [1, cfg.n_frames, -1], name="stem/tokens")
        pos = net.pos.detach().numpy()[None]
        if self.int8:
            s, zp = self.q(net.quant, "pos")
            x = b.add(x, b.int8_const("pos", pos, s, zp), q=self.q(net.quant, "embed"), name="embed")
        else:
            x = b.add(x, b.const("pos", pos.astype(np.float32)), name="embed")
        for i, block in enumerate(net.blocks):
            x = self.block(x, block, f"block{i}")
        x = self.layer_norm(x, net.norm, "norm")  # [1,T,d]
        x = b.transpose(x, [0, 2, 1], name="pool/time_last")
        x = self.unit_sum(x, self.q(net.quant, "pool") if self.int8 else None, "pool", 1 / cfg.n_frames)
        x = b.reshape(x, [1, -1], name="pool/flat")
        logits = self.linear(x, net.head, _scale(self.qat.output_quant) if self.int8 else None, label=OUTPUT)
        b.tensors[logits].name = OUTPUT
        b.mark_output(logits)
        return b.to_bytes()

    def conv1d(self, x: int, conv: nn.Module) -> int:
        """Conv1d(k, padding k//2) over time as CONV_2D on [1, 1, T, C] (OHWI weights)."""
        b = self.b
        if conv.padding[0] != conv.kernel_size[0] // 2 or conv.stride[0] != 1:
            raise ValueError("the stem must be a stride-1 'same' Conv1d")
        if not self.int8:
            w = conv.weight.detach().numpy().transpose(0, 2, 1)[:, None]
            return b.conv_2d(x, b.const("stem/weight", w.astype(np.float32)),
                             b.const("stem/bias", conv.bias.detach().numpy().astype(np.float32)), name="stem")
        return self.int8_conv(x, conv, "SAME", _scale(conv.output_quant), "stem")

    def int8_conv(self, x: int, conv: nn.Module, padding: str, q, name: str) -> int:
        """A QuantConv1d as an int8 CONV_2D on [1, 1, T, C]: per-channel OHWI weights, int32 bias, output at q."""
        b = self.b
        qw = conv.quant_weight()
        w_scale = qw.scale.detach().reshape(-1).numpy().astype(np.float32)
        ints = torch.round(qw.value / qw.scale).detach().numpy().astype(np.int8).transpose(0, 2, 1)[:, None]
        w = b.const("stem/weight", np.ascontiguousarray(ints), np.int8, scale=w_scale, zero_point=0,
                    quantized_dimension=0)
        (s_in,), _ = b.quant(x)
        bias = b.int32_bias("stem/bias", conv.bias.detach().numpy(), s_in, w_scale)
        return b.conv_2d(x, w, bias, padding=padding, q=q, name=name)

    def block(self, x: int, block: nn.Module, label: str) -> int:
        b = self.b
        q = (lambda n: self.q(block.quant, n)) if self.int8 else (lambda n: None)
        attn = self.attention(self.layer_norm(x, block.norm1, f"{label}/norm1"), block.attn, f"{label}/attn")
        x = b.add(x, attn, q=q("res1"), name=f"{label}/res1")
        n = self.layer_norm(x, block.norm2, f"{label}/norm2")
        hidden = self.linear(n, block.ff[0], q("ff_hidden"), act="relu", label=f"{label}/ff_hidden")
        return b.add(x, self.linear(hidden, block.ff[2], q("ff_out"), label=f"{label}/ff_out"), q=q("res2"),
                     name=f"{label}/res2")


def _scale(quantizer) -> tuple[float, int]:
    """(scale, zero point as int8) of a QuantIdentity or an activation quantizer proxy."""
    aq = getattr(quantizer, "act_quant", quantizer)
    return float(aq.scale()), 0 if aq.is_signed else -128


def _networks(model: nn.Module) -> tuple[nn.Module, object]:
    """The float network (norms folded) and the QAT model (or None) of a checkpoint's model."""
    from ...models.dscnn import DSCNN
    from ...quant import float_model, fold_norms
    qat = model if hasattr(model, "quant_cfg") else None
    if qat is not None:
        net = float_model(qat)
    elif isinstance(model, DSCNN):
        net = copy.deepcopy(model).fold_batch_norms()
    elif isinstance(model, KWSKuramoto):  # no norms to fold
        net = model
    else:
        net = fold_norms(copy.deepcopy(model))
    if not isinstance(net, (KWSTransformer, DSCNN, KWSKuramoto)):
        raise ValueError(f"TFLite export takes oscillator/softmax transformers, Kuramoto networks and DS-CNN, "
                         f"not {type(net).__name__}")
    return net.eval(), qat


def int8_file(folder: str | Path) -> Path:
    """The int8 model of a TFLite export folder: int8.tflite, or int8_custom.tflite where there is no other (a
    linear-form model's checkpoint from before its builtin twin)."""
    folder = Path(folder)
    builtin = folder / "int8.tflite"
    return builtin if builtin.is_file() or not (folder / "int8_custom.tflite").is_file() else folder / "int8_custom.tflite"


def npu_file(folder: str | Path) -> Path:
    """The file of a TFLite export folder that Vela compiles for the Ethos-U NPUs: int8_npu.tflite where the export
    has one (transformers), else int8.tflite (DS-CNN's, all of whose operators the NPUs run); either may be absent."""
    folder = Path(folder)
    return folder / NPU_FILE if (folder / NPU_FILE).is_file() else folder / "int8.tflite"


def firmware_int8(qat: nn.Module) -> tuple[str, bytes]:
    """The int8 file a QAT model's C firmware is generated from, (name, flatbuffer): int8.tflite, a linear-form
    model's int8_custom.tflite (its exact integer core; its int8.tflite is the builtin twin), or a streaming
    network's stream_int8.tflite."""
    from ...models.dscnn import DSCNN
    if isinstance(qat.net, DSCNN):
        from . import dscnn
        return "int8.tflite", dscnn.build(qat.net, qat)
    if getattr(qat.net, "window", 0):  # a streaming network: one frame a run, its state in the arena
        from . import stream
        return "stream_int8.tflite", stream.stream_file(qat)
    linear = linear_form(qat)
    return ("int8_custom.tflite" if linear else "int8.tflite"), Graph(qat.net, qat, custom_core=linear).build()


def linear_form(model: nn.Module) -> bool:
    """Whether a model has linear-form oscillator layers (an integer core of sums over keys, which only the
    EdgeOscAttention op and the C firmware run exactly; docs/maths.md#integer-linear-core)."""
    return any(isinstance(m, OscillatorAttention) and m.form == "linear" for m in model.modules())


def _save(data: bytes, path: Path) -> Path:
    check_tflite(data, name=str(path))
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(data)
    return path


def export(ckpt: Checkpoint, cfg: ExportConfig, out_dir: str | Path) -> Path:
    """Write the .tflite files of a float or QAT checkpoint (see FILES) into out_dir; returns out_dir."""
    out_dir = Path(out_dir)
    net, qat = _networks(ckpt.model)
    if getattr(net, "window", 0):  # a streaming network: int8 only (stream.py)
        from . import stream
        if qat is None:
            raise ValueError("a streaming network exports as int8 (stream_int8.tflite, window_int8.tflite): quantize "
                             "it first (edgeosc train --qat --from RUN/best.pt)")
        out_dir.mkdir(parents=True, exist_ok=True)
        with torch.no_grad():
            qat.eval()
            _save(stream.stream_file(qat), out_dir / "stream_int8.tflite")
            _save(stream.window_file(qat), out_dir / "window_int8.tflite")
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(net, KWSKuramoto):  # float only (export/tflite/kuramoto.py)
        from . import kuramoto
        with torch.no_grad():
            _save(kuramoto.build(net), out_dir / "float.tflite")
        return out_dir
    if not isinstance(net, KWSTransformer):  # DS-CNN: convolutions only, no custom op
        from . import dscnn
        with torch.no_grad():
            _save(dscnn.build(net), out_dir / "float.tflite")
            if qat is not None:
                _save(dscnn.build(qat.eval().net, qat), out_dir / "int8.tflite")
        return out_dir
    with torch.no_grad():
        _save(Graph(net).build(), out_dir / "float.tflite")
        if qat is None:
            return out_dir
        qat.eval()
        if not linear_form(qat) or qat.twin_calibrated:  # a linear core's builtin graph: its twin (twin.py)
            _save(Graph(qat.net, qat).build(), out_dir / "int8.tflite")
            _save(Graph(qat.net, qat, npu=True).build(), out_dir / NPU_FILE)  # the same, unit vectors for the NPUs
        else:
            warnings.warn(f"{out_dir}: no int8.tflite: the checkpoint predates the linear core's builtin twin (its "
                          "points are calibrated with QAT: rerun edgeosc train --qat); int8_custom.tflite holds it")
        if any(isinstance(m, OscillatorAttention) for m in qat.modules()):
            _save(Graph(qat.net, qat, custom_core=True).build(), out_dir / "int8_custom.tflite")
    return out_dir
