"""ONNX export of a float or QAT KWS model: standard ops, plus variants with the custom oscillator op.

Files (input "features" [batch, frames, coeffs] -> output "logits" [batch, classes], dynamic batch):
  float.onnx          the float network (a QAT model's float weights)
  float_op.onnx       the same with each oscillator core as one ai.edgeosc::OscillatorAttention node
  int8_qcdq.onnx      QAT model, Brevitas QCDQ: QuantizeLinear/DequantizeLinear around every quantized
                      tensor, int8 weights, int32 biases; onnxruntime folds them into int8 kernels
  int8_qcdq_op.onnx   the same with the custom op (its function body holds the core's Q/DQ pairs)
The *_op files exist for oscillator networks only; the int8 files for QAT/PTQ checkpoints only.
"""
from __future__ import annotations

import io
import tempfile
import warnings
from pathlib import Path

import onnx
import torch

from ...checkpoint import Checkpoint
from ...config import ExportConfig
from ...io import atomic_path
from ...models.attention import OscillatorAttention
from . import custom_op
from .trace import for_onnx
from ...runtime.onnx import INPUT, OUTPUT, load_onnx

FILES = ("float.onnx", "float_op.onnx", "int8_qcdq.onnx", "int8_qcdq_op.onnx")
DYNAMIC = {INPUT: {0: "batch"}, OUTPUT: {0: "batch"}}


def _kwargs(cfg: ExportConfig, custom: bool) -> dict:
    return dict(dynamo=False, opset_version=cfg.opset, input_names=[INPUT], output_names=[OUTPUT],
                dynamic_axes=DYNAMIC, custom_opsets={custom_op.DOMAIN: custom_op.VERSION} if custom else None,
                autograd_inlining=False)  # keep the custom op's autograd.Function as one node


def _oscillator_layer(model: torch.nn.Module) -> OscillatorAttention | None:
    """The oscillator layer whose settings the function body is traced from (all layers must agree)."""
    layers = [m for m in model.modules() if isinstance(m, OscillatorAttention)]
    settings = {(m.p, m.eps, m.positive, m.d_osc, m.d_h, m.form, m.gate is not None) for m in layers}
    if len(settings) > 1:
        raise ValueError(f"oscillator layers differ in settings {sorted(settings)}; one function cannot serve them")
    return layers[0] if layers else None


def _float_onnx(net: torch.nn.Module, x: torch.Tensor, cfg: ExportConfig, custom: bool) -> onnx.ModelProto:
    buf = io.BytesIO()
    with warnings.catch_warnings():  # the tracer notes that d_h becomes a constant: it is one
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)  # QCDQ: legacy exporter (docs/toolchain.md#onnx-export)
        torch.onnx.export(net, (x,), buf, **_kwargs(cfg, custom))
    return onnx.load_from_string(buf.getvalue())


def _qcdq_onnx(model: torch.nn.Module, x: torch.Tensor, cfg: ExportConfig, custom: bool) -> onnx.ModelProto:
    from brevitas.export import export_onnx_qcdq
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)  # QCDQ: legacy exporter (docs/toolchain.md#onnx-export)
        path = Path(tmp) / "model.onnx"  # Brevitas' QCDQ export returns nothing without a path
        # initializers must not be graph inputs, or onnxruntime cannot fold them into int8 kernels
        export_onnx_qcdq(model, args=x, export_path=str(path), keep_initializers_as_inputs=False,
                         **_kwargs(cfg, custom))
        return onnx.load(path)


def _save(proto: onnx.ModelProto, path: Path) -> Path:
    with atomic_path(path) as tmp:
        onnx.save(proto, tmp)
    load_onnx(path)  # full checker, finite weights, features -> logits
    return path


def export(ckpt: Checkpoint, cfg: ExportConfig, out_dir: str | Path) -> Path:
    """Write the ONNX files of a float or QAT checkpoint (see FILES) into out_dir; returns out_dir."""
    out_dir, model = Path(out_dir), ckpt.model
    qat = model if hasattr(model, "quant_cfg") else None
    if qat is not None:
        from ...quant import float_model
        net = float_model(qat)
    else:
        net = model
    net.eval()
    mcfg = model.cfg
    x = torch.randn(1, mcfg.n_frames, mcfg.n_coeffs, generator=torch.Generator().manual_seed(0))
    net = for_onnx(net)
    layer = _oscillator_layer(net)  # traced: the function body reads its head layout
    with torch.no_grad():
        _save(_float_onnx(net, x, cfg, custom=False), out_dir / "float.onnx")
        if layer is not None:
            proto = _float_onnx(custom_op.use_custom_op(net), x, cfg, custom=True)
            _save(custom_op.attach_function(proto, layer), out_dir / "float_op.onnx")
    if qat is None:
        return out_dir
    qat.eval()
    qat = for_onnx(qat)
    _save(_qcdq_onnx(qat, x, cfg, custom=False), out_dir / "int8_qcdq.onnx")
    if layer is not None:
        proto = _qcdq_onnx(custom_op.use_custom_op(qat), x, cfg, custom=True)
        _save(custom_op.attach_function(proto, _oscillator_layer(qat)), out_dir / "int8_qcdq_op.onnx")
    return out_dir
