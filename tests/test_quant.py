import json

import pytest
import torch
from brevitas.graph.calibrate import quantization_status_manager
from brevitas.nn import QuantConv1d, QuantIdentity, QuantLinear
from click.testing import CliRunner

from edgeosc.cli import main
from edgeosc.config import ATTENTION_KINDS, DIRECT_OSCILLATOR, QUANT_PRESETS, FeatureConfig, ModelConfig, QuantConfig, TrainConfig
from edgeosc.models.attention import GATE_POINTS, LAYER_POINTS, QUANT_POINTS, oscillator_attention, \
    softmax_attention
from edgeosc.models.kws import BLOCK_POINTS, MODEL_POINTS, build_model
from edgeosc.quant import FIXED, PRESETS, IntegerLayerNorm, QATModel, calibrate, float_model, quantize_model
from edgeosc.checkpoint import load_checkpoint
from edgeosc.evaluate import evaluate_checkpoint
from edgeosc.train import train


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: threads only contend with whatever else the machine runs
    yield
    torch.set_num_threads(n)


def net(kind="oscillator", seed=0):
    """A float net of an attention kind, or "gated": the direct oscillator core with the key gate."""
    torch.manual_seed(seed)
    gated = kind == "gated"
    return build_model(ModelConfig(**{**DIRECT_OSCILLATOR, "key_gate": gated}, dropout=0.0,
                                   attention="oscillator" if gated else kind)).eval()


def test_presets_and_hook_points_match_the_cores():
    assert tuple(PRESETS) == QUANT_PRESETS
    q, k, v = (torch.randn(2, 3, 7, 4) for _ in range(3))
    r = torch.nn.functional.normalize(torch.randn(2, 3, 7, 2), dim=-1)
    for kind, call in (("oscillator", lambda h: oscillator_attention(q, k, v, r, quant=h)),
                       ("softmax", lambda h: softmax_attention(q, k, v, quant=h))):
        seen = []
        call(lambda name, x: seen.append(name) or x)
        assert tuple(seen) == QUANT_POINTS[kind]  # every point once, in the order of the maths
    seen, points = [], QUANT_POINTS["oscillator"]
    oscillator_attention(q, k, v, r, quant=lambda name, x: seen.append(name) or x, g=torch.rand(2, 3, 7, 1))
    c = points.index("c")  # the key gate: (1 + z.r)^p held as "pow" before c = pow g, then c's unit rows "cn"
    assert tuple(seen) == points[:c] + ("pow", "c", "cn") + points[c + 1:]


@pytest.mark.parametrize("kind", ATTENTION_KINDS + ("gated",))
def test_qat_twin_holds_the_float_weights_and_maths(kind):
    model, x = net(kind), torch.randn(3, 49, 40)
    qat = quantize_model(model, QuantConfig())
    layers = [m for m in model.modules() if type(m) in (torch.nn.Linear, torch.nn.Conv1d)]
    assert len(layers) == sum(isinstance(m, (QuantLinear, QuantConv1d)) for m in qat.modules())
    assert not any(isinstance(m, QuantLinear) for m in model.modules())  # the float model is left as it was
    with torch.no_grad(), quantization_status_manager(qat, disable_act_quant=True, disable_weight_quant=True,
                                                      disable_bias_quant=True):
        torch.testing.assert_close(qat(x), model(x), atol=2e-5, rtol=1e-5)  # float32 reassociation
    with torch.no_grad():  # LayerNorm affines folded into the Linear layers: the same function
        torch.testing.assert_close(float_model(qat)(x), model(x), atol=1e-5, rtol=1e-5)
    if kind == "ds-cnn":  # batch norms folded; every convolution reads its producer's point
        from brevitas.nn import QuantConv2d
        d = qat.net
        assert sum(isinstance(m, QuantConv2d) for m in qat.modules()) == 1 + 2 * d.cfg.blocks
        assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in qat.modules())
        assert set(d.quant.points) == set(d.points()) and all(not p.act_quant.is_signed for p in d.quant.points.values())
        assert d.stem.input_quant is qat.input_quant.act_quant and d.head.input_quant is d.quant.proxy(f"pw{d.cfg.blocks - 1}")
        assert [m.input_quant for m in (d.dw[1], d.pw[1])] == [d.quant.proxy("pw0"), d.quant.proxy("dw1")]
    elif kind != "kuramoto":
        base = "oscillator" if kind == "gated" else kind
        points = QUANT_POINTS[base] + LAYER_POINTS[base] + (GATE_POINTS if kind == "gated" else ())
        assert all(set(m.quant.points) == set(points) for m in qat.modules() if hasattr(m, "qkv"))
        assert set(qat.net.quant.points) == set(MODEL_POINTS)
        assert all(set(b.quant.points) == set(BLOCK_POINTS) for b in qat.net.blocks)
        norms = [m for m in qat.modules() if isinstance(m, IntegerLayerNorm)]
        assert len(norms) == 2 * len(qat.net.blocks) + 1 and not any(isinstance(m, torch.nn.LayerNorm)
                                                                     for m in qat.modules())
        # a Linear reads its input through its producer's quantizer: one tensor, one scale
        attn = qat.net.blocks[0].attn
        readers = [attn.qkv] + ([attn.gate] if kind == "gated" else [])
        assert all(m.input_quant is qat.net.blocks[0].norm1.quant.proxy("norm") for m in readers)
        assert attn.out.input_quant is attn.quant.proxy("out")


