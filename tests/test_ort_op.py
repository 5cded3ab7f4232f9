"""The ai.edgeosc::OscillatorAttention kernel for onnxruntime (export/ort_op, edgeosc/runtime/ort_op.py).

The library stands in for the node's ONNX function: the same logits through a whole exported model (float_op.onnx
to float32 rounding, int8_qcdq_op.onnx to the odd one-step flip at a point), the same outputs as the torch core on
a bare node, OnnxRunner registering it by itself, and every way it cannot run a file ends with the function inlined
(one warning) or, when asked for the kernel, a clear error.
"""
import ctypes
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from edgeosc.cbuild import compiler
from edgeosc.runtime import ort_op
from edgeosc.runtime.onnx import OnnxModelError, OnnxRunner

ort = pytest.importorskip("onnxruntime")
try:
    compiler()
except RuntimeError:
    pytest.skip("no C compiler", allow_module_level=True)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny untrained oscillator of the pipeline's kind (linear core, d_osc 2, key gate, p 4, d_h 8), QAT-calibrated
    and exported to ONNX (float.onnx, float_op.onnx, int8_qcdq.onnx, int8_qcdq_op.onnx); a feature batch."""
    from edgeosc.checkpoint import Checkpoint
    from edgeosc.config import ExportConfig, FeatureConfig, ModelConfig, QuantConfig
    from edgeosc.export import export
    from edgeosc.models.kws import build_model
    from edgeosc.quant import calibrate, quantize_model

    torch.manual_seed(0)
    model = build_model(ModelConfig(n_classes=3, d_osc=2, positive="taylor2", form="linear", key_gate=True,
                                    size="tiny")).eval()
    x = torch.randn(48, 49, 40)
    qat = quantize_model(model, QuantConfig())
    calibrate(qat, [(x[:24], None), (x[24:], None)], 2)
    qat.eval()
    out = tmp_path_factory.mktemp("ort-op")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes
        export(Checkpoint.of(qat, FeatureConfig(), ["a", "b", "c"]), ExportConfig(), out)
    lsb = float(qat.output_quant.act_quant.scale().detach())
    return out, x.numpy(), lsb


def test_the_library_builds_and_onnxruntime_loads_it():
    lib = ort_op.build()
    assert lib.is_file() and ort_op.build() == lib  # cached
    assert ctypes.CDLL(str(lib)).RegisterCustomOps  # the entry point onnxruntime looks up
    ort.SessionOptions().register_custom_ops_library(str(lib))


@pytest.mark.parametrize("name", ["float_op.onnx", "int8_qcdq_op.onnx"])
@pytest.mark.parametrize("optimize", [True, False])
def test_op_files_give_the_functions_logits(exported, name, optimize):
    """Through the whole model: float32 rounding apart (float), or equal but for a rare one-step flip where a float32
    sum in another order lands on the other side of a point's rounding tie (int8)."""
    folder, x, lsb = exported
    native = OnnxRunner(folder / name, optimize)
    assert native.custom_op
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the function, by choice: no warning
        inlined = OnnxRunner(folder / name, optimize, custom_op=False)
    assert not inlined.custom_op
    a, b = native(x), inlined(x)
    assert (a.argmax(-1) == b.argmax(-1)).all()
    dev = np.abs(a - b)
    if name.startswith("float"):
        assert dev.max() <= 1e-5 * max(1.0, float(np.abs(b).max())), dev.max()
    else:
        assert dev.max() <= lsb * 1.001 and (dev == 0).mean() >= 0.98, (dev.max() / lsb, (dev == 0).mean())


def test_a_model_without_the_op_runs_as_before(exported):
    folder, x, _ = exported
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runner = OnnxRunner(folder / "float.onnx")
    assert not runner.custom_op
    assert np.array_equal(runner(x), OnnxRunner(folder / "float.onnx", custom_op=False)(x))


