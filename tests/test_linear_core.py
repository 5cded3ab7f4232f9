"""The integer linear oscillator core: C kernel == numpy reference, both within one step of the float linear form.

The state is a sum over keys: adding a key and then subtracting it restores it bit for bit (the sliding window
of a stream), and the C and numpy states are the same integers.
"""
import ctypes
import dataclasses

import numpy as np
import pytest
import torch

from edgeosc.cbuild import compiler
from edgeosc.integer import linear as L, reference as R
from edgeosc.models.attention import oscillator_attention_linear

from conftest import run_custom

try:
    compiler()
except RuntimeError:
    pytest.skip("no C compiler", allow_module_level=True)
from edgeosc.integer import ckernels as ck  # noqa: E402

SCALES = dict(q=0.03, k=0.04, v=0.02, out=0.015)
ZP = dict(q=3, k=-5, v=2, g=-128, out=-1)


def case(rng, H, T, dh, dv, gated, zp=ZP, extreme=False):
    """int8 q, k, v, unit anchors r at 1/128 and gates g (None when ungated)."""
    if extreme:  # the integer bounds' worst case: every offset input at its largest magnitude
        q = np.full((H, T, dh), -128, np.int8)
        k, v = np.full((H, T, dh), -128, np.int8), np.full((H, T, dv), -128, np.int8)
        r = np.tile(np.array([127, 0], np.int8), (H, T, 1))
        g = np.full((H, T), 127, np.int8) if gated else None
        return q, k, v, r, g
    q, k = rng.integers(-128, 128, (2, H, T, dh)).astype(np.int8)
    v = rng.integers(-128, 128, (H, T, dv)).astype(np.int8)
    r = rng.standard_normal((H, T, 2))
    r = np.clip(np.round(128 * r / np.linalg.norm(r, axis=-1, keepdims=True)), -128, 127).astype(np.int8)
    g = rng.integers(-128, 128, (H, T)).astype(np.int8) if gated else None
    return q, k, v, r, g


def float_linear(pq, scales, q, k, v, r, g):
    """The float linear form on the dequantized inputs, requantized to out's int8 grid."""
    t = lambda x, zp, s: torch.tensor((x.astype(np.float64) - zp) * s)[None]  # noqa: E731
    gate = None if g is None else t(g, pq.zp["g"], 1.0)[..., None]
    out = oscillator_attention_linear(t(q, pq.zp["q"], scales["q"]), t(k, pq.zp["k"], scales["k"]),
                                      t(v, pq.zp["v"], scales["v"]), t(r, 0, 1 / 128), p=pq.p, causal=pq.causal,
                                      window=pq.window, g=gate)[0].numpy()
    return np.clip(np.round(out / scales["out"]) + pq.zp["out"], -128, 127)


@pytest.mark.parametrize("p", [1, 2, 3, 4, 6, 8])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("gated", [False, True])
def test_c_equals_reference_and_float(p, causal, gated):
    rng = np.random.default_rng(p + 10 * causal + 100 * gated)
    H, T, dh, dv = 2, 49, 8, 8
    x = case(rng, H, T, dh, dv, gated)
    pq = L.linear_quant_from_scales(SCALES, dh, p, ZP, causal)
    want = L.linear_core_int8(pq, *x)
    assert np.array_equal(ck.linear_core(pq, *x), want)
    diff = np.abs(want.astype(int) - float_linear(pq, SCALES, *x))
    # z is int8 at 1/128: a sharper readout (p > 4) turns its step into more of out's, most where a causal query
    # reads one or two keys
    assert diff.max() <= (1 if p <= 4 else 3) and diff.mean() < (0.1 if p <= 4 else 0.2), (diff.max(), diff.mean())


# (2, 49, 4, 4): the narrow head's unrolled key terms and query
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (3, 17, 5, 7), (2, 49, 4, 4), (1, 196, 16, 16)])
def test_other_shapes(shape):
    rng = np.random.default_rng(len(shape))
    H, T, dh, dv = shape
    x = case(rng, H, T, dh, dv, gated=True)
    pq = L.linear_quant_from_scales(SCALES, dh, 4, ZP)
    assert np.array_equal(ck.linear_core(pq, *x), L.linear_core_int8(pq, *x))


