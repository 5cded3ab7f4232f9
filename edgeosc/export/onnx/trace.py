"""What the ONNX files trace: the same function as the torch model, in few and large ONNX ops.

onnxruntime spends a microsecond or two per node at batch 1, so at T = 49 a graph of many small ops costs more than
its arithmetic. `for_onnx` gives a copy of a float or QAT transformer whose whole-clip attention layers and integer
LayerNorms trace to fewer nodes, computing the same function at the same quantization points
(docs/toolchain.md#onnx-export):

- heads split and merged by Reshape with constant shapes (the batch stays dynamic, T is the model's), one Split of
  the projections' output instead of slices computed from its shape;
- an oscillator layer's three projections reading the LayerNorm (query/key/value, anchors, key gate) as one
  Linear: one int8 MatMul in onnxruntime, as softmax's qkv (three readers of one quantized tensor stay float
  MatMuls on dequantized inputs); each head's score scale folded into its query rows (both kinds);
- unit vectors of tensors on an int8 grid (anchors, key gates, LayerNorm's centred input) as LpNormalization:
  zero or at least one step long, so its zero for a zero vector is unit()'s eps cut-off exactly;
- a whole-clip linear core (form "linear", window 0) in its direct form, a few T x T MatMuls: the same function
  (docs/maths.md#linear-form) at its own points q k v r z out, everything between them float; in float.onnx the
  core's constants (the score's shift, [v, 1], the gate's shift) as constant rows of the fused projection.

The torch model, QAT and the TFLite and C exports are untouched; the ONNX files are checked against the torch model.
"""
from __future__ import annotations

import copy
import math
import types

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...models.attention import (POSITIVE, OscillatorAttention, SoftmaxAttention, _Heads, harmonic_coefficients,
                                 unit)


class _LpNorm(torch.autograd.Function):
    """unit(x, eps) in torch; one LpNormalization node in ONNX (0 for a zero vector, in onnxruntime too)."""

    @staticmethod
    def forward(ctx, x, axis, eps):
        return unit(x.transpose(axis, -1), eps).transpose(axis, -1)

    @staticmethod
    def symbolic(g, x, axis, eps):
        return g.op("LpNormalization", x, axis_i=axis, p_i=2)


def lp_unit(x: Tensor, axis: int = -1, eps: float = 1e-6) -> Tensor:
    """unit() along `axis` for a tensor on a quantization grid (|x| is 0 or at least one step, far above eps)."""
    return _LpNorm.apply(x, axis, eps)


def _by_head(layers: list[nn.Module], widths: list[int], heads: int, qat,
             row_scale: Tensor | None = None) -> nn.Module:
    """One Linear computing `layers` (all reading the same input), its outputs ordered head by head: head h's rows of
    each part in turn (a part of width w per head is rows [h w, (h + 1) w) of its layer, as _Heads.split reads them;
    `widths` per part, a layer holding several parts in a row). Per-channel weight scales and int32 biases (input
    scale x weight scale) move with their rows, so a QAT layer computes the same values, reordered. `row_scale`
    multiplies the rows first (the layers' concatenated rows): a QAT layer's per-channel scales (its weights' abs-max)
    follow, so its integer weights are the same and its outputs the scaled ones to float32 rounding."""
    weight = torch.cat([m.weight.detach() for m in layers])
    bias = torch.cat([m.bias.detach() for m in layers])
    if row_scale is not None:
        weight, bias = weight * row_scale[:, None], bias * row_scale
    starts = [sum(heads * w for w in widths[:i]) for i in range(len(widths))]
    order = [s0 + h * w + i for h in range(heads) for s0, w in zip(starts, widths) for i in range(w)]
    linear = nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        linear.weight.copy_(weight[order])
        linear.bias.copy_(bias[order])
    if qat is None:
        return linear
    from ...quant import PRESETS, _quant_layer
    return _quant_layer(linear, PRESETS[qat.quant_cfg.preset], layers[0].input_quant)


def split_heads(attn: _Heads, y: Tensor, widths: list[int] | None = None) -> list[Tensor]:
    """The fused projections' output [B, T, H W] as its parts of `widths` (attn.onnx_widths) per head, [B, H, T, w]
    each: one Reshape with a constant shape (Python ints: the batch alone dynamic; a function body's T is dynamic
    too), one Transpose and one Split for all of them."""
    widths, t = widths or attn.onnx_widths, attn.onnx_tokens
    y = y.reshape(-1, t, attn.heads, sum(widths)) if t is not None else y.unflatten(-1, (attn.heads, sum(widths)))
    return list(y.transpose(1, 2).split(widths, -1))


def merge_heads(attn: _Heads, x: Tensor) -> Tensor:
    """[B, H, T, d_v] -> [B, T, H d_v], with a constant shape where T is the model's."""
    x = x.transpose(1, 2)
    return x.reshape(-1, attn.onnx_tokens, attn.out.in_features) if attn.onnx_tokens is not None else x.flatten(-2)