def test_an_unsupported_node_runs_its_function_with_one_warning(exported, tmp_path):
    folder, x, _ = exported
    model = onnx.load(folder / "float_op.onnx")
    for node in model.graph.node:
        if node.op_type == ort_op.OP:  # the direct form: not the kernel's (the body stays the linear core)
            next(a for a in node.attribute if a.name == "form").s = b"direct"
    onnx.save(model, tmp_path / "direct_op.onnx")
    with pytest.warns(UserWarning, match=r"direct_op.onnx: onnxruntime inlines OscillatorAttention's ONNX function: "
                                         r"form 'direct'") as caught:
        runner = OnnxRunner(tmp_path / "direct_op.onnx")
    assert len(caught) == 1 and "\n" not in str(caught[0].message) and not runner.custom_op
    assert np.array_equal(runner(x), OnnxRunner(folder / "float_op.onnx", custom_op=False)(x))
    with pytest.raises(OnnxModelError, match="direct_op.onnx: edgeosc's OscillatorAttention kernel cannot run it"):
        OnnxRunner(tmp_path / "direct_op.onnx", custom_op=True)


def test_a_file_of_the_first_op_version_runs_its_function(exported, tmp_path):
    """Version 1 took unit anchors and gates: the kernel (version 2, raw ones) must not stand in for its nodes."""
    folder, x, _ = exported
    model = onnx.load(folder / "float_op.onnx")
    next(o for o in model.opset_import if o.domain == ort_op.DOMAIN).version = 1
    onnx.save(model, tmp_path / "v1_op.onnx")
    with pytest.warns(UserWarning, match=r"ai.edgeosc version 1 \(the kernel runs version 2: export the checkpoint"):
        runner = OnnxRunner(tmp_path / "v1_op.onnx")
    assert not runner.custom_op


def test_a_library_that_does_not_build_leaves_the_function(exported, monkeypatch):
    folder, x, _ = exported

    def no_compiler():
        raise RuntimeError("no C compiler found (set CC, or install gcc) to build the edgeosc C kernels")

    monkeypatch.setattr(ort_op, "build", no_compiler)
    with pytest.warns(UserWarning, match="its library does not build .no C compiler found"):
        runner = OnnxRunner(folder / "int8_qcdq_op.onnx")
    assert not runner.custom_op and runner(x[:2]).shape == (2, 3)
    with pytest.raises(OnnxModelError, match="no C compiler found"):
        OnnxRunner(folder / "int8_qcdq_op.onnx", custom_op=True)


# ---- the bare node: the library against the torch core, and the kernel's own refusals

HEADS = 2


