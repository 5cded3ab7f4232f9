import math

import pytest
import torch

from edgeosc.models.attention import (POSITIVE, KuramotoBlock, OscillatorAttention, SoftmaxAttention, coupling,
                                      harmonic_coefficients, kuramoto_attention, oscillator_attention,
                                      oscillator_attention_linear, softmax_attention, unit)

B, H, T, DH, DV = 2, 3, 11, 8, 5


def inputs(d_osc, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, H, T, DH, generator=g, dtype=dtype) for _ in range(2))
    v = torch.randn(B, H, T, DV, generator=g, dtype=dtype)
    r = torch.nn.functional.normalize(torch.randn(B, H, T, d_osc, generator=g, dtype=dtype), dim=-1)
    return [t.requires_grad_() for t in (q, k, v, r)]


def masks():
    lengths = torch.tensor([T, T - 4])
    padding = (torch.arange(T) < lengths[:, None])[:, None, None, :]  # [B,1,1,T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # [T,T]
    return [None, padding, causal]


def key_masks():
    """(key_mask [B,T], causal) and the [.., T, T] mask of the direct form they stand for."""
    lengths = torch.tensor([T, T - 4])
    keys = torch.arange(T) < lengths[:, None]  # [B,T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return [(None, False, None), (keys, False, keys[:, None, None, :]), (None, True, causal),
            (keys, True, keys[:, None, None, :] & causal)]


def close(a, b, tol=1e-9):
    return (a - b).norm() <= tol * b.norm()


@pytest.mark.parametrize("p", [1, 2, 4])
@pytest.mark.parametrize("d_osc", [2, 3])
@pytest.mark.parametrize("masking", range(4), ids=["none", "padding", "causal", "padding+causal"])
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("positive", ["taylor2", "cos2"])
def test_linear_form_equals_direct(p, d_osc, masking, gated, positive):
    """Sums over keys (harmonics at d_osc 2, monomials else) == the direct form with each polynomial map, values and
    gradients."""
    key_mask, causal, mask = key_masks()[masking]
    q, k, v, r = inputs(d_osc, seed=p + d_osc)
    g = (torch.rand(B, H, T, 1, generator=torch.Generator().manual_seed(3), dtype=q.dtype) + 0.1).requires_grad_()
    g = g if gated else None
    direct = oscillator_attention(q, k, v, r, p=p, positive=positive, mask=mask, g=g)
    linear = oscillator_attention_linear(q, k, v, r, p=p, positive=positive, key_mask=key_mask, causal=causal, g=g)
    assert close(linear, direct)
    wrt = (q, k, v, r) + ((g,) if gated else ())
    for i, (a, b) in enumerate(zip(torch.autograd.grad(linear.square().sum(), wrt),
                                   torch.autograd.grad(direct.square().sum(), wrt))):
        if i == 3 and d_osc == 2:  # the harmonics hold on the unit circle, where the model's anchors live
            a, b = (x - (x * r).sum(-1, keepdim=True) * r for x in (a, b))  # (r = unit(R x)): tangent parts
        assert close(a, b, 1e-8)


@pytest.mark.parametrize("masking", [2, 3], ids=["causal", "padding+causal"])
@pytest.mark.parametrize("window", [0, 4])
@pytest.mark.parametrize("positive", ["taylor2", "cos2"])
@pytest.mark.parametrize("d_osc", [2, 3])
def test_masked_products_equal_the_prefix_sums(masking, window, positive, d_osc, monkeypatch):
    """A short causal or windowed sequence takes masked T x T products, a long one the prefix sums a stream carries:
    the same values and gradients."""
    import edgeosc.models.attention as A
    key_mask, causal, _ = key_masks()[masking]
    q, k, v, r = inputs(d_osc, seed=5)
    g = (torch.rand(B, H, T, 1, generator=torch.Generator().manual_seed(6), dtype=q.dtype) + 0.1).requires_grad_()
    kw = dict(p=4, positive=positive, key_mask=key_mask, causal=causal, window=window, g=g)
    masked = oscillator_attention_linear(q, k, v, r, **kw)
    monkeypatch.setattr(A, "_state_size", lambda *a: 0)  # every T counts as long
    sums = oscillator_attention_linear(q, k, v, r, **kw)
    assert close(masked, sums) and not close(masked, oscillator_attention_linear(q, k, v, r, **dict(kw, window=3)))
    for a, b in zip(torch.autograd.grad(masked.square().sum(), (q, k, v, r, g)),
                    torch.autograd.grad(sums.square().sum(), (q, k, v, r, g))):
        assert close(a, b, 1e-8)


def test_linear_form_is_causal_and_needs_a_polynomial_map():
    q, k, v, r = inputs(2)
    out = oscillator_attention_linear(q, k, v, r, p=4, causal=True)
    later = [x.clone() for x in (q, k, v, r)]
    for x in later:
        x.data[:, :, 6:] = torch.randn_like(x[:, :, 6:])  # change the future
    later[3].data = torch.nn.functional.normalize(later[3].data, dim=-1)
    moved = oscillator_attention_linear(*later, p=4, causal=True)
    torch.testing.assert_close(moved[:, :, :6], out[:, :, :6])  # the past does not see it
    assert not torch.allclose(moved[:, :, 6:], out[:, :, 6:])
    with pytest.raises(ValueError, match="polynomial positive map"):
        oscillator_attention_linear(q, k, v, r, positive="relu2")
    with pytest.raises(ValueError, match="polynomial positive map"):
        OscillatorAttention(16, 4, positive="relu2", form="linear")


