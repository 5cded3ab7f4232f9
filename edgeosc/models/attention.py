"""The attention maths, once: oscillator (softmax-free), softmax baseline and Kuramoto (docs/maths.md).

Functional cores take per-head tensors; the nn.Modules only project and merge heads.
Shapes: B batch, H heads, T tokens, d_h query/key dim, d_v value dim, d_osc oscillator dim.
"""
from __future__ import annotations

import contextlib
import math
from itertools import combinations_with_replacement
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import FORMS, POLYNOMIAL_MAPS as POLYNOMIAL


def _elu1(x: Tensor) -> Tensor:
    return torch.where(x > 0, x + 1.0, x.clamp_max(0).exp())  # ELU + 1 without F.elu's 1 - 1 cancellation


def _relu2(x: Tensor) -> Tensor:
    return F.relu(x).square() + RELU2_FLOOR


def _taylor2(x: Tensor) -> Tensor:
    return 1.0 + x + 0.5 * x.square()  # exp's second-order Taylor polynomial: ((1 + x)^2 + 1) / 2 >= 1/2


def _cos2(c: Tensor) -> Tensor:
    return (1.0 + c).square()  # of a cosine: 0 for opposite q and k, 4 for aligned ones


# Positive maps for the coupling weights w. softplus is the paper's. elu1 (ELU + 1, range (0, inf))
# and relu2 (squared ReLU plus a floor) are edge-friendly: relu2 is a multiply and a max, and both
# are exact in an int8 lookup table without exp at run time. taylor2 is a polynomial, so sigma(q.k) is a
# dot product of finite feature maps, which the linear form needs (coupling_features). taylor2 is not monotone: trained
# scores grow to |x| >> 1, where it is ~x^2 / 2 and a key opposite a query pulls it as hard as an aligned one.
# cos2 = (1 + cos(q, k))^2, a map of the cosine of q and k (COSINE), is monotone and vanishes for opposite vectors: a
# polynomial can only be both on a bounded input.
RELU2_FLOOR = 1.0 / 64
POSITIVE = {"softplus": F.softplus, "elu1": _elu1, "relu2": _relu2, "taylor2": _taylor2, "cos2": _cos2}
COSINE = ("cos2",)  # maps of cos(q, k) = unit(q).unit(k); the score scale cancels in them


def _masked_fill(x: Tensor, mask: Tensor | None, value: float) -> Tensor:
    return x if mask is None else x.masked_fill(~mask, value)


# The cores take an optional hook quant(name, x) -> x', applied at these named points (QAT passes one
# fake quantizer per point, see quant.py; None is the identity, so float results are unchanged). They are
# the tensors an int8 runtime holds (export/tflite): q, k, v, r the core's inputs; qk = q k^T,
# h = wn r, zr = z r^T and out = a v the matmul outputs; w the positive map's output, wn its unit rows, z the oscillator
# state, c the shifted cosines (1 + zr)^p, csum their sum over keys, inv = 1 / csum, a = c inv the readout.
QUANT_POINTS = {"oscillator": ("q", "k", "v", "r", "qk", "w", "wn", "h", "z", "zr", "c", "csum", "inv", "a", "out"),
                "softmax": ("q", "k", "v", "qk", "a", "out")}
# The linear form's points (QAT of form "linear"): its integer kernel holds only these in int8; every sum over keys
# between them is exact in int32/int64 (docs/maths.md#integer-linear-core). r and z are unit vectors at 1/128.
LINEAR_POINTS = ("q", "k", "v", "r", "z", "out")
# Points of the attention modules around their cores: raw anchors (before normalising) and the output projection.
LAYER_POINTS = {"oscillator": ("r_raw", "proj"), "softmax": ("proj",)}
# The key gate's points: its projection g_raw, g = positive(g_raw), gn its unit vector over keys,
# pow = (1 + zr)^p before c = pow gn, and cn the unit rows of c. The linear form reads gn only.
GATE_POINTS = ("g_raw", "g", "gn", "pow", "cn")
LINEAR_GATE_POINTS = GATE_POINTS[:3]
STREAM_GATE_POINTS = GATE_POINTS[:2]  # a stream's gate is a sigmoid per key, not normalised over the keys


def _identity(name: str, x: Tensor) -> Tensor:
    return x


# The elementwise maps of the oscillator core. Between two quantized points each is a 256-entry table in
# the int8 graph (export/tflite builds the tables with these very functions).
def coupling(qk: Tensor, d_h: int, positive: str) -> Tensor:
    """w = positive(q.k / sqrt(d_h)); for the COSINE maps qk is unit(q).unit(k), taken as it is."""
    return POSITIVE[positive](qk if positive in COSINE else qk / math.sqrt(d_h))


def shifted_power(zr: Tensor, p: int) -> Tensor:
    """(1 + z.r)^p, in [0, 2^p]."""
    return (1.0 + zr).pow(p)


