"""The oscillator attention between its projections as one ONNX node, ai.edgeosc::OscillatorAttention
(export/oscillator_attention.md).

The node reads the attention layer's fused projections (per head: queries already times the score scale, keys,
values, raw anchors and, with the key gate, raw gates) and gives the heads merged. It carries a model-local ONNX
function whose body is trace.oscillator_heads (the heads split, the anchors' and gates' unit vectors, the gate's map,
the core of attention.py: the maths once, the heads merged), so stock onnxruntime inlines and runs it, while a runtime
with a native kernel replaces it by name. The attribute form ("direct" or "linear") names the core's form; a linear
body holds its own points (q k v r z out). In a quantized model the body holds the QuantizeLinear/DequantizeLinear
pairs of the layer's points from r_raw and g_raw on; their scales are the node's attributes <point>_scale, so one
function serves every layer.
"""
from __future__ import annotations

import copy
import io
import warnings

import onnx
import torch
from onnx import helper
from torch import nn

from ...models.attention import LINEAR_POINTS, QUANT_POINTS, OscillatorAttention
from .trace import oscillator_heads

# version 2 reads the fused projections and merges the heads (version 1, until 2026-12-07: q, k, v, the unit anchors
# and gates per head, and q without the score scale folded into it; out per head)
DOMAIN, OP, VERSION = "ai.edgeosc", "OscillatorAttention", 2
INPUT, OUTPUT = "x", "out"
# the points before the core: raw anchors (projected ones only), the key gate's raw value, map and unit vector
ANCHOR_POINTS, GATE_IN_POINTS = ("r_raw",), ("g_raw", "g", "gn")
GATE_CORE_POINTS = ("pow", "cn")  # the direct core's gate points


def quant_params(layer: OscillatorAttention) -> dict[str, tuple[float, bool]] | None:
    """Per quantized point: (scale, signed) of the layer's 8-bit zero-point-0 quantizers; None if float."""
    if layer.quant is None:
        return None
    params = {}
    points = ANCHOR_POINTS if layer.anchor is not None else ()
    if layer.gate is not None:
        points += GATE_IN_POINTS + (GATE_CORE_POINTS if layer.form != "linear" else ())
    points += LINEAR_POINTS if layer.form == "linear" else QUANT_POINTS["oscillator"]
    for name in points:  # the core's points (not the layer's projections around it)
        aq = layer.quant.points[name].act_quant
        if int(aq.bit_width()) != 8 or float(aq.zero_point()) != 0.0:
            raise ValueError(f"the custom op takes 8-bit symmetric points; {name} has {aq.bit_width()} bits")
        params[name] = (float(aq.scale()), bool(aq.is_signed))
    return params


def attributes(layer: OscillatorAttention) -> dict:
    attrs = dict(heads=layer.heads, anchors=layer.anchors, p=layer.p, eps=layer.eps, d_osc=layer.d_osc,
                 positive=layer.positive, form=layer.form)
    if layer.gate is not None:
        attrs["gate_map"] = layer.gate_map
    for name, (scale, _) in (quant_params(layer) or {}).items():
        attrs[f"{name}_scale"] = scale
    return attrs


class _Op(torch.autograd.Function):
    """Runs the layer's attention between its projections in torch; exports as one custom node."""

    @staticmethod
    def forward(ctx, y, layer):
        return oscillator_heads(layer, y)

    @staticmethod
    def symbolic(g, y, layer):
        kinds = {int: "i", float: "f", str: "s"}
        attrs = {f"{k}_{kinds[type(val)]}": val for k, val in attributes(layer).items()}
        out = g.op(f"{DOMAIN}::{OP}", y, **attrs)
        out.setType(y.type().with_sizes([None, None, layer.out.in_features]))  # [B,T,H d_v]; B and T dynamic
        return out


def use_custom_op(model: nn.Module) -> nn.Module:
    """A copy of `model` (traced by trace.for_onnx) whose oscillator attentions export as OscillatorAttention nodes."""
    model = copy.deepcopy(model)
    for m in model.modules():
        if isinstance(m, OscillatorAttention):
            if not hasattr(m, "onnx_attend"):
                raise ValueError("the op files are of whole-clip networks traced by for_onnx")
            m.onnx_attend = lambda y, m=m: _Op.apply(y, m)
            m.onnx_folded = None  # the op takes the layer's own projections
    return model


