"""Audio that holds no keyword: the negatives of the always-on protocol (stream_eval.py), on which false alarms are
counted per hour as published wake-word evaluations count them.

Made here and never trained on: the synthetic voices reading sentences of other words (none of any task's class
words, nor the synthetic set's _unknown_ words), noise of several colours and mains hum, and music-like passages
(notes with harmonics and decaying envelopes, chords, percussive bursts), in segments of a few seconds at varied
levels over a low noise floor (no digital silence, which no microphone gives).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from scipy.signal import resample_poly

from ..config import DIGITS, KEYWORDS
from ..io import atomic_path
from .audio import fade_edges, trim_word
from .clipset import DataError
from .synth import _UP, _DOWN, NATIVE_SR, SR, UNKNOWN_WORDS, VOICES, _colored, _Espeak, _hum, _rng

VERSION = 1  # bump whenever the recipe changes: cached recordings are rebuilt
# Sentences written for this protocol. No word of them is a class word of any task, nor a training _unknown_ word
# (tests/test_negatives.py checks): every detection on them is a false alarm.
SENTENCES = (
    "the weather will be cloudy with a chance of rain later this evening",
    "please remember to water the plants before leaving for the airport",
    "she painted the kitchen a pale shade of green last summer",
    "our train was delayed because of heavy snow near the border",
    "the museum opens at ten and closes early during the holidays",
    "could you pass me the salt and the pepper please",
    "he plays the violin in a small orchestra every weekend",
    "the children built a sandcastle near the water",
    "we should book the tickets soon before the prices rise",
    "the library has a quiet room where students can read",
    "a cold wind blew across the empty parking lot",
    "the chef added fresh basil and a little olive oil",
    "my neighbour repairs old bicycles in his garage",
    "the meeting has moved to the third floor conference room",
    "turn the music louder so everyone can hear the singer",
    "the river flows slowly through the valley towards the sea",
    "they watched a documentary about whales and dolphins",
    "the printer is out of paper again",
    "this recipe needs butter sugar flour and a pinch of salt",
    "the bus arrives every twenty minutes during the morning",
    "i think the battery is almost empty",
    "the garden looks beautiful after the spring rain",
    "the doctor asked him to rest for a week",
    "the store sells fresh bread and pastries every morning",
    "the old clock in the hall stopped working years ago",
    "we walked along the beach and collected shells",
    "the teacher explained the lesson with a simple drawing",
    "a small boat sailed past the lighthouse at dawn",
    "the phone rang while she was making coffee",
    "remember that the office will be closed tomorrow",
    "the lights in the stadium were bright and warm",
    "the kitten chased a ball of wool across the carpet",
    "traffic was light because it was a public holiday",
    "the package should arrive sometime later this week",
    "he forgot his umbrella at the restaurant",
    "the mountains were covered with fresh white snow",
    "thank you for calling please hold the line",
    "the radio played an old song about summer",
    "it is getting dark so we should head home",
    "the volume of the television is much too high",
)
KINDS = ("speech", "noise", "music")
WEIGHTS = (0.55, 0.2, 0.25)  # share of segments of each kind
SEGMENT_S = (4.0, 20.0)


def forbidden_words() -> set[str]:
    """Words no negative may say: every task's class words (keywords, digits) and the training _unknown_ words."""
    return {w.lower() for w in (*KEYWORDS, *DIGITS, *UNKNOWN_WORDS)}


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def _speech(eng: _Espeak, rng: np.random.Generator, seconds: float) -> np.ndarray:
    """One voice reading sentences, with pauses, for about `seconds`."""
    voice = VOICES[int(rng.integers(len(VOICES)))]
    rate, pitch, prange = int(rng.integers(130, 211)), int(rng.integers(20, 81)), int(rng.integers(25, 76))
    parts, n = [], 0
    while n < seconds * SR:
        text = SENTENCES[int(rng.integers(len(SENTENCES)))]
        x = eng.say(voice, text, rate, pitch, prange, int(rng.integers(1, 2**31))).astype(np.float32)
        if not np.any(x):
            raise DataError(f"voice {voice!r} produced no audio for {text!r}")
        y = fade_edges(resample_poly(trim_word(x, NATIVE_SR), _UP, _DOWN), SR)
        y *= 10 ** (rng.uniform(-24, -3) / 20) / np.abs(y).max()
        parts += [y, np.zeros(int(rng.uniform(0.2, 1.2) * SR), np.float32)]
        n += len(y) + len(parts[-1])
    return np.concatenate(parts)


