"""The kernels' fast paths (edgeosc_simd.h: DSP on Cortex-M, NEON on AArch64) against their portable path, both
emulated on the same core: the same integers for every shape class (odd rows and units, depths not a multiple
of 4, padding, stride, dilation, clamped activations, per-channel requantization), and fewer cycles."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess

import numpy as np
import pytest

from edgeosc.bench import estimate as E

if any(importlib.util.find_spec(m) is None for m in ("unicorn", "capstone", "elftools")):
    pytest.skip("not installed: unicorn, capstone, pyelftools", allow_module_level=True)
if not (shutil.which("arm-none-eabi-gcc") or importlib.util.find_spec("ziglang")):
    pytest.skip("no Thumb compiler: apt-get install gcc-arm-none-eabi, or pip install ziglang", allow_module_level=True)

EDGE_SHAPES = [
    dict(op="FULLY_CONNECTED", name="odd rows and units", rows=5, depth=16, units=7),
    dict(op="FULLY_CONNECTED", name="depth 4k+3", rows=4, depth=19, units=6, per_channel=1),
    dict(op="FULLY_CONNECTED", name="depth < 4, relu", rows=3, depth=3, units=3, act=(-20, 127)),
    dict(op="FULLY_CONNECTED", name="one row, one unit", rows=1, depth=33, units=1),
    dict(op="FULLY_CONNECTED", name="units past a chunk, depth 8k+5, capped activation", rows=3, depth=45, units=37,
         per_channel=1, act=(-30, 90)),
    dict(op="FULLY_CONNECTED", name="one row, units 4k+3", rows=1, depth=18, units=7, per_channel=1),
    # one row: weights unpacked at code generation (a quad of units in assembly, a lone pair in C)
    dict(op="FULLY_CONNECTED", name="one row, unpacked weights, 3 pairs, depth 8k+5", rows=1, depth=29, units=5,
         per_channel=1, act=(-30, 90)),
    dict(op="FULLY_CONNECTED", name="one row, unpacked weights, one pair", rows=1, depth=8, units=2),
    dict(op="FULLY_CONNECTED", name="four-row blocks past a chunk, depth 8k+5, capped activation, rows 4k+2", rows=10,
         depth=45, units=37, per_channel=1, act=(-30, 90)),
    dict(op="FULLY_CONNECTED", name="four-row blocks, depth 8k+4, odd units, relu", rows=8, depth=12, units=5,
         act=(-7, 127)),
    dict(op="FULLY_CONNECTED", name="constants prepared per call", rows=3, depth=8, units=5, per_channel=1,
         runtime_requant=1),
    dict(op="CONV_2D", name="10x4 stride 2", in_h=13, in_w=7, in_c=1, k_h=10, k_w=4, out_c=5, stride=2),
    dict(op="CONV_2D", name="3x3 dilated, channels 4k+2", in_h=6, in_w=5, in_c=6, k_h=3, k_w=3, out_c=3, dil=2,
         act=(0, 90)),
    dict(op="CONV_2D", name="1x3 over time", in_h=1, in_w=9, in_c=8, k_h=1, k_w=3, out_c=4),
    dict(op="CONV_2D", name="1x3 stride 2, odd channels (fields read in place, unaligned)", in_h=1, in_w=11, in_c=5,
         k_h=1, k_w=3, out_c=3, stride=2),
    dict(op="CONV_2D", name="1x3, one frame, constants prepared per call", in_h=1, in_w=1, in_c=8, k_h=1, k_w=3,
         out_c=6, runtime_requant=1),
    dict(op="DEPTHWISE_CONV_2D", name="depthwise 3x3", in_h=7, in_w=5, in_c=8, k_h=3, k_w=3, out_c=8),
    # 3 x 3 stride 1 on its planes: even and odd heights, one column, the extra row dropped, a clamp (other loops)
    dict(op="DEPTHWISE_CONV_2D", name="depthwise 3x3, even height", in_h=6, in_w=3, in_c=4, k_h=3, k_w=3, out_c=4),
    dict(op="DEPTHWISE_CONV_2D", name="depthwise 3x3, one column, one row", in_h=1, in_w=1, in_c=8, k_h=3, k_w=3,
         out_c=8),
    dict(op="DEPTHWISE_CONV_2D", name="depthwise 3x3, ds-cnn's height", in_h=25, in_w=2, in_c=4, k_h=3, k_w=3,
         out_c=4),
    # trained scales can put a channel at shift 0 or -1 (multipliers of 0.5 or 0.25 or more): rows in C, exact
    dict(op="DEPTHWISE_CONV_2D", name="depthwise 3x3, channels at shifts 0 and -1", in_h=7, in_w=5, in_c=8, k_h=3,
         k_w=3, out_c=8, multipliers=[0.7, 0.3, 0.6, 0.003, 0.26, 0.49, 0.99, 0.5]),
    dict(op="DEPTHWISE_CONV_2D", name="depthwise 3x3 relu (the other loops)", in_h=5, in_w=4, in_c=8, k_h=3, k_w=3,
         out_c=8, act=(-20, 127)),
    dict(op="DEPTHWISE_CONV_2D", name="depthwise stride 2 dilated relu", in_h=9, in_w=6, in_c=16, k_h=3, k_w=2,
         out_c=16, stride=2, dil=2, act=(-128, 40)),
    dict(op="DEPTHWISE_CONV_2D", name="depthwise channels 4k+4 (NEON: portable)", in_h=5, in_w=5, in_c=12, k_h=3,
         k_w=3, out_c=12),
    dict(op="DEPTHWISE_CONV_2D", name="depthwise multiplier 2 (portable)", in_h=4, in_w=4, in_c=3, k_h=3, k_w=3,
         out_c=6),
    dict(op="L2_NORMALIZATION", name="l2 norm, depth 4k+3, rows at the zero point", rows=5, depth=19, zero_rows=1),
    dict(op="L2_NORMALIZATION", name="l2 norm, zero point -128, depth 2", rows=6, depth=2, zp=-128),
    dict(op="L2_NORMALIZATION", name="l2 norm, zero point 127", rows=3, depth=32, zp=127),
    dict(op="ADD", name="add", rows=5, cols=7),
    dict(op="SUB", name="sub of a row broadcast, clamped", rows=4, cols=9, row_broadcast=1, act=(-30, 100)),
    dict(op="ADD", name="add, relu", rows=3, cols=16, act=(-5, 127)),
    # the DSP path scales only the input of the smaller scale: each input in that place, both signs, equal scales
    dict(op="SUB", name="sub, a the larger", rows=3, cols=10, scales=(0.2, 0.05, 0.1)),
    dict(op="SUB", name="sub, b the larger", rows=3, cols=10, scales=(0.05, 0.2, 0.1)),
    dict(op="SUB", name="sub of a row broadcast, b the larger", rows=3, cols=6, row_broadcast=1,
         scales=(0.03, 0.1, 0.1)),
    dict(op="ADD", name="add of a row broadcast, a the larger, relu", rows=2, cols=5, row_broadcast=1,
         scales=(0.1, 0.03, 0.05), act=(-40, 127)),
    dict(op="ADD", name="add, equal scales (portable)", rows=2, cols=8, scales=(0.07, 0.07, 0.1)),
]


@pytest.mark.parametrize("core", ["cortex-m4", "cortex-m33", "cortex-a53"])
def test_dsp_path_equals_portable_path(core, tmp_path):
    if core == "cortex-a53" and not (shutil.which("aarch64-linux-gnu-gcc") or importlib.util.find_spec("ziglang")):
        pytest.skip("no AArch64 compiler: apt-get install gcc-aarch64-linux-gnu, or pip install ziglang")
    # Cortex-A53: the NEON paths of FULLY_CONNECTED, CONV_2D and DEPTHWISE_CONV_2D
    # kernel_cycles raises if any output differs; the rows prove every case ran
    rows = E.kernel_cycles(core, shapes=EDGE_SHAPES, work_dir=tmp_path, seed=3)
    assert [r["name"] for r in rows] == [s["name"] for s in EDGE_SHAPES]
    assert all(r["output"].size and r["cycles"] > 0 for r in rows)


def test_dsp_loops_in_c_equal_the_portable_path(tmp_path):
    # EDGEOSC_NO_ASM (and unoptimised builds) take the loops in C, the twins of dsp/*.S
    rows = E.kernel_cycles("cortex-m4", shapes=EDGE_SHAPES, work_dir=tmp_path, seed=4,
                           flags=(*E.CFLAGS, "-DEDGEOSC_NO_ASM"))
    assert len(rows) == len(EDGE_SHAPES)


@pytest.mark.parametrize("level", ["-O0", "-O2"])
def test_kernels_build_unoptimised_and_optimised_with_hard_float(level, tmp_path):
    # -O0 keeps r7 as the frame pointer and hard float no core register to spare: the tightest register budget
    if not shutil.which("arm-none-eabi-gcc"):
        pytest.skip("no arm-none-eabi-gcc (apt-get install gcc-arm-none-eabi)")
    run = subprocess.run(["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16",
                          level, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{E.KERNELS}", "-c",
                          *map(str, E.KERNEL_SOURCES)], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_dscnn_depthwise_is_faster_on_the_dsp_path(tmp_path):
    # its 3 x 3 stride-1 planes: 2.44 cycles/MAC measured (3.50 in two-row passes, 13.0 on the per-tap SMLABB loop)
    shape = dict(op="DEPTHWISE_CONV_2D", name="ds-cnn depthwise", in_h=25, in_w=5, in_c=64, k_h=3, k_w=3, out_c=64)
    (row,) = E.kernel_cycles("cortex-m4", shapes=[shape], work_dir=tmp_path)
    assert row["speedup"] > 15 and row["cycles_per_mac"] < 2.5 and row["macs"] == 25 * 5 * 64 * 9


def test_depthwise_rounding_in_one_smmlar_is_exact_where_admitted():
    """The 3 x 3 planes round x / 2^r (ties away from zero), add zp_out and clamp as one SMMLAR by 2^(32 - r) + 1
    (dsp/edgeosc_depthwise_dsp.c): TFLite's result wherever code generation admits it, r <= 12 (any int32 x past
    INT32_MIN) or |x| < 2^(32 - r), which it bounds from the weights and bias."""
    from edgeosc.export.c.packing import depthwise3x3_packs
    rng = np.random.default_rng(0)
    for r in range(2, 24):
        lim = (1 << 31) - 1 if r <= 12 else (1 << (32 - r)) - 1
        ties = (rng.integers(-400, 400, 3000) << r) + (1 << (r - 1))  # x / 2^r at a half, most outputs unclamped
        near = rng.integers(-400 << r, 400 << r, 3000)
        x = np.concatenate([ties, near, rng.integers(-lim, lim + 1, 3000), [-lim, lim, 0, 1, -1]]).astype(np.int64)
        x, mask = x[np.abs(x) <= lim], (1 << r) - 1
        ref = (x >> r) + ((x & mask) > (mask >> 1) + (x < 0))  # TFLite's RoundingDivideByPOT
        for zp in (-128, 0, 127):
            got = zp + ((x * ((1 << (32 - r)) + 1) + (1 << 31)) >> 32)  # SMMLAR(x, 2^(32 - r) + 1, zp)
            np.testing.assert_array_equal(np.clip(got, -128, 127), np.clip(zp + ref, -128, 127), err_msg=f"r {r}")
    geo = dict(k_h=3, k_w=3, stride_h=1, stride_w=1, dil_h=1, dil_w=1, pad_top=1, pad_left=1, in_h=25, in_w=5,
               out_h=25, out_w=5)
    w, dsp = np.full((1, 3, 3, 4), 127, np.int8), lambda r: np.tile(np.array([-1 << 31, r], np.int32), 4)
    assert depthwise3x3_packs(geo, 4, 4, -128, 127, dsp(12), w, np.full(4, 1 << 30), 0)  # any accumulator
    assert depthwise3x3_packs(geo, 4, 4, -128, 127, dsp(14), w, np.zeros(4), 0)  # 128 * 9 * 127 < 2^18
    assert not depthwise3x3_packs(geo, 4, 4, -128, 127, dsp(14), w, np.full(4, 1 << 18), 0)
    assert depthwise3x3_packs(geo, 4, 4, -128, 127, dsp(1), w, np.zeros(4), 0)  # r 1 and 0: rounded from 2x in C
    assert depthwise3x3_packs(geo, 4, 4, -128, 127, dsp(0), w, np.full(4, (1 << 30) - 128 * 9 * 127 - 1), 0)
    assert not depthwise3x3_packs(geo, 4, 4, -128, 127, dsp(0), w, np.full(4, 1 << 30), 0)  # 2x would pass int32
    assert not depthwise3x3_packs(geo, 4, 4, -128, 127, None, w, np.zeros(4), 0)  # a shift above 0: no constants


def test_depthwise_rounding_from_twice_x_is_exact_at_shifts_0_and_minus_1():
    """Channels at shift right r 0 or 1 round in C as requant_zp on 2x with right r + 1 (dw3_rows_near):
    (2x + 2^r - [x < 0]) >> (r + 1) is TFLite's RoundingDivideByPOT(x, r) for every |x| < 2^30."""
    rng = np.random.default_rng(1)
    for r in (0, 1, 2, 7):
        x = np.concatenate([(rng.integers(-400, 400, 3000) << r) + (1 << r >> 1), rng.integers(-1 << 30, 1 << 30, 3000),
                            [0, 1, -1, (1 << 30) - 1, -(1 << 30) + 1]]).astype(np.int64)
        mask = (1 << r) - 1
        ref = (x >> r) + ((x & mask) > (mask >> 1) + (x < 0))
        np.testing.assert_array_equal((2 * x + (1 << r) - (x < 0)) >> (r + 1), ref, err_msg=f"r {r}")


