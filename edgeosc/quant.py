"""Brevitas quantization presets and the QAT twin of a float KWS network (the maths stays in attention.py).

Presets (bit width, granularity, scaling):
  int8  weights int8, per output channel, symmetric narrow range [-127, 127], float scale = max |w| of the
        channel (recomputed from the weights each step); activations int8 per tensor, symmetric [-128, 127],
        zero point 0, a float scale learned as log2(scale), initialised by calibration (the 99.999th
        percentile of the activations, averaged over calibration batches); non-negative tensors likewise in
        uint8 [0, 255] (int8 with zero point -128 in TFLite); bias int32 with scale = input scale x weight
        scale (no parameter of its own).
  w4a8  as int8 but weights int4 per output channel, symmetric narrow range [-7, 7].

The QAT graph simulates the integer graph of export/tflite: every tensor that graph holds in int8 is
quantized here, once, at a named point (attention.QUANT_POINTS / LAYER_POINTS, kws.MODEL_POINTS /
BLOCK_POINTS, IntegerLayerNorm.POINTS), so the two differ only by rounding. In particular:
  - an elementwise map from a quantized input to a quantized output (the positive map, (1 + zr)^p, 1/csum)
    is exactly a 256-entry table: the int8 graph looks it up (GATHER);
  - r, wn, z, the key gate's gn and cn, and LayerNorm's output are TFLite L2_NORMALIZATION outputs: fixed scale
    1/128; the softmax weights are TFLite SOFTMAX's output: fixed scale 1/256;
  - LayerNorm is mean, centre and L2_NORMALIZATION (IntegerLayerNorm), its affine folded into its readers (fold_norms);
  - a Linear reads its input through the quantizer of the point that produced it (shared, so the second
    pass is exact) and keeps its output float until the next point (the int32 accumulator).
Kuramoto networks: only their Linear/Conv1d layers, input and logits (no integer form of the phase maths).
DS-CNN: batch norms folded into the convolutions, a point after each ReLU (_quantize_dscnn).
"""
from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass

import torch
from torch import Tensor, nn

with warnings.catch_warnings():  # Brevitas warns on import that an optional CUDA kernel package is absent
    warnings.simplefilter("ignore", UserWarning)
    from brevitas import nn as qnn
    from brevitas.core.restrict_val import RestrictValueType
    from brevitas.inject.enum import ScalingImplType
    from brevitas.graph.calibrate import calibration_mode
    from brevitas.quant import (Int8ActPerTensorFloat, Int8WeightPerChannelFloat, Int32Bias,
                                Uint8ActPerTensorFloat)

from .config import QUANT_PRESETS, QuantConfig, to_dict
from .integer.linear import LINEAR_P
from .models.attention import (COSINE, GATE_POINTS, LAYER_POINTS, LINEAR_GATE_POINTS, LINEAR_POINTS, QUANT_POINTS,
                               STREAM_GATE_POINTS, SoftmaxAttention, direct_form, unit)
from .models.dscnn import DSCNN
from .models.kws import BLOCK_POINTS, MODEL_POINTS, KWSTransformer, build_model


class Int4WeightPerChannelFloat(Int8WeightPerChannelFloat):
    """Int8WeightPerChannelFloat at 4 bits: [-7, 7] per output channel."""

    bit_width = 4


# Activation scales are learned as log2(scale): Adam's steps are then relative. A linear scale of ~1e-4
# (the readout weights a) would be thrown far off by one step of lr 3e-4.
class Int8ActLogScale(Int8ActPerTensorFloat):
    restrict_scaling_type = RestrictValueType.LOG_FP


class Uint8ActLogScale(Uint8ActPerTensorFloat):
    restrict_scaling_type = RestrictValueType.LOG_FP


class UnitVector(Int8ActPerTensorFloat):
    """Fixed scale 1/128 (Brevitas: threshold / 2^7): TFLite L2_NORMALIZATION's int8 output."""

    scaling_impl_type = ScalingImplType.CONST
    scaling_init = 1.0


class Probability(Uint8ActPerTensorFloat):
    """Fixed scale 1/256 (threshold / 255): TFLite int8 SOFTMAX's output."""

    scaling_impl_type = ScalingImplType.CONST
    scaling_init = 255 / 256