def reciprocal(x: Tensor) -> Tensor:
    """1 / x, capped at 1 / eps (float32: 8.4e6) as x -> 0, where every readout weight is 0 and so is the output.

    Not 1 / tiny: QAT divides it by the quantizer's scale, which would overflow to inf and give NaN gradients.
    """
    return x.clamp_min(torch.finfo(x.dtype).eps).reciprocal()


def oscillator_state(q: Tensor, k: Tensor, r: Tensor, *, eps: float = 1e-6, positive: str = "softplus",
                     mask: Tensor | None = None, quant=None) -> Tensor:
    """Equilibrium of the Lohe flow, z = h / ||h|| with h = unit(positive(q k^T / sqrt(d_h))) r (unit rows of w
    leave the direction of h unchanged; 0 where ||h|| <= eps).

    `quant` sees qk, w, h and z; the inputs q, k, r are the caller's to quantize.
    """
    quant = _identity if quant is None else quant
    if positive in COSINE:
        q, k = unit(q, eps), unit(k, eps)
    qk = quant("qk", q @ k.transpose(-1, -2))  # [B,H,T,T]
    w = quant("w", coupling(qk, q.shape[-1], positive))  # [B,H,T,T] > 0
    # z depends only on the direction of each row of w r: unit rows of w keep |h| within [~1, sqrt(T)]
    # whatever the scores' magnitude, so 8 bits of h keep its direction (int8 graph: L2_NORMALIZATION)
    wn = quant("wn", unit(_masked_fill(w, mask, 0.0), eps))
    h = quant("h", wn @ r)  # [B,H,T,d_osc]
    # a degenerate h (|h| <= eps) gives z = 0, i.e. a uniform readout, instead of an undefined direction
    return quant("z", unit(h, eps))


def unit(x: Tensor, eps: float) -> Tensor:
    """x / ||x|| over the last axis; 0 where ||x|| <= eps, with a zero gradient there (no direction to learn).

    As TFLite's L2_NORMALIZATION in int8, where a quantized vector of zeros (a row of w below one step,
    say) gives zeros; F.normalize's gradient there would be 1/eps.
    """
    sq = x.square().sum(-1, keepdim=True)
    return torch.where(sq > eps * eps, x * sq.clamp_min(eps * eps).rsqrt(), 0.0)  # a scalar: traces without x.shape


def oscillator_attention(q: Tensor, k: Tensor, v: Tensor, r: Tensor, *, p: int = 1, eps: float = 1e-6,
                         positive: str = "softplus", mask: Tensor | None = None,
                         return_weights: bool = False, quant=None, g: Tensor | None = None):
    """Fixed-query oscillator attention, direct form: a = (1 + z r^T)^p / sum_j (.), out = a v.

    g [B,H,T,1] > 0, optional: a weight per key (the key gate), a_ij = g_j (1 + z_i.r_j)^p / sum_l (.), each
    row of g_j (1 + z_i.r_j)^p made a unit vector before the sum (the same a; see below).
    """
    quant = _identity if quant is None else quant
    q, k, v, r = quant("q", q), quant("k", k), quant("v", v), quant("r", r)
    z = oscillator_state(q, k, r, eps=eps, positive=positive, mask=mask, quant=quant)  # [B,H,T,d_osc]
    zr = quant("zr", z @ r.transpose(-1, -2))  # [B,H,T,T] in [-1, 1]: |z| <= 1, |r| <= 1
    c = shifted_power(zr, p)  # in [0, 2^p]
    if g is not None:  # the key gate: key j's shifted cosines times g_j (int8 graph: a table, then MUL)
        c = quant("pow", c) * g.transpose(-1, -2)
    c = quant("c", _masked_fill(c, mask, 0.0))
    if g is not None:  # unit rows: a common factor per row, so a is unchanged, and csum lies in [1, sqrt(T)]
        c = quant("cn", unit(c, eps))  # (gated rows span 4 decades of csum: no one int8 scale of 1/csum holds them)
    csum = quant("csum", c.sum(-1, keepdim=True))  # [B,H,T,1]
    # a reciprocal and a product, not a division: int8 runtimes lack DIV; 1/csum is a table of csum
    a = quant("a", c * quant("inv", reciprocal(csum)))
    out = quant("out", a @ v)
    return (out, a) if return_weights else out


def _ones(x: Tensor) -> Tensor:
    """A column of ones shaped as x[..., :1], computed from x so that an ONNX trace keeps its batch dynamic."""
    return x[..., :1] * 0 + 1


