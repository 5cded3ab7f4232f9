"""What the ONNX files trace (edgeosc/export/onnx/trace.py): the torch model's function in few and large ops."""
import warnings

import numpy as np
import onnx
import pytest
import torch

from edgeosc.export.onnx.trace import _harmonic_map, _monomials, direct_linear_core, for_onnx
from edgeosc.models.attention import (OscillatorAttention, harmonic_coefficients, oscillator_attention_linear,
                                      readout_features)


@pytest.mark.parametrize("p", range(1, 9))
def test_monomials_give_the_linear_forms_readout_features(p):
    """[1, cos m t, sin m t] as the linear form computes them, Re and Im of (x_0 + i x_1)^m, for any 2-vector (an
    int8 unit vector is one to 1/128 only)."""
    x = torch.randn(3, 7, 2, dtype=torch.float64) * 1.3
    mono, exps = _monomials(x, p)
    assert len(exps) == len(set(exps)) == (p + 1) * (p + 2) // 2 and mono.shape[-1] == len(exps)
    phi, psi = readout_features(x, x, p)
    k_phi = _harmonic_map(exps, p, harmonic_coefficients(p), torch.float64)
    k_psi = _harmonic_map(exps, p, [1.0] * (p + 1), torch.float64)
    assert torch.allclose(mono @ k_phi, phi, rtol=1e-12, atol=1e-12)
    assert torch.allclose(mono @ k_psi, psi, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("gate", [False, True])
@pytest.mark.parametrize("p", [1, 3, 4])
@pytest.mark.parametrize("tokens", [None, 11])  # a function body's dynamic T, a model's
def test_the_direct_core_is_the_linear_core(gate, p, tokens):
    torch.manual_seed(p)
    layer = OscillatorAttention(16, 2, 2, p, "taylor2", form="linear", key_gate=gate).double().eval()
    layer.onnx_tokens = tokens
    q, k, v = (torch.randn(3, 2, 11, 8, dtype=torch.float64) * 2 for _ in range(3))
    r = torch.randn(3, 2, 11, 2, dtype=torch.float64)
    r = r / r.norm(dim=-1, keepdim=True)
    g = torch.rand(3, 2, 11, 1, dtype=torch.float64) if gate else None
    want = oscillator_attention_linear(q, k, v, r, p=p, g=g)  # a float layer: (1 + z.r)^p over T x T
    assert torch.allclose(direct_linear_core(layer, q, k, v, r, g=g), want, rtol=1e-9, atol=1e-12)
    layer.quant = lambda name, x: x  # a quantized layer's (its points the identity here): the harmonics' sums
    for anchors in (r, r * (1 + 0.01 * torch.randn(3, 2, 11, 1))):  # unit vectors, and as int8 ones to 1/128
        want = oscillator_attention_linear(q, k, v, anchors, p=p, g=g)
        got = direct_linear_core(layer, q, k, v, anchors, g=g)
        assert torch.allclose(got, want, rtol=1e-9, atol=1e-12)
    if gate:  # no key with weight: 0, as the linear form
        assert not direct_linear_core(layer, q, k, v, r, g=torch.zeros_like(g)).any()


def _qat_model(window=0):
    from edgeosc.config import ModelConfig, QuantConfig
    from edgeosc.models.kws import build_model
    from edgeosc.quant import calibrate, quantize_model
    torch.manual_seed(0)
    net = build_model(ModelConfig(n_classes=3, d_osc=2, positive="taylor2", form="linear", key_gate=True)).eval()
    qat = quantize_model(net, QuantConfig())
    x = torch.randn(16, 49, 40)
    calibrate(qat, [(x, None)], 1)
    return qat.eval(), x


def test_projections_by_head_compute_the_same_values():
    """The fused, head-major projection of a QAT layer gives the layers' outputs reordered, the queries times the score
    scale, to float32 rounding (a GEMM of another width may sum in another order, as the CPU's kernels choose)."""
    qat, x = _qat_model()
    attn, block = qat.net.blocks[0].attn, qat.net.blocks[0]
    seen = []
    hook = block.norm1.register_forward_hook(lambda module, args, out: seen.append(out))
    with torch.no_grad():
        qat(x[:2])
        hook.remove()
        n = seen[0]  # what the projections read
        widths = [attn.d_h] * 3 + [attn.d_osc, 1]
        got = for_onnx(qat).net.blocks[0].attn.onnx_proj(n).unflatten(-1, (attn.heads, -1)).split(widths, -1)
        parts = [p.unflatten(-1, (attn.heads, -1)) for p in
                 list(attn.qkv(n).chunk(3, -1)) + [attn.anchor(n), attn.gate(n)]]
        q = parts[0] * attn.log_scale.exp().reshape(attn.heads, 1)  # the score scale folded into the query rows
        assert torch.allclose(got[0], q, rtol=1e-6, atol=0) and not torch.allclose(got[0], parts[0])
        for a, b in zip(got[1:], parts[1:]):
            assert torch.allclose(a, b, rtol=1e-6, atol=1e-6)


def test_onnx_files_are_few_ops_with_int8_projections(tmp_path):
    """The export traces for_onnx's graph: in onnxruntime every Linear becomes an int8 kernel (MatMulIntegerToFloat,
    as softmax's qkv), the core a handful of MatMuls; the files still equal the QAT model."""
    from edgeosc.checkpoint import Checkpoint
    from edgeosc.config import ExportConfig, FeatureConfig
    from edgeosc.export import export
    from edgeosc.runtime.onnx import OnnxRunner
    qat, x = _qat_model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folder = export(Checkpoint.of(qat, FeatureConfig(), ["a", "b", "c"]), ExportConfig(), tmp_path)
    with torch.no_grad():
        ref = qat(x).numpy()
    lsb = float(qat.output_quant.act_quant.scale().detach())
    for name in ("int8_qcdq.onnx", "int8_qcdq_op.onnx"):
        opt = tmp_path / f"{name}.optimized"
        out = OnnxRunner(folder / name, optimized_model=opt, custom_op=False)(x.numpy())
        assert np.abs(out - ref).max() <= lsb * 1.001 and (out.argmax(-1) == ref.argmax(-1)).all()
        nodes = onnx.load(opt).graph.node
        proj = [n.op_type for n in nodes if "onnx_proj/MatMul" in n.name]  # one per block, an int8 kernel
        assert proj == ["MatMulIntegerToFloat"] * 2, proj
        assert len(nodes) < 300, len(nodes)  # the linear core's trace: ~700 (int8_qcdq.onnx), ~500 (the op's body)
    model = onnx.load(folder / "int8_qcdq_op.onnx")
    assert len(model.functions[0].node) < 200  # the body: heads split and merged, the direct form (the linear
    # form's trace: ~300)


def test_float_onnx_holds_the_cores_constants_in_its_projections(tmp_path):
    """float.onnx of the shipped oscillator (taylor2 key gate, whole clip): the score's shift, [v, 1] and the gate's
    shift are constant rows of the fused projection, so the core has no Pad and no Clip, and equals the torch model;
    the op file keeps the op's own inputs."""
    from edgeosc.checkpoint import Checkpoint
    from edgeosc.config import ExportConfig, FeatureConfig, ModelConfig
    from edgeosc.export import export
    from edgeosc.models.kws import build_model
    from edgeosc.runtime.onnx import OnnxRunner
    torch.manual_seed(0)
    net = build_model(ModelConfig(n_classes=3, n_frames=12, n_coeffs=10, dropout=0.0)).eval()
    x = torch.randn(4, 12, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folder = export(Checkpoint.of(net, FeatureConfig(), ["a", "b", "c"]), ExportConfig(), tmp_path)
    with torch.no_grad():
        ref = net(x).numpy()
    ops = {n.op_type for n in onnx.load(folder / "float.onnx").graph.node}
    assert not ops & {"Pad", "Clip"} and "LpNormalization" in ops, ops
    for name in ("float.onnx", "float_op.onnx"):
        out = OnnxRunner(folder / name, custom_op=False)(x.numpy())
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_streaming_models_trace_as_they_are():
    from edgeosc.config import ModelConfig
    from edgeosc.models.kws import build_model
    net = build_model(ModelConfig(n_classes=3, d_osc=2, positive="taylor2", form="linear", window=8,
                                  rotate_anchors=True))
    traced = for_onnx(net)
    assert not any(hasattr(m, "onnx_proj") for m in traced.modules())
    assert torch.equal(traced.blocks[0].attn.omega, net.blocks[0].attn.omega)