@dataclass(frozen=True)
class Preset:
    weight: type  # Brevitas weight quantizer
    act: type  # signed activations
    act_unsigned: type  # activations that are >= 0 by construction
    bias: type


PRESETS = {"int8": Preset(Int8WeightPerChannelFloat, Int8ActLogScale, Uint8ActLogScale, Int32Bias),
           "w4a8": Preset(Int4WeightPerChannelFloat, Int8ActLogScale, Uint8ActLogScale, Int32Bias)}
assert tuple(PRESETS) == QUANT_PRESETS
# >= 0 by construction: positive map, shifted cosines and their sum, reciprocal, readout, the key gate and the
# shifted power it weighs; the ReLU output
NONNEGATIVE = {"w", "c", "csum", "inv", "a", "ff_hidden", "g", "pow"}
# A whole-clip linear core's builtin twin: the same function over T x T in builtin ops (export/tflite/twin.py:
# int8.tflite, which every interpreter loads), so the linear model carries the twin's own points too, qk = q k^T and
# zr = z r^T (its other scales follow from these): calibrated with the others (calibrate), never trained, unused by
# the linear forward and its integer kernel (int8_custom.tflite, the C firmware).
TWIN_POINTS = ("qk", "zr")
# The direct form's other points, which a twin does not hold: they pass floats unchanged, so the direct form, run in
# calibration, reaches the twin's points with the floats the linear form computes. (Checkpoints of the direct
# core's int8 twin held them all; checkpoint.load_checkpoint drops them: twin_legacy_keys.)
TWIN_PASS = tuple(n for n in QUANT_POINTS["oscillator"] + GATE_POINTS
                  if n not in LINEAR_POINTS + TWIN_POINTS + LINEAR_GATE_POINTS)

FIXED = {"oscillator": {"r": UnitVector, "wn": UnitVector, "z": UnitVector, "gn": UnitVector, "cn": UnitVector},
         "softmax": {"a": Probability}}
INPUT_LAYERS = {"to_phase"}  # Kuramoto: the layer reading the features (QATModel.input_quant's output)


class QuantPoints(nn.Module):
    """A `quant(name, x)` hook (attention.py, kws.py): one Brevitas QuantIdentity per named point."""

    def __init__(self, names: tuple[str, ...], preset: Preset, fixed: dict | None = None, passed: tuple[str, ...] = ()):
        super().__init__()
        fixed = fixed or {}
        kinds = {n: fixed[n] if n in fixed else preset.act_unsigned if n in NONNEGATIVE else preset.act
                 for n in names}  # not `fixed.get(n) or ...`: a Brevitas injector class is falsy
        self.points = nn.ModuleDict({n: qnn.QuantIdentity(kind) for n, kind in kinds.items()})
        self.passed = frozenset(passed)  # names that pass unchanged (a twin's TWIN_PASS)

    def forward(self, name: str, x: Tensor) -> Tensor:
        if name in self.passed:
            return x
        return self.points[name](x)  # a KeyError here: a point the model calls that quant.py does not know

    def proxy(self, name: str):
        """The point's quantizer, to share as a Linear's input quantizer."""
        return self.points[name].act_quant


class IntegerLayerNorm(nn.Module):
    """LayerNorm as the int8 graph computes it: mean, centre, then L2_NORMALIZATION's unit vector.

    (x - m) / sqrt(var + eps) = sqrt(d) (x - m) / ||x - m|| up to eps, and TFLite's L2_NORMALIZATION takes
    ||.|| in int32 with a fixed-point inverse square root, exactly and alike in every runtime: an int8
    variance and a 1/sqrt table instead amplify one LSB of a small variance into tens of LSBs out.
    sqrt(d) and the affine live in the Linear layers reading it (fold_norms); eps matters only for constant x.
    """

    POINTS = ("mean", "center", "norm")

    def __init__(self, preset: Preset):
        super().__init__()
        self.quant = QuantPoints(self.POINTS, preset, {"norm": UnitVector})

    def forward(self, x: Tensor) -> Tensor:  # [..., d] -> unit vectors [..., d]
        q = self.quant
        centered = q("center", x - q("mean", x.mean(-1, keepdim=True)))
        return q("norm", unit(centered, 1e-6))