def coupling_features(x: Tensor, positive: str = "taylor2", eps: float = 1e-6) -> Tensor:
    """phi with phi(q).phi(k) = positive(q, k): [1, x', x'_a x'_b for a <= b], 1 + d_h + d_h (d_h + 1) / 2 features.
    taylor2(q.k / sqrt(d_h)): x' = x / d_h^(1/4), the squares weighed by sqrt(1/2) (the feature map of "Based" linear
    attention). cos2, 1 + 2c + c^2 with c = unit(q).unit(k): x' = unit(x), the linear terms and the products a < b
    weighed by sqrt(2)."""
    d = x.shape[-1]
    cos = positive in COSINE
    x = unit(x, eps) if cos else x * d ** -0.25
    a, b = map(list, zip(*combinations_with_replacement(range(d), 2)))  # a <= b (constants: the graph gathers)
    linear, square, product = (math.sqrt(2.0), 1.0, math.sqrt(2.0)) if cos else (1.0, math.sqrt(0.5), 1.0)
    w = torch.tensor([square if i == j else product for i, j in zip(a, b)], dtype=x.dtype, device=x.device)
    return torch.cat([_ones(x), x * linear, x[..., a] * x[..., b] * w], -1)


def harmonic_coefficients(p: int) -> list[float]:
    """a_m with (1 + cos d)^p = sum_{m=0..p} a_m cos(m d): a_0 = C(2p, p) / 2^p, a_m = 2 C(2p, p - m) / 2^p."""
    return [math.comb(2 * p, p - m) * (1 if m == 0 else 2) / 2 ** p for m in range(p + 1)]


def _harmonics(x: Tensor, p: int) -> Tensor:
    """[cos m t, sin m t for m = 1..p] of x = (cos t, sin t), as the powers (x_0 + i x_1)^m: no trigonometry (complex
    products: a third to a quarter of the time of their real and imaginary parts taken apart, half with gradients)."""
    w = torch.view_as_complex(x[..., :2].contiguous())
    powers = [w]
    for _ in range(p - 1):
        powers.append(powers[-1] * w)
    return torch.view_as_real(torch.stack(powers, -1)).flatten(-2)


def readout_features(z: Tensor, r: Tensor, p: int) -> tuple[Tensor, Tensor]:
    """phi(z_i), psi(r_j) with phi(z_i).psi(r_j) = (1 + z_i.r_j)^p.

    d_osc = 2: harmonics, 2p + 1 features, exact for unit anchors and z unit or 0 (a row of z = 0 scales its
    readout by a_0, which the normalisation cancels). Otherwise: the monomials of degree <= p, C(d_osc + p, p)
    features, psi weighed by C(p, m) m! / alpha! (exact for any z, r).
    """
    if z.shape[-1] == 2:
        a = torch.tensor(harmonic_coefficients(p), dtype=z.dtype, device=z.device)
        hz = _harmonics(z, p)
        phi = torch.cat([_ones(z) * a[0], hz * a[1:].repeat_interleave(2)], -1)
        return phi, torch.cat([_ones(r), hz if r is z else _harmonics(r, p)], -1)
    phi, psi = [_ones(z)], [_ones(r)]
    for m in range(1, p + 1):
        for idx in combinations_with_replacement(range(z.shape[-1]), m):
            multinomial = math.factorial(m) / math.prod(math.factorial(idx.count(i)) for i in set(idx))
            phi.append(z[..., list(idx)].prod(-1, keepdim=True))
            psi.append(r[..., list(idx)].prod(-1, keepdim=True) * (math.comb(p, m) * multinomial))
    return torch.cat(phi, -1), torch.cat(psi, -1)


def oscillator_attention_linear(q: Tensor, k: Tensor, v: Tensor, r: Tensor, *, p: int = 1, eps: float = 1e-6,
                                positive: str = "taylor2", key_mask: Tensor | None = None, causal: bool = False,
                                window: int = 0, g: Tensor | None = None, quant=None) -> Tensor:
    """oscillator_attention with a polynomial positive map, as sums over keys: time linear in T, a state of fixed size.

    sigma(q_i.k_j) = phi(q_i).phi(k_j) makes the coupling field a sum over keys, h_i = phi(q_i)^T S / phi(q_i)^T s
    with S = sum_j phi(k_j) r_j^T and s = sum_j phi(k_j) (the row sum of w: it keeps h in the unit ball and leaves
    z = h / |h| unchanged); (1 + z_i.r_j)^p = phi(z_i).psi(r_j) makes the readout one, out_i = phi(z_i)^T M /
    phi(z_i)^T m with M = sum_j g_j psi(r_j) v_j^T and m = sum_j g_j psi(r_j). key_mask [B, T] (True: keep) drops
    keys from the sums; causal makes them prefix sums, the state a stream carries from one frame to the next, and
    window > 0 sums over the last `window` keys only (j in (i - window, i]: the prefix sum minus the one `window` keys
    back, as a stream adds the new key and subtracts the expired one).
    q, k [B,H,T,d_h], v [B,H,T,d_v], r [B,H,T,d_osc] unit anchors, g [B,H,T,1] > 0 the key gate -> out [B,H,T,d_v].
    `quant` sees LINEAR_POINTS (QAT; the integer kernel's int8 tensors).
    """
    if positive not in POLYNOMIAL:
        raise ValueError(f"the linear form needs a polynomial positive map ({', '.join(POLYNOMIAL)}), not {positive!r}")
    quant = _identity if quant is None else quant
    q, k, v, r = quant("q", q), quant("k", k), quant("v", v), quant("r", r)
    if q.shape[-2] <= _state_size(q, v, r, p):
        return _masked_sums(q, k, v, r, g, p, positive, eps, key_mask, causal or window > 0, window, quant)
    factors = _key_factors(k, r, v, g, p, positive, eps)
    if key_mask is not None:  # dropped keys add nothing
        keep = key_mask[:, None, :, None].to(q.dtype)  # [B,1,T,1]
        factors = [(a * keep, b) for a, b in factors]
    if causal or window:  # the sums after each key (less those `window` keys back): what a stream carries
        coupling, readout = (_running(a.unsqueeze(-1) * b.unsqueeze(-2), window) for a, b in factors)
    else:  # every query reads every key: each sum one matmul
        coupling, readout = (a.transpose(-1, -2) @ b for a, b in factors)
    return linear_query(q, coupling, readout, p, eps, quant, positive)


