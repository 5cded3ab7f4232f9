"""The Kuramoto network: its settings, diagnostics, float exports (ONNX, TFLite) and old checkpoints."""
import dataclasses
import math

import numpy as np
import pytest
import torch

from edgeosc import runtime
from edgeosc.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from edgeosc.config import ExportConfig, FeatureConfig, ModelConfig, to_dict
from edgeosc.evaluate import Batches, evaluate
from edgeosc.export import export
from edgeosc.export.parity import float_parity
from edgeosc.features import FeatureExtractor
from edgeosc.models.kws import KWSKuramoto, build_model, count_parameters

CFG = ModelConfig(attention="kuramoto", n_classes=3)
VARIANTS = [dict(), dict(phase_map="tanh", phase_readout="prototype", max_step=0.5),
            dict(phase_map="linear", feed_forward=False)]


def net(seed=0, **settings) -> KWSKuramoto:
    torch.manual_seed(seed)
    return build_model(dataclasses.replace(CFG, **settings)).eval()


def test_default_is_matched_to_softmax_and_angle_phases_lie_on_the_circle():
    sizes = {k: count_parameters(build_model(ModelConfig(attention=k, n_classes=12))) for k in ("kuramoto", "softmax")}
    assert abs(sizes["kuramoto"] / sizes["softmax"] - 1) < 0.02, sizes
    theta = net().phases(100 * torch.randn(2, 49, 40))  # the angle map is bounded whatever the input scale
    assert theta.abs().max() <= math.pi
    with pytest.raises(ValueError, match="phase_map"):
        ModelConfig(attention="kuramoto", phase_map="sigmoid")
    with pytest.raises(ValueError, match="max_step"):
        ModelConfig(attention="kuramoto", max_step=0.0)


def test_increments_are_capped_per_coordinate_rms():
    model = net(max_step=0.25)
    block = model.blocks[0]
    assert block.max_step == pytest.approx(0.25 * math.sqrt(model.cfg.d_model))
    with torch.no_grad():
        theta = model.phases(torch.randn(2, 49, 40))
        out = block(theta)  # records its attention increment
        assert block.last.delta.norm(dim=-1).max() <= block.max_step * (1 + 1e-5)
        ff = (out - theta - block.last.delta).norm(dim=-1)  # the SwiGLU increment
        assert ff.max() <= block.max_step * (1 + 1e-5)


def test_diagnostics_are_order_parameters_in_the_unit_interval(tones):
    model = net(n_coeffs=40)
    feats = FeatureExtractor(FeatureConfig())
    res = evaluate(model, Batches(tones, "test", feats, torch.device("cpu")), 3, batch_size=8)
    diag = res["diagnostics"]
    assert [d["block"] for d in diag] == list(range(len(model.blocks)))
    for d in diag:
        assert 0 < d["local_order"] <= 1 + 1e-6 and 0 < d["global_order_in"] <= 1 + 1e-6 and d["omega_abs"] > 0
    # each block's output is the next block's input
    assert diag[0]["global_order_out"] == pytest.approx(diag[1]["global_order_in"], rel=1e-5)


@pytest.mark.parametrize("settings", VARIANTS)
def test_float_tflite_and_onnx_equal_the_torch_network(settings, tmp_path):
    model = net(**settings)
    ckpt = Checkpoint.of(model, FeatureConfig(), ["a", "b", "c"])
    x = torch.randn(4, 49, 40, generator=torch.Generator().manual_seed(1)).numpy()
    tfl = export(ckpt, ExportConfig(), tmp_path / "tflite", "tflite")
    assert sorted(p.name for p in tfl.iterdir()) == ["float.tflite"]  # no int8 path
    errors = float_parity(model, tfl / "float.tflite", x)
    assert errors and max(errors.values()) < 1e-4, errors
    # TFLite Micro has no ATAN2: the angle map's file runs in the two other interpreters only
    assert ("tflite-micro" in errors) == (model.cfg.phase_map != "angle" and
                                          "tflite-micro" in runtime.available_interpreters())
    onnx_dir = export(ckpt, ExportConfig(), tmp_path / "onnx", "onnx")
    from edgeosc.runtime.onnx import OnnxRunner
    y = OnnxRunner(onnx_dir / "float.onnx")(x)
    with torch.no_grad():
        assert np.abs(y - model(torch.as_tensor(x)).numpy()).max() < 1e-4


def test_checkpoint_from_before_the_settings_loads_as_it_was_trained(tmp_path):
    k = net().cfg.d_model  # the old network capped each increment's norm at 1 radian
    legacy = net(phase_map="linear", phase_readout="prototype", max_step=1 / math.sqrt(k))
    config = {k: v for k, v in to_dict(legacy.cfg).items()
              if k not in ("phase_map", "max_step", "phase_readout", "feed_forward")}
    ckpt = Checkpoint.of(legacy, FeatureConfig(), ["a", "b", "c"])
    raw = dict(format="edgeosc-checkpoint", version=1, model_config=config, feature_config=to_dict(ckpt.feature_cfg),
               data_config=to_dict(ckpt.data_cfg), train_config=to_dict(ckpt.train_cfg), classes=["a", "b", "c"],
               quant=None, model=legacy.state_dict())
    save_checkpoint(tmp_path / "old.pt", raw)
    loaded = load_checkpoint(tmp_path / "old.pt")
    assert (loaded.model_cfg.phase_map, loaded.model_cfg.phase_readout) == ("linear", "prototype")
    x = torch.randn(2, 49, 40)
    with torch.no_grad():
        assert torch.equal(loaded.model.eval()(x), legacy(x))
