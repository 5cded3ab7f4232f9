"""Google Speech Commands (v0.01 / v0.02): the 12-class KWS task or every word as its own class."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..config import KEYWORDS, KWS12_CLASSES, SILENCE, UNKNOWN
from .audio import AudioError, cached, fingerprint, load_clips, read_wav, resample
from .clipset import SPLITS, ClipSet, DataError

log = logging.getLogger("edgeosc.data")
V1_WORDS = ("bed", "bird", "cat", "dog", "down", "eight", "five", "four", "go", "happy", "house",
            "left", "marvin", "nine", "no", "off", "on", "one", "right", "seven", "sheila", "six",
            "stop", "three", "tree", "two", "up", "wow", "yes", "zero")
V2_EXTRA = ("backward", "follow", "forward", "learn", "visual")
BACKGROUND = "_background_noise_"
CLIP = 16000
ZERO_FRACTION = 0.1  # share of silence clips that are digital zeros (a muted or gated microphone)


def _words(folder: Path) -> list[str]:
    return sorted(d.name for d in folder.iterdir() if d.is_dir() and d.name in V1_WORDS + V2_EXTRA)


def _find_root(root) -> tuple[Path, list[str]]:
    """The folder holding the word folders: `root` itself or its only child that holds them."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"Speech Commands folder not found: {root}")
    if words := _words(root):
        return root, words
    inner = [d for d in sorted(root.iterdir()) if d.is_dir() and _words(d)]
    if len(inner) == 1:
        return inner[0], _words(inner[0])
    raise DataError(f"no Speech Commands word folders (yes/, no/, ...) in {root}"
                    + (f"; several candidates: {[d.name for d in inner]}" if inner else ""))


def _read_list(root: Path, name: str) -> list[str]:
    path = root / name
    if not path.is_file():
        raise DataError(f"missing split list {path} (part of every official Speech Commands archive)")
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]


def _background(root: Path) -> tuple[list[np.ndarray], list[tuple[str, str]]]:
    """Each _background_noise_ recording as float32 at 16 kHz, plus the files that failed."""
    tracks, bad = [], []
    for f in sorted((root / BACKGROUND).glob("*.wav")):
        try:
            x, sr = read_wav(f)
            if len(x := resample(x, sr, 16000)) >= CLIP:
                tracks.append(x)
            else:
                bad.append((str(f), "shorter than 1 s"))
        except AudioError as e:
            bad.append((e.file, e.reason))
    return tracks, bad


def _silence(n: int, tracks: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """n silence clips: random 1 s background crops at random gain, or quiet white noise; some zeros."""
    out = np.zeros((n, CLIP), np.float32)
    for i in range(n):
        if rng.random() < ZERO_FRACTION:
            continue
        if tracks:  # gain log-uniform in [-40, 0] dB: mostly quiet rooms, sometimes the full recording
            t = tracks[rng.integers(len(tracks))]
            start = rng.integers(len(t) - CLIP + 1)
            out[i] = t[start:start + CLIP] * 10.0 ** (rng.uniform(-40.0, 0.0) / 20.0)
        else:  # no background folder (e.g. a sample): white noise at -70..-40 dBFS RMS
            out[i] = rng.standard_normal(CLIP) * 10.0 ** (rng.uniform(-70.0, -40.0) / 20.0)
    return np.clip(np.rint(out * 32768.0), -32768, 32767).astype(np.int16)


def load_speech_commands(root, *, task="12", cache_dir=None, seed=0, progress=True) -> ClipSet:
    """Load Speech Commands for task "12" (keywords + unknown + silence) or "all" (one class per word)."""
    task = str(task)
    if task not in ("12", "all"):
        raise ValueError(f"task must be '12' or 'all', not {task!r}")
    root, words = _find_root(root)
    build = lambda: _build(root, words, task, seed, progress)  # noqa: E731
    return cached(cache_dir, "speech-commands", f"{root.resolve()}|{task}|{seed}|{fingerprint(root)}", build)


def _build(root: Path, words: list[str], task: str, seed: int, progress: bool) -> ClipSet:
    version = "v0.02" if set(words) & set(V2_EXTRA) else "v0.01"
    vocab = V1_WORDS + V2_EXTRA if version == "v0.02" else V1_WORDS
    rel = [f"{w}/{f.name}" for w in words for f in sorted((root / w).glob("*.wav"))]
    if not rel:
        raise DataError(f"no .wav files in the word folders of {root}")
    split = dict.fromkeys(rel, "train")
    lists = {}
    for name, tag in (("validation_list.txt", "val"), ("testing_list.txt", "test")):
        entries = _read_list(root, name)
        present = [e for e in entries if e in split]
        split.update(dict.fromkeys(present, tag))  # absent entries: a partial download, not an error
        lists[tag] = dict(listed=len(entries), present=len(present), absent=len(entries) - len(present))
    speaker = {r: Path(r).name.split("_nohash_")[0] for r in rel}
    seen: dict[str, set] = {}
    for r in rel:
        seen.setdefault(speaker[r], set()).add(split[r])
    overlap = sorted(s for s, tags in seen.items() if len(tags) > 1)
    if overlap:  # the official lists are speaker-hash based; warn rather than refuse the user's data
        log.warning("%d speakers appear in more than one split (e.g. %s)", len(overlap), overlap[:3])

    rng = np.random.default_rng(seed)
    if task == "all":
        classes = tuple(sorted(vocab))
        chosen = rel
    else:
        classes = KWS12_CLASSES
        chosen, n_sil = [], {}
        for tag in SPLITS:  # unknown ~ one average keyword class per split, sampled with the seed
            kw = [r for r in rel if split[r] == tag and r.split("/")[0] in KEYWORDS]
            unk = [r for r in rel if split[r] == tag and r.split("/")[0] not in KEYWORDS]
            n_sil[tag] = round(len(kw) / len(KEYWORDS))
            pick = rng.permutation(len(unk))[:n_sil[tag]]
            chosen += kw + [unk[i] for i in sorted(pick)]
    word = [r.split("/")[0] for r in chosen]
    labels = [classes.index(w) if w in classes else classes.index(UNKNOWN) for w in word]
    tracks, bad = _background(root)
    noise = np.clip(np.rint(np.concatenate(tracks) * 32768.0), -32768, 32767).astype(np.int16) \
        if tracks else None
    meta = dict(source="speech_commands", version=version, task=task, seed=seed, root=str(root),
                lists=lists, speakers=len(seen), speaker_overlap=overlap[:20],
                silence=("background" if tracks else "synthetic") if task == "12" else None)
    cs = load_clips([root / r for r in chosen], labels, [speaker[r] for r in chosen],
                    [split[r] for r in chosen], classes, progress=progress, noise=noise, meta=meta,
                    skipped=bad)
    if task == "12":
        sil = [_silence(n_sil[tag], tracks, rng) for tag in SPLITS]
        tags = np.concatenate([np.full(len(s), tag) for s, tag in zip(sil, SPLITS)])
        cs = cs.extended(np.concatenate(sil), np.full(len(tags), classes.index(SILENCE)),
                         np.char.add(f"{SILENCE}:", tags), tags)
    return cs
