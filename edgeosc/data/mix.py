"""Real speech plus every synthetic voice: the speaker variety a few real speakers cannot give.

Measured on FSDD (docs/results.md#levers, the data.synth_mix rows): three training speakers teach the speakers,
not the words. The 93 eSpeak NG voices and 155 voices of 11 recorded speakers (flite, MBROLA, SVOX Pico,
Festival; each at several vocal-tract lengths and pitches, data/recorded.py) saying the same words,
band-limited to the recordings' band so no class is told apart by bandwidth, join the training split only
(validation and test stay real).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..config import DataConfig
from .audio import resample
from .clipset import ClipSet
from .synth import ENGINES, SR, load_synth

SYNTH_TASK = {"fsdd": "digits", "speech-commands": "12"}  # the synthetic task with the real set's classes
RECORDING_RATE = {"fsdd": 8000, "speech-commands": 16000}  # FSDD is recorded at 8 kHz


def band_limit(audio: np.ndarray, rate: int) -> np.ndarray:
    """int16 clips at SR through a `rate` recording chain: down to `rate` and back up (polyphase filters)."""
    if rate >= SR:
        return audio
    x = resample(resample(audio.astype(np.float32), SR, rate), rate, SR)
    return np.clip(np.rint(x), -32768, 32767).astype(np.int16)


def with_synthetic_voices(real: ClipSet, cfg: DataConfig, cache_dir: Path, progress: bool = True) -> ClipSet:
    task, rate = SYNTH_TASK[cfg.dataset], RECORDING_RATE[cfg.dataset]
    audio, labels, groups = [], [], []
    for engine in ENGINES:
        synth = load_synth(cache_dir, seed=cfg.seed, n_voices=cfg.n_voices, renditions=cfg.renditions, task=task,
                           progress=progress, engine=engine)
        if synth.classes != real.classes:
            raise ValueError(f"synthetic classes {synth.classes} differ from the dataset's {real.classes}")
        audio.append(band_limit(synth.audio, rate))
        labels.append(synth.labels)
        groups.append(np.char.add(f"{engine}:", synth.groups.astype(str)))
    n = sum(map(len, labels))
    return real.extended(np.concatenate(audio), np.concatenate(labels), np.concatenate(groups), np.full(n, "train"),
                         synth_mix=dict(clips=n, task=task, engines=list(ENGINES), band_hz=rate // 2))
