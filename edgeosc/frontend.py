"""Log-mel / MFCC features, defined once, exactly as CMSIS-DSP ``arm_mfcc_f32`` computes them (numpy only:
the streaming listener and the firmware generator import this without torch; features.py runs it in torch).

Per frame (defaults of FeatureConfig in brackets), the firmware can call arm_mfcc_f32 with the
constants from ``mfcc_constants`` and get the same numbers as ``FeatureExtractor``:

- framing: frame_length samples [512 = 32 ms], hop_length [320 = 20 ms]; frames start at sample 0,
  no centering or padding -> 1 + (clip - frame) // hop frames [49 per 1 s clip; 50 frames/s rate].
- window: periodic Hann, w[n] = 0.5 - 0.5 cos(2 pi n / N) (the usual STFT choice; CMSIS's own
  examples use periodic windows too). arm_mfcc_f32 first scales a frame by 1/absmax and the
  magnitudes back by absmax (skipped for an all-zero frame), which is a no-op up to rounding.
- spectrum: real FFT of size frame_length, *magnitude* |X[k]| (not power) of bins 0..N/2 [257].
- mel: n_mels [40] triangular filters, peak 1, no area normalisation, equally spaced on the HTK
  mel scale m = 1127 ln(1 + f / 700) between f_min and f_max [20-7600 Hz]; bin k sits at
  linspace(0, sr/2, N/2+1)[k] and the DC bin is always excluded (cmsisdsp.mfcc.melFilterMatrix).
- log: natural log of (mel energy + 1e-6); the floor ln(1e-6) = -13.8 is hit by digital silence.
- DCT (n_mfcc > 0): D[i, j] = sqrt(2 / n_mels) cos(pi i (j + 0.5) / n_mels), i < n_mfcc, for every
  row including i = 0, so it is DCT-II scaled by sqrt(2/M), NOT orthonormal (row 0 is sqrt(2) too
  big), as cmsisdsp.mfcc.dctMatrix. n_mfcc == 0 gives the log-mel vector (identity DCT).
- floor (floor_db > 0, log-mel only): every log-mel of a clip raised to at least the clip's largest less
  floor_db dB (floor_db ln(10) / 20 in the natural log of magnitudes), so digital silence (the zero padding of
  trimmed recordings) and a quiet noise floor give the same features; before the mean, over the same frames.
- normalize "utterance": subtract each clip's per-coefficient mean over frames (after log / DCT);
  firmware does the same over its buffered window of frames.
- normalize "active": each coefficient's mean over the clip's active frames only, those whose loudest log-mel
  band is within ACTIVE_DB of the clip's loudest log-mel (MFCCs too: the levels are the log-mels' before the DCT).
  Over all frames, a trimmed recording's padding or a pause weighs in, so a channel's spectral tilt is removed
  only in proportion to the clip's speech.
- normalize "running": each frame less the mean of the frames up to it, a causal mean: what a stream can compute
  (over a stream's window, the last frame's mean is the window's).
"""
from __future__ import annotations

import math

import numpy as np

from .config import FeatureConfig

LOG_OFFSET = 1e-6  # arm_mfcc_f32 adds this (float32) before arm_vlog_f32
ACTIVE_DB = 30.0  # normalize "active": the frames within this of the clip's loudest log-mel make the mean


def _hz_to_mel(f):
    return 1127.0 * np.log(1.0 + f / 700.0)


def nats(db: float) -> float:
    """A level difference in dB as one of log-mels (natural log of magnitudes: 20 log10 per dB)."""
    return db * math.log(10) / 20


def mfcc_constants(cfg: FeatureConfig) -> dict:
    """Window, dense and sparse (CMSIS) mel filters and DCT matrix, computed in float64 then float32."""
    n, m = cfg.frame_length, cfg.n_mels
    window = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n) / n)  # periodic Hann
    # Same float64 operations, in the same order, as cmsisdsp.mfcc.melFilterMatrix, so the float32
    # coefficients are bit-identical to what CMSIS tooling would generate.
    edges = np.linspace(_hz_to_mel(cfg.f_min), _hz_to_mel(cfg.f_max), num=m + 2)
    bin_mels = _hz_to_mel(np.linspace(0, cfg.sample_rate / 2.0, n // 2 + 1))[1:]
    up = (bin_mels - edges[:-2, None]) / (edges[1:-1] - edges[:-2])[:, None]
    down = (edges[2:, None] - bin_mels) / (edges[2:] - edges[1:-1])[:, None]
    mel = np.zeros((m, n // 2 + 1))
    mel[:, 1:] = np.maximum(0.0, np.minimum(up, down))
    pos, lengths = [], []
    for i, row in enumerate(mel):
        nz = np.flatnonzero(row)  # a triangle: one contiguous run of non-zeros
        if nz.size == 0:
            raise ValueError(f"mel filter {i} covers no FFT bin; use fewer mels or a longer FFT")
        pos.append(nz[0])
        lengths.append(nz[-1] - nz[0] + 1)
    coefs = np.concatenate([row[p:p + k] for row, p, k in zip(mel, pos, lengths)])
    if cfg.n_mfcc:
        s = (np.linspace(1, m, m) - 0.5) / m
        dct = np.cos(np.arange(cfg.n_mfcc)[:, None] * np.pi * s) * np.sqrt(2.0 / m)
    else:
        dct = np.eye(m)
    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)  # noqa: E731
    return {
        "window": f32(window),
        "mel": f32(mel),
        "filter_pos": np.asarray(pos, dtype=np.uint32),  # uint32_t in arm_mfcc_instance_f32
        "filter_lengths": np.asarray(lengths, dtype=np.uint32),
        "filter_coefs": f32(coefs),
        "dct": f32(dct),
    }
