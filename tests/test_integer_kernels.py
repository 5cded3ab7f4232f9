"""The int8 attention cores: C kernels == numpy reference == builtin TFLite ops in three interpreters.

The oscillator core's builtin decomposition (BATCH_MATMUL, CAST+ADD+GATHER tables, L2_NORMALIZATION of w
and h, MUL)
and the softmax baseline are written op by op with the schema API and run in tflite-runtime, ai-edge-litert
and TFLite Micro; every intermediate must equal edgeosc.integer.reference under that interpreter's Target.
"""
import numpy as np
import pytest

from edgeosc.cbuild import compiler
from edgeosc.integer import reference as R

from conftest import run_custom

from edgeosc.integer import ckernels as ck  # noqa: E402
try:
    compiler()
except RuntimeError:
    pytest.skip("no C compiler", allow_module_level=True)

from edgeosc.export.tflite.builder import TFLiteBuilder  # noqa: E402

POINTS = ["out", "qk", "w", "wn", "h", "z", "zr", "c", "sum", "inv", "a"]  # graph outputs of the builtin chain
SHAPES = [(2, 49, 16, 2, 16), (4, 49, 8, 8, 8), (1, 10, 4, 3, 5)]  # (H, T, dh, d_osc, dv)


# ---- fixtures: scales, tables, inputs ------------------------------------------------------------------

def realistic_scales(rng, T, dh):
    """Scales of a plausible layer (random float32 values: ties are rare)."""
    s = dict(q=0.06, k=0.05, v=0.04, r=1 / 128, qk=0.06 * 0.05 * 127 * np.sqrt(dh) * rng.uniform(0.5, 2) / 8,
             w=rng.uniform(4, 8) / 255, h=rng.uniform(0.01, 0.04), zr=1 / 127, c=4 / 255,
             sum=4 * T / 255 * rng.uniform(0.6, 1.2), inv=rng.uniform(0.05, 0.5) / 255, a=rng.uniform(0.2, 1) / 255,
             out=0.04 * rng.uniform(0.5, 1.5))
    return {k: float(np.float32(v)) for k, v in s.items()}


def tie_scales(T):
    """Power-of-two multipliers, so requantization ties are frequent and expose every rounding difference;
    a's multiplier is 0.375 in float32 but not in double (MUL's float-vs-double Prepare)."""
    s = dict(q=1 / 32, k=1 / 16, v=1 / 64, r=1 / 128, qk=1 / 128, w=1 / 64, h=1 / 32, zr=1 / 128, c=1 / 64,
             sum=T / 64, inv=1 / 256, out=1 / 64)
    s["a"] = float(np.float32(s["c"] * s["inv"] / 0.375))
    return s


def tables(sc, dh, p=2):
    """int8 tables of softplus(qk / sqrt(dh)), (1 + zr)^p and 1/sum on the chain's scales."""
    return R.core_tables(sc, dh, p)


def inputs(rng, H, T, dh, dr, dv):
    q, k = rng.integers(-128, 128, (2, H, T, dh)).astype(np.int8)
    v = rng.integers(-128, 128, (H, T, dv)).astype(np.int8)
    r = rng.standard_normal((H, T, dr))
    r = np.clip(np.round(128 * r / np.linalg.norm(r, axis=-1, keepdims=True)), -128, 127).astype(np.int8)
    return q, k, v, r


# ---- models written op by op ----------------------------------------------------------------------------