@pytest.mark.parametrize("p", [1, 2, 3, 4, 6])
def test_harmonic_coefficients(p):
    d = torch.linspace(-math.pi, math.pi, 101, dtype=torch.float64)
    series = sum(a * torch.cos(m * d) for m, a in enumerate(harmonic_coefficients(p)))
    torch.testing.assert_close(series, (1 + torch.cos(d)) ** p)


def test_p1_closed_form_readout():
    q, k, v, r = inputs(2)
    z_out, a = oscillator_attention(q, k, v, r, return_weights=True)
    # out_i = (sum_j v_j + z_i^T R^T V) / (T + z_i^T sum_j r_j), with z recovered from the weights
    w = torch.nn.functional.softplus(q @ k.transpose(-1, -2) / math.sqrt(DH))
    h = w @ r
    z = h / h.norm(dim=-1, keepdim=True)
    expected = (v.sum(-2, keepdim=True) + z @ (r.transpose(-1, -2) @ v)) / (T + z @ r.sum(-2).unsqueeze(-1))
    torch.testing.assert_close(z_out, expected)


@pytest.mark.parametrize("positive", sorted(POSITIVE))
@pytest.mark.parametrize("p", [1, 3])
def test_weights_nonnegative_rows_sum_to_one(positive, p):
    q, k, v, r = inputs(3)
    for mask in masks():
        _, a = oscillator_attention(q, k, v, r, p=p, positive=positive, mask=mask, return_weights=True)
        assert (a >= 0).all()
        torch.testing.assert_close(a.sum(-1), torch.ones_like(a.sum(-1)))
        if mask is not None:
            assert (a[~mask.expand_as(a)] == 0).all()
        _, s = softmax_attention(q, k, v, mask=mask, return_weights=True)
        assert (s >= 0).all()
        torch.testing.assert_close(s.sum(-1), torch.ones_like(s.sum(-1)))
    theta = torch.rand(B, T, 6, dtype=torch.float64) * 2 * math.pi
    out = kuramoto_attention(theta, *torch.randn(3, B, T, 6, dtype=torch.float64)[:2], torch.rand(6),
                             torch.randn(B, T, 6, dtype=torch.float64), causal=True)
    assert (out.attn >= 0).all() and (out.attn.triu(1) == 0).all()
    torch.testing.assert_close(out.attn.sum(-1), torch.ones(B, T, dtype=torch.float64))


def test_positive_maps_strictly_positive():
    x = torch.linspace(-50, 50, 1001)
    for name, fn in POSITIVE.items():
        assert (fn(x) > 0).all(), name


@pytest.mark.parametrize("form", ["direct", "linear"])
def test_degenerate_states_are_finite(form):
    core = oscillator_attention_linear if form == "linear" else oscillator_attention
    q, k, v, r = inputs(2)
    # antipodal anchors with equal weights: h = w r_0 + w (-r_0) = 0 exactly
    r0 = torch.tensor([1.0, 0.0], dtype=torch.float64)
    r_anti = torch.stack([r0 if j % 2 == 0 else -r0 for j in range(T - 1)] + [torch.zeros(2, dtype=torch.float64)])
    r_anti = r_anti.expand(B, H, T, 2).clone().requires_grad_()
    q0 = torch.zeros_like(q, requires_grad=True)  # equal weights for every key
    out = core(q0, k, v, r_anti[..., :, :], p=2, positive="taylor2")
    grads = torch.autograd.grad(out.sum(), (q0, k, v, r_anti))
    assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in grads)
    # z = 0: the readout degenerates to the uniform mean of the values
    torch.testing.assert_close(out, v.mean(-2, keepdim=True).expand_as(out))
    # all keys masked: finite zeros, not NaN
    none = torch.zeros(B, T, dtype=torch.bool)
    out = (core(q, k, v, r, key_mask=none) if form == "linear"
           else core(q, k, v, r, mask=none[:, None, None, :], positive="taylor2"))
    assert torch.isfinite(out).all() and (out == 0).all()


def test_kuramoto_identity():
    g = torch.Generator().manual_seed(1)
    theta = torch.rand(B, T, 7, generator=g, dtype=torch.float64) * 20 - 10
    gq, gk, gv = torch.randn(3, B, T, 7, generator=g, dtype=torch.float64)
    for causal in (False, True):
        out = kuramoto_attention(theta, gq, gk, torch.randn(7, generator=g, dtype=torch.float64), gv,
                                 causal=causal)
        direct = (out.attn.unsqueeze(-1) * torch.sin(theta.unsqueeze(1) - theta.unsqueeze(2))).sum(2)
        assert (out.coupling - direct).abs().max() <= 1e-6
        assert (out.delta.norm(dim=-1) <= 1.0 + 1e-12).all()  # norm-capped increment
        assert ((0 <= out.local_order) & (out.local_order <= 1)).all()
        assert ((0 <= out.global_order) & (out.global_order <= 1)).all()


