"""The streaming variant (ModelConfig.window > 0): causal, attention over the last `window` frames, and run one frame
at a time (KWSTransformer.stream_step) it gives what the windowed network gives over the whole stream."""
import pytest
import torch

from conftest import features, fit, tone_clipset
from edgeosc.config import ModelConfig
from edgeosc.models.kws import build_model

OSC = dict(attention="oscillator", d_osc=2, positive="taylor2", key_gate=True, form="linear")
KINDS = {"oscillator": OSC, "softmax": dict(attention="softmax"),
         "softmax-distance-bias": dict(attention="softmax", distance_bias=True)}


def net(kind: str, window: int, seed: int = 0, **settings):
    torch.manual_seed(seed)
    return build_model(ModelConfig(window=window, n_classes=3, **KINDS[kind], **settings)).eval()


def stream(model, x):
    """x [B, T, C] one frame at a time from a fresh state: ([B, T, classes] logits, the final state)."""
    state, out = None, []
    for t in range(x.shape[1]):
        y, state = model.stream_step(x[:, t], state)
        out.append(y)
    return torch.stack(out, 1), state


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("window", [7, 49])
def test_frame_by_frame_equals_the_windowed_network(kind, window):
    model, x = net(kind, window), torch.randn(2, 64, 40)
    with torch.no_grad():
        whole = model(x, per_frame=True)
        frames, _ = stream(model, x)
        again, _ = stream(model, x)  # a new stream starts afresh
        clip = model(x[:, :49])
    assert whole.shape == (2, 64, 3)
    assert torch.allclose(frames, whole, atol=2e-5), (frames - whole).abs().max()
    assert torch.equal(again, frames)
    assert torch.allclose(clip, whole[:, 48], atol=2e-5)  # a clip's logits are its last frame's


@pytest.mark.parametrize("kind", KINDS)
def test_causal_and_bounded_by_the_window(kind):
    W = 4
    model, x = net(kind, W), torch.randn(1, 40, 40)
    changed = x.clone()
    changed[:, 0] += 3.0
    changed[:, 30:] = torch.randn(1, 10, 40)
    with torch.no_grad():
        a, b = model(x, per_frame=True), model(changed, per_frame=True)
    # frame t reads frames t - 2 .. t (stem), then W frames per attention layer and the pooling's W
    reach = 2 + 3 * (W - 1)
    assert (a[:, reach] - b[:, reach]).abs().max() > 1e-3  # frame 0 matters within reach
    # and not beyond it (but for the rounding of the prefix sums a window subtracts from), nor the future before it
    assert torch.allclose(a[:, reach + 1:30], b[:, reach + 1:30], atol=1e-5)


def as_long_windows(monkeypatch):
    """Every window counts as longer than the linear core's sums (attention._state_size): the step keeps the sums."""
    import edgeosc.models.attention as A
    monkeypatch.setattr(A, "_state_size", lambda *a: 0)


@pytest.mark.parametrize("order", ["kept keys", "sums"])
def test_the_oscillator_state_is_fixed_in_size(order, monkeypatch):
    W = 5
    if order == "sums":
        as_long_windows(monkeypatch)
    model = net("oscillator", W)
    with torch.no_grad():
        _, s1 = stream(model, torch.randn(1, W + 3, 40))
        _, s2 = stream(model, torch.randn(1, 4 * W, 40))
    sums = ["coupling", "readout"] if order == "sums" else []
    assert all(name in s2["block0"] for name in sums) and ("coupling" in s2["block0"]) == bool(sums)
    shapes = lambda s: {k: [tuple(t.shape) for t in v["keys"] + [v[n] for n in sums]]  # noqa: E731
                        for k, v in s.items() if k.startswith("block")}
    assert shapes(s1) == shapes(s2)
    assert s2["block0"]["keys"][0].shape[2] == W and s2["pool"].shape[1] == W


@pytest.mark.parametrize("window", [7, 49])
def test_the_steps_two_evaluation_orders_agree(window, monkeypatch):
    """While the window is at most the sums' size the step reads its kept keys, past it the sums a stream carries
    (forward's rule): the same outputs, frame by frame."""
    model, x = net("oscillator", window), torch.randn(2, 3 * window, 40)
    with torch.no_grad():
        kept, _ = stream(model, x)
        as_long_windows(monkeypatch)
        sums, _ = stream(model, x)
    assert torch.allclose(kept, sums, atol=2e-5), (kept - sums).abs().max()
    assert not torch.allclose(kept[:, 1:], kept[:, :-1], atol=1e-3)  # frames differ: a real stream


