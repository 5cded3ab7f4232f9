"""Batch augmentation: speed, spectral tilt, time shift, background noise at a random SNR, random gain; SpecAugment
masks."""
from __future__ import annotations

import torch

from ..config import AugmentConfig

FLOOR_POWER = 1e-4  # -40 dBFS: silent clips get noise relative to this, not to zero (which gives none)


def _uniform(lo_hi, n, generator) -> torch.Tensor:
    lo, hi = lo_hi
    return lo + (hi - lo) * torch.rand(n, generator=generator, device=generator.device)


def augment(wave: torch.Tensor, cfg: AugmentConfig, generator: torch.Generator,
            noise: torch.Tensor | None = None, *, sample_rate: int = 16000) -> torch.Tensor:
    """Augment a [B, S] float batch in [-1, 1]; deterministic given the generator's state."""
    if tuple(cfg.speed) != (1.0, 1.0):  # drawn only when on, so other settings' draws stay as they were
        wave = speed_perturb(wave, cfg, generator)
    if cfg.tilt:
        wave = tilt(wave, cfg.tilt, generator)
    b, s = wave.shape
    dev, gdev = wave.device, generator.device
    # Every draw happens for every row, in a fixed order, so results depend only on the seed.
    max_shift = int(round(cfg.time_shift_ms * sample_rate / 1000.0))
    shift = torch.randint(-max_shift, max_shift + 1, (b,), generator=generator, device=gdev).to(dev)
    use_noise = (torch.rand(b, generator=generator, device=gdev) < cfg.noise_prob).to(dev)
    snr_db = _uniform(cfg.snr_db, b, generator).to(dev)
    gain_db = _uniform(cfg.gain_db, b, generator).to(dev)
    if noise is None or noise.numel() == 0:
        seg = torch.randn(b, s, generator=generator, device=gdev).to(dev)
    else:
        bank = noise.to(dev)
        if bank.numel() < s:  # a short bank is tiled so any segment fits
            bank = bank.repeat(s // bank.numel() + 1)
        start = torch.randint(0, bank.numel() - s + 1, (b,), generator=generator, device=gdev).to(dev)
        seg = bank.unfold(0, s, 1)[start]  # windows are views: only the B picked rows are copied
        seg = seg.float() / 32768.0 if not seg.is_floating_point() else seg.float()  # int16 bank

    # out[t] = in[t - shift], zero outside: row b is the window at (max_shift - shift) of a padded copy
    padded = torch.nn.functional.pad(wave, (max_shift, max_shift))
    x = padded.unfold(1, s, 1)[torch.arange(b, device=dev), max_shift - shift]

    p_sig = (torch.einsum("bs,bs->b", x, x) / s).clamp_min(FLOOR_POWER)
    p_noise = (torch.einsum("bs,bs->b", seg, seg) / s).clamp_min(1e-12)
    scale = torch.sqrt(p_sig / (p_noise * 10.0 ** (snr_db / 10.0))) * use_noise
    x = torch.addcmul(x, scale[:, None], seg)  # x is a fresh tensor from here on: in-place is safe
    return x.mul_((10.0 ** (gain_db / 20.0))[:, None]).clamp_(-1.0, 1.0)


def tilt(wave: torch.Tensor, most: float, generator: torch.Generator) -> torch.Tensor:
    """Each [B, S] clip through `filtered` with a uniform in [-most, most]."""
    return filtered(wave, _uniform((-most, most), wave.shape[0], generator).to(wave.device)[:, None])


def filtered(wave: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Each [B, S] clip through y[n] = x[n] - a x[n-1] (a [B, 1]; x[-1] = 0), its RMS kept: a first-order spectral
    tilt, the colour another microphone or vocal tract gives."""
    y = wave - a * torch.nn.functional.pad(wave, (1, 0))[:, :-1]
    rms = lambda x: x.square().mean(1, keepdim=True).sqrt().clamp_min(1e-8)  # noqa: E731
    return y * (rms(wave) / rms(y))


def speed_perturb(wave: torch.Tensor, cfg: AugmentConfig, generator: torch.Generator) -> torch.Tensor:
    """Play each [B, S] clip faster or slower by a random factor about its centre, keeping its length.

    Duration, pitch and formants all scale together, a cheap stand-in for another speaker's vocal
    tract. Linear interpolation: above 1 it aliases what lies over sample_rate / (2 x factor).
    """
    b, s = wave.shape
    factor = _uniform(cfg.speed, b, generator).to(wave.device)
    pos = (torch.arange(s, device=wave.device) - s / 2) * factor[:, None] + s / 2  # [B, S] source positions
    inside = (pos >= 0) & (pos <= s - 1)
    left = pos.floor().clamp(0, s - 2)
    frac = pos - left
    left = left.long()
    x = torch.gather(wave, 1, left) * (1 - frac) + torch.gather(wave, 1, left + 1) * frac
    return x * inside


def spec_augment(feats: torch.Tensor, cfg: AugmentConfig, generator: torch.Generator) -> torch.Tensor:
    """Mask random bands of coefficients and runs of frames in [B, T, C] features (SpecAugment).

    Masked cells take their band's mean over the clip (0 after per-utterance normalisation), so a masked
    band looks like any normalised band and carries no level cue. The band's silence level (its minimum)
    was tried first: a flat stripe at the padding's floor is a cue of its own, and the networks then did
    worse on unmasked clips than on masked ones (docs/notebook.md#specaugment-band-masks-on-the-fsdd-recipe).
    """
    b, t, c = feats.shape
    keep = torch.ones(b, t, c, dtype=torch.bool)
    for count, width, axis, size in ((cfg.freq_masks, cfg.freq_width, 2, c), (cfg.time_masks, cfg.time_width, 1, t)):
        for _ in range(count):
            w = (torch.rand(b, generator=generator) * (width + 1)).long()  # width in 0..width
            start = (torch.rand(b, generator=generator) * (size - w + 1)).long()
            pos = torch.arange(size)
            band = (pos >= start[:, None]) & (pos < (start + w)[:, None])  # [B, size]
            keep &= ~(band[:, None, :] if axis == 2 else band[:, :, None])
    return torch.where(keep.to(feats.device), feats, feats.mean(dim=1, keepdim=True))
