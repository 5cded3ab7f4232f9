"""DS-CNN's building blocks (MLPerf Tiny KWS): DEPTHWISE_CONV_2D and AVERAGE_POOL_2D from our TFLite writer run
in the three interpreters, the C firmware equals TFLite Micro bit for bit on 128 inputs, and code generation
refuses a bad depthwise shape or padding with a clear error."""
from __future__ import annotations

import numpy as np
import pytest

from edgeosc import runtime
from edgeosc.export.c import generate
from edgeosc.export.c.graph import UnsupportedGraph, read_graph
from edgeosc.export.c.ops import lower
from edgeosc.export.tflite.builder import TFLiteBuilder

ALL = runtime.available_interpreters()


def ds_block(rng, multiplier: int = 1, padding: str = "SAME", loud: float = 1.0) -> bytes:
    """10x4 stride-2 stem, a depthwise-separable block, average pooling, a 12-way classifier (int8); the depthwise
    weights of channel 0 times `loud`."""
    tb = TFLiteBuilder()
    x = tb.input("x", [1, 49, 10, 1], np.int8, 0.05, 3)
    w = tb.int8_weights("stem/w", rng.uniform(-1, 1, (8, 10, 4, 1)) * 0.3, axis=0)
    c = tb.conv_2d(x, w, tb.int32_bias("stem/b", rng.uniform(-1, 1, 8), 0.05, tb.quant(w)[0]), stride=2,
                   act="relu", q=(0.04, -128), name="stem")
    dw = tb.int8_weights("dw/w", rng.uniform(-1, 1, (1, 3, 3, 8 * multiplier)) * 0.5 * np.r_[loud, np.ones(
        8 * multiplier - 1)], axis=3)
    d = tb.depthwise_conv_2d(c, dw, tb.int32_bias("dw/b", rng.uniform(-1, 1, 8 * multiplier), 0.04, tb.quant(dw)[0]),
                             padding=padding, act="relu", q=(0.03, -128), name="dw")
    pw = tb.int8_weights("pw/w", rng.uniform(-1, 1, (8, 1, 1, 8 * multiplier)) * 0.5, axis=0)
    p = tb.conv_2d(d, pw, tb.int32_bias("pw/b", rng.uniform(-1, 1, 8), 0.03, tb.quant(pw)[0]), act="relu",
                   q=(0.03, -128), name="pw")
    h, wd = tb.shape(p)[1:3]
    a = tb.reshape(tb.average_pool_2d(p, (h, wd), name="pool"), [1, 8])
    fw = tb.int8_const("fc/w", rng.uniform(-1, 1, (12, 8)) * 0.5, 1 / 127)
    y = tb.fully_connected(a, fw, tb.int32_bias("fc/b", rng.uniform(-1, 1, 12), 0.03, 1 / 127), q=(0.1, 0), name="fc")
    tb.mark_output(y)
    return tb.to_bytes()


@pytest.fixture(scope="module")
def block(tmp_path_factory):
    root = tmp_path_factory.mktemp("dscnn")
    path = root / "ds.tflite"
    path.write_bytes(ds_block(np.random.default_rng(0), multiplier=2))
    x = np.random.default_rng(1).integers(-128, 128, (128, 49, 10, 1)).astype(np.int8)
    return path, root, x


def test_ops_run_in_every_interpreter(block):
    if len(ALL) < 3:
        pytest.skip(f"needs the three TFLite interpreters, found {ALL}")
    path, _, x = block
    outs = []
    for name in ALL:
        r = runtime.load(path, name, xnnpack=False)
        outs.append(np.stack([r.run_raw(xi[None]) for xi in x[:16]]))
    assert len(np.unique(outs[0])) > 10  # not saturated: the comparison means something
    for o in outs[1:]:
        assert np.abs(o.astype(int) - outs[0]).max() <= 1


def test_firmware_equals_tflite_micro_bit_for_bit(block):
    pytest.importorskip("tflite_micro")
    from edgeosc.bench.estimate import host_logits
    path, root, x = block
    generate(path, root / "ds", name="ds", features=None)
    micro = runtime.load(path, "tflite-micro")
    want = np.stack([micro.run_raw(xi[None]).ravel() for xi in x])
    got = host_logits(root / "ds", "ds", x.reshape(len(x), -1), root / "work")
    assert got.shape == want.shape == (128, 12)
    np.testing.assert_array_equal(got, want)


def test_firmware_names_the_layers_its_scales_keep_off_the_fast_kernels(tmp_path):
    """A depthwise channel whose weights' scale is large against the output's: at a requantization shift of -1 or 0
    (a multiplier of 0.25 or 0.5 or more) the layer stays on the 3 x 3 planes (that channel's rows in C), above 0 (a
    multiplier of 1 or more) it leaves them and the DSP path's exact range. firmware.json names the layer and why,
    which the report shows."""
    def slow(loud):
        path = tmp_path / f"ds{loud}.tflite"
        path.write_bytes(ds_block(np.random.default_rng(0), loud=loud))
        return generate(path, tmp_path / f"ds{loud}", features=None)["slow_layers"]
    assert slow(1.0) == {}
    assert slow(100.0) == slow(150.0) == {}  # channel 0: 0.04 x 0.39 / 0.03 = 0.499, 0.75
    assert slow(300.0) == {"dw": "a channel's requantization outside the DSP path's exact range"}  # 1.5