def test_default_kernels_are_faster_on_the_dsp_path(tmp_path):
    rows = {r["name"]: r for r in E.kernel_cycles("cortex-m4", work_dir=tmp_path)}
    assert {"stem", "projection", "feed-forward up", "feed-forward down"} <= set(rows)
    for name in ("stem", "projection", "feed-forward up", "feed-forward down"):
        assert rows[name]["speedup"] > 2.5, (name, rows[name]["speedup"])
        assert rows[name]["cycles_per_mac"] < 4.0, (name, rows[name]["cycles_per_mac"])


@pytest.mark.parametrize("gated", [True, False])
def test_streaming_linear_core_is_exact_on_both_paths(gated, tmp_path):
    """Each hop's step (the new key added, the expired one removed, the query read in the same pass) on Cortex-M4,
    every output checked against the integer reference over its window by linear_hop_cycles: on the DSP path in
    assembly, in C (EDGEOSC_NO_ASM) and on the portable one. Two anchors at int8's -1 make ungated readouts leave
    int16, which the DSP pass hands to the portable loops."""
    kw = dict(core="cortex-m4", heads=2, d_head=6, p=3, gated=gated)
    dsp = E.linear_hop_cycles(**kw, work_dir=tmp_path / "dsp")
    in_c = E.linear_hop_cycles(**kw, work_dir=tmp_path / "c", flags=(*E.CFLAGS, "-DEDGEOSC_NO_ASM"))
    portable = E.linear_hop_cycles(**kw, work_dir=tmp_path / "portable", flags=(*E.CFLAGS, "-DEDGEOSC_PORTABLE"))
    assert dsp < in_c < portable, (dsp, in_c, portable)


