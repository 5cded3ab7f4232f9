from pathlib import Path

import numpy as np
import pytest

from edgeosc.config import DataConfig
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
