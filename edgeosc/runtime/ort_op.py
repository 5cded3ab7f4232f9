"""The ai.edgeosc::OscillatorAttention kernel for onnxruntime: build its custom-op library and register it.

    opts = onnxruntime.SessionOptions()
    opts.register_custom_ops_library(str(ort_op.build()))

The library (export/ort_op/edgeosc_ort_op.c; no onnxruntime header needed) runs version 2 of the node (an attention
layer between its projections: the fused projections in, the heads merged out) over the linear core (form "linear",
d_osc 2, taylor2, projected anchors, with or without a taylor2 key gate) of float_op.onnx and int8_qcdq_op.onnx,
computing what the node's ONNX function computes (export/oscillator_attention.md). OnnxRunner registers it for every
file holding the domain whose nodes it supports (`unsupported`); otherwise onnxruntime inlines the function, as stock
onnxruntime does.
Torch-free, like the rest of edgeosc.runtime.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from ..cbuild import ORT_OP, build_shared

if TYPE_CHECKING:  # onnx itself only where a model is looked at: building the library needs neither it nor onnxruntime
    import onnx

DOMAIN, OP, VERSION = "ai.edgeosc", "OscillatorAttention", 2
GLUE = ORT_OP / "edgeosc_ort_op.c"
# -O3 unrolls the models' heads (d_h 4 and 8) and vectorizes their sums; no contraction into FMA, whose single
# rounding would move the float32 products off onnxruntime's
FLAGS = ("-O3", "-ffp-contract=off")
MIN_ONNXRUNTIME = (1, 16)  # C API version 16: CreateKernelV2 / KernelComputeV2 (the library asks for it)
POINTS = ("q", "k", "v", "r", "z", "out")  # the linear core's quantization points (attention.LINEAR_POINTS)
MAX_P = 8


def build() -> Path:
    """Path of the library (compiled on first use, cached by source hash and compiler target)."""
    return build_shared([GLUE], "edgeosc_ort_op", extra_flags=FLAGS, libs=("-lm",))


def holds_op(model: onnx.ModelProto) -> bool:
    """Whether the model's graph has OscillatorAttention nodes."""
    return any((n.domain, n.op_type) == (DOMAIN, OP) for n in model.graph.node)


def unsupported(model: onnx.ModelProto) -> str | None:
    """Why the kernel cannot stand in for this model's OscillatorAttention nodes, in a few words; None if it can."""
    import onnx
    import onnxruntime
    from onnx import helper
    version = tuple(int(x) for x in onnxruntime.__version__.split(".")[:2] if x.isdigit())
    if version < MIN_ONNXRUNTIME:
        return f"onnxruntime {onnxruntime.__version__} is older than 1.16 (C API version 16)"
    op_version = next((o.version for o in model.opset_import if o.domain == DOMAIN), VERSION)
    if op_version != VERSION:
        return f"{DOMAIN} version {op_version} (the kernel runs version {VERSION}: export the checkpoint again)"
    for node in (n for n in model.graph.node if (n.domain, n.op_type) == (DOMAIN, OP)):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        text = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
        scales = [f"{p}_scale" for p in POINTS]
        if text.get("form", "direct") != "linear":
            return f"form {text.get('form', 'direct')!r} (the kernel runs the linear core)"
        if text.get("positive") != "taylor2" or text.get("d_osc") != 2 or not 1 <= text.get("p", 0) <= MAX_P:
            return (f"positive {text.get('positive')!r}, d_osc {text.get('d_osc')}, p {text.get('p')} (the kernel "
                    f"runs taylor2, d_osc 2, p 1..{MAX_P})")
        given = [s for s in scales if s in attrs]
        if given and (len(given) < len(scales) or not all(0 < attrs[s] < math.inf for s in scales)):
            return f"quantization scales {given} (the kernel needs all of {scales}, positive)"
        if len(node.input) != 1:
            return f"{len(node.input)} inputs (the kernel takes one, the fused projections)"
        if text.get("anchors") != "projected":
            return f"anchors {text.get('anchors')!r} (the kernel runs projected anchors)"
        if "gate_map" in text and text["gate_map"] != "taylor2":
            return f"gate_map {text['gate_map']!r} (the kernel runs taylor2)"
    for fn in model.functions:  # the body's points: int8 at zero point 0, uint8 for g (the kernel's ranges)
        for n in fn.node:
            zp = [a.t for a in n.attribute if n.op_type == "Constant" and a.type == onnx.AttributeProto.TENSOR
                  and n.output[0].endswith("_zp")]
            unsigned = n.output[0].endswith("__g_zp")  # custom_op.function names them <value>__<point>_zp
            want = onnx.TensorProto.UINT8 if unsigned else onnx.TensorProto.INT8
            if zp and (zp[0].data_type != want or any(onnx.numpy_helper.to_array(zp[0]).ravel())):
                return f"a point of {fn.name}'s body is not {'uint8' if unsigned else 'int8'} at zero point 0"
    return None
