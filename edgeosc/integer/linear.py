"""Numpy integer reference of the linear oscillator core (d_osc 2) and a stream's turning anchors.

Bit-exact with `edgeosc_linear_core_int8` in firmware_models/kernels (and the EdgeOscAttention op's form "linear");
docs/maths.md#integer-linear-core derives it; the fixed-point primitives are the builtin ops' (reference.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import schema as S
from .reference import I32_MAX, I32_MIN, Requant, _f32, _i64, fc_multiplier, l2norm_int8, requant, wrap32


# --- the linear oscillator core (d_osc 2) ------------------------------------------------------------------
# docs/maths.md#integer-linear-core. A state of int32 sums over keys, each an outer product of a key's features
# with a value: the coupling's [1, K_a, K_a K_b (a <= b)] x r_j, the readout's g_j [1, cos m f_j, sin m f_j] x
# [v_j, 1]. A query contracts them with its own coefficients in int64. Keys enter the state in any order and
# leave it by subtraction (two's-complement sums wrap and unwrap exactly): what a stream carries between frames.

LINEAR_P = (1, 8)  # the readout's powers the kernel's int64 sums hold: its weights 2^p a_m sum to 4^p, so a query's
# numerators stay below 196 keys x 2^8 x 2^15 x 4^p x 2^15 = 2^(45.6 + 2p), 2^61.6 at p = 8
LINEAR_C1 = (16, 1 << 20)  # coupling coefficients round(2 / s) the bounds hold for (and taylor2 within 3%)
Q15 = 1 << 15
UNGATED = 256  # a key's gate without the key gate: the readout's features stay Q15


@dataclass
class LinearQuant:
    """Integer parameters of the linear oscillator core; build with linear_quant_from_scales."""
    p: int
    c1: int  # round(2 / s): 4 taylor2(s X) / s^2 = 2 X^2 + 2 c1 X + c1^2 with X = Q.K, exactly when c1 = 2 / s
    rq_out: Requant  # v's scale over out's: the readout is a weighted mean of the v_j
    zp: dict = field(default_factory=lambda: dict.fromkeys(S.LINEAR.zero_points, 0))  # q k v g out
    causal: bool = False
    window: int = 0  # > 0 (causal): query i reads keys j in (i - window, i]
    turn: tuple[int, ...] | None = None  # per head, the anchors' turn a frame in steps of 2^-16 turns (turn_steps)

    def fields(self, heads: int, tokens: int, d_head: int, d_value: int, t0: int = 0) -> dict:
        """EdgeoscLinearParams by field name (schema.LINEAR); turn is the tuple (the caller points to it)."""
        if self.turn is not None and len(self.turn) != heads:
            raise ValueError(f"linear core: {len(self.turn)} turn rates for {heads} heads")
        return S.LINEAR.ordered(dict(heads=heads, tokens=tokens, d_head=d_head, d_value=d_value, p=self.p,
                                     causal=int(self.causal), window=self.window,
                                     **{f"zp_{n}": self.zp[n] for n in S.LINEAR.zero_points},
                                     c1=self.c1, rq_out=self.rq_out, turn=self.turn, t0=_uint32(t0)))


def linear_state_words(d_head: int, d_value: int, p: int) -> int:
    """int32 words of one head's state (EDGEOSC_LINEAR_STATE_WORDS): 2 per coupling feature, d_v + 1 per readout one."""
    return 2 * (1 + d_head + d_head * (d_head + 1) // 2) + (2 * p + 1) * (d_value + 1)


def linear_quant_from_scales(scales: dict, d_head: int, p: int, zp: dict | None = None,
                             causal: bool = False, window: int = 0, turn=None) -> LinearQuant:
    """From the float32 scales of q, k, v, out (r and z are unit vectors at 1/128); refuses what the kernel's
    integer bounds do not hold. turn: per head, the anchors' turn a frame (turn_steps), or None."""
    if not LINEAR_P[0] <= p <= LINEAR_P[1]:
        raise ValueError(f"linear core: p = {p} is out of range {LINEAR_P[0]}..{LINEAR_P[1]}")
    if window < 0 or (window and not causal):
        raise ValueError(f"linear core: window {window}: a sliding window is causal and >= 0")
    if turn is not None:
        turn = tuple(int(x) for x in turn)
        if not all(0 <= x < TURN_STEPS for x in turn):
            raise ValueError(f"linear core: turn rates {turn}: steps of 2^-16 turns, in [0, 2^16)")
    s = float(_f32(scales["q"])) * float(_f32(scales["k"])) / math.sqrt(d_head)
    c1 = math.floor(2.0 / s + 0.5)  # as the custom op's Prepare computes it
    if not LINEAR_C1[0] <= c1 < LINEAR_C1[1]:
        raise ValueError(f"linear core: the score scale {s:.3g} (q's x k's / sqrt(d_head)) gives coupling "
                         f"coefficient 2 / s = {c1}, outside [{LINEAR_C1[0]}, {LINEAR_C1[1]})")
    rq = requant(fc_multiplier(1.0, scales["v"], scales["out"]), 1.0, scales["v"], scales["out"])
    if not -10 <= rq.shift <= 20:
        raise ValueError(f"linear core: v's scale over out's ({rq.real:.3g}) is out of range")
    return LinearQuant(p, c1, rq, {**dict.fromkeys(S.LINEAR.zero_points, 0), **(zp or {})}, causal, window, turn)


def _bitlen(x) -> np.ndarray:
    """Bit length of non-negative int64 values (0 for 0)."""
    x, n = _i64(x), np.zeros(np.shape(x), np.int64)
    for s in (32, 16, 8, 4, 2, 1):
        big = (x >> s) > 0
        x, n = np.where(big, x >> s, x), n + big * s
    return n + (x > 0)


def _shift_round(x, e) -> np.ndarray:
    """x / 2^e rounded half up (e > 0), x * 2^-e (e <= 0); int64."""
    x, e = _i64(x), _i64(e)
    right = np.maximum(e, 0)
    up = (x + np.where(right > 0, np.int64(1) << np.maximum(right - 1, 0), 0)) >> right
    return np.where(e > 0, up, x << np.maximum(-e, 0))


def harmonics_q15(x, p: int) -> np.ndarray:
    """[cos m t, sin m t for m = 1..p] in Q15 of x = 128 (cos t, sin t) (int8 at 1/128), as the powers
    (x_0 + i x_1)^m, each product rounded back to Q15: [..., 2p]."""
    x = _i64(x)
    c, s = x[..., 0] << 8, x[..., 1] << 8
    out = []
    for _ in range(p):
        out += [c, s]
        c, s = (c * x[..., 0] - s * x[..., 1] + 64) >> 7, (s * x[..., 0] + c * x[..., 1] + 64) >> 7
    return np.stack(out, -1)


def readout_weights(p: int) -> list[int]:
    """2^p a_m, m = 0..p: the integer weights of (1 + cos d)^p = sum_m a_m cos(m d) (70, 112, 56, 16, 2 at p = 4)."""
    return [math.comb(2 * p, p - m) * (1 if m == 0 else 2) for m in range(p + 1)]


def linear_key_features(k, v, r, g, pq: LinearQuant) -> tuple[np.ndarray, np.ndarray]:
    """One key's contributions to the two states: [.., 1 + d_h + d_h(d_h+1)/2, 2] and [.., 2p + 1, d_v + 1]."""
    K, rr, V = _i64(k) - pq.zp["k"], _i64(r), _i64(v) - pq.zp["v"]
    a, b = np.triu_indices(K.shape[-1])  # a <= b, row-major: the order of the C loops
    phi = np.concatenate([np.ones(K.shape[:-1] + (1,), np.int64), K, K[..., a] * K[..., b]], -1)
    G = np.full(K.shape[:-1], UNGATED, np.int64) if g is None else _i64(g) - pq.zp["g"]
    u = np.concatenate([(G << 7)[..., None], (G[..., None] * harmonics_q15(rr, pq.p) + 128) >> 8], -1)
    V1 = np.concatenate([V, np.ones(V.shape[:-1] + (1,), np.int64)], -1)
    return phi[..., :, None] * rr[..., None, :], u[..., :, None] * V1[..., None, :]


def linear_state(q, k, v, r, g, pq: LinearQuant) -> tuple[np.ndarray, np.ndarray]:
    """The int32 states each query reads, [H, T, Fc, 2] and [H, T, Fr, d_v + 1]: sums over all keys, or over
    j <= i when causal, i - window < j <= i with a window (as int32 sums wrap)."""
    sc, sr = linear_key_features(k, v, r, g, pq)
    if pq.causal:
        def running(f):  # prefix sums, less those `window` keys back
            s = np.cumsum(f, 1)
            if pq.window:
                s[:, pq.window:] -= s[:, :-pq.window].copy()
            return wrap32(s)
        return running(sc), running(sr)
    T = np.shape(q)[1]
    return (np.repeat(wrap32(sc.sum(1, keepdims=True)), T, 1), np.repeat(wrap32(sr.sum(1, keepdims=True)), T, 1))


def linear_query(q, state_c, state_r, pq: LinearQuant, return_all: bool = False):
    """Each query against its state: z from the coupling, then the readout divided once per query."""
    Q = _i64(q) - pq.zp["q"]
    a, b = np.triu_indices(Q.shape[-1])
    alpha = np.concatenate([np.full(Q.shape[:-1] + (1,), pq.c1 * pq.c1, np.int64), 2 * pq.c1 * Q,
                            np.where(a == b, 2, 4) * Q[..., a] * Q[..., b]], -1)
    h = np.einsum("...f,...fe->...e", alpha, _i64(state_c))  # 2 x 2/s^2 sum_j taylor2(q.k_j) r_j, < 2^57
    n = _bitlen(np.abs(h).max(-1, keepdims=True))
    z = l2norm_int8(_shift_round(h, n - 14))  # the direction of h in 14 bits, then TFLite's L2 norm (h = 0: z = 0)
    w = _i64(readout_weights(pq.p))
    beta = np.concatenate([np.broadcast_to(w[0] * Q15, z.shape[:-1] + (1,)),
                           harmonics_q15(z, pq.p) * np.repeat(w[1:], 2)], -1)
    nd = np.einsum("...f,...fd->...d", beta, _i64(state_r))  # numerators and the denominator (LINEAR_P)
    out = linear_divide(nd[..., :-1], nd[..., -1:], pq)
    return (out, dict(h=h, z=z, nd=nd)) if return_all else out


def linear_divide(num, den, pq: LinearQuant) -> np.ndarray:
    """out = num / den x v's scale over out's, with one integer division per query: den to 22 bits, then
    (m 2^21 / den) a multiplier of the numerators (shifted alike, saturated to int32). den <= 0 (no weight on any key): out = 0."""
    num, den = _i64(num), _i64(den)
    e = _bitlen(np.maximum(den, 0)) - 22
    d = np.maximum(_shift_round(den, e), 1)  # [2^21, 2^22]
    big = np.int64(1) << 40  # a left shift (den < 2^21) of a numerator beyond 2^40 saturates anyway
    nd = np.clip(_shift_round(np.where(e > 0, num, np.clip(num, -big, big)), e), I32_MIN, I32_MAX)
    inv = (np.int64(pq.rq_out.multiplier) << 21) // d
    y = _shift_round(nd * inv, 52 - pq.rq_out.shift) + pq.zp["out"]
    return np.where(den > 0, np.clip(y, -128, 127), pq.zp["out"]).astype(np.int8)


def linear_core_int8(pq: LinearQuant, q, k, v, r, g=None, return_all: bool = False, t0: int = 0):
    """The linear core on [H, T, *] int8 tensors (r [H, T, 2] at 1/128; g [H, T] the unit key gates or None):
    out [H, T, d_v]. With pq.turn, token i's anchor first turns by turn (t0 + i) (turn_anchors)."""
    sc, sr = linear_state(q, k, v, turn_anchors(r, pq.turn, t0), g, pq)
    return linear_query(q, sc, sr, pq, return_all)


# --- a stream's relative positions: the anchors turn a fixed angle a frame (docs/maths.md#streaming) -------------
# Frame t's anchor turns by turn_h t steps of a 2^16-step circle (t a uint32 frame count: 2^32 is a multiple of
# 2^16, so the phase stays exact as t wraps), its cosine and sine in Q15 linear between 257 points of a quarter
# wave (error < 0.2 of Q15's unit). Every runtime turns by these integers, so a stream's age changes nothing.
TURN_STEPS = 1 << 16
COS_QUARTER_Q15 = np.round(Q15 * np.cos(np.pi / 2 * np.arange(257) / 256)).astype(np.int64)


def turn_steps(omega) -> tuple[int, ...]:
    """Per head, a turn of omega radians a frame in steps of 2^-16 turns (the rotating anchors' omega)."""
    return tuple(int(round(float(w) * TURN_STEPS / (2 * math.pi))) % TURN_STEPS for w in np.ravel(omega))


def _uint32(x: int) -> int:
    """A uint32 frame number as the int32 a C struct holds."""
    x = int(x) & 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def _quarter_cos(y) -> np.ndarray:
    """cos(pi/2 y / 2^14) in Q15 for y in [0, 2^14], linear between the table's points (rounded down)."""
    i, f = y >> 6, y & 63
    lo, hi = COS_QUARTER_Q15[i], COS_QUARTER_Q15[np.minimum(i + 1, 256)]
    return lo + (((hi - lo) * f + 32) >> 6)


def cos_sin_q15(phase) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin) in Q15 of phase steps of 2^-16 turns (any integers: taken mod 2^16)."""
    u = _i64(phase) & (TURN_STEPS - 1)
    quadrant, x = u >> 14, u & 0x3FFF
    c, s = _quarter_cos(x), _quarter_cos(0x4000 - x)
    return (np.choose(quadrant, [c, -s, -c, s]), np.choose(quadrant, [s, c, -s, -c]))


def turn_anchors(r, turn, t0: int = 0) -> np.ndarray:
    """r [H, T, 2] (int8 unit vectors at 1/128) with token i's turned by turn_h (t0 + i) steps, rounded half up to
    int8; r itself when turn is None."""
    if turn is None:
        return np.asarray(r)
    H, T = np.shape(r)[:2]
    t = (int(t0) + np.arange(T, dtype=np.int64)) & 0xFFFFFFFF
    c, s = cos_sin_q15((_i64(turn)[:, None] * t) & (TURN_STEPS - 1))  # [H, T]
    x, y = _i64(r)[..., 0], _i64(r)[..., 1]
    out = np.stack([(c * x - s * y + (1 << 14)) >> 15, (s * x + c * y + (1 << 14)) >> 15], -1)
    return np.clip(out, -128, 127).astype(np.int8)


@dataclass
class LinearStream:
    """A stream's state of the windowed linear core, what it carries from one frame to the next (all heads):
    clock [3] int32: the next frame's number t (uint32, wraps; the anchors' turn), keys held n <= window, the
    ring's next slot; sums [H, words] int32: the two sums over the held keys; kept [H, window, d_h + d_v + 3] int8:
    each held key's k, v, turned anchor and gate, to subtract its terms when it expires. zeros (t) starts one."""
    clock: np.ndarray
    sums: np.ndarray
    kept: np.ndarray

    @classmethod
    def zeros(cls, heads: int, d_head: int, d_value: int, p: int, window: int, t: int = 0) -> LinearStream:
        return cls(np.array([_uint32(t), 0, 0], np.int32), np.zeros((heads, linear_state_words(d_head, d_value, p)),
                   np.int32), np.zeros((heads, window, d_head + d_value + 3), np.int8))


