"""Free Spoken Digit Dataset: 8 kHz digits resampled to 1 s, 16 kHz clips, split by leaving speakers out."""
from __future__ import annotations

import re
from pathlib import Path

from ..config import DIGITS
from .audio import cached, fingerprint, load_clips
from .clipset import ClipSet, DataError

NAME = re.compile(r"^(\d)_([A-Za-z0-9-]+)_(\d+)\.wav$")


def _find_root(root) -> Path:
    """The folder of {digit}_{speaker}_{index}.wav files: `root` or its `recordings/` (the repo root)."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"FSDD folder not found: {root}")
    if not any(root.glob("*.wav")) and (root / "recordings").is_dir():
        root = root / "recordings"
    if not any(root.glob("*.wav")):
        raise DataError(f"no FSDD recordings ({{digit}}_{{speaker}}_{{index}}.wav) in {root}")
    return root


VAL_INDICES = 5  # without val speakers: recordings 0-4 of each training speaker (FSDD's own test convention)


def _assign(speakers: list[str], test, val) -> dict[str, str]:
    """Speaker -> split ("train" speakers also give their first recordings to val when no val speaker is named).

    Default: the last sorted speaker is the test speaker, so `--test-speakers X` alone is a
    leave-one-speaker-out fold that trains on every other speaker.
    """
    for name, given in (("test", test), ("val", val)):
        unknown = sorted(set(given or ()) - set(speakers))
        if unknown:
            raise DataError(f"unknown FSDD {name} speakers {unknown}; the folder has {speakers}")
    test = list(test) if test is not None else speakers[-1:]
    rest = [s for s in speakers if s not in test]
    val = list(val or ())
    if set(test) & set(val):
        raise DataError(f"speakers in both test and val: {sorted(set(test) & set(val))}")
    if not [s for s in rest if s not in val]:
        raise DataError(f"no training speaker left: speakers {speakers}, test {test}, val {val}")
    return {s: "test" if s in test else "val" if s in val else "train" for s in speakers}


def load_fsdd(root, *, test_speakers=None, val_speakers=None, cache_dir=None, progress=True) -> ClipSet:
    """Load FSDD as 10 digit classes with speaker-disjoint train/val/test splits."""
    root = _find_root(root)
    files, bad = [], []
    for f in sorted(p for p in root.iterdir() if p.is_file() and not p.name.startswith(".")):
        m = NAME.match(f.name)
        if m:
            files.append((f, int(m.group(1)), m.group(2), int(m.group(3))))
        else:
            bad.append((str(f), "name does not match {digit}_{speaker}_{index}.wav"))
    if not files:
        raise DataError(f"no file in {root} is named {{digit}}_{{speaker}}_{{index}}.wav")
    speakers = sorted({s for _, _, s, _ in files})
    where = _assign(speakers, test_speakers, val_speakers)
    key = f"{root.resolve()}|{sorted(where.items())}|{bool(val_speakers)}|{fingerprint(root)}"
    meta = dict(source="fsdd", root=str(root), speakers=where, val=f"speakers {val_speakers}" if val_speakers
                else f"recordings 0-{VAL_INDICES - 1} of the training speakers")
    split = [where[s] if val_speakers or where[s] != "train" or i >= VAL_INDICES else "val" for _, _, s, i in files]
    build = lambda: load_clips(  # noqa: E731
        [f for f, _, _, _ in files], [d for _, d, _, _ in files], [s for _, _, s, _ in files],
        split, DIGITS, progress=progress, meta=meta, skipped=bad)
    return cached(cache_dir, "fsdd", key, build)