def _state_size(q: Tensor, v: Tensor, r: Tensor, p: int) -> int:
    """Numbers in one query's two sums over keys (coupling and readout), each key's terms as many."""
    d_h, d_osc = q.shape[-1], r.shape[-1]
    features = 1 + d_h + d_h * (d_h + 1) // 2
    readout = 2 * p + 1 if d_osc == 2 else math.comb(d_osc + p, p)
    return features * (d_osc + 1) + readout * (v.shape[-1] + 1)


def _masked_sums(q: Tensor, k: Tensor, v: Tensor, r: Tensor, g: Tensor | None, p: int, positive: str, eps: float,
                 key_mask: Tensor | None, causal: bool, window: int, quant) -> Tensor:
    """oscillator_attention_linear's sums as T x T products: each sum over the keys a query reads is the inner
    products of their features (the coupling's closed form, phi(q).phi(k) = positive(q, k); the readout's features
    themselves), masked to the keys it reads. The same function as the sums over keys, in fewer and larger ops (no
    features of the keys' pairs), and less memory than the prefix sums while T is under _state_size (clips and
    training streams)."""
    T = q.shape[-2]
    keep = window_mask(T, window or T, q.device).to(q.dtype) if causal else None  # [T, T]: (i - window, i] or j <= i
    if key_mask is not None:
        keys = key_mask[:, None, None, :].to(q.dtype)  # [B, 1, 1, T]
        keep = keys if keep is None else keep * keys
    return _read_keys(q, k, v, r, _readout_factor(r, g, p), p, positive, eps, keep, quant)


def _readout_factor(r: Tensor, g: Tensor | None, p: int) -> Tensor:
    """Each key's factor of the readout's sums, g_j psi(r_j)."""
    psi = readout_features(r, r, p)[1]
    return psi if g is None else psi * g


def _read_keys(q: Tensor, k: Tensor, v: Tensor, r: Tensor, factor: Tensor, p: int, positive: str, eps: float,
               keep: Tensor | None, quant) -> Tensor:
    """Queries q [..., Tq, d_h] read keys [..., Tk, .] (factor: _readout_factor's) through the features' inner
    products, keep [Tq, Tk] (or broadcast to it) the keys each query reads, None all."""
    qk = unit(q, eps) @ unit(k, eps).transpose(-1, -2) if positive in COSINE else q @ k.transpose(-1, -2)
    w = _kept(coupling(qk, q.shape[-1], positive), keep)
    z = quant("z", unit(_ratio(w @ r, w.sum(-1, keepdim=True)), eps))
    a = _kept(readout_features(z, z, p)[0] @ factor.transpose(-1, -2), keep)
    return quant("out", _ratio(a @ v, a.sum(-1, keepdim=True)))


def _kept(x: Tensor, keep: Tensor | None) -> Tensor:
    return x if keep is None else x * keep


def _ratio(num: Tensor, den: Tensor) -> Tensor:
    """num / den, a weighted mean; 0 where no key has weight (all gates at 0 in a stream's window, as the integer
    core gives), with a gradient there too."""
    some = den > torch.finfo(den.dtype).tiny
    return torch.where(some, num / torch.where(some, den, torch.ones_like(den)), torch.zeros_like(num))


def _key_factors(k: Tensor, r: Tensor, v: Tensor, g: Tensor | None, p: int,
                 positive: str = "taylor2", eps: float = 1e-6) -> list[tuple[Tensor, Tensor]]:
    """Each key's two factor pairs of oscillator_attention_linear's sums: (phi(k_j), [r_j, 1]) for the coupling and
    (g_j psi(r_j), [v_j, 1]) for the readout."""
    return [(coupling_features(k, positive, eps), F.pad(r, (0, 1), value=1.0)),
            (_readout_factor(r, g, p), F.pad(v, (0, 1), value=1.0))]


def _running(terms: Tensor, window: int) -> Tensor:
    """Sums of per-key terms [B,H,T,...] over keys j <= i, or j in (i - window, i] when window > 0."""
    state = terms.cumsum(2)
    if 0 < window < state.shape[2]:
        state = torch.cat([state[:, :, :window], state[:, :, window:] - state[:, :, :-window]], 2)
    return state