@pytest.mark.parametrize("p", [4, L.LINEAR_P[1]])
@pytest.mark.parametrize("gated", [False, True])
def test_worst_case_bounds_at_196_tokens(gated, p):
    """Inputs at their extremes, the largest coupling coefficient: no int32 state wraps, no int64 overflows."""
    H, T, dh, dv = 1, 196, 8, 8
    x = case(None, H, T, dh, dv, gated, extreme=True)
    zp = dict(q=127, k=127, v=127, g=-128, out=0)
    scales = dict(q=4e-3, k=4e-3, v=1.0, out=3.0)
    pq = L.linear_quant_from_scales(scales, dh, p, zp)
    assert pq.c1 > 3e5  # near the top of LINEAR_C1
    sc, sr = L.linear_state(*x, pq)
    sc64, sr64 = (np.cumsum(f, 1)[:, -1] for f in L.linear_key_features(*x[1:], pq))  # unwrapped sums
    assert np.array_equal(sc[:, -1], sc64) and np.array_equal(sr[:, -1], sr64)
    want = L.linear_core_int8(pq, *x)
    assert np.array_equal(ck.linear_core(pq, *x), want)
    assert np.array_equal(want, float_linear(pq, scales, *x))  # every v_j is -255: so is the mean (-85 steps)


@pytest.mark.parametrize("gated", [False, True])
def test_windowed_core_is_each_query_over_its_own_keys(gated):
    """causal with window W: query i reads keys i - W < j <= i. The C core steps as a stream does (key i added,
    key i - W removed, query i read, one pass a step); each output equals the core run on that query's W keys
    alone, and the float core with the same window within two steps."""
    rng = np.random.default_rng(21 + gated)
    H, T, W, dh, dv = 2, 40, 7, 8, 8
    x = case(rng, H, T, dh, dv, gated)
    pq = L.linear_quant_from_scales(SCALES, dh, 4, ZP, causal=True, window=W)
    want = L.linear_core_int8(pq, *x)
    assert np.array_equal(ck.linear_core(pq, *x), want)
    whole = L.linear_quant_from_scales(SCALES, dh, 4, ZP)
    for i in (0, W - 1, W, T - 1):
        lo = max(0, i - W + 1)
        alone = L.linear_core_int8(whole, *(None if a is None else a[:, lo:i + 1] for a in x))
        assert np.array_equal(want[:, i], alone[:, -1]), i
    assert not np.array_equal(want, L.linear_core_int8(dataclasses.replace(pq, window=0), *x))
    # a mean of 7 keys weighted by (1 + z.r)^4 moves more with z's int8 step than one of 49: up to 2 steps, rarely
    diff = np.abs(want.astype(int) - float_linear(pq, SCALES, *x))
    assert diff.max() <= 2 and diff.mean() < 0.15, (diff.max(), diff.mean())
    with pytest.raises(ValueError, match="a sliding window is causal"):
        L.linear_quant_from_scales(SCALES, dh, 4, ZP, causal=False, window=W)
    with pytest.raises(ValueError, match="rejected its parameters"):  # the C core refuses it too
        ck.linear_core(dataclasses.replace(pq, causal=False), *x)


