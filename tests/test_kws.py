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
    soft = build_model(ModelConfig(attention="softmax", size="small"))
    extra = count_parameters(osc) - count_parameters(soft)
    cfg = osc.cfg
    # anchors R and the key gate K only
    assert extra == cfg.blocks * (cfg.d_model + 1) * cfg.heads * (cfg.d_osc + 1)


def test_bad_config():
    with pytest.raises(ValueError):
        ModelConfig(attention="linear")
    with pytest.raises(ValueError):
        build_model(ModelConfig(size="huge"))