def _out(attn: _Heads, x: Tensor) -> Tensor:
    return attn.point("proj", attn.out(x))


def _softmax_forward(self: SoftmaxAttention, x: Tensor, mask: Tensor | None = None) -> Tensor:
    from ...models.attention import softmax_attention
    q, k, v = split_heads(self, self.onnx_proj(x))  # q already times the score scale (_query_scale)
    return _out(self, merge_heads(self, softmax_attention(q, k, v, mask=mask, quant=self.quant)))


def _positive(name: str, x: Tensor) -> Tensor:
    """POSITIVE[name](x); taylor2 as ((x + 1)^2 + 1) / 2, which reads x once (onnxruntime gives each reader of a
    dequantized tensor its own DequantizeLinear)."""
    if name == "taylor2":
        y = x + 1.0
        return (y * y + 1.0) * 0.5
    return POSITIVE[name](x)


def _oscillator_forward(self: OscillatorAttention, x: Tensor, mask: Tensor | None = None) -> Tensor:
    if mask is not None:
        raise ValueError("an exported whole-clip oscillator attends over every token (no mask)")
    if getattr(self, "onnx_folded", None) is not None:  # float.onnx (the op files take the op's inputs)
        return _out(self, _folded_heads(self, self.onnx_folded(x)))
    return _out(self, self.onnx_attend(self.onnx_proj(x)))


def _can_fold(layer: OscillatorAttention) -> bool:
    return (layer.form == "linear" and not layer.window and layer.positive == "taylor2" and layer.anchor is not None
            and layer.gate is not None and layer.gate_map == "taylor2")


def _folded_widths(layer: OscillatorAttention) -> list[int]:
    """The parts of _folded_projection per head: q, k and v a column wider than the layer's own."""
    return [w + 1 for w in layer.onnx_widths[:3]] + layer.onnx_widths[3:]


def _folded_projection(layer: OscillatorAttention) -> nn.Module:
    """The float layer's fused projection (q, k, v, raw anchors, raw gate per head) with the core's constants moved
    into it: a column d_h^(1/4) on q and on k (q.k + sqrt(d_h)), a column 1 on v ([v, 1]: numerator and denominator
    in one product) and the gate's +1 in its bias. Four nodes a layer fewer in float.onnx; the same function."""
    proj, heads, n = layer.onnx_proj, layer.heads, layer.onnx_proj.in_features
    rows = torch.cat([proj.weight.detach(), proj.bias.detach()[:, None]], 1).view(heads, -1, n + 1)  # weights, bias
    q, k, v, rest = rows.split(layer.onnx_widths[:3] + [sum(layer.onnx_widths[3:])], 1)
    rest[:, -1, n] += 1.0  # the gate's shift, in its bias

    def constant(c: float) -> Tensor:  # a row per head: no weights, bias c
        return F.pad(torch.zeros(heads, 1, n), (0, 1), value=c)

    c = layer.d_h ** 0.25
    rows = torch.cat([q, constant(c), k, constant(c), v, constant(1.0), rest], 1).flatten(0, 1)
    linear = nn.Linear(n, rows.shape[0])
    with torch.no_grad():
        linear.weight.copy_(rows[:, :n])
        linear.bias.copy_(rows[:, n])
    return linear


def _folded_heads(layer: OscillatorAttention, y: Tensor) -> Tensor:
    """oscillator_heads of a float layer on _folded_projection's parts."""
    q, k, vb, r_raw, shifted = split_heads(layer, y, _folded_widths(layer))
    g = shifted * shifted + 1.0  # 2 taylor2 of the raw gate: a factor common to the keys is left out
    return merge_heads(layer, direct_linear_core(layer, q, k, vb, lp_unit(r_raw, -1, layer.eps), g=g, folded=True))


def oscillator_heads(layer: OscillatorAttention, y: Tensor) -> Tensor:
    """What ai.edgeosc::OscillatorAttention computes (export/oscillator_attention.md): from the layer's fused
    projections y [B, T, H W] (per head q times the score scale, k, v, the raw anchors, the raw gate), the anchors'
    unit vectors, the key gate's map and its unit vector over the keys, the core, at the layer's points, and the
    heads merged, [B, T, H d_v]. The op files hold it as one node (custom_op.py), whose function body is this trace."""
    point = layer.point
    parts = split_heads(layer, y)
    q, k, v = parts[:3]
    r = lp_unit(point("r_raw", parts[3]) if layer.anchor is not None else k[..., : layer.d_osc], -1, layer.eps)
    g = None
    if layer.gate is not None and layer.quant is None and layer.gate_map == "taylor2":
        shifted = parts[-1] + 1.0
        g = shifted * shifted + 1.0  # 2 taylor2: in float a factor common to the keys is left out, not cancelled
    elif layer.gate is not None:
        g = point("g", _positive(layer.gate_map, point("g_raw", parts[-1])))  # [B,H,T,1]
        g = point("gn", lp_unit(g, 2, layer.eps))  # unit over the keys
    if layer.form == "linear" and not layer.window:
        return merge_heads(layer, direct_linear_core(layer, q, k, v, r, g=g))
    return merge_heads(layer, layer.core(q, k, v, r, g=g))