def _noise(rng: np.random.Generator, seconds: float) -> np.ndarray:
    n = int(seconds * SR)
    if rng.random() < 0.25:
        x = _hum(rng, n)
    else:
        x = sum(w * _colored(rng, n, a) for w, a in zip(rng.dirichlet(np.ones(3)), (0, 1, 2)))
    return x / np.sqrt(np.mean(x**2)) * 10 ** (rng.uniform(-50, -20) / 20)


def _music(rng: np.random.Generator, seconds: float) -> np.ndarray:
    """Notes of a random scale at a random tempo, each a few harmonics under a decaying envelope, sometimes as
    chords, with percussive noise bursts on some beats."""
    n, beat = int(seconds * SR), int(SR * 60 / rng.uniform(70, 160))
    root, scale = rng.uniform(110, 330), np.array([0, 2, 4, 5, 7, 9, 11, 12])
    out, t = np.zeros(n + 2 * beat), np.arange(2 * beat) / SR  # a note rings for two beats
    for start in range(0, n, beat):
        voices = 1 + int(rng.integers(3))
        for _ in range(voices):
            f = root * 2 ** (scale[int(rng.integers(len(scale)))] / 12 + int(rng.integers(2)))
            env = np.exp(-t * rng.uniform(2, 8))
            note = sum(rng.uniform(0.2, 1) / h * np.sin(2 * np.pi * h * f * t) for h in range(1, 5))
            out[start: start + len(t)] += note * env / voices
        if rng.random() < 0.3:
            burst = _colored(rng, beat // 4, rng.uniform(0, 1)) * np.exp(-np.arange(beat // 4) / (0.02 * SR))
            out[start: start + len(burst)] += 0.5 * burst
    out = out[:n]
    return out / np.abs(out).max() * 10 ** (rng.uniform(-24, -6) / 20)


def make_negatives(hours: float, seed: int = 0, progress=None) -> np.ndarray:
    """`hours` of keyword-free audio at 16 kHz, float32 in [-1, 1]; progress(done_s, total_s) after each segment."""
    if not hours > 0:
        raise ValueError(f"negatives need hours > 0, got {hours}")
    rng, eng, total = _rng(seed, "negatives", VERSION), None, int(hours * 3600 * SR)
    parts, n = [], 0
    while n < total:
        kind = KINDS[int(rng.choice(len(KINDS), p=WEIGHTS))]
        seconds = rng.uniform(*SEGMENT_S)
        if kind == "speech":
            eng = eng or _Espeak()
            seg = _speech(eng, rng, seconds)
        else:
            seg = (_noise if kind == "noise" else _music)(rng, seconds)
        parts.append(seg.astype(np.float32))
        n += len(seg)
        if progress:
            progress(min(n, total) / SR, total / SR)
    if eng is not None:
        eng.close()
    x = np.concatenate(parts)[:total]
    floor = _colored(rng, len(x), 1) * 10 ** (rng.uniform(-70, -55) / 20)  # the room: never digital silence
    return np.clip(x + floor, -1, 1).astype(np.float32)


def load_negatives(hours: float, seed: int = 0, cache_dir: str | Path | None = None, progress=None) -> np.ndarray:
    """make_negatives, cached as 16-bit PCM in cache_dir/negatives (written atomically) when cache_dir is given."""
    if cache_dir is None:
        return make_negatives(hours, seed, progress)
    path = Path(cache_dir) / "negatives" / f"v{VERSION}-{hours:g}h-seed{seed}.npy"
    if path.is_file():
        try:
            return np.load(path, allow_pickle=False).astype(np.float32) / 32767
        except (OSError, ValueError):
            path.unlink()  # a damaged cache file: made again below
    pcm = np.round(make_negatives(hours, seed, progress) * 32767).astype(np.int16)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, pcm, allow_pickle=False)
    return pcm.astype(np.float32) / 32767  # as every later call reads it