def test_turned_anchors_are_the_rotation_and_the_same_in_c():
    """The anchors' turn: cos and sin within 1.1 of Q15's unit of the true ones at every phase of the 2^16-step
    circle, turned anchors within one int8 step of the exact rotation, C == numpy at every phase, and a frame
    number that wraps at 2^32 keeps turning by the same steps (2^32 is a multiple of 2^16)."""
    phase = np.arange(L.TURN_STEPS)
    c, s = L.cos_sin_q15(phase)
    angle = 2 * np.pi * phase / L.TURN_STEPS
    assert np.abs(c - L.Q15 * np.cos(angle)).max() < 1.1 and np.abs(s - L.Q15 * np.sin(angle)).max() < 1.1
    rng = np.random.default_rng(3)
    r = case(rng, 3, 64, 2, 2, False)[3]  # [3, 64, 2] unit anchors
    turn = (1, 977, 65535)
    for t0 in (0, 123_456_789, (1 << 32) - 10):
        got = L.turn_anchors(r, turn, t0)
        a = 2 * np.pi * ((np.array(turn)[:, None] * ((t0 + np.arange(64)) % (1 << 32))) % L.TURN_STEPS) / L.TURN_STEPS
        exact = r[..., 0] * np.cos(a) - r[..., 1] * np.sin(a), r[..., 0] * np.sin(a) + r[..., 1] * np.cos(a)
        assert np.abs(got - np.clip(np.stack(exact, -1), -128, 127)).max() <= 1.0
    assert np.array_equal(L.turn_anchors(r, turn, (1 << 32) - 10)[:, 10:], L.turn_anchors(r[:, 10:], turn, 0))
    assert np.array_equal(L.turn_anchors(r, (0, 0, 0), 77), r) and L.turn_anchors(r, None) is r
    out, got = np.empty(2, np.int8), []
    for x in ([127, 0], [-128, 0], [90, -91], [-128, -128]):
        x = np.array(x, np.int8)
        for u in range(0, L.TURN_STEPS, 5):
            ck.library().edgeosc_turn_anchor(ck._ptr(x), u, ck._ptr(out))
            got.append(out.copy())
    xs = np.repeat(np.array([[127, 0], [-128, 0], [90, -91], [-128, -128]], np.int8), len(range(0, L.TURN_STEPS, 5)), 0)
    phases = np.tile(np.arange(0, L.TURN_STEPS, 5), 4)
    want = np.stack([L.turn_anchors(xs[i:i + 1, None], [1], int(u))[0, 0] for i, u in enumerate(phases)])
    assert np.array_equal(np.array(got), want)
    assert L.turn_steps([0.05, np.pi, -np.pi / 2]) == (522, 32768, 49152)  # 0.05 rad: 521.5 steps


@pytest.mark.parametrize("gated", [False, True])
def test_a_stream_of_frames_equals_the_windowed_core(gated):
    """edgeosc_linear_stream_int8 and its numpy twin: frames fed one, several or all at a time from a fresh state
    (clock {t0, 0, 0}) give the windowed core's outputs at t0 bit for bit, with the anchors turning, at any age
    (t0 just below the uint32 wrap); C and numpy states are the same integers; a fresh state resets the stream;
    a state of the wrong shape or clock is refused."""
    rng = np.random.default_rng(31 + gated)
    H, T, W, dh, dv = 2, 50, 9, 8, 8
    x = case(rng, H, T, dh, dv, gated)
    pq = L.linear_quant_from_scales(SCALES, dh, 4, ZP, causal=True, window=W, turn=L.turn_steps([0.07, 0.45]))
    for t0 in (0, (1 << 32) - 20):
        want = L.linear_core_int8(pq, *x, t0=t0)
        assert np.array_equal(ck.linear_core(pq, *x, t0=t0), want)
        for stream in (ck.linear_stream, L.linear_stream_int8):
            state, outs = L.LinearStream.zeros(H, dh, dv, 4, W, t0), []
            for lo, hi in ((0, 1), (1, 2), (2, 17), (17, 18), (18, T)):
                out, state = stream(pq, state, *(None if a is None else a[:, lo:hi] for a in x))
                outs.append(out)
            assert np.array_equal(np.concatenate(outs, 1), want), (stream, t0)
            assert list(state.clock) == [L._uint32(t0 + T), W, T % W]
        c_state = ck.linear_stream(pq, L.LinearStream.zeros(H, dh, dv, 4, W, t0), *x)[1]
        np_state = L.linear_stream_int8(pq, L.LinearStream.zeros(H, dh, dv, 4, W, t0), *x)[1]
        assert all(np.array_equal(a, b) for a, b in zip(vars(c_state).values(), vars(np_state).values()))
    unturned = L.linear_core_int8(dataclasses.replace(pq, turn=None), *x)
    assert not np.array_equal(unturned, L.linear_core_int8(pq, *x))
    assert np.array_equal(unturned, L.linear_core_int8(dataclasses.replace(pq, turn=(0, 0)), *x))
    again = ck.linear_stream(pq, L.LinearStream.zeros(H, dh, dv, 4, W), *x)[0]  # a reset: a fresh state
    assert np.array_equal(again, L.linear_core_int8(pq, *x))
    with pytest.raises(ValueError, match="not this core's"):
        ck.linear_stream(pq, L.LinearStream.zeros(H, dh, dv, 4, W + 1), *x)
    with pytest.raises(ValueError, match="not this core's"):
        L.linear_stream_int8(pq, L.LinearStream.zeros(H, dh, dv, 2, W), *x)
    bad = L.LinearStream.zeros(H, dh, dv, 4, W)
    bad.clock[2] = W  # the ring's slot past its end
    with pytest.raises(ValueError, match="rejected its parameters or state"):
        ck.linear_stream(pq, bad, *x)
    with pytest.raises(ValueError, match="turn rates"):
        L.linear_quant_from_scales(SCALES, dh, 4, ZP, turn=[1 << 16])


