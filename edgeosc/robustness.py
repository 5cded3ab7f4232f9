"""How much of a model's test accuracy survives another channel: the same clips slower or faster, 20 dB quieter, in
white noise (at an SNR, or a quiet floor at a fixed level), or through a first-order filter (another microphone's or
vocal tract's colour). No training: a diagnostic of what an unseen speaker or device may change
(docs/notebook.md#robustness-to-the-channel-and-tilt-augmentation, where it ranked the kinds' sensitivity to spectral
tilt).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from .config import AugmentConfig, FeatureConfig
from .data.augment import filtered, speed_perturb
from .features import FeatureExtractor

SNR_DB, TILT, FLOOR_DBFS = 10.0, 0.9, -50.0


def _speed(factor: float) -> Callable:
    return lambda wave, gen: speed_perturb(wave, AugmentConfig(speed=(factor, factor)), gen)


def _white(wave: torch.Tensor, gen: torch.Generator, level) -> torch.Tensor:
    """wave plus white noise of RMS `level` (a number, or one per clip [B, 1])."""
    return (wave + torch.randn(wave.shape, generator=gen) * level).clamp(-1.0, 1.0)


def _noise(wave: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return _white(wave, gen, wave.square().mean(1, keepdim=True).sqrt() * 10.0 ** (-SNR_DB / 20.0))


# name -> what it does to [B, S] waves in [-1, 1] (a generator for whatever is random)
CONDITIONS: dict[str, Callable] = {
    "recorded": lambda wave, gen: wave,
    "speed 0.9": _speed(0.9),  # 10% slower: pitch and duration together
    "speed 1.1": _speed(1.1),
    "-20 dB": lambda wave, gen: wave * 0.1,
    f"noise {SNR_DB:g} dB": _noise,  # white, SNR against the clip's RMS
    # white, at a fixed level whatever the clip's: a microphone's floor, which also fills padded recordings' zeros
    f"floor {FLOOR_DBFS:g} dBFS": lambda wave, gen: _white(wave, gen, 10.0 ** (FLOOR_DBFS / 20.0)),
    f"tilt {TILT:g}": lambda wave, gen: filtered(wave, torch.full((wave.shape[0], 1), TILT)),  # x[n] - 0.9 x[n-1]
}


@torch.no_grad()
def robustness(model: torch.nn.Module, feature_cfg: FeatureConfig, audio, labels, batch_size: int = 256,
               seed: int = 0) -> dict[str, float]:
    """Accuracy of `model` on int16 clips `audio` [N, S] with `labels` [N] under each of CONDITIONS (the same noise
    every call for a seed)."""
    model.eval()
    extract = FeatureExtractor(feature_cfg)
    labels = torch.as_tensor(labels)
    out = {}
    for name, change in CONDITIONS.items():
        gen, right = torch.Generator().manual_seed(seed), 0
        for i in range(0, len(labels), batch_size):
            wave = torch.as_tensor(audio[i:i + batch_size] / 32768.0, dtype=torch.float32)
            logits = model(extract(change(wave, gen)))
            right += int((logits.argmax(-1) == labels[i:i + batch_size]).sum())
        out[name] = right / max(len(labels), 1)
    return out
