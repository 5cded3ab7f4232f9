"""ClipSet: every dataset decoded once to 1 s, 16 kHz int16 clips with labels, speaker groups and splits."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..io import atomic_path, write_json

SPLITS = ("train", "val", "test")
CACHE_VERSION = 1


class DataError(ValueError):
    """A dataset problem the user can fix (missing folder, no usable files); the message names it."""


@dataclass
class ClipSet:
    audio: np.ndarray  # [N, clip_samples] int16, 16 kHz
    labels: np.ndarray  # [N] int64 index into classes
    groups: np.ndarray  # [N] str: speaker / voice id (splits never share a group)
    split: np.ndarray  # [N] str in SPLITS
    classes: tuple[str, ...]
    noise: np.ndarray | None = None  # [M] int16 background noise for augmentation, or None
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file, reason) not loaded
    meta: dict = field(default_factory=dict)  # provenance: source, seed, versions

    def __post_init__(self):
        n = len(self.audio)
        if not (len(self.labels) == len(self.groups) == len(self.split) == n):
            raise ValueError("ClipSet arrays differ in length")

    def indices(self, split: str) -> np.ndarray:
        return np.flatnonzero(self.split == split)

    def extended(self, audio, labels, groups, split, **meta) -> "ClipSet":
        """A new set: these clips plus more of the same classes; noise and skipped files kept, `meta` added."""
        return dataclasses.replace(
            self, audio=np.concatenate([self.audio, audio]), labels=np.concatenate([self.labels, labels]),
            groups=np.concatenate([self.groups, groups]), split=np.concatenate([self.split, split]),
            meta=dict(self.meta, **meta))

    def save(self, folder: str | Path) -> None:
        """Write atomically: arrays first, the manifest last, so a manifest means a complete cache."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        arrays = dict(audio=self.audio, labels=self.labels, groups=self.groups.astype(str),
                      split=self.split.astype(str))
        if self.noise is not None:
            arrays["noise"] = self.noise
        with atomic_path(folder / "clips.npz") as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, **arrays)
        write_json(folder / "manifest.json", dict(
            version=CACHE_VERSION, classes=list(self.classes), n=len(self.audio),
            skipped=self.skipped, meta=self.meta))

    @classmethod
    def load(cls, folder: str | Path) -> "ClipSet | None":
        """The cached set, or None if absent, incomplete or of another cache version."""
        folder = Path(folder)
        try:
            man = json.loads((folder / "manifest.json").read_text())
            if man.get("version") != CACHE_VERSION:
                return None
            z = np.load(folder / "clips.npz", allow_pickle=False)
            out = cls(audio=z["audio"], labels=z["labels"], groups=z["groups"], split=z["split"],
                      classes=tuple(man["classes"]), noise=z["noise"] if "noise" in z else None,
                      skipped=[tuple(s) for s in man["skipped"]], meta=man["meta"])
        except (OSError, ValueError, KeyError, json.JSONDecodeError):
            return None
        return out if len(out.audio) == man["n"] else None