@pytest.mark.parametrize("gated, p", [(True, 4), (False, 4), (True, 6), (True, 8)])
def test_default_head_streams_exactly_on_its_unrolled_path(gated, p, tmp_path):
    """The default head (d_head = d_value = 8 at the build's EDGEOSC_LINEAR_D8_P, 4 unless set) takes an unrolled
    update and query of its own on the DSP path: every hop's outputs against the integer reference over its window
    (linear_hop_cycles), its query's loops in assembly and in C (EDGEOSC_NO_ASM), each faster than the one after it.
    Its assembly at p 6 and 8 adds the readout rows past the ninth in a second pass."""
    kw, d8 = dict(core="cortex-m4", heads=2, d_head=8, p=p, gated=gated), f"-DEDGEOSC_LINEAR_D8_P={p}"
    dsp = E.linear_hop_cycles(**kw, work_dir=tmp_path / "dsp", flags=(*E.CFLAGS, d8))
    in_c = E.linear_hop_cycles(**kw, work_dir=tmp_path / "c", flags=(*E.CFLAGS, d8, "-DEDGEOSC_NO_ASM"))
    portable = E.linear_hop_cycles(**kw, work_dir=tmp_path / "portable", flags=(*E.CFLAGS, "-DEDGEOSC_PORTABLE"))
    assert dsp < in_c < 0.8 * portable, (dsp, in_c, portable)