class _Mark(torch.autograd.Function):
    """Identity in torch; a named placeholder node in the traced body (replaced by Q/DQ or Identity)."""

    @staticmethod
    def forward(ctx, x, name):
        return x.clone()

    @staticmethod
    def symbolic(g, x, name):
        y = g.op(f"{DOMAIN}::Point", x, name_s=name)
        y.setType(x.type())
        return y


class _MarkPoints(nn.Module):
    def forward(self, name, x):
        return _Mark.apply(x, name)


class _Core(nn.Module):
    def __init__(self, layer: OscillatorAttention):
        super().__init__()
        self.layer = layer

    def forward(self, y):
        return oscillator_heads(self.layer, y)


def function(layer: OscillatorAttention, opset_imports) -> onnx.FunctionProto:
    """The FunctionProto of the node: the layer's attention traced to standard ops, Q/DQ at its points."""
    params = quant_params(layer)
    layer = copy.deepcopy(layer)
    layer.quant = _MarkPoints()
    layer.onnx_tokens = None  # the body's T is dynamic
    args = (torch.randn(1, 5, layer.heads * sum(layer.onnx_widths)),)
    input_names = (INPUT,)
    buf = io.BytesIO()
    dims = {0: "B", 1: "T"}
    with warnings.catch_warnings():  # d_h becomes a constant of the body: it is one
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)  # QCDQ: legacy exporter (docs/toolchain.md#onnx-export)
        torch.onnx.export(_Core(layer).eval(), args, buf, dynamo=False, opset_version=opset_of(opset_imports),
                          input_names=list(input_names), output_names=[OUTPUT],
                          dynamic_axes={n: dims for n in (*input_names, OUTPUT)}, custom_opsets={DOMAIN: VERSION})
    body = onnx.load_from_string(buf.getvalue()).graph
    nodes = [helper.make_node("Constant", [], [init.name], value=init) for init in body.initializer]
    for node in body.node:
        if (node.domain, node.op_type) != (DOMAIN, "Point"):
            nodes.append(node)
            continue
        name = helper.get_attribute_value(node.attribute[0]).decode()
        x, y = node.input[0], node.output[0]
        if name not in (params or {}):  # a float model, or a point kept at accumulator precision
            nodes.append(helper.make_node("Identity", [x], [y]))
            continue
        zp = helper.make_tensor("zp", onnx.TensorProto.INT8 if params[name][1] else onnx.TensorProto.UINT8, [], [0])
        scale = helper.make_node("Constant", [], [f"{y}_scale"])
        scale.attribute.append(helper.make_attribute_ref("value_float", onnx.AttributeProto.FLOAT,
                                                         ref_attr_name=f"{name}_scale"))
        zp_name = f"{y}__{name}_zp"  # the point's name in it: runtime/ort_op.py checks g's is uint8
        nodes += [scale, helper.make_node("Constant", [], [zp_name], value=zp),
                  helper.make_node("QuantizeLinear", [x, f"{y}_scale", zp_name], [f"{y}_int"]),
                  helper.make_node("DequantizeLinear", [f"{y}_int", f"{y}_scale", zp_name], [y])]
    names = ["heads", "anchors", "p", "eps", "d_osc", "positive", "form"]
    names += (["gate_map"] if layer.gate is not None else []) + [f"{n}_scale" for n in (params or {})]
    return helper.make_function(DOMAIN, OP, list(input_names), [OUTPUT], nodes, list(opset_imports), names,
                                doc_string="Fixed-query oscillator attention core (export/oscillator_attention.md)")


def opset_of(opset_imports) -> int:
    return next(o.version for o in opset_imports if o.domain in ("", "ai.onnx"))


def attach_function(model: onnx.ModelProto, layer: OscillatorAttention) -> onnx.ModelProto:
    """Give a model holding OscillatorAttention nodes their function (opset imports equal the model's)."""
    if not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, VERSION))
    model.functions.append(function(layer, model.opset_import))
    return model
