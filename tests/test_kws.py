import pytest
import torch

from edgeosc.config import ATTENTION_KINDS, MODEL_SIZES, ModelConfig
from edgeosc.models import dscnn, kws
from edgeosc.models.kws import build_model, count_parameters


@pytest.mark.parametrize("attention", ATTENTION_KINDS)
@pytest.mark.parametrize("size,low,high", [("small", 15_000, 30_000), ("medium", 100_000, 200_000)])
def test_model_forward_backward_and_size(attention, size, low, high):
    cfg = ModelConfig(attention=attention, size=size)
    model = build_model(cfg)
    assert low <= count_parameters(model) <= high
    x = torch.randn(4, cfg.n_frames, cfg.n_coeffs)
    logits = model(x)
    assert logits.shape == (4, cfg.n_classes)
    logits.logsumexp(-1).sum().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("attention", ATTENTION_KINDS)
def test_every_kind_has_every_size_growing_in_order(attention):
    # the size axis of the accuracy-per-joule curve: one name list, every kind's presets, smallest first
    assert list(kws.SIZES) == list(dscnn.SIZES) == list(kws.KURAMOTO_WIDTH) == list(MODEL_SIZES)
    counts = [count_parameters(build_model(ModelConfig(attention=attention, size=s))) for s in MODEL_SIZES]
    assert counts == sorted(counts) and len(set(counts)) == len(counts)
    # the curve's transformer sizes keep the kernels' unrolled head of 8
    assert all(kws.SIZES[s][0] == 8 * kws.SIZES[s][1] for s in ("tiny", "small", "base"))


def test_oscillator_and_softmax_networks_differ_only_in_attention():
    osc = build_model(ModelConfig(attention="oscillator", size="small"))
    soft = build_model(ModelConfig(attention="softmax", size="small", heads=osc.cfg.heads))  # at the same heads
    extra = count_parameters(osc) - count_parameters(soft)
    cfg = osc.cfg
    # anchors R and the key gate K only
    assert extra == cfg.blocks * (cfg.d_model + 1) * cfg.heads * (cfg.d_osc + 1)


def test_bad_config():
    with pytest.raises(ValueError):
        ModelConfig(attention="linear")
    with pytest.raises(ValueError):
        build_model(ModelConfig(size="huge"))


def test_the_whole_clip_oscillator_takes_heads_of_its_d_head():
    """d_head 4: twice the preset's heads at the same width for the whole-clip oscillator; d_head 0 (the default),
    the streaming oscillator and the other kinds keep the preset's; a width it does not divide is refused."""
    from edgeosc.models.kws import SIZES, resolve
    for size, (d, h, _) in SIZES.items():
        assert (resolve(ModelConfig(size=size)).heads, resolve(ModelConfig(size=size, d_head=4)).heads) == (h, d // 4)
        assert resolve(ModelConfig(size=size, window=49, d_head=4)).heads == h
        assert resolve(ModelConfig(size=size, attention="softmax", d_head=4)).heads == h  # not its setting
    assert resolve(ModelConfig(heads=2, d_head=4)).heads == 2 and resolve(ModelConfig(d_model=48, d_head=4)).heads == 12
    with pytest.raises(ValueError, match="not a multiple of the oscillator's d_head 5"):
        resolve(ModelConfig(d_head=5))  # d_model 32
    with pytest.raises(ValueError, match="d_head >= 0"):
        ModelConfig(d_head=-1)


def test_sharpness_counts_the_keys_each_query_reads():
    from edgeosc.models.sharpness import sharpness
    torch.manual_seed(0)
    x = torch.randn(3, 49, 40)
    soft = build_model(ModelConfig(attention="softmax", n_classes=3)).eval()
    d = soft.cfg.d_model
    with torch.no_grad():  # q = 0: every score 0, every row uniform over the 49 frames
        for block in soft.blocks:
            block.attn.qkv.weight[:d] = 0
            block.attn.qkv.bias[:d] = 0
    rows = sharpness(soft, x)
    assert len(rows) == soft.cfg.blocks and all(abs(k - 49) < 1e-3 for r in rows for k in r["effective_keys"])
    assert all(abs(w - 1 / 49) < 1e-6 for r in rows for w in r["largest_weight"])
    assert all(s < 1e-6 for r in rows for s in r["query_specificity"])  # every query reads the same row
    osc = build_model(ModelConfig(n_classes=3)).eval()  # the linear core: read from its direct form
    rows = sharpness(osc, x)
    assert all(1 <= k <= 49 and len(r["effective_keys"]) == osc.cfg.heads for r in rows for k in r["effective_keys"])
    assert osc.blocks[0].attn.quant is None and osc.blocks[0].attn.form == "linear"  # the model is left as it was
    with pytest.raises(ValueError, match="whole-clip"):
        sharpness(build_model(ModelConfig(n_classes=3, window=8)), x)


def test_query_specificity_is_0_for_a_pooling_and_near_1_for_disjoint_rows():
    from edgeosc.models.sharpness import query_specificity
    t = 10
    assert query_specificity(torch.full((t, t), 1 / t)).item() < 1e-7
    torch.testing.assert_close(query_specificity(torch.eye(t)), torch.tensor(1 - 1 / t))  # each row its own key
    half = torch.cat([torch.eye(t)[:5], torch.full((5, t), 1 / t)])  # half the queries read one key, half all
    assert 0 < query_specificity(half).item() < 1 - 1 / t
