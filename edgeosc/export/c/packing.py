"""The DSP path's weights packed at code generation (edgeosc_ops.h EDGEOSC_PACKED) and the fast paths' scratch."""
from __future__ import annotations

import numpy as np

from .calls import Array, Only, Ref, Struct
from .graph import Tensor, UnsupportedGraph


def wide_words(depth: int) -> int:
    """EDGEOSC_WIDE_WORDS: four rows of depth values widened, in an even number of groups of four."""
    return 16 * -(-depth // 8)


def depthwise_scratch_words(out_h: int, out_w: int) -> int:
    """EDGEOSC_DEPTHWISE_SCRATCH_WORDS: four channels' planes (256 bytes a column, 63 words to align), records."""
    return 63 + 64 * (out_w + 2) + 4 + 2 * -(-out_h // 2) * out_w


def fast_scratch_words(depth: int, units: int, rq: Struct) -> int:
    """EDGEOSC_FC_SCRATCH_WORDS less the constants' 2 words per channel where code generation wrote them."""
    return wide_words(depth) + (0 if rq.fields["dsp"] is not None else 2 * units)


def pack_weights(w: np.ndarray, bias: np.ndarray | None, zp_in: int, w16: bool = False) -> np.ndarray:
    """The packed weights of EDGEOSC_PACKED builds (edgeosc_ops.h) from int8 weights [units, depth] and their int32
    bias (or None), as bytes: per pair of units (zero-padded) its two biases less zp_in sum_d w[u][d] (int32, little
    endian), then per group of four depth values (an even number of groups, zero-padded) the words A (w[u][d],
    w[u+1][d], w[u][d+2], w[u+1][d+2]) and B (the same at d + 1). w16 (a FULLY_CONNECTED of one row): each word as
    its two SXTB16 halves, (bytes 0, 2) then (bytes 1, 3), int16 pairs."""
    w = np.asarray(w, np.int8)
    units, depth = w.shape
    pairs, groups = -(-units // 2), 2 * -(-depth // 8)
    full = np.zeros((2 * pairs, 4 * groups), np.int8)
    full[:units, :depth] = w
    # [pair, unit of the pair, group, half (d, d+1 | d+2, d+3), parity] -> [pair, group, parity (word), half, unit]
    words = full.reshape(pairs, 2, groups, 2, 2).transpose(0, 2, 4, 3, 1).reshape(pairs, -1)
    folded = np.zeros(2 * pairs, np.int64)
    folded[:units] = (0 if bias is None else np.asarray(bias, np.int64)) - zp_in * w.astype(np.int64).sum(1)
    if np.any(np.abs(folded) >= 1 << 31):
        raise UnsupportedGraph(f"a bias with the input zero point folded in passes int32 ({folded.min()}..{folded.max()})")
    biases = folded.astype("<i4").view(np.int8).reshape(pairs, 8)
    if w16:  # [pair, word, byte] -> [pair, word, half (bytes 0 2 | 1 3), lane] as int16
        b = words.reshape(pairs, -1, 4).astype("<i2")
        words = np.stack([b[..., 0::2], b[..., 1::2]], 2).view(np.int8).reshape(pairs, -1)
    return np.concatenate([biases, words], 1).ravel()


def pack_depthwise3x3(w: np.ndarray, bias: np.ndarray | None, zp_in: int) -> np.ndarray:
    """The packed weights of a 3 x 3 DEPTHWISE_CONV_2D for EDGEOSC_PACKED builds (edgeosc_ops.h), from int8 weights
    [1, 3, 3, C] and int32 bias (or None), as bytes: per channel seven int32 words, the int16 pairs W_kx = (w[0][kx],
    w[1][kx]) for kx = 0, 1, 2, V_kx = (w[1][kx], w[2][kx]), then the bias less zp_in sum w (the planes hold zp_in)."""
    w = np.asarray(w, np.int64).reshape(3, 3, -1)
    pair = lambda lo, hi: (lo & 0xFFFF) | ((hi & 0xFFFF) << 16)  # noqa: E731
    folded = (0 if bias is None else np.asarray(bias, np.int64)) - zp_in * w.sum((0, 1))
    if np.any(np.abs(folded) >= 1 << 31):
        raise UnsupportedGraph(f"a bias with the input zero point folded in passes int32 ({folded.min()}..{folded.max()})")
    words = [pair(w[0, kx], w[1, kx]) for kx in range(3)] + [pair(w[1, kx], w[2, kx]) for kx in range(3)]
    return np.stack(words + [folded & 0xFFFFFFFF], 1).astype("<u4").view(np.int8).ravel()


def depthwise3x3_packs(g: dict, c_in: int, c_out: int, lo: int, hi: int, dsp, w, bias, zp_in: int) -> bool:
    """Whether the DSP build runs a DEPTHWISE_CONV_2D (geometry g) on its 3 x 3 planes (dsp/edgeosc_depthwise_dsp.c):
    stride 1, no dilation, multiplier 1, channels 4k, int8's whole output range, out_h <= 30, padding at most 1 before,
    every channel on the DSP constants (dsp) with a shift right r >= 2 where SMMLAR by 2^(32 - r) + 1 rounds by 2^r
    exactly: r <= 12, or its accumulators (|bias - zp_in sum w| + 128 sum |w|, w [1, 3, 3, C]) below 2^(32 - r); at
    r 0 or 1 (rounded in C from 2x) below 2^30."""
    if dsp is None:
        return False
    w, right = np.asarray(w, np.int64).reshape(-1, c_out), np.asarray(dsp)[1::2]
    acc = np.abs((0 if bias is None else np.asarray(bias, np.int64)) - zp_in * w.sum(0)) + 128 * np.abs(w).sum(0)
    return (g["k_h"], g["k_w"], g["stride_h"], g["stride_w"], g["dil_h"], g["dil_w"]) == (3, 3, 1, 1, 1, 1) \
        and c_in == c_out and c_in % 4 == 0 and (lo, hi) == (-128, 127) and g["out_h"] <= 30 and g["pad_top"] <= 1 \
        and g["pad_left"] <= 1 and g["pad_top"] + g["in_h"] <= 2 * -(-g["out_h"] // 2) + 2 and g["pad_left"] + g["in_w"] \
        <= g["out_w"] + 2 and bool(np.all(right >= 0) and np.all(np.where(right >= 2, (right <= 12) | (acc < 2.0 ** (32 - right)),
                                                              acc < 2.0 ** 30)))


def weight_fields(w: Tensor, bias: int | None, zp_in: int, label: str, g_tensors, pack: bool = True,
                  w16: bool = False) -> dict:
    """The weights and bias fields of a FULLY_CONNECTED / CONV_2D / DEPTHWISE_CONV_2D parameter struct, and with pack
    its packed field: the packed form for the DSP path's builds (w16: unpacked, for one row or one output pixel) and
    TFLite's for the others (a single unit keeps TFLite's in both: the DSP path reads it so)."""
    units = w.shape[0]
    plain = dict(weights=Ref(w.index), bias=Ref(bias) if bias is not None else None)
    if not pack:
        return plain
    if units == 1:
        return dict(**plain, packed=None)
    packed = pack_weights(w.data.reshape(units, -1), None if bias is None else g_tensors[bias].data, zp_in, w16)
    return dict(weights=Only(plain["weights"], False), bias=Only(plain["bias"], False),
                packed=Only(Array(packed, f"{label}_packed"), True))