def _picks(index, n: int, dtype=torch.float32) -> Tensor:
    """[n, len(index)] 0/1: x @ it is x[..., index]."""
    return torch.tensor([[1.0 if i == j else 0.0 for j in index] for i in range(n)], dtype=dtype)


def _monomials(x: Tensor, p: int) -> tuple[Tensor, list[tuple[int, int]]]:
    """Every monomial x_0^a x_1^b with a + b <= p of x [..., 2], by squaring [1, x_0, x_1], and their exponents (a, b).
    A product of two monomial vectors picks its factors by MatMuls with 0/1 matrices (exact; onnxruntime's Gather
    along the last axis copies element by element, ten times slower here)."""
    base, base_exps = F.pad(x, (1, 0), value=1.0), [(0, 0), (1, 0), (0, 1)]

    def times(a, ea, b, eb):
        pairs = {}
        for i, u in enumerate(ea):
            for j, w in enumerate(eb):
                pairs.setdefault((u[0] + w[0], u[1] + w[1]), (i, j))
        exps = sorted(pairs)
        left, right = zip(*(pairs[e] for e in exps))
        return a @ _picks(left, len(ea), a.dtype) * (b @ _picks(right, len(eb), b.dtype)), exps

    out, exps = base, base_exps
    for bit in bin(p)[3:]:
        out, exps = times(out, exps, out, exps)
        if bit == "1":
            out, exps = times(out, exps, base, base_exps)
    return out, exps