def osc_chain_model(sc, shapes, tabs, sum_op="batch_matmul", ones=1, ones_scale=1.0) -> bytes:
    """Steps 1-10 as builtin ops; outputs POINTS."""
    H, T, dh, dr, dv = shapes
    z = R.ZP_DEFAULT
    b = TFLiteBuilder()
    q, k = (b.input(n, (H, T, dh), np.int8, sc[n], z[n]) for n in "qk")
    v = b.input("v", (H, T, dv), np.int8, sc["v"], z["v"])
    r = b.input("r", (H, T, dr), np.int8, sc["r"], z["r"])
    c128 = b.const("c128", np.array([128], np.int32))

    def lut(x, name, table):  # GATHER(table, x + 128): CAST and ADD run in all three interpreters
        idx = b.add(b.cast(x, np.int32, name=f"{name}/i32"), c128, name=f"{name}/idx")
        return b.gather(b.const(f"{name}/table", table, np.int8, sc[name], z[name]), idx, name=name)

    qk = b.batch_matmul(q, k, adj_y=True, q=(sc["qk"], z["qk"]), name="qk")
    w = lut(qk, "w", tabs[0])
    wn = b.l2_normalization(w, name="wn")
    h = b.batch_matmul(wn, r, q=(sc["h"], z["h"]), name="h")
    zt = b.l2_normalization(h, name="z")
    zr = b.batch_matmul(zt, r, adj_y=True, q=(sc["zr"], z["zr"]), name="zr")
    c = lut(zr, "c", tabs[1])
    if sum_op == "batch_matmul":
        ones_t = b.const("ones", np.full((T, 1), ones, np.int8), np.int8, ones_scale, 0)
        s = b.batch_matmul(c, ones_t, q=(sc["sum"], z["sum"]), name="sum")
    else:
        ones_t = b.const("ones", np.full((1, T), ones, np.int8), np.int8, ones_scale, 0)
        s = b.fully_connected(c, ones_t, keep_num_dims=True, q=(sc["sum"], z["sum"]), name="sum")
    inv = lut(s, "inv", tabs[2])
    a = b.mul(c, inv, q=(sc["a"], z["a"]), name="a")
    out = b.batch_matmul(a, v, q=(sc["out"], z["out"]), name="out")
    b.mark_output(out, qk, w, wn, h, zt, zr, c, s, inv, a)
    return b.to_bytes()


def softmax_chain_model(sc, shapes) -> bytes:
    H, T, dh, _, dv = shapes
    b = TFLiteBuilder()
    q, k = (b.input(n, (H, T, dh), np.int8, sc[n], 0) for n in "qk")
    v = b.input("v", (H, T, dv), np.int8, sc["v"], 0)
    qk = b.batch_matmul(q, k, adj_y=True, q=(sc["qk"], 0), name="qk")
    a = b.softmax(qk, name="a")
    out = b.batch_matmul(a, v, q=(sc["out"], 0), name="out")
    b.mark_output(out, qk, a)
    return b.to_bytes()


# ---- interpreters -------------------------------------------------------------------------------------

# interpreter variant -> the integer reference target it must match bit-exactly
VARIANTS = {
    "tflite-runtime": "tflite-runtime",
    "tflite-runtime-ref": "reference",
    "ai-edge-litert": "ai-edge-litert",
    "ai-edge-litert-nodelegate": "ai-edge-litert-nodelegate",
    "ai-edge-litert-ref": "ai-edge-litert-ref",
    "tflite-micro": "tflite-micro",
}


def run(variant, model, xs, n_out):
    """Invoke one interpreter variant; returns its outputs."""
    if variant == "tflite-micro":
        runtime = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
        it = runtime.Interpreter.from_bytes(model, arena_size=4 << 20)
        for i, x in enumerate(xs):
            it.set_input(x, i)
        it.invoke()
        return [it.get_output(i) for i in range(n_out)]
    mod = pytest.importorskip("tflite_runtime.interpreter" if variant.startswith("tflite-runtime")
                              else "ai_edge_litert.interpreter")
    kind = {"ref": mod.OpResolverType.BUILTIN_REF, "nodelegate": mod.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
    suffix = variant.rsplit("-", 1)[1]
    it = mod.Interpreter(model_content=model, experimental_op_resolver_type=kind.get(suffix, mod.OpResolverType.AUTO))
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), xs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def diff_report(names, got, want) -> dict:
    return {n: int(np.count_nonzero(g != want[n])) for n, g in zip(names, got) if np.count_nonzero(g != want[n])}


# ---- integer helpers ------------------------------------------------------------------------------------

@pytest.mark.parametrize("real, expected", [
    (1.0, (1 << 30, 1)), (0.5, (1 << 30, 0)), (0.75, (1610612736, 0)), (0.0, (0, 0)),
    (0.3, (1288490189, -1)), (1 - 2.0 ** -40, (1 << 30, 1)),  # rounds up to 2^31: halved, shift + 1
    (3e-10, (1383505806, -31)), (2.0 ** -32, (1 << 30, -31)), (2.0 ** -33, (0, 0)),  # shift < -31: zero
    (1000.0, (2097152000, 10)),
])
def test_quantize_multiplier(real, expected):
    assert R.quantize_multiplier(real) == expected


