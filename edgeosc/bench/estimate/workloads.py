"""What the estimates run: untrained calibrated networks as generated firmware (random_firmware), the builtin kernels
at the default model's shapes with random int8 data (default_kernel_shapes, kernel_case), and an attention layer's
plausible integer parameters with random inputs (layer_inputs)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from . import structs as S


def random_firmware(cfg, n_frames: int, out_dir: str | Path, window: int = 0) -> tuple[Path, str]:
    """An untrained, calibrated int8 network of ModelConfig cfg (any kind, DS-CNN included) as generated C firmware
    (folder, name): over n_frames frames, or with window > 0 the streaming variant's stream_int8.tflite
    (export/tflite/stream.py: one frame a run, its state in the arena). What the estimates count depends on the
    shapes; the values only move a few data-dependent branches (the linear core's, requantization's), so random
    weights price a model as a trained one does."""
    import torch

    from ...config import QuantConfig
    from ...export.c import generate
    from ...export.tflite import firmware_int8
    from ...models.kws import build_model
    from ...quant import calibrate, quantize_model
    cfg = dataclasses.replace(cfg, dropout=0.0, window=window, **({} if window else dict(n_frames=n_frames)))
    torch.manual_seed(0)
    qat = quantize_model(build_model(cfg).eval(), QuantConfig())
    frames = 2 * window if window else n_frames  # a stream's calibration: a window's keys and as many to follow
    calibrate(qat, [(torch.randn(8 if window else 16, frames, cfg.n_coeffs), None)], 1)
    kind = cfg.attention.replace("-", "_")
    out, name = Path(out_dir), f"{kind}_stream_w{window}" if window else f"{kind}_t{n_frames}"
    out.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        (out / f"{name}.tflite").write_bytes(firmware_int8(qat.eval())[1])
    generate(out / f"{name}.tflite", out / name, name=name, features=None)
    return out / name, name


def default_kernel_shapes() -> list[dict]:
    """The builtin kernels of the default small model (models/kws.py SIZES["small"], 49 frames x 40 coefficients)
    at their shapes: the stem, the attention projections, the feed-forward pair, the classifier, a residual ADD,
    the layer norm's SUB of the row mean and its L2 normalisation."""
    from ...config import ModelConfig
    from ...models.kws import resolve
    m = resolve(ModelConfig())
    T, C, d = m.n_frames, m.n_coeffs, m.d_model
    return [dict(op="CONV_2D", name="stem", in_h=1, in_w=T, in_c=C, k_h=1, k_w=3, out_c=d),
            dict(op="FULLY_CONNECTED", name="projection", rows=T, depth=d, units=d),
            dict(op="FULLY_CONNECTED", name="feed-forward up", rows=T, depth=d, units=2 * d),
            dict(op="FULLY_CONNECTED", name="feed-forward down", rows=T, depth=2 * d, units=d),
            dict(op="FULLY_CONNECTED", name="layer-norm mean", rows=T, depth=d, units=1),
            dict(op="FULLY_CONNECTED", name="classifier", rows=1, depth=d, units=m.n_classes),
            dict(op="ADD", name="residual", rows=T, cols=d),
            dict(op="SUB", name="layer-norm center", rows=T, cols=d, row_broadcast=1),
            dict(op="L2_NORMALIZATION", name="layer norm", rows=T, depth=d)]


