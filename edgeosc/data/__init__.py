"""Datasets, all decoded to a ClipSet: the embedded synthetic set, Speech Commands, FSDD."""
from __future__ import annotations

import os
from pathlib import Path

from ..config import DataConfig
from .clipset import ClipSet, DataError


def default_cache_dir() -> Path:
    """$EDGEOSC_CACHE, else $XDG_CACHE_HOME/edgeosc, else ~/.cache/edgeosc."""
    if os.environ.get("EDGEOSC_CACHE"):
        return Path(os.environ["EDGEOSC_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "edgeosc"


def load_dataset(cfg: DataConfig, cache_dir: str | Path | None = None, progress: bool = True) -> ClipSet:
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    data = _load(cfg, cache_dir, progress)
    if cfg.synth_mix:
        from .mix import with_synthetic_voices
        data = with_synthetic_voices(data, cfg, cache_dir, progress)
    if cfg.negatives_hours:
        from .negatives import with_training_negatives
        data = with_training_negatives(data, cfg.negatives_hours, cfg.seed, cache_dir, progress)
    elif cfg.hard_negatives_hours:  # mined windows join as _unknown_ (mining.training_data): its classes everywhere
        from .negatives import with_unknown_class
        data = with_unknown_class(data)
    return data


def _load(cfg: DataConfig, cache_dir: Path, progress: bool) -> ClipSet:
    if cfg.dataset == "synth":
        from .synth import load_synth
        return load_synth(cache_dir, seed=cfg.seed, n_voices=cfg.n_voices, renditions=cfg.renditions,
                          progress=progress, task=cfg.task)
    if cfg.dataset == "speech-commands":
        from .speech_commands import load_speech_commands
        return load_speech_commands(cfg.data_dir, task=cfg.task, cache_dir=cache_dir, seed=cfg.seed,
                                    progress=progress)
    from .fsdd import load_fsdd
    return load_fsdd(cfg.data_dir, test_speakers=cfg.test_speakers or None, val_speakers=cfg.val_speakers or None,
                     cache_dir=cache_dir, progress=progress)


__all__ = ["ClipSet", "DataError", "load_dataset", "default_cache_dir"]