class QATModel(nn.Module):
    """A KWS network with fake quantization: features and logits quantized, layers and cores hooked."""

    def __init__(self, net: nn.Module, quant_cfg: QuantConfig):
        super().__init__()
        preset = PRESETS[quant_cfg.preset]
        self.cfg, self.quant_cfg, self.provenance = net.cfg, quant_cfg, {}
        self.input_quant = qnn.QuantIdentity(preset.act, return_quant_tensor=True)  # carries its scale to the stem
        self.net = net
        self.output_quant = qnn.QuantIdentity(preset.act)  # int8 logits: parity is measured in their LSBs
        # 1 once calibrate() has set the builtin twin's points (linear-form models; twin_points)
        self.register_buffer("twin_calibrated", torch.zeros((), dtype=torch.uint8))

    def forward(self, feats: Tensor, per_frame: bool = False) -> Tensor:  # [B,T,C] -> [B,classes]
        if per_frame:  # a streaming network's every frame (KWSTransformer.forward)
            return self.output_quant(self.net(self.input_quant(feats), per_frame=True))
        return self.output_quant(self.net(self.input_quant(feats)))

    # a streaming network (ModelConfig.window > 0) runs one frame at a time through the same points
    @property
    def window(self) -> int:
        return self.net.window

    def set_window(self, window: int) -> None:
        self.net.set_window(window)

    def stream_step(self, frame: Tensor, state: dict | None = None) -> tuple[Tensor, dict]:
        logits, state = self.net.stream_step(frame, state, input_quant=self.input_quant)
        return self.output_quant(logits), state

    def checkpoint_record(self) -> dict:
        """What a checkpoint keeps to rebuild and trace this model: preset, source, calibration."""
        return dict(config=to_dict(self.quant_cfg), **self.provenance)


def _quant_layer(layer: nn.Module, preset: Preset, input_quant=None, output_quant=None) -> nn.Module:
    kw = dict(bias=layer.bias is not None, weight_quant=preset.weight, bias_quant=preset.bias,
              input_quant=input_quant, output_quant=output_quant)
    with warnings.catch_warnings():  # Brevitas notes that a shared input quantizer ignores its keyword arguments
        warnings.filterwarnings("ignore", "Keyword arguments are being passed")
        if isinstance(layer, nn.Linear):
            new = qnn.QuantLinear(layer.in_features, layer.out_features, **kw)
        elif isinstance(layer, nn.Conv2d):
            new = qnn.QuantConv2d(layer.in_channels, layer.out_channels, layer.kernel_size, stride=layer.stride,
                                  padding=layer.padding, dilation=layer.dilation, groups=layer.groups, **kw)
        else:
            new = qnn.QuantConv1d(layer.in_channels, layer.out_channels, layer.kernel_size, stride=layer.stride,
                                  padding=layer.padding, dilation=layer.dilation, groups=layer.groups, **kw)
    with torch.no_grad():
        new.weight.copy_(layer.weight)
        if layer.bias is not None:
            new.bias.copy_(layer.bias)
    return new


@torch.no_grad()
def _unit_output(norm: nn.LayerNorm) -> None:
    """Affine of a LayerNorm whose output is the unit vector (x - m) / ||x - m|| (up to eps)."""
    norm.weight.fill_(1 / math.sqrt(norm.normalized_shape[-1]))
    norm.bias.zero_()


def _norm1_readers(attn: nn.Module) -> list[str]:
    """The Linear layers reading an attention layer's input: qkv, and the anchor and gate projections if present."""
    return [name for name in ("qkv", "anchor", "gate") if getattr(attn, name, None) is not None]


