"""Brevitas quantization presets and the QAT twin of a float KWS network (the maths stays in attention.py).

Presets (bit width, granularity, scaling):
  int8  weights int8, per output channel, symmetric narrow range [-127, 127], float scale = max |w| of the
        channel (recomputed from the weights each step); activations int8 per tensor, symmetric [-128, 127],
        zero point 0, a float scale learned as log2(scale), initialised by calibration (the 99.999th
        percentile of the activations, averaged over calibration batches); the non-negative points w, c, a
        likewise in uint8 [0, 255]; bias int32 with scale = input scale x weight scale (no parameter of its own).
  w4a8  as int8 but weights int4 per output channel, symmetric narrow range [-7, 7].

What is quantized (what an integer runtime executes in integer): the feature input, every Linear/Conv1d
(int8 weights, quantized input, int32 bias), the inputs and outputs of every matmul in the attention
cores (q, k, v, r; qk, zr, out), the positive map's output w, the state z, the shifted cosines c, the
readout weights a, and the logits (so parity is counted in their LSBs). A tensor is quantized once,
where an integer op consumes it; the stem's output is quantized too, so onnxruntime runs it as QLinearConv.
h = w r stays at int32 accumulator precision (see ACCUMULATOR), like every Linear's output.
What stays float (between DequantizeLinear and QuantizeLinear in QCDQ), and why:
  - LayerNorm and the residual adds: Brevitas has no quantized LayerNorm and QCDQ no integer
    LayerNormalization; an integer runtime keeps the residual stream in int16/int32.
  - the positive map (Brevitas has no softplus/elu1/relu2 quantizer), 1/||h|| and the readout division:
    elementwise maps from quantized inputs to quantized outputs, i.e. 256-entry tables or fixed-point
    rsqrt/division in an integer kernel; onnxruntime computes them in float.
  - the per-head score scale and 1/sqrt(d_h): constants folded into q's projection and w's table.
  - softmax (baseline: exp), the positions added after the stem, the mean over time before the head.
  - Kuramoto networks: only their Linear/Conv1d layers, input and logits; the phase maths (cos/sin,
    softmax coupling, circular means) has no integer form here.
"""
from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

with warnings.catch_warnings():  # Brevitas warns on import that an optional CUDA kernel package is absent
    warnings.simplefilter("ignore", UserWarning)
    from brevitas import nn as qnn
    from brevitas.core.restrict_val import RestrictValueType
    from brevitas.graph.calibrate import calibration_mode
    from brevitas.quant import (Int8ActPerTensorFloat, Int8WeightPerChannelFloat, Int32Bias,
                                Uint8ActPerTensorFloat)

from .config import QUANT_PRESETS, ModelConfig, QuantConfig, to_dict
from .io import sha256_file
from .models.attention import QUANT_POINTS, OscillatorAttention, SoftmaxAttention
from .models.kws import build_model


class Int4WeightPerChannelFloat(Int8WeightPerChannelFloat):
    """Int8WeightPerChannelFloat at 4 bits: [-7, 7] per output channel."""

    bit_width = 4


# Activation scales are learned as log2(scale): Adam's steps are then relative. A linear scale of ~1e-4
# (the readout weights a) would be thrown far off by one step of lr 3e-4.
class Int8ActLogScale(Int8ActPerTensorFloat):
    restrict_scaling_type = RestrictValueType.LOG_FP


class Uint8ActLogScale(Uint8ActPerTensorFloat):
    restrict_scaling_type = RestrictValueType.LOG_FP


@dataclass(frozen=True)
class Preset:
    weight: type  # Brevitas weight quantizer
    act: type  # signed activations
    act_unsigned: type  # activations that are >= 0 by construction
    bias: type


PRESETS = {"int8": Preset(Int8WeightPerChannelFloat, Int8ActLogScale, Uint8ActLogScale, Int32Bias),
           "w4a8": Preset(Int4WeightPerChannelFloat, Int8ActLogScale, Uint8ActLogScale, Int32Bias)}
assert tuple(PRESETS) == QUANT_PRESETS
NONNEGATIVE = {"w", "c", "a"}  # positive map output, shifted cosines, readout/softmax weights
# Matmul outputs kept at accumulator precision (int32 in an integer kernel): h = w r is only normalised,
# z = h / ||h||, and 8 bits per tensor lose the direction of short h (PTQ of a small oscillator net,
# d_osc 8, p 4, relu2, synth validation: 96.6% with h in int8, 98.7% with h in int32, 98.8% float).
ACCUMULATOR = {"h"}
# The layers reading the features: their input is QATModel.input_quant's; their output is quantized too
# (before the positions are added), so onnxruntime runs them as QLinearConv.
INPUT_LAYERS = {"stem", "to_phase"}