def test_sliding_window_state_is_exact():
    """A window moved key by key (the new key added and the expired one removed in one update) holds the same
    integers as one built from its keys, in C and in numpy, and its queries give the same outputs; adding two keys
    in one update equals adding them one by one."""
    rng = np.random.default_rng(7)
    T, W, dh, dv = 30, 8, 8, 8
    q, k, v, r, g = (x[0] for x in case(rng, 1, T, dh, dv, gated=True))
    pq = L.linear_quant_from_scales(SCALES, dh, 4, ZP)
    c, _ = ck.linear_params(pq, 1, T, dh, dv)
    lib, words = ck.library(), L.linear_state_words(dh, dv, 4)
    i32p = lambda a: a.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))  # noqa: E731
    key = lambda j, sign=1: ck.linear_key(k[j], v[j], r[j], int(g[j]) - ZP["g"], sign)  # noqa: E731
    state = np.zeros(words, np.int32)
    sc, sr = L.linear_key_features(k, v, r, g, pq)
    for j in range(T):
        lib.edgeosc_linear_update(ctypes.byref(c), i32p(state), key(j), key(j - W, -1) if j >= W else None)
        lo = max(0, j - W + 1)
        want = np.concatenate([R.wrap32(sc[lo:j + 1].sum(0)).ravel(), R.wrap32(sr[lo:j + 1].sum(0)).ravel()])
        assert np.array_equal(state, want), j
        out = np.empty(dv, np.int8)
        lib.edgeosc_linear_query(ctypes.byref(c), i32p(state), q[j].ctypes.data_as(ctypes.POINTER(ctypes.c_int8)),
                                 out.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)))
        window = L.linear_core_int8(pq, *(x[None, lo:j + 1] for x in (q, k, v, r, g)))
        assert np.array_equal(out, window[0, -1]), j
    pair = np.zeros(words, np.int32)
    lib.edgeosc_linear_update(ctypes.byref(c), i32p(pair), key(3), key(4))
    lib.edgeosc_linear_update(ctypes.byref(c), i32p(pair), key(3, -1), None)  # leaves key 4 alone
    single = np.zeros(words, np.int32)
    lib.edgeosc_linear_update(ctypes.byref(c), i32p(single), key(4), None)
    assert np.array_equal(pair, single) and single.any()


def test_degenerate_inputs():
    rng = np.random.default_rng(3)
    q, k, v, r, g = case(rng, 1, 12, 4, 4, gated=True)
    pq = L.linear_quant_from_scales(SCALES, 4, 2, ZP)
    g[:] = ZP["g"]  # every gate 0: no weight on any key, so the output is 0 (its zero point)
    for got in (L.linear_core_int8(pq, q, k, v, r, g), ck.linear_core(pq, q, k, v, r, g)):
        assert (got == ZP["out"]).all()
    r[:] = 0  # anchors of norm 0 (below one step): h = 0 and z = 0, a uniform readout of the gated keys
    g = rng.integers(0, 128, (1, 12)).astype(np.int8)
    _, parts = L.linear_core_int8(pq, q, k, v, r, g, return_all=True)
    assert (parts["z"] == 0).all()
    assert np.array_equal(ck.linear_core(pq, q, k, v, r, g), L.linear_core_int8(pq, q, k, v, r, g))