def test_multiplier_arithmetic_matches_prepare():
    """BATCH_MATMUL: float32 product; FULLY_CONNECTED / TFLite Micro MUL: double; TFLite MUL: all float32."""
    s = (np.float32(0.03125), np.float32(0.0625), np.float32(0.03125 * 0.0625 / 0.375))
    assert R.quantize_multiplier(R.mul_multiplier(*s)) == (1610612736, -1)  # exactly 0.375 in float32
    assert R.quantize_multiplier(R.mul_multiplier(*s, double=True)) == (1610612688, -1)
    assert R.matmul_multiplier(0.1, 0.2, 0.3) == float(np.float32(0.1) * np.float32(0.2)) / float(np.float32(0.3))
    assert R.fc_multiplier(0.1, 0.2, 0.3) != R.matmul_multiplier(0.1, 0.2, 0.3)


@pytest.mark.parametrize("mode", ["away", "up", "single"])
def test_c_requantize_matches_numpy(mode):
    rng = np.random.default_rng(1)
    for m, s in [(1 << 30, 0), (R.I32_MAX, -31), (1500000000, 5), (1234567890, -7), (1717986918, -1),
                 (1 << 30, -2)]:
        x = rng.integers(-2 ** 31, 2 ** 31, 4000) >> max(s + 1, 0)
        x[:64] = np.arange(-32, 32) << min(max(-s - 1, 0), 25)  # ties (when m is a power of two)
        np.testing.assert_array_equal(ck.mbqm(x, m, s, mode), R.requantize_value(x, (m, s), mode))


def test_c_rows_match_numpy():
    rng = np.random.default_rng(2)
    for n in (2, 3, 8, 32):
        x = rng.integers(-128, 128, (300, n)).astype(np.int8)
        x[:40] = rng.integers(-2, 3, (40, n))  # tiny norms: GetInvSqrtQuantizedMultiplierExp's edge cases
        x[40], x[41], x[42] = 0, 127, -128
        for zp in (0, 3, -128):
            np.testing.assert_array_equal(ck.rows("l2norm", x, zp), R.l2norm_int8(x, zp))
    x = rng.integers(-128, 128, (200, 49)).astype(np.int8)
    x[0], x[1] = 127, -128
    for s in (0.0039, 0.01, 0.1, 1.3, 7.0):
        prm = R.softmax_params(s)
        np.testing.assert_array_equal(ck.rows("softmax", x, *prm), R.softmax_int8(x, *prm))


# ---- C core == numpy reference --------------------------------------------------------------------------

@pytest.mark.parametrize("shapes", SHAPES + [(1, 1, 1, 2, 1), (3, 17, 5, 32, 7)])
@pytest.mark.parametrize("target", ["reference", "tflite-runtime", "tflite-micro"])
def test_c_core_matches_reference(shapes, target):
    H, T, dh, dr, dv = shapes
    rng = np.random.default_rng(hash(shapes) % 1000)
    for trial, sum_op in enumerate(["batch_matmul", "fully_connected"]):
        sc = realistic_scales(rng, T, dh) if trial == 0 else tie_scales(T)
        tabs = tables(sc, dh) if trial == 0 else [rng.integers(-128, 128, 256) for _ in range(3)]
        p = R.osc_quant_from_scales(sc, *tabs, sum_op=sum_op, ones=(1, 127)[trial], target_name=target)
        q, k, v, r = inputs(rng, H, T, dh, dr, dv)
        np.testing.assert_array_equal(ck.oscillator_core(p, q, k, v, r), R.oscillator_core_int8(p, q, k, v, r))
        sp = R.softmax_quant_from_scales(dict(q=0.05, k=0.04, v=0.03, qk=sc["qk"], out=0.05), target_name=target)
        want = R.softmax_core_int8(sp, q, k, v)
        np.testing.assert_array_equal(ck.softmax_core(sp, q, k, v), want)
        np.testing.assert_array_equal(ck.softmax_core(sp, q, k, v, lut=True), want)  # exps from a table


def test_c_core_rejects_float_rounding():
    sc = tie_scales(4)
    p = R.osc_quant_from_scales(sc, *tables(sc, 4), target_name="ai-edge-litert")
    with pytest.raises(ValueError, match="no rounding mode 'fp32'"):
        ck.oscillator_core(p, *inputs(np.random.default_rng(0), 1, 4, 4, 2, 4))