def test_narrow_head_streams_exactly(tmp_path):
    """The narrow head (d_head = d_value = 4 at the default power: twice the heads at the same width) takes key terms
    and a query unrolled in C on every path: each hop's outputs against the integer reference (linear_hop_cycles),
    gated and not."""
    for gated in (True, False):
        assert E.linear_hop_cycles("cortex-m4", heads=2, d_head=4, p=4, gated=gated, work_dir=tmp_path / str(gated)) > 0


@pytest.mark.parametrize("out_shift", [-10, 19, 20])
def test_default_head_division_at_its_extreme_shifts(out_shift, tmp_path):
    """The query's division on the DSP path at the output shift's ends, against the integer reference: -10 and 19
    (62- and 33-bit roundings, SMMLA adding the rounding's top word) and 20 (a 32-bit one, SMMULR); at 19 and 20
    nearly every output saturates (a division without SSAT fails here)."""
    assert E.linear_hop_cycles("cortex-m4", heads=2, d_head=8, p=4, out_shift=out_shift, work_dir=tmp_path) > 0


def test_inv_sqrt_multiplier_on_the_dsp_path_equals_the_reference(tmp_path):
    """1/sqrt's Newton steps on SMMULR (edgeosc_fixedpoint.c) against TFLite's arithmetic in numpy, emulated on the
    Cortex-M4 over the whole int32 range: every power of two and its neighbours, and log-uniform values."""
    from edgeosc.bench import cycles as C
    from edgeosc.integer import reference as R
    rng = np.random.default_rng(7)
    edges = [v + d for b in range(31) for d in (-1, 0, 1) for v in [1 << b] if 0 <= v + d < 2**31]
    acc = np.unique(np.concatenate([[0, 2**31 - 1], edges, np.exp2(rng.uniform(0, 31, 6000)).astype(np.int64)]))
    acc = acc[acc < 2**31].astype(np.int32)
    driver = E.generated_source(tmp_path, "inv_sqrt", "\n".join([
        '#include "edgeosc_fixedpoint.h"',
        "int inv_sqrt_all(const int32_t *acc, int n, int32_t *mult, int32_t *shift) {",
        "  int i, s;",
        "  for (i = 0; i < n; ++i) edgeosc_inv_sqrt_multiplier(acc[i], &mult[i], &s), shift[i] = s;",
        "  return n;", "}", ""]))
    elf = E.build([E.KERNEL_SOURCES[0], driver], "cortex-m4", tmp_path)
    run = C.emulate(elf, "inv_sqrt_all", ["acc", acc.size, "mult", "shift"],
                    dict(acc=acc, mult=np.zeros_like(acc), shift=np.zeros_like(acc)), core="cortex-m4")
    mult, shift = R.inv_sqrt_multiplier(acc)
    np.testing.assert_array_equal(run.outputs["mult"], mult)
    np.testing.assert_array_equal(run.outputs["shift"], shift)