def test_anchors_turn_per_frame_and_the_setting_is_measured_both_ways():
    model = net("oscillator", 49)
    still = net("oscillator", 49, rotate_anchors=False)
    assert model.blocks[0].attn.omega is not None and still.blocks[0].attn.omega is None
    x = torch.randn(1, 10, 32)
    attn = model.blocks[0].attn
    with torch.no_grad():
        k = attn.qkv_heads(x)[1]
        r0, r5 = attn.anchors_of(x, k), attn.anchors_of(x, k, 5)
    # turning every anchor by the same angle keeps their lengths and the angles between them
    assert torch.allclose(r0.norm(dim=-1), r5.norm(dim=-1), atol=1e-6)
    gram = lambda r: r @ r.transpose(-1, -2)  # noqa: E731
    assert torch.allclose(gram(r0), gram(r5), atol=1e-5)
    assert not torch.allclose(r0, r5)


def test_a_streams_age_does_not_move_its_outputs():
    """Anchors turn by omega t with t the frame count: a month at 20 ms hops is 1.3e8 frames, where float32 omega t
    would be off by radians. Positions are relative, so the outputs at any age equal those at age 0."""
    attn = net("oscillator", 8).blocks[0].attn
    x = torch.randn(1, 12, 32)

    def run(age):
        state = {"t": age}
        return torch.cat([attn.step(x[:, i:i + 1], state) for i in range(x.shape[1])], 1)
    with torch.no_grad():
        young = run(0)
        for age in (4_320_000, 130_000_000):  # a day, a month
            assert torch.allclose(run(age), young, atol=1e-5), (age, (run(age) - young).abs().max())
    omega = attn.omega
    attn.anchors_of(x, None, 5).sum().backward()  # the angle still trains
    assert omega.grad is not None and omega.grad.abs().sum() > 0


def test_float_sums_are_refreshed_from_the_kept_keys_every_window(monkeypatch):
    """Adding and subtracting keys in float32 all day would let rounding pile up in the sums; every `window` frames
    the stream recomputes them from the keys it keeps, so the error stays that of one window."""
    from edgeosc.models.attention import linear_key_terms
    as_long_windows(monkeypatch)
    attn, state = net("oscillator", 5).blocks[0].attn, {}
    with torch.no_grad():
        for _ in range(10):
            attn.step(torch.randn(1, 1, 32), state)
        k, r, v, g = state["keys"]
        fresh = [a.sum(2, keepdim=True) for a in linear_key_terms(k, r, v, g, attn.p)]
    assert torch.equal(state["coupling"], fresh[0]) and torch.equal(state["readout"], fresh[1])
    model = net("softmax", 5)  # the pooling's running sum too
    with torch.no_grad():
        _, state = stream(model, torch.randn(1, 10, 40))
    assert torch.equal(state["pool_sum"], state["pool"].sum(1))


def test_distance_bias_takes_each_heads_slope_per_frame_of_distance():
    from edgeosc.models.attention import SoftmaxAttention
    attn, t = SoftmaxAttention(32, 4, window=8, distance_bias=True), torch.arange(6)
    slopes = 2.0 ** (-8.0 * torch.arange(1, 5) / 4)  # ALiBi's for 4 heads: 1/4, 1/16, 1/64, 1/256
    want = -slopes[:, None, None] * (t[:, None] - t[None, :])
    assert torch.equal(attn.bias(t, t), want)
    assert SoftmaxAttention(32, 4, window=8).bias(t, t) is None
    with pytest.raises(ValueError, match="needs a window"):
        SoftmaxAttention(32, 4, distance_bias=True)