def _node_model(**attrs):
    """A graph of one OscillatorAttention node (no function: only the library runs it): x [B, T, H W] -> out."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "T", "C"])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["B", "T", "D"])
    node = helper.make_node(ort_op.OP, ["x"], ["out"], domain=ort_op.DOMAIN, heads=HEADS, anchors="projected", **attrs)
    return helper.make_model(helper.make_graph([node], "core", [x], [out]),
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ort_op.DOMAIN, 2)])


def _session(model):
    opts = ort.SessionOptions()
    opts.register_custom_ops_library(str(ort_op.build()))
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _inputs(rng, T, d_h, gate):
    """Per head q, k, v, raw anchors (one with no direction: 0, as LpNormalization) and raw gates, [B, H, T, .] each,
    and x, their fused layout [B, T, H W]."""
    parts = dict(q=rng.standard_normal((3, HEADS, T, d_h)) * 2, k=rng.standard_normal((3, HEADS, T, d_h)) * 2,
                 v=rng.standard_normal((3, HEADS, T, d_h)), r=rng.standard_normal((3, HEADS, T, 2)))
    parts["r"][0, 0, 0] = 0.0
    if gate:
        parts["g"] = rng.standard_normal((3, HEADS, T, 1))
    parts = {n: a.astype(np.float32) for n, a in parts.items()}
    x = np.concatenate(list(parts.values()), -1).transpose(0, 2, 1, 3).reshape(3, T, -1)
    return parts, np.ascontiguousarray(x)


SCALES = dict(q=0.03, k=0.04, v=0.02, r=1 / 128, z=1 / 128, out=0.01, r_raw=0.02, g_raw=0.03, g=0.02, gn=1 / 128)


@pytest.mark.parametrize("d_h, p, gate", [(8, 4, True), (8, 4, False), (4, 4, True), (4, 2, True), (3, 8, False)])
@pytest.mark.parametrize("quantized", [True, False])
def test_the_bare_node_equals_the_torch_core(d_h, p, gate, quantized):
    """The models' heads (d_h 8 and 4, p 4: the unrolled paths) and others, against the anchors' and gates' unit
    vectors, oscillator_attention_linear and the heads merged (what trace.oscillator_heads computes)."""
    from edgeosc.models.attention import oscillator_attention_linear, unit

    attrs = dict(p=p, eps=1e-6, d_osc=2, positive="taylor2", form="linear")
    if gate:
        attrs["gate_map"] = "taylor2"
    if quantized:
        attrs.update({f"{n}_scale": s for n, s in SCALES.items() if gate or not n.startswith("g")})

    def fake_quant(name, x):  # QuantizeLinear then DequantizeLinear at zero point 0: uint8 for g, int8 otherwise
        s = torch.tensor(SCALES[name], dtype=torch.float32)
        return torch.clamp(torch.round(x / s), 0 if name == "g" else -128, 255 if name == "g" else 127) * s

    quant = fake_quant if quantized else lambda name, x: x
    parts, x = _inputs(np.random.default_rng(d_h * 10 + p), 17, d_h, gate)
    got = _session(_node_model(**attrs)).run(None, dict(x=x))[0]
    t = {n: torch.from_numpy(a) for n, a in parts.items()}
    r = unit(quant("r_raw", t["r"]), 0.0)
    g = None
    if gate:
        y = quant("g_raw", t["g"]) + 1.0
        g = quant("gn", unit(quant("g", (y * y + 1.0) * 0.5).transpose(-1, -2), 0.0).transpose(-1, -2))
    want = oscillator_attention_linear(t["q"], t["k"], t["v"], r, p=p, eps=1e-6, g=g,
                                       quant=fake_quant if quantized else None)
    want = want.transpose(1, 2).flatten(-2).numpy()  # the heads merged
    dev = np.abs(got - want)
    if quantized:  # out on its grid; a float32 sum's order may flip the odd rounding tie at z or out
        assert dev.max() <= SCALES["out"] * 1.001 and (dev < 1e-6).mean() >= 0.98, (dev.max(), (dev < 1e-6).mean())
    else:
        assert dev.max() <= 1e-5 * max(1.0, float(np.abs(want).max())), dev.max()


def test_the_kernel_refuses_what_it_does_not_run_by_name():
    base = dict(p=4, eps=1e-6, d_osc=2, positive="taylor2", form="linear")
    for attrs, needle in ((dict(base, form="direct"), "the linear core only"),
                          (dict(base, positive="relu2"), 'needs positive "taylor2"'),
                          (dict(base, d_osc=3), "d_osc 2 only"),
                          (dict(base, p=9), "p must be 1..8"),
                          (dict(base, q_scale=0.1), "needs all of q_scale"),
                          (dict(base, gate_map="softplus"), 'map must be "taylor2"'),
                          (dict(base, g_scale=0.1), "needs all of g_raw_scale")):
        with pytest.raises(Exception, match=f"edgeosc_ort_op: ai.edgeosc::OscillatorAttention: .*{needle}"):
            _session(_node_model(**attrs))
    session = _session(_node_model(**base))
    for d_h, width in ((40, 3 * 40 + 2), (8, 3 * 8 + 1)):  # d_h over 32; a width no head layout has
        with pytest.raises(Exception, match="x's last dimension must be heads"):
            session.run(None, dict(x=np.zeros((1, 5, HEADS * width), np.float32)))