@torch.no_grad()
def fold_norms(net: KWSTransformer) -> KWSTransformer:
    """Make every LayerNorm give unit vectors, its affine and sqrt(d) moved into the Linear layers reading it.

    W (g sqrt(d) u + b0) + b = (W g sqrt(d)) u + (W b0 + b), u = n / sqrt(d): the same function, in place.
    """
    def fold(norm: nn.LayerNorm, *readers: nn.Linear) -> None:
        for layer in readers:
            layer.bias.add_(layer.weight @ norm.bias)
            layer.weight.mul_(norm.weight * math.sqrt(norm.normalized_shape[-1]))
        _unit_output(norm)

    for block in net.blocks:
        fold(block.norm1, *(getattr(block.attn, name) for name in _norm1_readers(block.attn)))
        fold(block.norm2, block.ff[0])
    fold(net.norm, net.head)  # the mean over time commutes with the affine
    return net


def _quantize_transformer(net: KWSTransformer, preset: Preset) -> None:
    """Points everywhere the int8 graph holds a tensor; Linear inputs share their producer's quantizer."""
    fold_norms(net)
    net.quant = QuantPoints(tuple(n for n in MODEL_POINTS if n != "pos" or net.pos is not None), preset)
    net.stem = _quant_layer(net.stem, preset, output_quant=preset.act)  # input: QATModel.input_quant
    for block in net.blocks:
        attn = block.attn
        kind = "softmax" if isinstance(attn, SoftmaxAttention) else "oscillator"
        linear = kind == "oscillator" and attn.form == "linear"
        if linear and (attn.d_osc != 2 or not LINEAR_P[0] <= attn.p <= LINEAR_P[1]):
            raise ValueError(f"model.form 'linear' in int8 needs d_osc 2 and p in {LINEAR_P[0]}..{LINEAR_P[1]} (the "
                             f"integer linear core), not d_osc {attn.d_osc}, p {attn.p}")
        if kind == "oscillator" and attn.positive in COSINE:
            raise ValueError(f"positive map {attn.positive!r} has no int8 path yet (the integer cores and the int8 "
                             "graphs compute maps of q.k, not of unit q and k): train with another map for int8")
        anchor, gate = getattr(attn, "anchor", None), getattr(attn, "gate", None)
        block.norm1, block.norm2 = IntegerLayerNorm(preset), IntegerLayerNorm(preset)
        twin = linear and not attn.window  # its builtin twin's points too: int8.tflite (export/tflite/twin.py)
        names = ((LINEAR_POINTS + TWIN_POINTS if twin else LINEAR_POINTS if linear else QUANT_POINTS[kind])
                 + tuple(n for n in LAYER_POINTS[kind] if n != "r_raw" or anchor is not None)
                 + ((STREAM_GATE_POINTS if attn.window else LINEAR_GATE_POINTS if linear else GATE_POINTS)
                    if gate is not None else ()))
        attn.quant = QuantPoints(names, preset, FIXED[kind], TWIN_PASS if twin else ())
        for name in _norm1_readers(attn):
            setattr(attn, name, _quant_layer(getattr(attn, name), preset, block.norm1.quant.proxy("norm")))
        attn.out = _quant_layer(attn.out, preset, attn.quant.proxy("out"))
        block.quant = QuantPoints(BLOCK_POINTS, preset)
        block.ff[0] = _quant_layer(block.ff[0], preset, block.norm2.quant.proxy("norm"))
        block.ff[2] = _quant_layer(block.ff[2], preset, block.quant.proxy("ff_hidden"))
    net.norm = IntegerLayerNorm(preset)
    net.head = _quant_layer(net.head, preset, net.quant.proxy("pool"))


def _quantize_dscnn(qat: QATModel, preset: Preset) -> None:
    """Batch norms folded, a point after every ReLU (unsigned), each convolution reading its producer's point.
    The stem reads the input's quantizer (QATModel.input_quant gives plain tensors here: the SAME padding
    before the stem adds exact zeros)."""
    net = qat.net.fold_batch_norms()
    names = net.points()
    net.quant = QuantPoints(names, preset, dict.fromkeys(names, preset.act_unsigned))
    qat.input_quant.return_quant_tensor = False
    net.stem = _quant_layer(net.stem, preset, qat.input_quant.act_quant)
    producer = "stem"
    for i, (dw, pw) in enumerate(zip(net.dw, net.pw)):
        net.dw[i] = _quant_layer(dw, preset, net.quant.proxy(producer))
        producer = f"dw{i}"
        net.pw[i] = _quant_layer(pw, preset, net.quant.proxy(producer))
        producer = f"pw{i}"
    net.head = _quant_layer(net.head, preset, net.quant.proxy(producer))  # the pooled mean keeps its point