def test_float_core_without_weight_on_any_key_gives_zero_and_a_finite_gradient():
    """A stream's gates can all round to 0 over a window (QAT): the integer core's 0, and no NaN for training."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 6, 4, requires_grad=True) for _ in range(3))
    r = torch.nn.functional.normalize(torch.randn(2, 2, 6, 2), dim=-1)
    g = torch.rand(2, 2, 6, 1)
    g[:, :, :3] = 0  # the first three queries' causal windows hold no weighted key
    g.requires_grad_()
    out = oscillator_attention_linear(q, k, v, r, p=2, g=g, causal=True)
    assert (out[:, :, :3] == 0).all() and (out[:, :, 3:].abs() > 0).any()
    (out * torch.randn_like(out)).sum().backward()  # a gradient at the zeros too (as a quantizer passes one)
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v, g))


@pytest.mark.parametrize("change, message", [
    (dict(p=9), "p = 9 is out of range"),
    (dict(p=0), "p = 0 is out of range"),
    (dict(scales=dict(SCALES, q=1.0, k=1.0)), "coupling coefficient"),
    (dict(scales=dict(SCALES, q=1e-5)), "coupling coefficient"),
    (dict(scales=dict(SCALES, out=1e3)), "v's scale over out's"),
])
def test_out_of_range_settings_are_refused(change, message):
    args = dict(scales=SCALES, p=4) | change
    with pytest.raises(ValueError, match=message):
        L.linear_quant_from_scales(args["scales"], 8, args["p"], ZP)


def test_c_refuses_what_it_cannot_compute():
    rng = np.random.default_rng(0)
    pq = L.linear_quant_from_scales(SCALES, 4, 4, ZP)
    x = case(rng, 1, 4, 4, 4, gated=False)
    for field, bad in (("p", 9), ("c1", 15), ("c1", 1 << 20)):
        wrong = L.LinearQuant(**{**vars(pq), field: bad})
        with pytest.raises(ValueError, match="rejected"):
            ck.linear_core(wrong, *x)


def linear_op_model(shapes, scales, zp, p, gated, lead=(), **options) -> bytes:
    """One EdgeOscAttention op with form "linear": q, k, v, r (+ g [.., H, 1, T]) -> out; options: causal, window."""
    from edgeosc.export.tflite import custom_op as tflite_op
    from edgeosc.export.tflite.builder import TFLiteBuilder

    H, T, dh, dv = shapes
    b = TFLiteBuilder()
    xs = [b.input(n, (*lead, H, T, d), np.int8, scales.get(n, 1 / 128), zp.get(n, 0))
          for n, d in zip("qkvr", (dh, dh, dv, 2))]
    if gated:
        xs.append(b.input("g", (*lead, H, 1, T), np.int8, 1 / 128, zp["g"]))
    out = b.tensor("out", (*lead, H, T, dv), np.int8, scale=scales["out"], zero_point=zp["out"])
    b.custom(tflite_op.OP_NAME, xs, [out], tflite_op.custom_options(form="linear", p=p, heads=H, d_osc=2, **options))
    b.mark_output(out)
    return b.to_bytes()


@pytest.mark.parametrize("gated", [False, True])
def test_custom_op_equals_reference(gated):
    """The TFLite kernel derives c1 and the output multiplier from the tensors' float32 scales as the reference does."""
    rng = np.random.default_rng(11)
    for shapes, p in (((2, 49, 8, 8), 4), ((3, 17, 5, 7), 2)):
        q, k, v, r, g = case(rng, *shapes, gated)
        pq = L.linear_quant_from_scales(SCALES, shapes[2], p, ZP)
        want = L.linear_core_int8(pq, q, k, v, r, g)
        xs = [q, k, v, r] + ([g[:, None, :]] if gated else [])
        np.testing.assert_array_equal(run_custom(linear_op_model(shapes, SCALES, ZP, p, gated), xs), want)
        lead = [x[None] for x in xs]  # a leading batch axis flattens into the heads
        np.testing.assert_array_equal(run_custom(linear_op_model(shapes, SCALES, ZP, p, gated, (1,)), lead)[0], want)
        window = dict(causal=1, window=5)  # a stream's sliding window
        pw = L.linear_quant_from_scales(SCALES, shapes[2], p, ZP, causal=True, window=5)
        np.testing.assert_array_equal(run_custom(linear_op_model(shapes, SCALES, ZP, p, gated, **window), xs),
                                      L.linear_core_int8(pw, q, k, v, r, g))