def linear_key_terms(k: Tensor, r: Tensor, v: Tensor, g: Tensor | None, p: int,
                     positive: str = "taylor2", eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """The keys' terms of oscillator_attention_linear's two sums, as a stream adds and later subtracts them:
    coupling phi(k_j) [r_j, 1]^T [..., F, d_osc + 1] and readout g_j psi(r_j) [v_j, 1]^T [..., n, d_v + 1]."""
    (a, b), (c, d) = _key_factors(k, r, v, g, p, positive, eps)
    return a.unsqueeze(-1) * b.unsqueeze(-2), c.unsqueeze(-1) * d.unsqueeze(-2)


def linear_query(q: Tensor, coupling: Tensor, readout: Tensor, p: int, eps: float, quant=None,
                 positive: str = "taylor2") -> Tensor:
    """oscillator_attention_linear's output for queries q [..., T, d_h] from the two sums over the keys they read:
    one per query ([..., T, F, d_osc + 1] and [..., T, n, d_v + 1], as linear_key_terms), or shared by all of them
    ([..., F, d_osc + 1] and [..., n, d_v + 1])."""
    quant = _identity if quant is None else quant

    def contract(x: Tensor, sums: Tensor) -> Tensor:
        return x @ sums if sums.ndim == x.ndim else (x.unsqueeze(-2) @ sums).squeeze(-2)

    def ratio(sums: Tensor) -> Tensor:  # the last column: the weights' sum
        return _ratio(sums[..., :-1], sums[..., -1:])

    z = quant("z", unit(ratio(contract(coupling_features(q, positive, eps), coupling)), eps))  # [..., d_osc]
    return quant("out", ratio(contract(readout_features(z, z, p)[0], readout)))


def rotate_pairs(x: Tensor, angle: Tensor) -> Tensor:
    """x [..., 2] turned by angle (broadcast to x[..., 0])."""
    c, s = angle.cos(), angle.sin()
    return torch.stack([x[..., 0] * c - x[..., 1] * s, x[..., 0] * s + x[..., 1] * c], -1)


def window_mask(T: int, window: int, device=None) -> Tensor:
    """[T, T] True where query i reads key j: j in (i - window, i]."""
    d = torch.arange(T, device=device)[:, None] - torch.arange(T, device=device)[None, :]
    return (d >= 0) & (d < window)


def softmax_attention(q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None = None,
                      return_weights: bool = False, quant=None, bias: Tensor | None = None):
    """The baseline: scaled dot-product attention with a softmax over keys; bias [H, Tq, Tk] added to the scores."""
    quant = _identity if quant is None else quant
    q, k, v = quant("q", q), quant("k", k), quant("v", v)
    qk = quant("qk", q @ k.transpose(-1, -2))  # [B,H,T,T]
    s = qk / math.sqrt(q.shape[-1])
    s = _masked_fill(s if bias is None else s + bias, mask, float("-inf"))
    a = quant("a", torch.softmax(s, -1))
    out = quant("out", a @ v)
    return (out, a) if return_weights else out


class KuramotoOut(NamedTuple):
    delta: Tensor  # [B,T,k] capped phase increment v(theta) * coupling
    coupling: Tensor  # [B,T,k] sum_u A_tu sin(theta_u - theta_t), the Kuramoto coupling term
    attn: Tensor  # [B,T,T] the softmax coupling kernel A
    local_order: Tensor  # [B] mean_t,j |G_tj|: coherence with the attended neighbours
    global_order: Tensor  # [B] mean_j |mean_t exp(i theta_tj)|


def cap_norm(x: Tensor, max_norm: float) -> Tensor:
    """Scale rows with ||x|| > max_norm back onto the ball, keeping the phase state bounded."""
    norm = x.norm(dim=-1, keepdim=True)
    return x * (max_norm / norm.clamp_min(max_norm))


def kuramoto_attention(theta: Tensor, gate_q: Tensor, gate_k: Tensor, omega: Tensor, value_gate: Tensor,
                       *, tau: float | Tensor = 1.0, causal: bool = False, max_step: float = 1.0,
                       mask: Tensor | None = None) -> KuramotoOut:
    """One Kuramoto attention step on phases theta [B,T,k] (docs/maths.md#kuramoto-attention).

    gate_q, gate_k [B,T,k]: raw gate logits, made positive (softplus) and divided by their mean over
    coordinates; omega [k]: natural frequencies, a rotary phase offset omega_j (t - u); value_gate
    [B,T,k]: signed per-coordinate gain on the increment.
    """
    b, t, k = theta.shape
    gq = F.softplus(gate_q)
    gq = gq / gq.mean(-1, keepdim=True)
    gk = F.softplus(gate_k)
    gk = gk / gk.mean(-1, keepdim=True)
    # cos(theta_t - theta_u + omega (t - u)) = Re(e^{i phi_t} e^{-i phi_u}), phi_t = theta_t + omega t
    pos = torch.arange(t, device=theta.device, dtype=theta.dtype)
    phase = theta + pos[:, None] * omega
    s = (gq * phase.cos()) @ (gk * phase.cos()).transpose(-1, -2)
    s = (s + (gq * phase.sin()) @ (gk * phase.sin()).transpose(-1, -2)) * (tau / math.sqrt(k))
    if causal:
        keep = torch.ones(t, t, dtype=torch.bool, device=theta.device).tril()
        mask = keep if mask is None else mask & keep
    attn = torch.softmax(_masked_fill(s, mask, float("-inf")), -1)  # [B,T,T]
    # circular mean of the raw phases: G_tj = sum_u A_tu e^{i theta_uj}
    g_re, g_im = attn @ theta.cos(), attn @ theta.sin()
    coupling = -theta.sin() * g_re + theta.cos() * g_im  # = Im(G e^{-i theta}) = sum A sin(th_u - th_t)
    delta = cap_norm(value_gate * coupling, max_step)
    local = torch.sqrt(g_re.square() + g_im.square()).mean((-1, -2))
    glob = torch.sqrt(theta.cos().mean(1).square() + theta.sin().mean(1).square()).mean(-1)
    return KuramotoOut(delta, coupling, attn, local, glob)


# ---------------------------------------------------------------------------------- modules


class Hooked(nn.Module):
    """A module with named points; `quant` is None in float (the identity), quant.py sets it for QAT."""

    def __init__(self):
        super().__init__()
        self.quant: nn.Module | None = None

    def point(self, name: str, x: Tensor) -> Tensor:
        return x if self.quant is None else self.quant(name, x)


class _Heads(Hooked):
    """Shared plumbing: project to heads, a learned per-head score scale, merge heads, output projection.

    The scale multiplies q k^T / sqrt(d_h). It is a scalar, so weight decay (matrices only) does not
    pull the scores towards 0, where softplus is ~ log 2 + x / 2 and every query gets the same z.
    """

    def __init__(self, d_model: int, heads: int, score_scale: float = 1.0):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by heads {heads}")
        self.heads, self.d_h = heads, d_model // heads
        self.log_scale = nn.Parameter(torch.full((heads, 1, 1), math.log(score_scale)))
        self.out = nn.Linear(d_model, d_model)

    def split(self, x: Tensor) -> Tensor:  # [B,T,H*d] -> [B,H,T,d]
        return x.unflatten(-1, (self.heads, -1)).transpose(1, 2)

    def qkv_heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = map(self.split, self.qkv(x).chunk(3, -1))
        return q * self.log_scale.exp(), k, v

    def merge(self, x: Tensor) -> Tensor:  # [B,H,T,d] -> [B,T,H*d]
        return self.point("proj", self.out(x.transpose(1, 2).flatten(-2)))


class SoftmaxAttention(_Heads):
    """window > 0: causal, each query reads the last `window` keys (a stream keeps them in a key/value cache);
    distance_bias: each head's scores less slope_h x (i - j), ALiBi's relative position (fixed slopes)."""

    def __init__(self, d_model: int, heads: int, score_scale: float = 1.0, window: int = 0,
                 distance_bias: bool = False):
        super().__init__(d_model, heads, score_scale)
        if distance_bias and not window:
            raise ValueError("distance_bias is the streaming softmax's relative position: it needs a window")
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.window = window
        slopes = 2.0 ** (-8.0 * torch.arange(1, heads + 1) / heads)
        self.register_buffer("slopes", slopes if distance_bias else None, persistent=False)

    def bias(self, queries: Tensor, keys: Tensor) -> Tensor | None:
        """[H, Tq, Tk] the distance penalty between query and key positions, or None."""
        if self.slopes is None:
            return None
        return -self.slopes[:, None, None] * (queries[:, None] - keys[None, :]).to(self.slopes.dtype)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        q, k, v = self.qkv_heads(x)
        bias = None
        if self.window:
            mask = window_mask(x.shape[1], self.window, x.device)
            t = torch.arange(x.shape[1], device=x.device)
            bias = self.bias(t, t)
        return self.merge(softmax_attention(q, k, v, mask=mask, quant=self.quant, bias=bias))

    def step(self, x: Tensor, state: dict) -> Tensor:
        """One frame x [B,1,d] of a stream: its key and value join the cache (the oldest leaves once `window` are
        there), its query reads the cache. O(window) work per frame."""
        q, k, v = self.qkv_heads(x)
        keys = torch.cat([state["k"], k], 2)[:, :, -self.window:] if "k" in state else k
        values = torch.cat([state["v"], v], 2)[:, :, -self.window:] if "v" in state else v
        state["k"], state["v"] = keys, values
        n = keys.shape[2]  # the query is the cache's last position
        bias = self.bias(torch.tensor([n - 1], device=x.device), torch.arange(n, device=x.device))
        return self.merge(softmax_attention(q, keys, values, bias=bias, quant=self.quant))


class OscillatorAttention(_Heads):
    """Projections F (query), G (key), V (value) and per-head anchors r_j = normalize(R e_j).

    anchors="projected" learns R; "tied" uses the first d_osc key coordinates of each head.
    key_gate adds a weight per key and head, g_j = positive(K e_j), to the readout (docs/maths.md#key-gate):
    the shifted cosines only see the angle between z_i and r_j, so without it every key within a kernel width of
    z_i gets weight however uninformative (softmax weighs keys by themselves through the query bias).
    """

    def __init__(self, d_model: int, heads: int, d_osc: int = 2, p: int = 1, positive: str = "softplus",
                 anchors: str = "projected", eps: float = 1e-6, form: str = "direct", score_scale: float = 1.0,
                 key_gate: bool = False, window: int = 0, rotate_anchors: bool = False, gate_map: str = ""):
        super().__init__(d_model, heads, score_scale)
        if positive not in POSITIVE:
            raise ValueError(f"unknown positive map {positive!r}; choose from {sorted(POSITIVE)}")
        if anchors == "tied" and d_osc > self.d_h:
            raise ValueError("tied anchors need d_osc <= d_model / heads")
        if form not in FORMS or (form == "linear" and positive not in POLYNOMIAL):
            raise ValueError(f"form {form!r}: choose from {FORMS}; linear needs a polynomial positive map {POLYNOMIAL}")
        self.d_osc, self.p, self.positive, self.anchors, self.eps, self.form = d_osc, p, positive, anchors, eps, form
        self.qkv = nn.Linear(d_model, 3 * d_model)  # F, G, V
        self.anchor = nn.Linear(d_model, heads * d_osc) if anchors == "projected" else None
        self.gate = nn.Linear(d_model, heads) if key_gate else None
        self.gate_map = gate_map or positive
        if key_gate:
            nn.init.ones_(self.gate.bias)  # every key's weight starts near positive(1)
        if window and form != "linear" or rotate_anchors and not (window and d_osc == 2):
            raise ValueError("window needs the linear form; rotate_anchors a window and d_osc 2")
        self.window = window
        # relative positions: anchor j turned by omega_h j, so z_i . r_j (and h_i turned back by omega_h i) depend on
        # i - j only; a stream's state then turns by a fixed angle per frame. Frequencies from slow to ~0.5 rad/frame.
        self.omega = nn.Parameter(torch.linspace(0.05, 0.5, heads)) if rotate_anchors else None

    def anchors_of(self, x: Tensor, k: Tensor, t0: int | Tensor = 0) -> Tensor:
        """[B,H,T,d_osc] unit anchors of frames t0, t0 + 1, ... (t0 matters only with rotate_anchors)."""
        raw = self.split(self.point("r_raw", self.anchor(x))) if self.anchor is not None else k[..., : self.d_osc]
        r = unit(raw, self.eps)
        if self.omega is None:
            return r
        # in float64, reduced mod 2 pi: a stream's frame count grows all day, and in float32 omega t would be off by
        # 0.03 rad after a day at 20 ms hops (ulp(2e6)), 0.5 rad after a month
        t = t0 + torch.arange(x.shape[1], device=x.device, dtype=torch.float64)
        angle = (self.omega.double()[:, None] * t).remainder(2 * math.pi)  # [H,T]
        return rotate_pairs(r, angle.to(x.dtype))

    def gates_of(self, x: Tensor) -> Tensor | None:
        if self.gate is None:
            return None
        if self.window:  # a stream weighs each key by itself: no normalisation over the keys, a bounded map instead
            return self.point("g", torch.sigmoid(self.split(self.point("g_raw", self.gate(x)))))  # [B,H,T,1]
        g = self.point("g", POSITIVE[self.gate_map](self.split(self.point("g_raw", self.gate(x)))))  # [B,H,T,1]
        # a common factor on the g_j leaves a_ij unchanged: unit vectors over the keys keep g_j (1 + z_i.r_j)^p
        # within [0, 2^p] in every clip, one int8 scale for all
        return self.point("gn", unit(g.transpose(-1, -2), self.eps)).transpose(-1, -2)

    def core(self, q: Tensor, k: Tensor, v: Tensor, r: Tensor, mask: Tensor | None = None,
             g: Tensor | None = None) -> Tensor:
        """The functional core with this layer's settings (the ONNX export emits it as one custom op)."""
        if self.form == "linear":
            if mask is not None:
                raise ValueError("the linear form takes key masks and causality, not a [T, T] mask")
            return oscillator_attention_linear(q, k, v, r, p=self.p, eps=self.eps, positive=self.positive, g=g,
                                               window=self.window, quant=self.quant)
        return oscillator_attention(q, k, v, r, p=self.p, eps=self.eps, positive=self.positive, mask=mask,
                                    quant=self.quant, g=g)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        q, k, v = self.qkv_heads(x)
        return self.merge(self.core(q, k, v, self.anchors_of(x, k), mask, g=self.gates_of(x)))

    def step(self, x: Tensor, state: dict) -> Tensor:
        """One frame x [B,1,d] of a stream (the linear form with a window): its key's terms join the two sums, the
        terms of the key `window` frames back leave them (its k, r, g, v kept until then), its query reads the sums:
        O(1) work per frame, whatever the window. While the window is at most the sums' size (forward's evaluation
        order), the query reads the kept keys instead: the same function in fewer ops, and no sums to drift."""
        t = int(state.get("t", 0))
        q, k, v = self.qkv_heads(x)
        r, g = self.anchors_of(x, k, t), self.gates_of(x)
        q, k, v, r = (self.point(name, a) for name, a in zip("qkvr", (q, k, v, r)))  # the core's int8 inputs
        if self.window <= _state_size(q, v, r, self.p):  # forward's evaluation order: the kept keys read directly
            keys = [k, v, r, _readout_factor(r, g, self.p)]  # [B,H,1,.] each; the window's last ones are kept
            kept = [torch.cat([a, b], 2)[:, :, -self.window:] for a, b in zip(state["keys"], keys)] \
                if "keys" in state else keys
            state.update(t=t + 1, keys=kept)
            return self.merge(_read_keys(q, *kept, self.p, self.positive, self.eps, None,
                                         self.quant or _identity))

        def terms(keys: list[Tensor]) -> tuple[Tensor, Tensor]:  # the two sums' terms of keys [k, r, v(, g)]
            return linear_key_terms(*keys[:3], keys[3] if len(keys) == 4 else None, self.p, self.positive,
                                    self.eps)

        keys = [k, r, v] + ([g] if g is not None else [])
        coupling, readout = terms(keys)
        if "coupling" in state:
            coupling, readout = coupling + state["coupling"], readout + state["readout"]
        kept = [torch.cat([a, b], 2) for a, b in zip(state["keys"], keys)] if "keys" in state else keys
        if kept[0].shape[2] > self.window:  # the key `window` frames back expires
            c_old, r_old = terms([a[:, :, :1] for a in kept])
            coupling, readout, kept = coupling - c_old, readout - r_old, [a[:, :, 1:] for a in kept]
        if (t + 1) % self.window == 0:  # the sums afresh from the kept keys every `window` frames (O(1) a frame on
            # average): float32 rounding of a day's adds and subtracts would otherwise pile up (the integer sums wrap
            # exactly and need none of this)
            coupling, readout = (a.sum(2, keepdim=True) for a in terms(kept))
        state.update(t=t + 1, coupling=coupling, readout=readout, keys=kept)
        return self.merge(linear_query(q, coupling, readout, self.p, self.eps, self.quant, self.positive))


@contextlib.contextmanager
def direct_form(model: nn.Module):
    """Meanwhile, the model's whole-clip linear-form oscillator layers compute the direct form: the same function
    over T x T (docs/maths.md#linear-form), with the direct core's named points (its attention rows among them)."""
    layers = [m for m in model.modules() if isinstance(m, OscillatorAttention) and m.form == "linear" and not m.window]
    for attn in layers:
        attn.form = "direct"
    try:
        yield model
    finally:
        for attn in layers:
            attn.form = "linear"


class SwiGLU(nn.Module):
    def __init__(self, d_in: int, d_hidden: int, d_out: int):
        super().__init__()
        self.gate_up = nn.Linear(d_in, 2 * d_hidden)
        self.down = nn.Linear(d_hidden, d_out)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up(x).chunk(2, -1)
        return self.down(F.silu(gate) * up)


class KuramotoBlock(nn.Module):
    """Kuramoto attention increment then a SwiGLU increment on the raw angles, each norm-capped."""

    def __init__(self, k: int, d_ff: int, causal: bool = False, max_step: float = 1.0, ff: bool = True):
        super().__init__()
        self.causal, self.max_step = causal, max_step
        self.gates = nn.Linear(2 * k, 3 * k)  # gate_q, gate_k, value_gate from (cos, sin) features
        self.omega = nn.Parameter(torch.randn(k) * 0.1)
        self.log_tau = nn.Parameter(torch.tensor(math.log(4.0)))
        self.ff = SwiGLU(k, d_ff, k) if ff else None
        self.last: KuramotoOut | None = None  # diagnostics of the latest forward

    def forward(self, theta: Tensor, mask: Tensor | None = None) -> Tensor:
        gq, gk, gv = self.gates(torch.cat([theta.cos(), theta.sin()], -1)).chunk(3, -1)
        out = kuramoto_attention(theta, gq, gk, self.omega, gv, tau=self.log_tau.exp(), causal=self.causal,
                                 max_step=self.max_step, mask=mask)
        self.last = KuramotoOut(*(t.detach() for t in out))
        theta = theta + out.delta
        return theta if self.ff is None else theta + cap_norm(self.ff(theta), self.max_step)