def test_bad_depthwise_and_pool_graphs_are_refused():
    g = read_graph(ds_block(np.random.default_rng(0)))
    dw = next(op for op in g.ops if op.kind == "DEPTHWISE_CONV_2D")
    w = g.tensors[dw.inputs[1]]
    w.shape, w.data = (3, 3, 8, 1), w.data.reshape(3, 3, 8, 1)  # weights not [1, kh, kw, out_c]
    with pytest.raises(UnsupportedGraph, match=r"dw: DEPTHWISE_CONV_2D weights must be \[1, kh, kw, out_c\]"):
        lower(g)
    g = read_graph(ds_block(np.random.default_rng(0)))
    next(op for op in g.ops if op.kind == "DEPTHWISE_CONV_2D").options.padding = 7
    with pytest.raises(UnsupportedGraph, match="dw: DEPTHWISE_CONV_2D padding 7 is neither SAME nor VALID"):
        lower(g)
    g = read_graph(ds_block(np.random.default_rng(0)))
    next(op for op in g.ops if op.kind == "DEPTHWISE_CONV_2D").options.padding = 1  # VALID: the output is smaller
    with pytest.raises(UnsupportedGraph, match="dw: DEPTHWISE_CONV_2D output size 25 does not follow"):
        lower(g)
    g = read_graph(ds_block(np.random.default_rng(0)))
    pool = next(op for op in g.ops if op.kind == "AVERAGE_POOL_2D")
    g.tensors[pool.outputs[0]].zp = np.array([5])
    with pytest.raises(UnsupportedGraph, match="AVERAGE_POOL_2D needs the input's scale and zero point"):
        lower(g)


def test_emulated_cortex_m4_equals_tflite_micro(block):
    """The DSP path of the stem and the pointwise convolution (in_c 1 and 8) inside a whole graph."""
    import importlib.util
    import shutil
    pytest.importorskip("tflite_micro")
    pytest.importorskip("unicorn")
    if not (shutil.which("arm-none-eabi-gcc") or importlib.util.find_spec("ziglang")):
        pytest.skip("no Thumb compiler: apt-get install gcc-arm-none-eabi, or pip install ziglang")
    from edgeosc.bench.estimate import estimate_model
    path, root, x = block
    generate(path, root / "ds_m4", name="ds_m4", features=None)
    want = runtime.load(path, "tflite-micro").run_raw(x[:1]).ravel()
    est = estimate_model(root / "ds_m4", "ds_m4", x[0], ("cortex-m4",), root / "work", tflite=path, expected=want)
    assert est["logits"] == want.tolist() and est["targets"]["cortex-m4"]["model"]["cycles"] > 0
    assert est["macs"]["by_kind"]["DEPTHWISE_CONV_2D"] == 25 * 5 * 16 * 3 * 3  # per output: k_h k_w


@pytest.mark.parametrize("loud", [1.0, 150.0])
def test_emulated_cortex_m4_depthwise_planes_equal_tflite_micro(tmp_path, loud):
    """DEPTHWISE_CONV_2D with one output per channel inside a whole graph: code generation packs it for the DSP path's
    3 x 3 planes (dsp/edgeosc_depthwise_dsp.c), and the emulated M4's logits equal TFLite Micro's; loud 150 puts a
    channel at requantization shift 0, whose rows run in C."""
    import importlib.util
    import shutil
    pytest.importorskip("tflite_micro")
    pytest.importorskip("unicorn")
    if not (shutil.which("arm-none-eabi-gcc") or importlib.util.find_spec("ziglang")):
        pytest.skip("no Thumb compiler: apt-get install gcc-arm-none-eabi, or pip install ziglang")
    from edgeosc.bench.estimate import estimate_model
    path = tmp_path / "ds.tflite"
    path.write_bytes(ds_block(np.random.default_rng(0), loud=loud))
    generate(path, tmp_path / "ds_planes", name="ds_planes", features=None)
    micro = runtime.load(path, "tflite-micro")
    for x in np.random.default_rng(2).integers(-128, 128, (2, 1, 49, 10, 1)).astype(np.int8):
        want = micro.run_raw(x).ravel()
        est = estimate_model(tmp_path / "ds_planes", "ds_planes", x, ("cortex-m4",), tmp_path / "work", tflite=path,
                             expected=want)
        assert est["logits"] == want.tolist()
        assert est["targets"]["cortex-m4"]["by_function"].get("edgeosc_dw3_rows", 0) > 0  # dsp/edgeosc_depthwise_dsp.S