def degenerate_case():
    """Rows whose w, so wn and h, are exactly 0 (TFLite's L2 norm then gives 0) and saturating inputs."""
    H, T, dh, dr, dv = 2, 49, 8, 2, 8
    rng = np.random.default_rng(3)
    sc = realistic_scales(rng, T, dh)
    tw, tc, tinv = tables(sc, dh)
    tw[128] = -128  # w(0) = 0: a query row of zeros gives w = 0 everywhere, so h = 0
    q, k, v, r = inputs(rng, H, T, dh, dr, dv)
    q[0, :5] = 0
    q[1, :3], k[1] = 127, 127  # saturating scores
    q[1, 3:6], v[1, :] = -128, -128
    return (H, T, dh, dr, dv), sc, (tw, tc, tinv), (q, k, v, r)


def test_degenerate_and_saturating_rows():
    shapes, sc, tabs, xs = degenerate_case()
    p = R.osc_quant_from_scales(sc, *tabs, target_name="tflite-runtime")
    out, t = R.oscillator_core_int8(p, *xs, return_all=True)
    assert np.all(t["wn"][0, :5] == 0) and np.all(t["h"][0, :5] == 0) and np.all(t["z"][0, :5] == 0)
    assert np.all(t["qk"][1, :3] == 127)
    np.testing.assert_array_equal(ck.oscillator_core(p, *xs), out)
    got = run("tflite-runtime", osc_chain_model(sc, shapes, tabs), list(xs), len(POINTS))
    assert diff_report(POINTS, got, t) == {}
    for fill in (127, -128):  # everything saturated
        ys = [np.full_like(x, fill) for x in xs]
        want = R.oscillator_core_int8(p, *ys)
        np.testing.assert_array_equal(ck.oscillator_core(p, *ys), want)
        np.testing.assert_array_equal(run("tflite-runtime", osc_chain_model(sc, shapes, tabs), ys, 1)[0], want)


# ---- builtin ops in the three interpreters == numpy reference -----------------------------------------

@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("sum_op", ["batch_matmul", "fully_connected"])
def test_builtin_chain_matches_reference(variant, sum_op):
    rng = np.random.default_rng(4)
    for shapes in SHAPES:
        H, T, dh, dr, dv = shapes
        for trial in range(3):  # realistic scales; ties everywhere; ties with random tables (varied row sums)
            sc = realistic_scales(rng, T, dh) if trial == 0 else tie_scales(T)
            tabs = tables(sc, dh) if trial < 2 else [rng.integers(-128, 128, 256).astype(np.int8) for _ in range(3)]
            xs = inputs(rng, *shapes)
            got = run(variant, osc_chain_model(sc, shapes, tabs, sum_op), list(xs), len(POINTS))
            p = R.osc_quant_from_scales(sc, *tabs, sum_op=sum_op, target_name=VARIANTS[variant])
            _, want = R.oscillator_core_int8(p, *xs, return_all=True)
            assert diff_report(POINTS, got, want) == {}, (shapes, sc)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_softmax_chain_matches_reference(variant):
    rng = np.random.default_rng(5)
    for shapes in SHAPES:
        H, T, dh, dr, dv = shapes
        for s_qk in (0.02, 0.1, 1 / 8):
            sc = dict(q=1 / 32, k=1 / 16, v=1 / 64, qk=s_qk, out=1 / 64)
            xs = inputs(rng, *shapes)[:3]
            got = run(variant, softmax_chain_model(sc, shapes), list(xs), 3)
            p = R.softmax_quant_from_scales(sc, target_name=VARIANTS[variant])
            _, want = R.softmax_core_int8(p, *xs, return_all=True)
            assert diff_report(["out", "qk", "a"], got, want) == {}, (shapes, s_qk)
            np.testing.assert_array_equal(want["a"], ck.rows("softmax", want["qk"], p.beta_multiplier,
                                                             p.beta_left_shift, p.diff_min))