@pytest.mark.parametrize("kind", ["oscillator", "softmax-distance-bias"])
def test_the_qat_twin_streams_as_it_runs_windowed(kind, tmp_path):
    """QAT passes a frame through every point the windowed network has, so its int8 logits are the same codes."""
    from edgeosc.checkpoint import CHECKPOINT_FORMAT, CHECKPOINT_VERSION, save_checkpoint
    from edgeosc.config import DataConfig, FeatureConfig, QuantConfig, TrainConfig, to_dict
    from edgeosc.quant import calibrate, quantize_model
    from edgeosc.stream import load_model
    qat, x = quantize_model(net(kind, 5), QuantConfig()), torch.randn(2, 14, 40)
    calibrate(qat, [(x, None)], 1)
    qat.eval()
    with torch.no_grad():
        whole, (frames, _) = qat(x, per_frame=True), stream(qat, x)
    lsb = qat.output_quant.act_quant.scale().item()
    assert torch.equal(torch.round(frames / lsb), torch.round(whole / lsb))
    assert len(torch.unique(torch.round(whole / lsb))) > 20  # int8 codes, and not a constant
    path = tmp_path / "qat.pt"  # a QAT streaming checkpoint streams after a round trip
    save_checkpoint(path, dict(format=CHECKPOINT_FORMAT, version=CHECKPOINT_VERSION, model_config=to_dict(qat.cfg),
                               feature_config=to_dict(FeatureConfig()), data_config=to_dict(DataConfig()),
                               train_config=to_dict(TrainConfig()), classes=["a", "b", "c"],
                               quant=qat.checkpoint_record(), model=qat.state_dict()))
    model = load_model(path)
    assert model.window == 5
    steps = [model.step(f.numpy()) for f in x[0]]
    assert torch.equal(torch.round(torch.tensor(steps[-1]) / lsb), torch.round(whole[0, -1] / lsb))


def test_it_learns_causally():
    x, y = features(tone_clipset(n_per_class=12, seed=0))
    held, held_y = features(tone_clipset(n_per_class=20, seed=1))
    torch.manual_seed(0)
    for kind in ("oscillator", "softmax"):
        model = fit(build_model(ModelConfig(window=49, n_classes=3, dropout=0.0, **KINDS[kind])), x, y, 40, 1e-2)
        with torch.no_grad():
            acc = (model(held).argmax(-1) == held_y).float().mean().item()
        assert acc > 0.9, (kind, acc)


def test_settings_that_cannot_stream_are_refused(tmp_path):
    for bad in (dict(attention="kuramoto"), dict(attention="oscillator", form="direct"), dict(attention="ds-cnn"),
                dict(OSC, d_osc=4)):
        with pytest.raises(ValueError, match="window"):
            ModelConfig(window=49, **bad)
    with pytest.raises(ValueError, match="window"):
        ModelConfig(window=-1)
    with pytest.raises(ValueError, match="distance_bias"):
        ModelConfig(window=49, distance_bias=True, **OSC)
    with pytest.raises(ValueError, match="streaming variant"):
        net("softmax", 0).stream_step(torch.randn(1, 40))
    with pytest.raises(ValueError, match=r"one frame \[batch, 40\]"):
        net("softmax", 49).stream_step(torch.randn(1, 10))
    from edgeosc.checkpoint import Checkpoint
    from edgeosc.config import DataConfig, ExportConfig, FeatureConfig, TrainConfig
    from edgeosc.export import export
    model = net("softmax", 49)
    ckpt = Checkpoint(model, model.cfg, FeatureConfig(), DataConfig(), TrainConfig(), ("a", "b", "c"), {})
    with pytest.raises(ValueError, match="exports to TFLite"):  # tests/test_stream_export.py: the TFLite export
        export(ckpt, ExportConfig(), tmp_path)
    from edgeosc.pipeline import load_config, run_pipeline
    with pytest.raises(ValueError, match="window"):
        run_pipeline(load_config(overrides={"model.window": 49}), tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_state_from_another_model_window_or_batch_is_refused(kind):
    model, other = net(kind, 8), net(kind, 8, seed=1)
    _, state = stream(model, torch.randn(2, 3, 40))
    with pytest.raises(ValueError, match="another model"):
        other.stream_step(torch.randn(2, 40), state)
    with pytest.raises(ValueError, match="batch of 2 streams, the frame has 1"):
        model.stream_step(torch.randn(1, 40), state)
    with pytest.raises(ValueError, match="not a stream state"):
        model.stream_step(torch.randn(2, 40), {"stem": torch.zeros(2, 2, 40)})
    model.set_window(4)
    with pytest.raises(ValueError, match="8-frame window and the model now attends over 4"):
        model.stream_step(torch.randn(2, 40), state)
    y, fresh = model.stream_step(torch.randn(2, 40), None)  # a reset starts over
    assert y.shape == (2, 3) and model.stream_step(torch.randn(2, 40), fresh)[0].shape == (2, 3)