def _harmonic_map(exps: list[tuple[int, int]], p: int, weights: list[float], dtype=torch.float32) -> Tensor:
    """[monomials, 2p + 1]: the monomials to [1, cos m t, sin m t for m = 1..p] of x = (cos t, sin t) as the linear
    form computes them, Re and Im of (x_0 + i x_1)^m (attention.readout_features), feature m weighed by weights[m]."""
    k = [[0.0] * (2 * p + 1) for _ in exps]  # Python numbers: a constant of the trace
    k[exps.index((0, 0))][0] = weights[0]
    for m in range(1, p + 1):
        for j in range(m + 1):  # C(m, j) x_0^(m-j) (i x_1)^j
            k[exps.index((m - j, j))][2 * m - 1 + j % 2] += math.comb(m, j) * (-1) ** (j // 2) * weights[m]
    return torch.tensor(k, dtype=dtype)


def _power(x: Tensor, p: int) -> Tensor:
    """x^p by squaring: a few Muls (onnxruntime's Pow calls powf per element, ten times slower at T x T)."""
    out = None
    while p:
        if p & 1:
            out = x if out is None else out * x
        p >>= 1
        if p:
            x = x * x
    return out


def direct_linear_core(layer: OscillatorAttention, q: Tensor, k: Tensor, v: Tensor, r: Tensor,
                       mask: Tensor | None = None, g: Tensor | None = None, folded: bool = False) -> Tensor:
    """oscillator_attention_linear (whole clip, taylor2) in few large ops, at the same points (LINEAR_POINTS).

    The coupling as T x T products: w_ij = (q_i.k_j + sqrt(d_h))^2 + d_h is 2 d_h taylor2(q_i.k_j / sqrt(d_h)), a
    positive row scale, which z = unit(w r) does not see. The readout of a quantized layer (d_osc 2) as the linear
    form's sums over keys, its features the harmonics of z and r as the linear form computes them for int8 unit
    vectors, which are unit vectors to 1/128 only; of a float layer (or d_osc > 2) as (1 + z.r)^p over T x T, the
    same function for exact unit vectors in a third of the nodes. folded (a float layer's _folded_projection): q
    and k carry a column each, so q.k is the shifted score, and v its column of ones."""
    if mask is not None:
        raise ValueError("the linear form takes key masks and causality, not a [T, T] mask")
    quant, p = layer.point, layer.p
    q, k, v, r = quant("q", q), quant("k", k), quant("v", v), quant("r", r)
    d_h, d_v = layer.d_h, layer.out.in_features // layer.heads  # Python ints: constants of the trace
    s = q @ k.transpose(-1, -2) if folded else q @ k.transpose(-1, -2) + math.sqrt(d_h)
    z = quant("z", lp_unit((s * s + d_h) @ r, -1, layer.eps))  # the direction of h = w r / sum_j w
    vb = v if folded else F.pad(v, (0, 1), value=1.0)  # [v, 1]: numerator and denominator in one product
    if layer.d_osc == 2 and layer.quant is not None:
        t = getattr(layer, "onnx_tokens", None)  # a model's T: the monomials of z and r at once (a function body's T
        if t is not None:  # is dynamic: one at a time)
            mono, exps = _monomials(torch.cat([z, r], 2), p)
            mono_z, mono_r = mono.split([t, t], 2)
        else:
            (mono_z, exps), (mono_r, _) = _monomials(z, p), _monomials(r, p)
        psi = mono_r @ _harmonic_map(exps, p, [1.0] * (p + 1), r.dtype)
        sums = (psi if g is None else psi * g).transpose(-1, -2) @ vb  # [2p + 1, d_v + 1] per head
        both = mono_z @ _harmonic_map(exps, p, harmonic_coefficients(p), z.dtype) @ sums
    else:
        power = _power(1.0 + z @ r.transpose(-1, -2), p)
        both = power @ (vb if g is None else g * vb)
    num, den = both.split([d_v, 1], -1)
    if folded:  # float, den >= 1, no clamp: z . h = |h| >= 0 with h = sum_j w_j r_j, w_j > 0, so some key has
        return num / den  # z . r_j >= 0 and its term g_j (1 + z . r_j)^p >= 1 (h = 0: z = 0, every term g_j >= 1)
    # the linear form's ratio, 0 where no key has weight: a den of 0 is a sum of terms that are all 0, and so is num.
    # (int8 anchors are unit vectors to 1/128, so a term can be slightly negative, and a row whose terms cancelled to
    # <= tiny would differ; a Where costs the core 10-20% more time in onnxruntime)
    return quant("out", num / den.clamp_min(torch.finfo(den.dtype).tiny))


def _integer_norm_forward(self, x: Tensor) -> Tensor:
    q = self.quant
    centered = q("center", x - q("mean", x.mean(-1, keepdim=True)))
    return q("norm", lp_unit(centered, -1, 1e-6))


def _query_scale(attn: _Heads, layers: list[nn.Module]) -> Tensor:
    """Row factors of the concatenated projections: each head's score scale on its query rows, 1 elsewhere (one Mul
    a layer fewer; the score scale multiplies q before its point in the torch model too)."""
    scale = torch.ones(sum(m.out_features for m in layers))
    scale[: attn.heads * attn.d_h] = attn.log_scale.detach().exp().reshape(attn.heads, 1).expand(-1, attn.d_h).flatten()
    return scale


def for_onnx(model: nn.Module) -> nn.Module:
    """A copy of a float or QAT KWS network (either kind) that traces to the ONNX graph described above."""
    model = copy.deepcopy(model)
    qat = model if hasattr(model, "quant_cfg") else None
    net = model.net if qat is not None else model
    tokens = getattr(getattr(net, "cfg", None), "n_frames", None)
    if getattr(net, "window", 1) or tokens is None:  # streaming networks, other kinds: as they are
        return model
    from ...quant import IntegerLayerNorm
    for m in list(model.modules()):
        if isinstance(m, IntegerLayerNorm):
            m.forward = types.MethodType(_integer_norm_forward, m)
        elif isinstance(m, (SoftmaxAttention, OscillatorAttention)):
            d_h = m.out.in_features // m.heads
            layers, widths = [m.qkv], [d_h] * 3
            if isinstance(m, OscillatorAttention):
                layers += [p for p in (m.anchor, m.gate) if p is not None]
                widths += ([m.d_osc] if m.anchor is not None else []) + ([1] if m.gate is not None else [])
                m.forward = types.MethodType(_oscillator_forward, m)
                m.onnx_attend = types.MethodType(oscillator_heads, m)
            else:
                m.forward = types.MethodType(_softmax_forward, m)
            m.onnx_tokens, m.onnx_widths = tokens, widths
            m.onnx_proj = _by_head(layers, widths, m.heads, qat, _query_scale(m, layers))
            if qat is None and isinstance(m, OscillatorAttention) and _can_fold(m):
                m.onnx_folded = _folded_projection(m)
            for name in ("qkv", "anchor", "gate"):  # not traced now: float stand-ins (a quantized layer that the
                if getattr(m, name, None) is not None:  # export's forward pass leaves out would lack its bias scale)
                    setattr(m, name, _by_head([getattr(m, name)], [getattr(m, name).out_features], 1, None))
    if qat is not None:  # a pass with Brevitas' caches on gives the fused layers' int32 biases their input scale
        from brevitas.export.manager import _cache_inp_out
        with torch.no_grad():
            _cache_inp_out(model.eval(), torch.zeros(1, tokens, net.cfg.n_coeffs))
    return model