def test_calibration_sets_every_scale_and_survives_a_checkpoint():
    qat, x = quantize_model(net(), QuantConfig()), torch.randn(16, 49, 40)
    assert calibrate(qat, [(x[:8], None), (x[8:], None)], 2) == 16
    fixed = FIXED["oscillator"]
    learned, constant = [], []
    for name, m in qat.named_modules():
        if isinstance(m, QuantIdentity):
            point = name.rsplit(".", 1)[-1]
            is_fixed = ("attn" in name and point in fixed) or point == "norm"
            (constant if is_fixed else learned).append(float(m.act_quant.scale().detach()))
    assert all(s > 0 for s in learned) and len(set(learned)) == len(learned)  # each calibrated on its own data
    assert set(constant) == {1 / 128}  # r, wn, z, LayerNorm: TFLite L2_NORMALIZATION's output scale
    state = qat.state_dict()
    fresh = quantize_model(build_model(qat.cfg), QuantConfig())
    fresh.load_state_dict(state)  # strict: every calibrated scale has its key
    with torch.no_grad():
        assert torch.equal(fresh.eval()(x), qat(x))


def test_w4a8_preset_has_4_bit_weights():
    head = lambda preset: quantize_model(net(), QuantConfig(preset=preset)).net.head.quant_weight()  # noqa: E731
    for preset, hi in (("int8", 127), ("w4a8", 7)):
        w = head(preset)
        ints = (w.value / w.scale).round()
        assert int(w.bit_width) == (8 if preset == "int8" else 4) and ints.abs().max() == hi


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_qat_and_ptq_through_the_cli(tones, data_cfg, tmp_path, monkeypatch):
    train(tones, tmp_path / "float", model_cfg=ModelConfig(size="small"), feature_cfg=FeatureConfig(),
          train_cfg=TrainConfig(epochs=2, batch_size=8, lr=1e-2), data_cfg=data_cfg, progress=False)
    src = tmp_path / "float" / "best.pt"
    monkeypatch.setattr("edgeosc.data.load_dataset", lambda *a, **k: tones)
    common = ["--from", src, "--batch-size", 8, "--calib-batches", 1, "--quiet", "--no-augment"]
    for mode, epochs in (("ptq", 0), ("qat", 1)):
        res = invoke("train", "--qat", "--epochs", epochs, "--out", tmp_path / mode, *common)
        assert res.exit_code == 0, res.output
        assert f"int8-{mode}" in res.output
        ckpt = load_checkpoint(tmp_path / mode / "best.pt")
        assert isinstance(ckpt.model, QATModel) and ckpt.quant_cfg == QuantConfig(calibration_batches=1)
        assert ckpt.raw["quant"]["source"]["path"] == str(src) and ckpt.raw["quant"]["calibration"]["clips"] == 8
        results = json.loads((tmp_path / mode / "results.json").read_text())
        assert results["quant"] == f"int8-{mode}" and results["epochs"] == epochs
        assert evaluate_checkpoint(tmp_path / mode / "best.pt", tones)["accuracy"] == results["test_accuracy"]
    res = invoke("eval", tmp_path / "qat" / "best.pt")
    assert res.exit_code == 0 and "test accuracy" in res.output, res.output
    res = invoke("export", tmp_path / "ptq")
    assert res.exit_code == 0 and "int8_qcdq_op.onnx" in res.output, res.output
    manifest = json.loads((tmp_path / "ptq" / "export-onnx" / "manifest.json").read_text())
    assert manifest["quant"]["config"]["preset"] == "int8" and set(manifest["tools"]) >= {"torch", "onnxruntime"}
    res = invoke("eval", tmp_path / "ptq" / "export-onnx" / "int8_qcdq_op.onnx")  # an export's file, in onnxruntime
    assert res.exit_code == 0 and "test accuracy" in res.output and "(onnxruntime" in res.output, res.output
    # misuse: one-line errors
    quantized = tmp_path / "qat" / "best.pt"
    for args, needle in ((["--qat"], "--from"), (["--qat", "--from", src, "--attention", "softmax"], "--attention"),
                         (["--qat", "--from", quantized, "--out", tmp_path / "x"], "already quantized")):
        res = invoke("train", *args)
        assert res.exit_code == 1 and needle in res.output and res.exception.__class__ is SystemExit, res.output
    res = invoke("export", tmp_path / "nothing-here")
    assert res.exit_code == 1 and "no such checkpoint" in res.output


@pytest.mark.parametrize("form", ["linear", "direct"])
def test_int8_refuses_a_map_of_unit_q_and_k(form):
    """cos2 has no integer core or int8 graph yet: QAT says so instead of quantizing a map of q.k."""
    model = build_model(ModelConfig(positive="cos2", form=form)).eval()
    with pytest.raises(ValueError, match="'cos2' has no int8 path"):
        quantize_model(model, QuantConfig())
