"""DS-CNN (MLPerf Tiny's KWS reference) through the stages: its size and MACs, batch norms folded exactly, float
and int8 TFLite equal to the float and QAT models in every interpreter, ONNX likewise, and the C firmware equal
to TFLite Micro bit for bit on 128 inputs."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgeosc import runtime
from edgeosc.checkpoint import Checkpoint
from edgeosc.config import ExportConfig, FeatureConfig, ModelConfig, QuantConfig
from edgeosc.models.dscnn import DSCNN, same_padding
from edgeosc.models.kws import build_model, count_parameters
from edgeosc.quant import calibrate, quantize_model

MLPERF = FeatureConfig(n_mfcc=10, f_max=4000.0)  # 49 x 10 MFCC
CLASSES = [f"c{i}" for i in range(12)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A DS-CNN with non-trivial batch statistics, its calibrated QAT twin, both exported."""
    from edgeosc.export.onnx import export as export_onnx
    from edgeosc.export.tflite import export
    torch.manual_seed(0)
    net = build_model(ModelConfig(attention="ds-cnn", n_frames=49, n_coeffs=10, n_classes=12))
    with torch.no_grad():
        for _ in range(3):
            net(2 * torch.randn(64, 49, 10))  # running statistics away from (0, 1)
    net.eval()
    x = torch.randn(32, 49, 10)
    qat = quantize_model(net, QuantConfig())
    calibrate(qat, [(x, None)], 1)
    qat.eval()
    root = tmp_path_factory.mktemp("dscnn")
    with torch.no_grad():
        out = dict(net=net, qat=qat, x=x, want=net(x).numpy(), ref=qat(x).numpy(), root=root)
    for name, model in (("float", net), ("int8", qat)):
        ckpt = Checkpoint.of(model, MLPERF, CLASSES)
        out[f"{name}_tflite"] = export(ckpt, ExportConfig(), root / f"{name}-tflite")
        out[f"{name}_onnx"] = export_onnx(ckpt, ExportConfig(), root / f"{name}-onnx")
    return out


def test_architecture_is_mlperf_tinys():
    net = build_model(ModelConfig(attention="ds-cnn", n_frames=49, n_coeffs=10, n_classes=12))
    assert isinstance(net, DSCNN) and net.cfg.d_model == 64 and net.cfg.blocks == 4
    assert net.stem.kernel_size == (10, 4) and net.stem.stride == (2, 2)
    assert all(c.groups == 64 and c.kernel_size == (3, 3) for c in net.dw)
    assert 20_000 < count_parameters(net) < 25_000
    assert same_padding(49, 10, 2) == (4, 5) and same_padding(10, 4, 2) == (1, 1)  # TensorFlow's SAME
    with pytest.raises(ValueError, match="at least 5 frames"):
        build_model(ModelConfig(attention="ds-cnn", n_frames=3, n_coeffs=10))


def test_batch_norms_fold_exactly(models):
    x = models["x"]
    folded = build_model(models["net"].cfg)
    folded.load_state_dict(models["net"].state_dict())
    folded.eval().fold_batch_norms()
    with torch.no_grad():
        torch.testing.assert_close(folded(x), models["net"](x), atol=1e-5, rtol=1e-5)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())


def test_tflite_files_equal_the_models_in_every_interpreter(models):
    from edgeosc.bench.estimate import count_macs
    x = models["x"].numpy()
    lsb = float(models["qat"].output_quant.act_quant.scale().detach())
    for name in runtime.available_interpreters():
        got = runtime.load(models["float_tflite"] / "float.tflite", name).run(x)
        assert np.abs(got - models["want"]).max() < 1e-4, name
        got = runtime.load(models["int8_tflite"] / "int8.tflite", name).run(x)
        assert np.abs(got - models["ref"]).max() <= 1.001 * lsb, name  # the QAT model's integers
    macs = count_macs(models["int8_tflite"] / "int8.tflite")["by_kind"]
    assert macs["CONV_2D"] == 25 * 5 * 64 * 40 + 4 * 25 * 5 * 64 * 64 and macs["DEPTHWISE_CONV_2D"] == 4 * 25 * 5 * 64 * 9


def test_onnx_files_equal_the_models(models):
    from edgeosc.runtime.onnx import OnnxRunner
    x = models["x"].numpy()
    assert np.abs(OnnxRunner(models["float_onnx"] / "float.onnx")(x) - models["want"]).max() < 1e-4
    lsb = float(models["qat"].output_quant.act_quant.scale().detach())
    got = OnnxRunner(models["int8_onnx"] / "int8_qcdq.onnx", optimize=False)(x)
    assert np.abs(got - models["ref"]).max() <= 1.001 * lsb


def test_firmware_equals_tflite_micro_bit_for_bit(models):
    pytest.importorskip("tflite_micro")
    from edgeosc.bench.estimate import host_logits
    from edgeosc.export.c import generate
    tflite, root = models["int8_tflite"] / "int8.tflite", models["root"]
    generate(tflite, root / "fw", name="dscnn", features=MLPERF)
    micro = runtime.load(tflite, "tflite-micro")
    x = np.random.default_rng(0).integers(-128, 128, (128, 49, 10)).astype(np.int8)
    want = np.stack([micro.run_raw(xi[None]).ravel() for xi in x])
    got = host_logits(root / "fw", "dscnn", x.reshape(len(x), -1), root / "work")
    assert len(np.unique(want)) > 10  # not saturated
    np.testing.assert_array_equal(got, want)
