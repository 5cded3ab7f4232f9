from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from edgeosc.config import DataConfig, FeatureConfig, ModelConfig, QuantConfig
from edgeosc.data.clipset import ClipSet

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"


def tone_clipset(n_per_class: int = 12, classes: int = 3, seed: int = 0) -> ClipSet:
    """A tiny learnable set: class c is a 0.4 s tone burst at 400 (c + 1) Hz in noise; speakers split by index."""
    rng = np.random.default_rng(seed)
    t = np.arange(16000) / 16000
    audio, labels, groups, split = [], [], [], []
    for c in range(classes):
        for i in range(n_per_class):
            burst = (t > 0.3) & (t < 0.7)  # not stationary: survives per-clip mean subtraction
            x = 0.3 * burst * np.sin(2 * np.pi * 400 * (c + 1) * t + rng.uniform(0, 6))
            x = x + 0.02 * rng.standard_normal(16000)
            audio.append((x * 32767).astype(np.int16))
            labels.append(c)
            spk = i % 4
            groups.append(f"spk{spk}")
            split.append("test" if spk == 3 else "val" if spk == 2 else "train")
    return ClipSet(np.stack(audio), np.array(labels), np.array(groups), np.array(split),
                   tuple(f"tone{c}" for c in range(classes)), meta=dict(source="tones"))


@pytest.fixture
def tones():
    return tone_clipset()


@pytest.fixture
def data_cfg():
    return DataConfig()


def features(clips):
    wave = torch.as_tensor(clips.audio, dtype=torch.float32) / 32768
    from edgeosc.features import FeatureExtractor
    return FeatureExtractor(FeatureConfig())(wave), torch.as_tensor(clips.labels)


def fit(model, x, y, steps, lr):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="session")
def trained():
    """Oscillator, key-gated oscillator ("gated") and softmax KWS nets trained briefly on tones, then QAT-tuned
    (also as checkpoints, for the exporters); a held-out feature batch."""
    from edgeosc.checkpoint import Checkpoint
    from edgeosc.models.kws import build_model
    from edgeosc.quant import calibrate, float_model, quantize_model
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: threads only contend with whatever else the machine runs
    x, y = features(tone_clipset(n_per_class=12, seed=0))
    held, _ = features(tone_clipset(n_per_class=40, seed=1))  # 120 clips no model has seen
    out = {}
    for kind in ("oscillator", "gated", "softmax"):
        torch.manual_seed(0)
        cfg = ModelConfig(attention="oscillator" if kind == "gated" else kind, key_gate=kind == "gated",
                          n_classes=3, dropout=0.0)
        net = fit(build_model(cfg), x, y, 30, 1e-2)
        qat = quantize_model(net, QuantConfig())
        calibrate(qat, [(x, y)], 1)
        qat = fit(qat, x, y, 5, 1e-3)
        out[kind] = dict(qat=qat, float=float_model(qat),
                         ckpt=Checkpoint.of(qat, FeatureConfig(), [f"tone{c}" for c in range(3)]))
    torch.set_num_threads(threads)
    return out, held