def test_targets_are_distinguishable():
    """The tie-heavy scales make every interpreter's rounding visible: no single target fits all."""
    shapes = SHAPES[0]
    sc = tie_scales(shapes[1])
    tabs = tables(sc, shapes[2])
    xs = inputs(np.random.default_rng(6), *shapes)
    names = [n for n in R.TARGETS if n != "ai-edge-litert-nodelegate"]  # the same as reference
    outs = {n: R.oscillator_core_int8(R.osc_quant_from_scales(sc, *tabs, sum_op="fully_connected", target_name=n),
                                      *xs, return_all=True)[1] for n in names}
    for a in names:
        for b in names:
            if a < b:
                assert any(np.any(outs[a][n] != outs[b][n]) for n in POINTS), (a, b)


# ---- the custom op in tflite-runtime ------------------------------------------------------------------

def custom_op_model(sc, shapes, tabs, as_inputs, lead=(), **extra) -> bytes:
    from edgeosc.export.tflite import custom_op as tflite_op

    H, T, dh, dr, dv = shapes
    b = TFLiteBuilder()
    xs = [b.input(n, (*lead, H, T, d), np.int8, sc[n], 0) for n, d in zip("qkvr", (dh, dh, dv, dr))]
    out = b.tensor("out", (*lead, H, T, dv), np.int8, scale=sc["out"], zero_point=0)
    tins = [b.const(f"table_{n}", t, np.int8, 1.0, 0) for n, t in zip(("w", "c", "inv"), tabs)] if as_inputs else []
    opts = tflite_op.options_from_quant(sc, None if as_inputs else tabs, p=2, eps=1e-3, positive="softplus",
                                        heads=H, d_osc=dr, **extra)
    b.custom(tflite_op.OP_NAME, xs + tins, [out], opts)
    b.mark_output(out)
    return b.to_bytes()


@pytest.mark.parametrize("as_inputs", [False, True])
def test_custom_op_matches_reference_and_builtin_chain(as_inputs):
    rng = np.random.default_rng(7)
    for shapes in SHAPES:
        for sc in (realistic_scales(rng, shapes[1], shapes[2]), tie_scales(shapes[1])):
            tabs = tables(sc, shapes[2])
            xs = list(inputs(rng, *shapes))
            got = run_custom(custom_op_model(sc, shapes, tabs, as_inputs), xs)
            p = R.osc_quant_from_scales(sc, *tabs, target_name="tflite-runtime")
            np.testing.assert_array_equal(got, R.oscillator_core_int8(p, *xs))
            np.testing.assert_array_equal(got, run("tflite-runtime", osc_chain_model(sc, shapes, tabs), xs, 1)[0])


def test_custom_op_options_switch_sum_op_and_rounding():
    """Degenerate rows, a leading batch axis, and the options that pick step 7's op and the target."""
    shapes, sc, tabs, xs = degenerate_case()
    for sum_op, ones, rounding in [("fully_connected", 127, "reference"), ("batch_matmul", 3, "tflite-micro"),
                                   ("fully_connected", 1, "tflite-runtime")]:
        model = custom_op_model(sc, shapes, tabs, False, lead=(1,), sum_op=sum_op, ones=ones, ones_scale=1 / 127,
                                rounding=rounding)
        p = R.osc_quant_from_scales(sc, *tabs, sum_op=sum_op, ones=ones, ones_scale=1 / 127, target_name=rounding)
        got = run_custom(model, [x[None] for x in xs])
        np.testing.assert_array_equal(got[0], R.oscillator_core_int8(p, *xs))


def test_custom_options_flexbuffer():
    from flatbuffers import flexbuffers

    from edgeosc.export.tflite import custom_op as tflite_op

    sc = tie_scales(8)
    tabs = tables(sc, 4)
    opts = flexbuffers.Loads(tflite_op.options_from_quant(sc, tabs, p=2, positive="softplus"))
    assert opts["qk_scale"] == np.float32(sc["qk"]) and opts["w_zero_point"] == -128
    assert bytes(opts["table_c"]) == tabs[1].tobytes() and opts["positive"] == "softplus"
    with pytest.raises(ValueError, match="qk_scale"):
        tflite_op.custom_options(p=2)
    bad = custom_op_model(sc, (1, 8, 4, 2, 4), tabs, False, rounding="ai-edge-litert")  # no integer fp32 mode
    with pytest.raises(RuntimeError, match="custom options"):
        run_custom(bad, list(inputs(np.random.default_rng(0), 1, 8, 4, 2, 4)))
