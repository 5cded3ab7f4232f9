"""WAV decoding to fixed 1 s, 16 kHz int16 clips; bad files are skipped with a reason, never fatal."""
from __future__ import annotations

import hashlib
import logging
import os
import warnings
from math import gcd
from pathlib import Path

import numpy as np
from scipy.io import wavfile
from scipy.signal import resample_poly
from tqdm import tqdm

from ..io import atomic_path
from .clipset import ClipSet, DataError

log = logging.getLogger("edgeosc.data")
MIN_MS = 50.0  # shorter than this is no utterance (a click, an aborted recording)


def trim_word(x: np.ndarray, rate: int) -> np.ndarray:
    """The word's extent (samples above -40 dB re peak) and 10 ms either side, so onsets and releases stay."""
    loud = np.flatnonzero(np.abs(x) > 0.01 * np.abs(x).max())
    pad = rate // 100
    return x[max(loud[0] - pad, 0): loud[-1] + pad]


def fade_edges(y: np.ndarray, rate: int) -> np.ndarray:
    """5 ms fades in place, within trim_word's pad: no click at the cut."""
    fade = np.sin(np.linspace(0, np.pi / 2, rate // 200)) ** 2
    y[: len(fade)] *= fade
    y[-len(fade):] *= fade[::-1]
    return y


class AudioError(ValueError):
    """A WAV file that cannot become a clip; carries the file and the reason."""

    def __init__(self, file, reason: str):
        self.file, self.reason = str(file), reason
        super().__init__(f"{file}: {reason}")


def _truncation(path: Path) -> str | None:
    """Reason if the data chunk claims more bytes than the file holds (scipy only warns about it)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(12)
        if head[:4] not in (b"RIFF", b"RIFX") or head[8:12] != b"WAVE":
            return None  # RF64 and friends: leave the verdict to scipy
        order = "little" if head[:4] == b"RIFF" else "big"
        while len(hdr := f.read(8)) == 8:
            n = int.from_bytes(hdr[4:], order)
            if hdr[:4] == b"data":
                have = size - f.tell()
                return f"truncated: data chunk declares {n} bytes, file holds {have}" if n > have else None
            f.seek(n + (n & 1), os.SEEK_CUR)  # chunks are word aligned
    return "no data chunk"


def read_wav(path) -> tuple[np.ndarray, int]:
    """Decode a PCM (8/16/24/32-bit) or float WAV to float32 mono in [-1, 1] and its sample rate."""
    path = Path(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", wavfile.WavFileWarning)  # truncation is decided below
            sr, x = wavfile.read(path)
        reason = _truncation(path)
    except Exception as e:  # scipy raises ValueError, struct.error, EOFError... for bad headers
        raise AudioError(path, f"unreadable: {type(e).__name__}: {e}") from None
    if reason:
        raise AudioError(path, reason)
    if x.dtype == np.uint8:
        x = (x.astype(np.float32) - 128.0) / 128.0
    elif x.dtype.kind == "i":  # 24-bit arrives left-justified in int32, so the int32 scale fits it
        x = x.astype(np.float32) / float(2 ** (8 * x.dtype.itemsize - 1))
    elif x.dtype.kind == "f":
        x = x.astype(np.float32)
    else:
        raise AudioError(path, f"unsupported sample type {x.dtype}")
    if x.ndim == 2:
        x = x.mean(axis=1)
    if x.size == 0:
        raise AudioError(path, "no samples")
    if not np.isfinite(x).all():
        raise AudioError(path, "non-finite samples (NaN or inf)")
    return x, int(sr)


def write_wav(path, x: np.ndarray, rate: int) -> None:
    """float samples in [-1, 1] as a 16-bit mono WAV, written atomically."""
    with atomic_path(path) as tmp:
        wavfile.write(tmp, rate, (np.clip(x, -1, 1) * 32767).round().astype(np.int16))


def resample(x: np.ndarray, sr: int, rate: int) -> np.ndarray:
    """Exact rational polyphase resampling from sr to rate, along the last axis (one clip or a batch)."""
    if sr == rate:
        return x
    g = gcd(int(sr), int(rate))
    return resample_poly(x, rate // g, sr // g, axis=-1).astype(np.float32)


def to_clip(x: np.ndarray, sr: int, *, samples: int = 16000, rate: int = 16000, file="<array>",
            min_ms: float = MIN_MS) -> np.ndarray:
    """Resample to `rate`, centre-pad short clips with zeros, keep the loudest window of long ones; int16."""
    if x.size * 1000.0 / sr < min_ms:
        raise AudioError(file, f"too short: {x.size * 1000.0 / sr:.1f} ms < {min_ms:g} ms")
    x = resample(np.asarray(x, np.float32), sr, rate)
    if x.size < samples:
        left = (samples - x.size) // 2
        x = np.pad(x, (left, samples - x.size - left))
    elif x.size > samples:
        # Keep the window with the most energy: a long recording's word need not be centred or first.
        c = np.concatenate([[0.0], np.cumsum(x.astype(np.float64) ** 2)])
        start = int(np.argmax(c[samples:] - c[:-samples]))
        x = x[start:start + samples]
    return np.clip(np.rint(x * 32768.0), -32768, 32767).astype(np.int16)


def load_clips(files, labels, groups, splits, classes, *, progress=True, noise=None, meta=None,
               skipped=()) -> ClipSet:
    """Decode files into a ClipSet; bad files land in `skipped` (after any given) and a summary is logged."""
    files = [Path(f) for f in files]
    skipped, keep, clips = list(skipped), [], []
    total = len(files) + len(skipped)  # earlier-skipped entries (e.g. misnamed files) count too
    for i, f in enumerate(tqdm(files, desc="decoding", unit="file", disable=not progress, leave=False)):
        try:
            x, sr = read_wav(f)
            clips.append(to_clip(x, sr, file=f))
            keep.append(i)
        except AudioError as e:
            skipped.append((e.file, e.reason))
    if skipped:
        first = "; ".join(f"{Path(f).name} ({r})" for f, r in skipped[:3])
        log.warning("skipped %d of %d files: %s%s", len(skipped), total, first,
                    " ..." if len(skipped) > 3 else "")
    if not clips:
        where = os.path.commonpath([str(f.parent) for f in files]) if files else "<no files>"
        raise DataError(f"no usable audio in {where} ({len(skipped)} files skipped)")
    keep = np.asarray(keep, np.int64)
    return ClipSet(audio=np.stack(clips), labels=np.asarray(labels, np.int64)[keep],
                   groups=np.asarray(groups, str)[keep], split=np.asarray(splits, str)[keep],
                   classes=tuple(classes), noise=noise, skipped=skipped, meta=dict(meta or {}))


def fingerprint(folder: Path) -> str:
    """Names, sizes and mtimes of the WAVs under `folder`, so a changed download invalidates its cache."""
    h = hashlib.sha1()
    for f in sorted(Path(folder).rglob("*.wav")):
        st = f.stat()
        h.update(f"{f.relative_to(folder)}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def cached(cache_dir, prefix: str, key: str, build) -> ClipSet:
    """Return the ClipSet cached under cache_dir/<prefix>-<hash of key>, building and saving it if absent."""
    if cache_dir is None:
        return build()
    folder = Path(cache_dir) / f"{prefix}-{hashlib.sha1(key.encode()).hexdigest()[:16]}"
    if (hit := ClipSet.load(folder)) is not None:
        log.info("loaded cached clips from %s", folder)
        return hit
    out = build()
    out.save(folder)
    return out