@pytest.mark.parametrize("input_scale", [0.02, 0.2])
def test_softmax_row_on_the_dsp_path_equals_the_portable_path(input_scale, tmp_path):
    """SOFTMAX's int8 row through its exp table (the softmax core's rows, streams' and windows'): its DSP path (the
    maximum four bytes a step, unrolled sums) against the portable loops, both emulated on the Cortex-M4, over rows
    of every length class (shorter than a word, whole words, tails) with the maximum at the start, the end and in a
    tail."""
    from edgeosc.bench import cycles as C
    from edgeosc.integer import reference as R
    rng = np.random.default_rng(11)
    lengths = [1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 48, 49, 50, 51]
    rows = []
    for n in lengths:
        for where in (0, n - 1, n // 2):
            row = rng.integers(-128, 100, n)
            row[where] = rng.integers(100, 128)
            rows.append(row)
    rows.append(np.full(7, -128))
    x = np.concatenate(rows).astype(np.int8)
    lens = np.array([len(r) for r in rows], np.int32)
    lut = R.softmax_exp_table(*R.softmax_params(input_scale, 1.0))
    driver = E.generated_source(tmp_path, "softmax_rows", "\n".join([
        '#include "edgeosc_attention.h"',
        "int softmax_rows(const int8_t *x, const int32_t *lens, int n, const int32_t *lut, int8_t *out) {",
        "  int i;",
        "  for (i = 0; i < n; x += lens[i], out += lens[i], ++i) edgeosc_softmax_row_lut_int8(x, lens[i], lut, out);",
        "  return n;", "}", ""]))
    outs = []
    for flags in (E.CFLAGS, (*E.CFLAGS, "-DEDGEOSC_PORTABLE")):
        elf = E.build([*E.KERNEL_SOURCES, driver], "cortex-m4", tmp_path / flags[-1].strip("-"), flags=flags)
        run = C.emulate(elf, "softmax_rows", ["x", "lens", lens.size, "lut", "out"],
                        dict(x=x, lens=lens, lut=lut, out=np.zeros_like(x)), core="cortex-m4")
        outs.append(run.outputs["out"])
    np.testing.assert_array_equal(outs[0], outs[1])
    assert len(np.unique(outs[1])) > 20  # real probabilities, not a constant row


def test_softmax_core_past_its_packed_pairs_equals_the_reference(tmp_path):
    """The softmax core's mix packs a query's probability pairs on the stack, 64 pairs at a time: at T = 131 a row
    takes two chunks, the second a lone pair, and an odd last key. core_scaling checks every output against the
    integer reference on the emulated Cortex-M4 (and the linear core's at that T), its pairs' loop in assembly
    and in C (EDGEOSC_NO_ASM)."""
    (row,) = E.core_scaling(T_values=(131,), d_osc_values=(2,), core="cortex-m4", work_dir=tmp_path / "asm")
    (in_c,) = E.core_scaling(T_values=(131,), d_osc_values=(2,), core="cortex-m4", work_dir=tmp_path / "c",
                             flags=(*E.CFLAGS, "-DEDGEOSC_NO_ASM"))
    assert row["oscillator_linear_cycles"] < row["softmax_cycles"] < in_c["softmax_cycles"]


def newton_stays_unsaturated(stride: int) -> bool:
    """The DSP path's premise for 1/sqrt: over every stride-th normalised input x in [2^27, 2^29), TFLite's five
    Newton steps never saturate and y stays in [2^28, 2^30), so SMMULR with plain shifts computes them exactly.
    stride=1 checks all 402,653,184 inputs (3.5 min; run for docs/notebook.md#fast-kernels)."""
    from edgeosc.integer import reference as R
    half_three = (1 << 28) + (1 << 27)
    for start in range(1 << 27, 1 << 29, stride << 22):
        x = np.arange(start, min(start + (stride << 22), 1 << 29), stride, dtype=np.int64)
        half_input, y = R.rdbpot(x >> 1, 1), np.full(x.shape, 1 << 28, np.int64)
        for _ in range(5):
            y3 = R.srdhm(R.srdhm(y, y), y)
            d = R.srdhm(half_three, y) - R.srdhm(half_input, y3 << 6)
            if np.abs(y3).max() >= 1 << 25 or np.abs(d).max() >= 1 << 28:
                return False
            y = d << 3
            if y.min() < 1 << 28 or y.max() >= 1 << 30:
                return False
    return True


def test_inv_sqrt_newton_steps_never_saturate():
    assert newton_stays_unsaturated(stride=97)


@pytest.mark.parametrize("d_head", [6, 8, 16])
def test_neon_attention_cores_equal_the_reference(d_head, tmp_path):
    """The three fused cores' NEON paths (d_head 6: the tails and the portable fallbacks) on Cortex-A53, each output
    checked against the integer reference by core_scaling, and faster than the portable loops."""
    if not (shutil.which("aarch64-linux-gnu-gcc") or importlib.util.find_spec("ziglang")):
        pytest.skip("no AArch64 compiler: apt-get install gcc-aarch64-linux-gnu, or pip install ziglang")
    kw = dict(T_values=(9,), d_osc_values=(2,), core="cortex-a53", d_head=d_head)
    (neon,) = E.core_scaling(**kw, work_dir=tmp_path / "neon")
    (port,) = E.core_scaling(**kw, work_dir=tmp_path / "portable", flags=(*E.CFLAGS, "-DEDGEOSC_PORTABLE"))
    if d_head % 8 == 0:  # the T x T matmuls on SMLAL; the linear core's int64 sums gain less
        assert neon["softmax_cycles"] < 0.8 * port["softmax_cycles"]
        assert neon["oscillator_cycles"] < 0.9 * port["oscillator_cycles"]
        assert neon["oscillator_linear_cycles"] < port["oscillator_linear_cycles"]