def linear_stream_int8(pq: LinearQuant, state: LinearStream, q, k, v, r, g=None) -> tuple[np.ndarray, LinearStream]:
    """T more frames [H, T, *] of a stream through the windowed core (pq.window > 0): out [H, T, d_v] and the new
    state. Each frame adds its key, subtracts the one `window` frames back (once n = window), then queries: a
    stream started from LinearStream.zeros(..., t0) equals linear_core_int8(..., t0=t0) over the same frames."""
    W = pq.window
    if not (pq.causal and W > 0):
        raise ValueError("a stream runs the windowed core (causal, window > 0)")
    q, k, v, r = (np.asarray(a) for a in (q, k, v, r))
    H, T, dh = q.shape
    dv = v.shape[-1]
    if state.kept.shape != (H, W, dh + dv + 3) or state.sums.shape != (H, linear_state_words(dh, dv, pq.p)):
        raise ValueError(f"stream state of shapes {state.kept.shape} / {state.sums.shape} is not this core's "
                         f"({(H, W, dh + dv + 3)} / {(H, linear_state_words(dh, dv, pq.p))})")
    t, n, slot = (int(x) for x in state.clock)
    sums, kept = _i64(state.sums), state.kept.copy()
    gate = np.zeros((H, T), np.int8) if g is None else np.asarray(g)
    fc = 2 * (1 + dh + dh * (dh + 1) // 2)
    outs = []

    def terms(kk, vv, rr, gg):  # [H, words]: one key's terms of both sums
        sc, sr = linear_key_features(kk, vv, rr, None if g is None else gg, pq)
        return np.concatenate([sc.reshape(H, -1), sr.reshape(H, -1)], -1)

    for i in range(T):
        rt = turn_anchors(r[:, i:i + 1], pq.turn, t)[:, 0]
        sums = sums + terms(k[:, i], v[:, i], rt, gate[:, i])
        if n == W:  # the oldest held key expires
            old = kept[:, slot]
            sums = sums - terms(old[:, :dh], old[:, dh:dh + dv], old[:, dh + dv:dh + dv + 2], old[:, -1])
        kept[:, slot] = np.concatenate([k[:, i], v[:, i], rt, gate[:, i:i + 1]], -1)
        sums = wrap32(sums)
        outs.append(linear_query(q[:, i:i + 1], sums[:, None, :fc].reshape(H, 1, -1, 2),
                                 sums[:, None, fc:].reshape(H, 1, -1, dv + 1), pq))
        t, n, slot = (t + 1) & 0xFFFFFFFF, min(n + 1, W), (slot + 1) % W
    return np.concatenate(outs, 1), LinearStream(np.array([_uint32(t), n, slot], np.int32),
                                                 sums.astype(np.int32), kept)
