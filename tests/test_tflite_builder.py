"""TFLite builder, structural check and interpreter-agnostic runtime across the installed interpreters."""
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("flatbuffers")
from edgeosc import runtime  # noqa: E402
from edgeosc.export.tflite.builder import TFLiteBuilder, quantize  # noqa: E402
from edgeosc.runtime.tflite_file import ModelFileError, check_tflite, schema  # noqa: E402

ALL = ("ai-edge-litert", "tflite-runtime", "tflite-micro")
INSTALLED = runtime.available_interpreters()
each = pytest.mark.parametrize("interp", [
    pytest.param(n, marks=pytest.mark.skipif(n not in INSTALLED, reason=f"{n} not installed")) for n in ALL])
need_all = pytest.mark.skipif(len(INSTALLED) < 3, reason=f"needs all three interpreters, have {INSTALLED}")


def float_fc_softmax(rng):
    w, b = rng.standard_normal((5, 8)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    tb = TFLiteBuilder()
    x = tb.input("x", [1, 8])
    y = tb.softmax(tb.fully_connected(x, tb.const("w", w), tb.const("b", b)), beta=0.7)
    tb.mark_output(y)
    return tb.to_bytes(), w, b


def int8_chain(rng):
    """int8 conv -> reshape -> FC(keep dims) -> batch_matmul(adj_y) -> cast/add/gather LUT."""
    tb = TFLiteBuilder()
    x = tb.input("x", [1, 1, 16, 8], np.int8, 0.05, -128)
    w = tb.int8_weights("conv/w", rng.uniform(-1, 1, (12, 1, 3, 8)) * 0.3, axis=0)
    c = tb.conv_2d(x, w, tb.int32_bias("conv/b", rng.uniform(-1, 1, 12), 0.05, tb.quant(w)[0]),
                   act="relu", q=(0.05, -128))
    r = tb.reshape(c, [1, 16, 12])
    fw = tb.int8_const("fc/w", rng.uniform(-1, 1, (8, 12)) * 0.5, 1 / 127)
    f = tb.fully_connected(r, fw, tb.int32_bias("fc/b", rng.uniform(-1, 1, 8), 0.1, 1 / 127),
                           keep_num_dims=True, q=(0.08, 0))
    s = tb.batch_matmul(f, f, adj_y=True, q=(0.1, 0))
    idx = tb.add(tb.cast(s, np.int32), tb.const("c128", np.array([128], np.int32)))
    table = quantize(np.tanh((np.arange(256) - 128) / 32), 1 / 127)
    y = tb.gather(tb.const("tanh", table, np.int8, 1 / 127, 0), idx)
    tb.mark_output(y)
    return tb.to_bytes()


@pytest.fixture(scope="module")
def float_model(tmp_path_factory):
    data, w, b = float_fc_softmax(np.random.default_rng(0))
    path = tmp_path_factory.mktemp("tfl") / "fc_softmax.tflite"
    path.write_bytes(data)
    return path, w, b


@pytest.fixture(scope="module")
def int8_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("tfl") / "int8_chain.tflite"
    path.write_bytes(int8_chain(np.random.default_rng(1)))
    return path


@each
def test_float_fc_softmax_matches_numpy(float_model, interp):
    path, w, b = float_model
    r = runtime.load(path, interp)
    x = np.random.default_rng(2).standard_normal((6, 8)).astype(np.float32)
    y = r.run(x)  # batch 6 on a batch-1 model: looped
    z = 0.7 * (x.astype(np.float64) @ w.T + b)
    ref = np.exp(z - z.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    assert y.shape == (6, 5) and y.dtype == np.float32
    np.testing.assert_allclose(y, ref, atol=1e-5)
    assert r.input_shape == (1, 8) and r.output_shape == (1, 5) and interp in r.name


@need_all
def test_int8_chain_runs_and_agrees_everywhere(int8_model):
    info = check_tflite(int8_model)
    assert info["builtin_ops"] == sorted(["CONV_2D", "RESHAPE", "FULLY_CONNECTED", "BATCH_MATMUL", "CAST", "ADD",
                                          "GATHER"])
    x = np.random.default_rng(3).uniform(-1, 1, (4, 1, 1, 16, 8)).astype(np.float32)
    # builtin kernels only: LiteRT's default XNNPACK delegate rounds int8 ops differently (see the op matrix)
    runners = [runtime.load(int8_model, n, xnnpack=False) for n in ALL]
    outs = [np.stack([r.run_raw(r.inputs[0].quantize(xi)) for xi in x]) for r in runners]
    assert all(o.dtype == np.int8 and o.shape == (4, 1, 16, 16) for o in outs)
    assert len(np.unique(outs[0])) > 20  # not saturated: the comparison means something
    for o in outs[1:]:
        # TFLM's int8 FC rounds differently on ~0.1% of outputs; the LUT after BATCH_MATMUL magnifies it
        assert np.abs(o.astype(int) - outs[0]).max() <= 4
        assert (o == outs[0]).mean() > 0.95


@each
def test_int8_run_quantizes_and_dequantizes(int8_model, interp):
    r = runtime.load(int8_model, interp, xnnpack=False)
    t = r.inputs[0]
    assert t.quantized and t.dtype == np.int8 and t.zero_point == (-128,)
    x = np.random.default_rng(4).uniform(-1, 1, (1, 1, 16, 8)).astype(np.float32)
    y = r.run(x)
    o = r.outputs[0]
    np.testing.assert_allclose(y, (r.run_raw(t.quantize(x)).astype(np.float64) - o.zero_point[0]) * o.scale[0],
                               rtol=0, atol=1e-6)
    assert y.dtype == np.float32 and np.abs(y).max() <= 1.0 + 1e-6


def test_quantize_rounds_half_to_even_and_clips():
    t = runtime.TensorInfo("x", (4,), np.dtype(np.int8), (0.5,), (1,))
    np.testing.assert_array_equal(t.quantize([0.25, 0.75, 1000.0, -1000.0]), [1, 3, 127, -128])
    np.testing.assert_allclose(t.dequantize(np.array([1, 3], np.int8)), [0.0, 1.0])


def test_builder_options_and_quantization():
    tb = TFLiteBuilder()
    x = tb.input("x", [2, 4, 8], np.int8, 0.1, 3)
    w = tb.int8_weights("w", np.random.default_rng(0).uniform(-1, 1, (6, 8)))
    y = tb.fully_connected(x, w, keep_num_dims=True, act="relu", q=(0.2, -5))
    z = tb.mean(tb.transpose(y, [0, 2, 1]), [-1], q=(0.2, -5))
    tb.mark_output(z)
    m = schema.ModelT.InitFromObj(schema.Model.GetRootAs(tb.to_bytes(), 0))
    sg = m.subgraphs[0]
    fc = sg.operators[0].builtinOptions
    assert fc.keepNumDims and fc.fusedActivationFunction == schema.ActivationFunctionType.RELU
    wq = sg.tensors[w].quantization
    assert len(wq.scale) == 6 and list(wq.zeroPoint) == [0] * 6 and wq.quantizedDimension == 0
    assert list(sg.tensors[y].shape) == [2, 4, 6] and list(sg.tensors[z].shape) == [2, 6, 1]
    assert len(m.operatorCodes) == 3 and m.description == b"edgeosc"
    assert [md.name for md in m.metadata] == [b"edgeosc"]
    with pytest.raises(ValueError, match="quantization"):
        tb.tensor("bad", [2], np.int8)


def test_custom_op_written_and_reported():
    tb = TFLiteBuilder()
    x = tb.input("x", [1, 4])
    y = tb.tensor("y", [1, 4])
    tb.custom("EdgeoscOsc", [x], [y], b"\x00")
    tb.mark_output(y)
    info = check_tflite(tb.to_bytes())
    assert info["custom_ops"] == ["EdgeoscOsc"] and info["opcodes"] == ["CUSTOM:EdgeoscOsc"]


def _malformed(good: bytes):
    root = int.from_bytes(good[:4], "little")
    flipped = bytearray(good)
    flipped[:4] = (root + 4096).to_bytes(4, "little")  # root offset past the end
    vt = bytearray(good)
    vt[root:root + 4] = (-(1 << 20)).to_bytes(4, "little", signed=True)  # vtable offset past the end
    rng = np.random.default_rng(5)
    noise = bytearray(rng.integers(0, 256, 600, dtype=np.uint8).tobytes())
    noise[4:8] = b"TFL3"  # garbage that carries the right identifier
    return dict(empty=b"", short=good[:7], identifier=good[:4] + b"XXXX" + good[8:], truncated=good[: len(good) // 2],
                truncated_end=good[:-16], flipped_root=bytes(flipped), flipped_vtable=bytes(vt),
                random=rng.integers(0, 256, 700, dtype=np.uint8).tobytes(), noise_tfl3=bytes(noise))


def test_check_accepts_good_and_rejects_malformed(int8_model, tmp_path):
    good = int8_model.read_bytes()
    info = check_tflite(int8_model)
    assert info["subgraphs"][0]["inputs"][0]["shape"] == [1, 1, 16, 8] and info["quantized_tensors"] > 5
    for name, data in _malformed(good).items():
        p = tmp_path / f"{name}.tflite"
        p.write_bytes(data)
        with pytest.raises(ModelFileError, match=str(p)):
            check_tflite(p)
        with pytest.raises(ModelFileError, match=str(p)):  # load checks in Python before native code sees it
            runtime.load(p)
    with pytest.raises(ModelFileError, match="missing.tflite"):
        check_tflite(tmp_path / "missing.tflite")


def test_check_rejects_missing_quant_and_bad_buffer():
    tb = TFLiteBuilder()
    x = tb.input("x", [1, 4], np.int8, 0.1, 0)
    tb.mark_output(tb.fully_connected(x, tb.int8_const("w", np.ones((3, 4)), 1 / 127), q=(0.1, 0)))
    m = tb.to_model()
    m.subgraphs[0].tensors[0].quantization = None
    with pytest.raises(ModelFileError, match="without quantization"):
        check_tflite(_pack(m), name="noquant.tflite")
    m = tb.to_model()
    m.buffers[m.subgraphs[0].tensors[1].buffer].data = np.zeros(5, np.uint8)
    with pytest.raises(ModelFileError, match="holds 5 bytes"):
        check_tflite(_pack(m))
    m = tb.to_model()
    m.subgraphs[0].tensors[2].shape = [1, 7]
    with pytest.raises(ModelFileError, match="FULLY_CONNECTED"):
        check_tflite(_pack(m))


def _pack(m) -> bytes:
    import flatbuffers
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def test_random_corruption_never_escapes_as_other_errors(int8_model):
    good = int8_model.read_bytes()
    rng = np.random.default_rng(6)
    for _ in range(300):
        d = bytearray(good)
        for _ in range(3):
            d[rng.integers(0, len(d))] = rng.integers(0, 256)
        try:
            check_tflite(bytes(d[: rng.integers(len(d) // 2, len(d) + 1)]))
        except ModelFileError:
            pass


def test_interpreter_errors(float_model, tmp_path):
    path = float_model[0]
    with pytest.raises(runtime.InterpreterUnavailable, match="unknown interpreter"):
        runtime.load(path, "onnxruntime")
    with pytest.raises(runtime.InterpreterUnavailable, match="only supported with tflite-runtime"):
        runtime.load(path, "tflite-micro", custom_ops=["Register_X"])
    tb = TFLiteBuilder()
    x = tb.input("x", [1, 4])
    y = tb.tensor("y", [1, 4])
    tb.custom("EdgeoscNoSuchOp", [x], [y])
    tb.mark_output(y)
    p = tb.save(tmp_path / "custom.tflite")
    with pytest.raises(runtime.InterpreterUnavailable, match="EdgeoscNoSuchOp"):
        runtime.load(p)
    r = runtime.load(path)
    with pytest.raises(ValueError, match="do not match"):
        r.run(np.zeros((2, 3), np.float32))


@pytest.mark.skipif("tflite-runtime" not in INSTALLED, reason="tflite-runtime not installed")
def test_custom_ops_hook_reaches_tflite_runtime(float_model):
    seen = []
    r = runtime.load(float_model[0], custom_ops=[seen.append])  # a registerer that registers nothing
    assert r.interpreter == "tflite-runtime" and len(seen) == 1 and isinstance(seen[0], int) and seen[0] != 0
    assert r.run(np.zeros((1, 8), np.float32)).shape == (1, 5)


def test_runtime_and_latency_bench_import_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import edgeosc.runtime as r, edgeosc.runtime.tflite_file, edgeosc.runtime.custom_op, edgeosc.bench.latency\n"
            "print(r.available_interpreters())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr



# unit_vector's cases (the lowering is the same in steps whatever the scale): a LayerNorm's centred rows (d 32), 2-D
# anchors, and an unsigned input (zero point -128)
UNIT_CASES = {"layer_norm": (32, 0.59, 0), "anchors": (2, 0.02, 0), "unsigned": (8, 0.01, -128)}


def unit_rows(n: int, zp: int, rows: int = 1000) -> np.ndarray:
    """int8 rows whose norms (in steps above the zero point) run from 1 to the largest, a zero row and a full one."""
    rng = np.random.default_rng(n)
    v = rng.standard_normal((rows, n)) * rng.uniform(0.2, 1, (rows, n)) ** 3  # peaked and flat rows alike
    if zp == -128:
        v = np.abs(v)
    big = max(127 - zp, zp + 128)
    v *= big * np.geomspace(1 / big, 1, rows)[:, None] / np.abs(v).max(-1, keepdims=True)
    q = np.clip(np.round(v) + zp, -128, 127)
    q[0], q[1] = zp, (-128 if zp == 0 else 127)
    return q.astype(np.int8)


def unit_file(path, n: int, scale: float, zp: int, rows: int):
    tb = TFLiteBuilder()
    tb.mark_output(tb.unit_vector(tb.input("x", [1, rows, n], np.int8, scale, zp), "unit"))
    path.write_bytes(tb.to_bytes())
    return path


@each
@pytest.mark.parametrize("case", UNIT_CASES)
def test_unit_vector_matches_numpy(case, interp, tmp_path):
    """The NPU passes against x / ||x||, in output steps (1/128). A row whose square sum rounds to 1 step or more in
    pass 1 (norm >= its half step) passes three roundings: twice at 1.25/127 between passes (0.62 output steps, up to
    ~0.8 after the next factor) and once at the end (0.5), and the last factor's and sum's steps leave 0.4% of a
    component (0.5 steps): within 2.7 steps (L2_NORMALIZATION: 0.5). A shorter row is scaled up by pass 1 and
    restored by pass 2 down to 1/8 of that norm (its rounding between passes then counts more); below, it stays
    short of 1 but keeps its direction."""
    n, scale, zp = UNIT_CASES[case]
    q = unit_rows(n, zp)
    got = runtime.load(unit_file(tmp_path / "unit.tflite", n, scale, zp, len(q)), interp, xnnpack=False) \
        .run_raw(q[None]).reshape(q.shape).astype(np.float64)
    v = q.astype(np.float64) - zp
    norm = np.linalg.norm(v, axis=-1)
    assert (got[norm == 0] == 0).all()  # a zero row stays zero, as with L2_NORMALIZATION
    got, v, norm = got[norm > 0], v[norm > 0], norm[norm > 0]
    err = np.abs(got - 128 * v / norm[:, None]).max(-1)
    out = np.linalg.norm(got, axis=-1) / 128
    cos = (got * v).sum(-1) / (128 * out * norm)
    half = np.sqrt(n) * max(127 - zp, zp + 128) / np.sqrt(2 * 255)  # pass 1's half-step norm, in input steps
    full, restored, short = norm >= half, (norm >= half / 8) & (norm < half), norm < half / 8
    assert full.sum() > 100 and restored.sum() > 100 and short.sum() > (10 if n > 2 else 0)
    assert err[full].max() <= 2.7 and err[full].mean() <= 1.3, (err[full].max(), err[full].mean())
    assert np.abs(out[full | restored] - 1).max() <= 0.03 and cos[restored].min() >= 0.995
    assert out.max() <= 1.03 and cos[short & (norm >= 4)].min(initial=1.0) >= 0.99


@need_all
def test_unit_vector_agrees_across_interpreters(tmp_path):
    n, scale, zp = UNIT_CASES["layer_norm"]
    q = unit_rows(n, zp)
    path = unit_file(tmp_path / "unit.tflite", n, scale, zp, len(q))
    outs = [runtime.load(path, name, xnnpack=False).run_raw(q[None]).astype(int) for name in ALL]
    for o in outs[1:]:  # TFLM's SUM requantizes a step apart now and then, and the passes after carry it
        assert np.abs(o - outs[0]).max() <= 2 and (o == outs[0]).mean() > 0.99


def layer_norm_file(path, l2: bool):
    """A LayerNorm as export/tflite writes one: mean (FULLY_CONNECTED), SUB, unit vectors."""
    tb = TFLiteBuilder()
    x = tb.input("x", [1, 49, 32], np.int8, 0.05, 0)
    ones = tb.const("ones", np.full((1, 32), 127, np.int8), np.int8, scale=1 / 32 / 127)
    mean = tb.fully_connected(x, ones, keep_num_dims=True, q=(0.05, 0))
    centre = tb.sub(x, mean, q=(0.08, 0))
    tb.mark_output(tb.l2_normalization(centre) if l2 else tb.unit_vector(centre))
    path.write_bytes(tb.to_bytes())
    return path


@pytest.mark.parametrize("accelerator", ["ethos-u55-128", "ethos-u85-256"])
def test_a_layer_norm_runs_on_the_npus_only_as_unit_vector_passes(accelerator, tmp_path):
    from edgeosc.bench import npu
    if npu.vela_version() is None:
        pytest.skip("Vela (ethos-u-vela) is not installed")
    row = npu.compile_model(layer_norm_file(tmp_path / "npu.tflite", False), accelerator)
    assert row["cpu_operators"] == 0 and row["npu_operators"] == row["operators"] > 10, row
    row = npu.compile_model(layer_norm_file(tmp_path / "l2.tflite", True), accelerator)
    assert [o["op"] for o in row["on_cpu"]] == ["L2_NORMALIZATION"], row
