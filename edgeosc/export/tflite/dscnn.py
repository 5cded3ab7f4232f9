"""DS-CNN (models/dscnn.py) as a TFLite graph, float or int8 (batch norms folded):

    input [1, T, C]  -> RESHAPE [1, T, C, 1] (NHWC, one channel)
    stem             -> CONV_2D 10 x 4, stride 2, SAME (TensorFlow's: the odd padding row and column last), ReLU
    block i          -> DEPTHWISE_CONV_2D 3 x 3 SAME, ReLU; CONV_2D 1 x 1, ReLU
    mean             -> AVERAGE_POOL_2D over the whole image (its input's quantization), RESHAPE [1, F]
    classifier       -> FULLY_CONNECTED
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .builder import TFLiteBuilder

INPUT, OUTPUT = "features", "logits"  # as the transformers' graphs (export/tflite/__init__.py)


def _int8_weights(b: TFLiteBuilder, name: str, layer: nn.Module, order: tuple, axis: int) -> tuple[int, np.ndarray]:
    """A QuantConv2d / QuantLinear's int8 weights (per output channel), transposed to TFLite's layout."""
    qw = layer.quant_weight()
    scale = qw.scale.detach().reshape(-1).numpy().astype(np.float32)
    ints = torch.round(qw.value / qw.scale).detach().numpy().astype(np.int8).transpose(order)
    return b.const(name, np.ascontiguousarray(ints), np.int8, scale=scale, zero_point=0, quantized_dimension=axis), scale


def build(net: nn.Module, qat=None) -> bytes:
    """The float graph of a folded DS-CNN (qat None), or the int8 graph of its QAT twin (net = qat.net)."""
    b, cfg, int8 = TFLiteBuilder(), net.cfg, qat is not None
    point = (lambda n: _point(net.quant, n)) if int8 else (lambda n: None)

    def conv(x, layer, name, q, depthwise=False):
        order, axis = ((1, 2, 3, 0), 3) if depthwise else ((0, 2, 3, 1), 0)  # [1, kh, kw, F] / OHWI
        stride = layer.stride[0]
        op = b.depthwise_conv_2d if depthwise else b.conv_2d
        if not int8:
            w = layer.weight.detach().numpy().transpose(order).astype(np.float32)
            bias = b.const(f"{name}/bias", layer.bias.detach().numpy().astype(np.float32))
            return op(x, b.const(f"{name}/weight", np.ascontiguousarray(w)), bias, stride=stride, act="relu", name=name)
        w, w_scale = _int8_weights(b, f"{name}/weight", layer, order, axis)
        (s_in,), _ = b.quant(x)
        bias = b.int32_bias(f"{name}/bias", layer.bias.detach().numpy(), s_in, w_scale)
        return op(x, w, bias, stride=stride, act="relu", q=q, name=name)

    if int8:
        s_in = float(qat.input_quant.act_quant.scale())
        x = b.input(INPUT, [1, cfg.n_frames, cfg.n_coeffs], np.int8, scale=s_in, zero_point=0)
    else:
        x = b.input(INPUT, [1, cfg.n_frames, cfg.n_coeffs])
    x = conv(b.reshape(x, [1, cfg.n_frames, cfg.n_coeffs, 1], name="image"), net.stem, "stem", point("stem"))
    for i in range(cfg.blocks):
        x = conv(x, net.dw[i], f"dw{i}", point(f"dw{i}"), depthwise=True)
        x = conv(x, net.pw[i], f"pw{i}", point(f"pw{i}"))
    h, w = b.shape(x)[1:3]
    x = b.reshape(b.average_pool_2d(x, (h, w), name="pool"), [1, cfg.d_model], name="pool/flat")
    if int8:
        (s_in,), _ = b.quant(x)
        wq, w_scale = _int8_weights(b, "head/weight", net.head, (0, 1), 0)
        bias = b.int32_bias("head/bias", net.head.bias.detach().numpy(), s_in, w_scale)
        aq = qat.output_quant.act_quant
        logits = b.fully_connected(x, wq, bias, q=(float(aq.scale()), 0), name=OUTPUT)
    else:
        logits = b.fully_connected(x, b.const("head/weight", net.head.weight.detach().numpy().astype(np.float32)),
                                   b.const("head/bias", net.head.bias.detach().numpy().astype(np.float32)), name=OUTPUT)
    b.mark_output(logits)
    return b.to_bytes()


def _point(quant, name: str) -> tuple[float, int]:
    aq = quant.points[name].act_quant
    return float(aq.scale()), 0 if aq.is_signed else -128