def kernel_case(spec: dict, rng) -> tuple[str, list, dict, int]:
    """(driver function of harness/kernel_driver.c, its arguments, buffers, MACs) for one kernel spec with random
    int8 data. Optional keys: "act" (act_min, act_max), "per_channel" (FULLY_CONNECTED), "runtime_requant"
    (FULLY_CONNECTED, CONV_2D: the DSP requantization constants prepared on each call, not given as code generation
    writes them), "stride" and "dil" (CONV_2D and DEPTHWISE_CONV_2D, SAME padding; "MACs" counts the taps inside
    and outside the image alike), "scales" (ADD / SUB: the scales of a, b and the output; random otherwise),
    "multipliers" (CONV_2D, DEPTHWISE_CONV_2D: the channels' real multipliers, cycled; weights in -3..2)."""
    from ...export.c.multipliers import dsp_requant
    from ...export.c.packing import (depthwise3x3_packs, depthwise_scratch_words, pack_depthwise3x3, pack_weights,
                                     wide_words)
    from ...integer import reference as R
    i8 = lambda *shape: rng.integers(-128, 128, shape).astype(np.int8)  # noqa: E731
    zp = lambda: int(rng.integers(-128, 128))  # noqa: E731
    if spec["op"] == "L2_NORMALIZATION":  # "rows" x "depth", zero point "zp" (random otherwise)
        rows, depth = spec["rows"], spec["depth"]
        f = S.BenchL2Norm(rows, depth, int(spec.get("zp", rng.integers(-128, 128))))
        x = i8(rows, depth)
        if spec.get("zero_rows"):  # rows at the zero point: no norm (TFLite's output 0)
            x[::2] = f.zp
        bufs = dict(f=S.buffer(f), x=x, out=np.zeros(rows * depth, np.int8))
        return "edgeosc_bench_l2norm", ["f", "x", "out"], bufs, 0
    if spec["op"] in ("ADD", "SUB"):  # "rows" x "cols", b broadcast along the row when "row_broadcast"
        rows, cols, (lo, hi) = spec["rows"], spec["cols"], spec.get("act", (-128, 127))
        row_b = int(spec.get("row_broadcast", 0))
        scales = spec.get("scales", rng.uniform(0.01, 0.2, 3))  # drawn either way: the data after it stay the same
        mult, shift = zip(*(R.quantize_multiplier(m) for m in R.add_multipliers(*scales)))
        f = S.BenchAdd((1, 1, rows, cols), (0, 0, cols, 1), (0, 0, 1 if row_b else cols, 0 if row_b else 1),
                       *rng.integers(-128, 128, 3), lo, hi, int(spec["op"] == "SUB"))
        bufs = dict(f=S.buffer(f), w=i8(rows, 1 if row_b else cols), bias=np.zeros(1, np.int32),
                    mult=np.array(mult, np.int32), shift=np.array(shift, np.int32), x=i8(rows, cols),
                    out=np.zeros(rows * cols, np.int8), scratch=np.zeros(1, np.int32))
        return "edgeosc_bench_add", ["f", "w", "bias", "mult", "shift", "x", "out", "scratch"], bufs, 0
    lo, hi = spec.get("act", (-128, 127))
    if spec["op"] == "FULLY_CONNECTED":
        rows, depth, units = spec["rows"], spec["depth"], spec["units"]
        f = S.BenchFc(rows, depth, units, zp(), zp(), lo, hi, int(spec.get("per_channel", 0)))
        w, x, macs, n_out, n_bias = i8(units, depth), i8(rows, depth), rows * depth * units, rows * units, units
        channels = units if f.per_channel else 1
        fn, words = "edgeosc_bench_fc", wide_words(depth) + 2 * units  # EDGEOSC_FC_SCRATCH_WORDS
    else:
        depthwise = spec["op"] == "DEPTHWISE_CONV_2D"
        h, wd, c, kh, kw, oc = (spec[k] for k in ("in_h", "in_w", "in_c", "k_h", "k_w", "out_c"))
        st, dil = spec.get("stride", 1), spec.get("dil", 1)
        oh, ow = -(-h // st), -(-wd // st)  # SAME padding (ComputePaddingWithOffset)
        pads = [max((o - 1) * st + (k - 1) * dil + 1 - n, 0) // 2 for o, k, n in ((oh, kh, h), (ow, kw, wd))]
        f = S.BenchConv(h, wd, c, oh, ow, oc, kh, kw, st, st, dil, dil, *pads, zp(), zp(), lo, hi, depthwise)
        w, x, n_out = i8(1, kh, kw, oc) if depthwise else i8(oc, kh, kw, c), i8(h, wd, c), oh * ow * oc
        n_bias = channels = oc
        macs = oh * ow * kh * kw * oc * (1 if depthwise else c)
        K = kh * kw * c
        fn, words = "edgeosc_bench_conv", wide_words(K) + 2 * oc + K  # EDGEOSC_CONV_SCRATCH_WORDS
        if depthwise:
            words = depthwise_scratch_words(oh, ow)
    reals = rng.uniform(2e-4, 4e-3, channels)
    if "multipliers" in spec:  # cycled over the channels, with weights and bias small enough for unclamped outputs
        reals, w = np.resize(spec["multipliers"], channels), (w.astype(np.int32) * 3 // 128).astype(np.int8)
    mult, shift = zip(*(R.quantize_multiplier(float(s)) for s in reals))
    bias = rng.integers(-5000, 5000, n_bias).astype(np.int32) // (50 if "multipliers" in spec else 1)
    bufs = dict(f=S.buffer(f), w=w, bias=bias,
                mult=np.array(mult, np.int32), shift=np.array(shift, np.int32), x=x, out=np.zeros(n_out, np.int8),
                scratch=np.zeros(words, np.int32))
    dsp = None if spec.get("runtime_requant") else dsp_requant(mult, shift)
    if dsp is not None:  # as generated firmware has them (spec "runtime_requant": prepared on each call instead)
        bufs["dsp"] = dsp
    packs = spec["op"] != "DEPTHWISE_CONV_2D" and w.shape[0] > 1  # as code generation packs them
    if spec["op"] == "DEPTHWISE_CONV_2D":
        geo = {name: getattr(f, name) for name in ("in_h", "in_w", "in_c", "out_h", "out_w", "out_c", "k_h", "k_w",
                                                    "stride_h", "stride_w", "dil_h", "dil_w", "pad_top", "pad_left")}
        near = None if spec.get("runtime_requant") else dsp_requant(mult, shift, 0)  # the planes take shift 0 too
        packs = depthwise3x3_packs(geo, c, oc, lo, hi, near, w, bufs["bias"], f.zp_in)
        if packs:
            bufs["packed"], bufs["dsp"] = pack_depthwise3x3(w, bufs["bias"], f.zp_in), near
    elif packs:
        one_row = n_out == channels if fn == "edgeosc_bench_conv" else spec["rows"] == 1  # unpacked (edgeosc_ops.h)
        bufs["packed"] = pack_weights(w.reshape(w.shape[0], -1), bufs["bias"], f.zp_in, w16=one_row)
    return fn, ["f", "w", "bias", "mult", "shift", "x", "out", "scratch", "dsp" if "dsp" in bufs else 0,
                "packed" if packs else 0], bufs, macs


def layer_inputs(T: int, d_osc: int, heads: int, d_head: int, seed: int, p: int = 4) -> dict:
    """Plausible integer parameters (callgrind's layer scales, TFLite Micro's multipliers) and random inputs of an
    attention layer; the linear core's readout power p. The cores' parameters as their ckernels mirrors (osc, sm,
    lin: the OscQuant, SoftmaxQuant and LinearQuant; osc_p, sm_p, lin_p: their structs for T tokens)."""
    from ...integer import ckernels as K
    from ...integer import linear as L
    from ...integer import reference as R
    from ..callgrind import _layer
    s, tables = _layer(T, d_head, 4)
    osc = R.osc_quant_from_scales(s, *tables, sum_op="fully_connected", ones=127, ones_scale=1 / 127,
                                  target_name="tflite-micro")
    sm = R.softmax_quant_from_scales(dict(q=s["q"], k=s["k"], v=s["v"], qk=0.5, out=s["out"]),
                                     beta=1 / np.sqrt(d_head), target_name="tflite-micro")
    rng = np.random.default_rng(seed)
    q, k, v = (rng.integers(-128, 128, (heads, T, d_head)).astype(np.int8) for _ in range(3))
    r = rng.standard_normal((heads, T, d_osc))
    r = np.clip(np.round(127 * r / np.linalg.norm(r, axis=-1, keepdims=True)), -128, 127).astype(np.int8)
    osc_p = K.osc_params(osc, heads, T, d_head, d_osc, d_head)[0]
    sm_p = K.softmax_params(sm, heads, T, d_head, d_head)
    lut = R.softmax_exp_table(sm.beta_multiplier, sm.beta_left_shift, sm.diff_min).astype(np.int32)
    lin = L.linear_quant_from_scales(s, d_head, p, zp=dict(g=-128))  # gates >= 0
    r2 = rng.standard_normal((heads, T, 2))
    r2 = np.clip(np.round(128 * r2 / np.linalg.norm(r2, axis=-1, keepdims=True)), -128, 127).astype(np.int8)
    if T > 5:  # anchors at int8's -1: ungated, their readouts pass int16 (the DSP pass leaves them to the portable)
        r2[:, 3:6:2] = [[-128, 0], [0, -128]]
    g = rng.integers(-128, 128, (heads, T)).astype(np.int8)
    return dict(osc=osc, sm=sm, lin=lin, r2=r2, g=g, lin_p=K.linear_params(lin, heads, T, d_head, d_head)[0],
                q=q, k=k, v=v, r=r, osc_p=osc_p, sm_p=sm_p, lut=lut,
                tables=np.concatenate([osc.table_w, osc.table_c, osc.table_inv]).astype(np.int8))