class QuantPoints(nn.Module):
    """The cores' `quant(name, x)` hook: one Brevitas QuantIdentity per named point of attention.py."""

    def __init__(self, names: tuple[str, ...], preset: Preset):
        super().__init__()
        self.points = nn.ModuleDict({n: qnn.QuantIdentity(preset.act_unsigned if n in NONNEGATIVE else preset.act)
                                     for n in names if n not in ACCUMULATOR})

    def forward(self, name: str, x: Tensor) -> Tensor:
        if name in ACCUMULATOR:
            return x
        return self.points[name](x)  # a KeyError here: attention.py has a point quant.py does not know


class QATModel(nn.Module):
    """A KWS network with fake quantization: features and logits quantized, layers and cores hooked."""

    def __init__(self, net: nn.Module, quant_cfg: QuantConfig):
        super().__init__()
        preset = PRESETS[quant_cfg.preset]
        self.cfg, self.quant_cfg, self.provenance = net.cfg, quant_cfg, {}
        self.input_quant = qnn.QuantIdentity(preset.act, return_quant_tensor=True)  # carries its scale to the stem
        self.net = net
        self.output_quant = qnn.QuantIdentity(preset.act)  # int8 logits: parity is measured in their LSBs

    def forward(self, feats: Tensor) -> Tensor:  # [B,T,C] -> [B,classes]
        return self.output_quant(self.net(self.input_quant(feats)))

    def checkpoint_record(self) -> dict:
        """What a checkpoint keeps to rebuild and trace this model: preset, source, calibration."""
        return dict(config=to_dict(self.quant_cfg), **self.provenance)


def _quant_layer(layer: nn.Module, preset: Preset, first: bool) -> nn.Module:
    kw = dict(bias=layer.bias is not None, weight_quant=preset.weight, bias_quant=preset.bias,
              input_quant=None if first else preset.act, output_quant=preset.act if first else None)
    if isinstance(layer, nn.Linear):
        new = qnn.QuantLinear(layer.in_features, layer.out_features, **kw)
    else:
        new = qnn.QuantConv1d(layer.in_channels, layer.out_channels, layer.kernel_size, stride=layer.stride,
                              padding=layer.padding, dilation=layer.dilation, groups=layer.groups, **kw)
    with torch.no_grad():
        new.weight.copy_(layer.weight)
        if layer.bias is not None:
            new.bias.copy_(layer.bias)
    return new


def quantize_model(model: nn.Module, quant_cfg: QuantConfig) -> QATModel:
    """The QAT twin of a float KWS network of any attention kind, with its float weights (the input is kept)."""
    preset, net = PRESETS[quant_cfg.preset], copy.deepcopy(model)
    for name, module in list(net.named_modules()):
        for child_name, child in module.named_children():
            if type(child) in (nn.Linear, nn.Conv1d):
                first = module is net and child_name in INPUT_LAYERS
                setattr(module, child_name, _quant_layer(child, preset, first))
        if isinstance(module, OscillatorAttention) and module.factorized:
            raise ValueError("QAT uses the direct oscillator form; the factorized core has no quantization points")
        if isinstance(module, (OscillatorAttention, SoftmaxAttention)):
            kind = "softmax" if isinstance(module, SoftmaxAttention) else "oscillator"
            module.quant = QuantPoints(QUANT_POINTS[kind], preset)
    return QATModel(net, quant_cfg)


def float_model(model: QATModel) -> nn.Module:
    """The float network holding a QAT model's (unquantized) weights."""
    net = build_model(model.cfg)
    own = net.state_dict()
    net.load_state_dict({k: v for k, v in model.net.state_dict().items() if k in own})
    return net.eval()


@torch.no_grad()
def calibrate(model: QATModel, batches, n_batches: int) -> int:
    """Set activation scales from statistics of n_batches (features, labels); returns the clips seen."""
    model.eval()  # dropout off: the statistics of inference-time activations
    seen = 0
    with calibration_mode(model):
        for _, (feats, _labels) in zip(range(n_batches), batches):
            model(feats)
            seen += len(feats)
    return seen


def qat_builder(source: str | Path, quant_cfg: QuantConfig):
    """train()'s `build` hook: the float checkpoint's network, quantized, calibrated on training batches."""
    from .train import CheckpointError, load_checkpoint

    def build(model_cfg: ModelConfig, train_batches, device) -> QATModel:
        ckpt = load_checkpoint(source)
        if ckpt.quant_cfg is not None:
            raise CheckpointError(f"{source}: already quantized ({ckpt.quant_cfg.preset}); start QAT from a float one")
        if ckpt.model_cfg != model_cfg:
            raise CheckpointError(f"{source}: its model does not fit this data ({ckpt.model_cfg} vs {model_cfg})")
        model = quantize_model(ckpt.model, quant_cfg).to(device)
        clips = calibrate(model, train_batches, quant_cfg.calibration_batches)
        # the first `clips` clips of the train split in index order (no augmentation)
        model.provenance = dict(source=dict(path=str(source), sha256=sha256_file(source)),
                                calibration=dict(split="train", order="index", clips=clips))
        return model
    return build