def linear_stream_op_model(shapes, window, turn, gated, kept_rows=None) -> bytes:
    """One EdgeOscAttention op as a stream's step over T frames: q, k, v, r (+ g), clock, sums, kept -> out and the
    next clock, sums, kept (kept_rows: another model's ring length, to be refused)."""
    from edgeosc.export.tflite import custom_op as tflite_op
    from edgeosc.export.tflite.builder import TFLiteBuilder

    H, T, dh, dv = shapes
    b = TFLiteBuilder()
    xs = [b.input(n, (H, T, d), np.int8, SCALES.get(n, 1 / 128), ZP.get(n, 0)) for n, d in zip("qkvr", (dh, dh, dv, 2))]
    if gated:
        xs.append(b.input("g", (H, 1, T), np.int8, 1 / 128, ZP["g"]))
    state = [(3,), (H, L.linear_state_words(dh, dv, 4)), (H, kept_rows or window, dh + dv + 3)]
    types = (np.int32, np.int32, np.int8)
    raw = [dict(), dict(), dict(scale=1.0, zero_point=0)]  # kept: raw int8 storage (k, v, r, g of each key)
    xs += [b.input(f"{n}_in", shape, dtype, **q) for n, shape, dtype, q in zip(("clock", "sums", "kept"), state, types, raw)]
    outs = [b.tensor("out", (H, T, dv), np.int8, scale=SCALES["out"], zero_point=ZP["out"])]
    outs += [b.tensor(n, shape, dtype, **q) for n, shape, dtype, q in zip(("clock", "sums", "kept"), state, types, raw)]
    b.custom(tflite_op.OP_NAME, xs, outs, tflite_op.custom_options(form="linear", p=4, heads=H, d_osc=2, causal=1,
                                                                   window=window, turn=turn, stream=1))
    for o in outs:
        b.mark_output(o)
    return b.to_bytes()


@pytest.mark.parametrize("gated", [False, True])
def test_custom_op_streams_as_the_windowed_core(gated):
    """The op with option stream: frames one at a time through tflite-runtime, the state passed from each call's
    outputs to the next call's inputs, equal the windowed core (the anchors turning) bit for bit; so does the op
    over all frames at once with the turn option; a ring of another length is refused by name."""
    tfl = pytest.importorskip("tflite_runtime.interpreter")
    from edgeosc.runtime import custom_op

    rng = np.random.default_rng(41 + gated)
    H, T, W, dh, dv = 2, 30, 6, 8, 8
    x = case(rng, H, T, dh, dv, gated)
    turn = L.turn_steps([0.11, 0.4])
    pq = L.linear_quant_from_scales(SCALES, dh, 4, ZP, causal=True, window=W, turn=turn)
    want = L.linear_core_int8(pq, *x)
    xs = list(x[:4]) + ([x[4][:, None, :]] if gated else [])
    windowed = linear_op_model((H, T, dh, dv), SCALES, ZP, 4, gated, causal=1, window=W, turn=turn)
    np.testing.assert_array_equal(run_custom(windowed, xs), want)
    it = tfl.InterpreterWithCustomOps(model_content=linear_stream_op_model((H, 1, dh, dv), W, turn, gated),
                                      custom_op_registerers=[custom_op.register])
    it.allocate_tensors()
    ins, outs = it.get_input_details(), it.get_output_details()
    state = list(vars(L.LinearStream.zeros(H, dh, dv, 4, W)).values())
    got = []
    for i in range(T):
        frame = [a[:, i:i + 1] for a in x[:4]] + ([x[4][:, None, i:i + 1]] if gated else [])
        for d, a in zip(ins, frame + state):
            it.set_tensor(d["index"], np.ascontiguousarray(a))
        it.invoke()
        got.append(it.get_tensor(outs[0]["index"]))
        state = [it.get_tensor(d["index"]) for d in outs[1:]]
    np.testing.assert_array_equal(np.concatenate(got, 1), want)
    assert list(state[0]) == [T, W, T % W]
    with pytest.raises(RuntimeError, match="a state of another model"):
        run_custom(linear_stream_op_model((H, 1, dh, dv), W, turn, gated, kept_rows=W + 1),
                   [a[:, :1] for a in xs] + [np.zeros(3, np.int32)])


