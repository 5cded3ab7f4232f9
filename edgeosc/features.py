"""Log-mel / MFCC features in torch (FeatureExtractor), as frontend.py defines them (the CMSIS-DSP definition)."""
from __future__ import annotations

import numpy as np
import torch

from .config import CAUSAL_NORMALIZE, FeatureConfig
from .frontend import ACTIVE_DB, LOG_OFFSET, mfcc_constants, nats


class FeatureExtractor(torch.nn.Module):
    """[B, clip_samples] (or [clip_samples]) float waveform in [-1, 1] -> [B, n_frames, n_coeffs]."""

    def __init__(self, cfg: FeatureConfig):
        super().__init__()
        self.cfg = cfg
        const = mfcc_constants(cfg)
        # Buffers follow .to(device) but are not saved: they are a pure function of cfg.
        self.register_buffer("window", torch.from_numpy(const["window"]), persistent=False)
        self.register_buffer("mel_t", torch.from_numpy(const["mel"].T.copy()), persistent=False)
        self.register_buffer("dct_t", torch.from_numpy(const["dct"].T.copy()), persistent=False)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        """Features of each clip; raises ValueError on a wrong shape/dtype or non-finite samples."""
        cfg = self.cfg
        if not isinstance(wave, torch.Tensor):
            raise ValueError(f"expected a torch.Tensor, got {type(wave).__name__}")
        if wave.ndim not in (1, 2) or wave.shape[-1] != cfg.clip_samples:
            raise ValueError(f"expected [B, {cfg.clip_samples}] or [{cfg.clip_samples}] samples, "
                             f"got shape {tuple(wave.shape)}")
        if not wave.is_floating_point():  # int16 PCM must be scaled by 1/32768 first
            raise ValueError(f"expected float samples in [-1, 1], got dtype {wave.dtype}")
        if not torch.isfinite(wave).all():
            raise ValueError("waveform contains NaN or Inf samples")
        squeeze = wave.ndim == 1
        log_mels = self._log_mels(wave.to(torch.float32).reshape(-1, cfg.clip_samples))
        feats = self._coefficients(log_mels)
        if cfg.floor_db:  # log-mel only: feats are the log-mels
            feats = torch.maximum(feats, feats.amax(dim=(1, 2), keepdim=True) - nats(cfg.floor_db))
        if cfg.normalize == "utterance":
            feats = feats - feats.mean(dim=1, keepdim=True)
        elif cfg.normalize == "active":
            # [B, F, 1]: each frame's loudest log-mel band (floored where the floor is on)
            level = (log_mels if cfg.n_mfcc else feats).amax(dim=2, keepdim=True)
            active = (level >= level.amax(dim=1, keepdim=True) - nats(ACTIVE_DB)).to(feats.dtype)
            feats = feats - (feats * active).sum(1, keepdim=True) / active.sum(1, keepdim=True)
        elif cfg.normalize == "running":
            feats = feats - self._running_mean(feats)
        return feats[0] if squeeze else feats

    def stream(self, wave: torch.Tensor) -> torch.Tensor:
        """A stream's features, as the listener gives a streaming model each new frame: [B, S] samples of any
        length >= one clip -> [B, frames, n_coeffs]; "running": each frame less the mean of the last n_frames frames
        up to it (within the first n_frames, of the frames so far: a clip's "running" features); "none": as they are."""
        cfg = self.cfg
        if cfg.normalize not in CAUSAL_NORMALIZE:
            raise ValueError(f"stream features need normalize {' or '.join(map(repr, CAUSAL_NORMALIZE))} (a stream "
                             f"cannot look ahead), not {cfg.normalize!r}")
        if wave.ndim != 2 or wave.shape[1] < cfg.clip_samples or not wave.is_floating_point():
            raise ValueError(f"expected float samples [B, >= {cfg.clip_samples}], got {tuple(wave.shape)} "
                             f"{wave.dtype}")
        feats = self._coefficients(self._log_mels(wave.to(torch.float32)))
        return feats - self._running_mean(feats, cfg.n_frames) if cfg.normalize == "running" else feats

    def _log_mels(self, x: torch.Tensor) -> torch.Tensor:
        """[B, S] -> [B, F, n_mels] log-mels (what a frame's level is read from, MFCC or not)."""
        frames = x.unfold(-1, self.cfg.frame_length, self.cfg.hop_length) * self.window  # [B, F, N]
        mag = torch.fft.rfft(frames, dim=-1).abs()  # [B, F, N/2+1]
        return torch.log(mag @ self.mel_t + LOG_OFFSET)

    def _coefficients(self, log_mels: torch.Tensor) -> torch.Tensor:
        """The model's coefficients before any normalisation: MFCCs, or the log-mels (the identity DCT skipped)."""
        return log_mels @ self.dct_t if self.cfg.n_mfcc else log_mels

    @staticmethod
    def _running_mean(feats: torch.Tensor, window: int = 0) -> torch.Tensor:
        """Each frame's mean over the frames up to it (the last `window` of them when window > 0)."""
        sums = feats.cumsum(1)
        if 0 < window < feats.shape[1]:
            sums = torch.cat([sums[:, :window], sums[:, window:] - sums[:, :-window]], 1)
        n = torch.arange(1, feats.shape[1] + 1, dtype=feats.dtype, device=feats.device)
        return sums / (n.clamp_max(window) if window else n)[:, None]


def features_numpy(wave: np.ndarray, cfg: FeatureConfig) -> np.ndarray:
    """Convenience wrapper: FeatureExtractor under no_grad on a float numpy array (same checks)."""
    with torch.no_grad():
        return FeatureExtractor(cfg)(torch.from_numpy(np.asarray(wave))).numpy()