def quantize_model(model: nn.Module, quant_cfg: QuantConfig) -> QATModel:
    """The QAT twin of a float KWS network of any kind, with its float weights (the input is kept)."""
    preset, net = PRESETS[quant_cfg.preset], copy.deepcopy(model)
    if isinstance(net, DSCNN):
        qat = QATModel(net, quant_cfg)
        _quantize_dscnn(qat, preset)
        return qat
    if isinstance(net, KWSTransformer):
        _quantize_transformer(net, preset)
    else:  # Kuramoto: Linear/Conv1d layers only, each quantizing its own input
        for module in list(net.modules()):
            for name, child in module.named_children():
                if type(child) in (nn.Linear, nn.Conv1d):
                    first = module is net and name in INPUT_LAYERS
                    setattr(module, name, _quant_layer(child, preset, None if first else preset.act,
                                                       preset.act if first else None))
    return QATModel(net, quant_cfg)


def float_model(model: QATModel) -> nn.Module:
    """The float network holding a QAT model's (unquantized) weights, its LayerNorms folded (fold_norms), a
    DS-CNN's batch norms folded."""
    net = build_model(model.cfg)
    if isinstance(net, DSCNN):
        net.fold_batch_norms()
    own = net.state_dict()
    missing = net.load_state_dict({k: v for k, v in model.net.state_dict().items() if k in own},
                                  strict=False).missing_keys
    norms = {n: m for n, m in net.named_modules() if isinstance(m, nn.LayerNorm)}
    if any(k.rsplit(".", 1)[0] not in norms for k in missing):
        raise ValueError(f"the QAT model lacks weights of its float network: {missing}")
    for norm in norms.values():  # as fold_norms leaves them
        _unit_output(norm)
    return net.eval()


def _twins(model: nn.Module) -> list[nn.Module]:
    """The whole-clip linear-form oscillator layers of a QAT model: those with a builtin twin (TWIN_POINTS)."""
    return [m for m in model.modules() if getattr(m, "form", None) == "linear" and not m.window
            and isinstance(getattr(m, "quant", None), QuantPoints) and TWIN_POINTS[0] in m.quant.points]


def twin_points(model: nn.Module) -> list[nn.Module]:
    """The quantizers of the twins' own points (TWIN_POINTS), in model order."""
    return [attn.quant.points[n] for attn in _twins(model) for n in TWIN_POINTS]


def twin_state_keys(model: nn.Module) -> set[str]:
    """The state-dict keys of the twins' points and their flag: what a checkpoint written before the twins may lack
    (its model then exports no int8.tflite)."""
    ids = {id(q) for q in twin_points(model)}
    owners = [name for name, m in model.named_modules() if id(m) in ids]
    return {k for k in model.state_dict() if k == "twin_calibrated" or any(k.startswith(o + ".") for o in owners)}


def twin_legacy_keys(model: nn.Module, keys) -> set[str]:
    """Those of a checkpoint's keys that are the twins' TWIN_PASS points, which checkpoints of the direct core's int8
    twin held (their qk and zr are the twins' points still)."""
    owners = [f"{name}.points.{n}." for name, m in model.named_modules()
              if isinstance(m, QuantPoints) and m.passed for n in m.passed]
    return {k for k in keys if any(k.startswith(o) for o in owners)}


@torch.no_grad()
def calibrate(model: QATModel, batches, n_batches: int) -> int:
    """Set activation scales from statistics of n_batches (features, labels); returns the clips seen. A linear-form
    model runs its direct form meanwhile, which reaches its twin's points too: in calibration the points pass float
    values, and both forms compute the same floats (attention.py), so every other point sees what it would."""
    model.eval()  # dropout off: the statistics of inference-time activations
    seen = 0
    with direct_form(model), calibration_mode(model):
        for _, (feats, _labels) in zip(range(n_batches), batches):
            model(feats)
            seen += len(feats)
    if twin_points(model):
        model.twin_calibrated.fill_(1)
    return seen