def test_kuramoto_score_uses_phase_offset():
    # with unit gates the score is tau/sqrt(k) sum_j cos(theta_tj - theta_uj + omega_j (t - u))
    k = 4
    theta = torch.rand(1, T, k, dtype=torch.float64) * 6
    omega = torch.randn(k, dtype=torch.float64)
    zeros = torch.zeros(1, T, k, dtype=torch.float64)
    out = kuramoto_attention(theta, zeros, zeros, omega, zeros + 1, tau=2.0)
    t = torch.arange(T, dtype=torch.float64)
    arg = theta[0, :, None, :] - theta[0, None, :, :] + omega * (t[:, None, None] - t[None, :, None])
    s = 2.0 / math.sqrt(k) * arg.cos().sum(-1)
    torch.testing.assert_close(out.attn[0], torch.softmax(s, -1))


def test_modules_shapes_and_linear_module():
    x = torch.randn(2, T, 16)
    osc = OscillatorAttention(16, 4, d_osc=3, p=2, positive="taylor2")
    lin = OscillatorAttention(16, 4, d_osc=3, p=2, positive="taylor2", form="linear")
    lin.load_state_dict(osc.state_dict())
    torch.testing.assert_close(osc(x), lin(x), rtol=1e-4, atol=1e-5)
    assert SoftmaxAttention(16, 4)(x).shape == x.shape
    tied = OscillatorAttention(16, 4, d_osc=2, anchors="tied")
    assert tied(x).shape == x.shape and tied.anchor is None
    theta = torch.randn(2, T, 12)
    assert KuramotoBlock(12, 8)(theta).shape == theta.shape
    with pytest.raises(ValueError):
        OscillatorAttention(16, 4, positive="exp")


@pytest.mark.parametrize("mask_i", [0, 1, 2])
def test_key_gate_weighs_keys_in_the_readout(mask_i):
    mask = masks()[mask_i]
    q, k, v, r = inputs(2, seed=5)
    _, plain = oscillator_attention(q, k, v, r, p=4, mask=mask, return_weights=True)
    ones = torch.ones(B, H, T, 1, dtype=q.dtype)
    torch.testing.assert_close(oscillator_attention(q, k, v, r, p=4, mask=mask, g=ones * 3.0),
                               oscillator_attention(q, k, v, r, p=4, mask=mask))  # only ratios of g count
    g = torch.rand(B, H, T, 1, generator=torch.Generator().manual_seed(1), dtype=q.dtype) + 0.1
    g[:, :, 2] = 1e-9  # key 2 all but switched off
    out, a = oscillator_attention(q, k, v, r, p=4, mask=mask, g=g, return_weights=True)
    assert a[..., 2].max() < 1e-7 and plain[..., 2].max() > 1e-2
    expected = plain * g.transpose(-1, -2)  # a_ij = g_j c_ij / sum_l g_l c_il
    torch.testing.assert_close(a, expected / expected.sum(-1, keepdim=True))


def test_key_gate_module_is_oscillator_only_and_matches_its_linear_form():
    from edgeosc.config import ModelConfig
    from edgeosc.models.kws import build_model
    soft = ModelConfig(attention="softmax", key_gate=True, form="linear")  # another kind holds none of them
    assert (soft.key_gate, soft.form) == (False, "direct")
    with pytest.raises(ValueError, match="polynomial positive map"):
        ModelConfig(positive="relu2")  # the linear core, the default form, needs a finite feature map
    model = build_model(ModelConfig(key_gate=True, d_osc=2, positive="taylor2")).eval()
    x = torch.randn(2, 49, 40)
    attn = model.blocks[0].attn
    assert attn.gate is not None and (attn.gates_of(torch.zeros(1, 49, 32)) > 0).all()
    before = model(x)
    for block in model.blocks:
        block.attn.form = "linear"
    torch.testing.assert_close(model(x), before, atol=1e-5, rtol=1e-5)


def test_cos2_is_monotone_in_the_cosine_and_ignores_lengths():
    """cos2 weighs a key by (1 + cos(q, k))^2: 0 for an opposite key, 4 for an aligned one, whatever the lengths
    (taylor2 of large scores weighs an opposite key like an aligned one)."""
    q = torch.tensor([[[[3.0, 0.0]]]])
    k = torch.tensor([[[[-5.0, 0.0], [0.0, 2.0], [0.5, 0.0]]]])
    w = coupling(unit(q, 1e-6) @ unit(k, 1e-6).transpose(-1, -2), 2, "cos2")
    torch.testing.assert_close(w, torch.tensor([[[[0.0, 1.0, 4.0]]]]))
    big = coupling(100 * q @ k.transpose(-1, -2), 2, "taylor2")
    assert big[..., 0] > big[..., 2]  # taylor2: the opposite key pulls hardest