def test_the_op_runs_in_either_interpreter_and_names_a_bad_file(tmp_path):
    """ai-edge-litert runs the op as a delegate, tflite-runtime registered: the reference's integers in both; a file
    whose options the kernel refuses is an error naming the file, in both."""
    from edgeosc import runtime
    rng = np.random.default_rng(3)
    q, k, v, r, g = case(rng, 2, 49, 8, 8, True)
    path = tmp_path / "op.tflite"
    path.write_bytes(linear_op_model((2, 49, 8, 8), SCALES, ZP, 4, True))
    want = L.linear_core_int8(L.linear_quant_from_scales(SCALES, 8, 4, ZP), q, k, v, r, g)
    for name in runtime.OP_INTERPRETERS:
        if name in runtime.available_interpreters():
            np.testing.assert_array_equal(runtime.load(path, name).run_raw(q, k, v, r, g[:, None, :]), want)
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(linear_op_model((1, 4, 4, 4), SCALES, ZP, 2, False, window=2))  # a window that is not causal
    for name in runtime.OP_INTERPRETERS:
        if name in runtime.available_interpreters():
            with pytest.raises(runtime.ModelFileError, match=f"bad.tflite: {name} cannot prepare it: .*bad custom"):
                runtime.load(bad, name)


def test_custom_op_refuses_bad_linear_settings():
    from edgeosc.export.tflite import custom_op as tflite_op

    with pytest.raises(ValueError, match="p in 1..8"):
        tflite_op.custom_options(form="linear", p=9)
    rng = np.random.default_rng(0)
    xs = list(case(rng, 1, 4, 4, 4, gated=False)[:4])
    with pytest.raises(RuntimeError, match="bad custom options"):  # a window that is not causal
        run_custom(linear_op_model((1, 4, 4, 4), SCALES, ZP, 2, False, window=2), xs)
    bad_r = linear_op_model((1, 4, 4, 4), dict(SCALES, r=1 / 64), ZP, 2, False)
    with pytest.raises(RuntimeError, match="r must be unit vectors"):
        run_custom(bad_r, xs)


@pytest.mark.parametrize("gated, window", [(False, 0), (True, 0), (True, 9)])
def test_firmware_lowering_equals_reference(tmp_path, gated, window):
    """The op lowered by export/c (edgeosc_linear_core_int8, its state in the arena) on the host build; with a
    window, as a stream's steps, the anchors turning."""
    from edgeosc.bench.estimate import host_logits
    from edgeosc.export.c import generate

    rng = np.random.default_rng(5)
    shapes = (2, 49, 8, 8)
    model = tmp_path / "op.tflite"
    turn = L.turn_steps([0.2, 0.03]) if window else None
    model.write_bytes(linear_op_model(shapes, SCALES, ZP, 4, gated, **(dict(causal=1, window=window, turn=turn)
                                                                       if window else {})))
    info = generate(model, tmp_path / "fw", "op", features=None)
    assert "edgeosc_linear_core_int8" in (tmp_path / "fw" / "op_model.c").read_text() and info["calls"] == 1
    pq = L.linear_quant_from_scales(SCALES, shapes[2], 4, ZP, causal=bool(window), window=window, turn=turn)
    for _ in range(3):
        xs = case(rng, *shapes, gated)
        flat = np.concatenate([x.ravel() for x in xs if x is not None])[None]
        got = host_logits(tmp_path / "fw", "op", flat, work=tmp_path / "build").reshape(2, 49, 8)
        np.testing.assert_array_equal(got, L.linear_core_int8(pq, *xs))
