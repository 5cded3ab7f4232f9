"""Audio that holds no keyword: the negatives of the always-on protocol (stream_eval.py), on which false alarms are
counted per hour as published wake-word evaluations count them, and a second pool for training detectors.

Made here: the synthetic voices reading sentences of other words (none of any task's class words, nor the synthetic
set's _unknown_ words), noise of several colours and mains hum, and music-like passages (notes with harmonics and
decaying envelopes, chords, percussive bursts), in segments of a few seconds at varied levels over a low noise floor
(no digital silence, which no microphone gives). Two pools that share no sentence and no random stream: "eval", the
protocol's, never trained on, and "train" (`data.negatives_hours`: 1 s clips of it join a training split as
_unknown_, the keyword-free audio a detector must learn to ignore).
"""
from __future__ import annotations

import dataclasses
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
# The training pool's sentences: none of the evaluation's, the same rule for words.
TRAINING_SENTENCES = (
    "the bakery at the corner sells warm rolls and cakes",
    "my sister is learning to paint landscapes with watercolours",
    "the hotel lobby was full of tourists with heavy suitcases",
    "a gentle breeze moved the curtains in the small bedroom",
    "they are planning a picnic by the lake next saturday",
    "the farmer harvested the apples before the first frost",
    "this jacket is warm but the sleeves are too long",
    "we listened to the rain drumming against the window",
    "the pharmacy closes early at weekends",
    "her grandfather collects stamps from many countries",
    "the football match was postponed because of the storm",
    "an orange kitten slept in the sun all afternoon",
    "the engineers tested the bridge with heavy trucks",
    "please write your name at the top of the page",
    "the coffee machine in the kitchen makes a strange noise",
    "we drove through the forest to reach the village",
    "the students presented their projects to the class",
    "a flock of geese flew south over the fields",
    "the soup needs more pepper and a little lemon",
    "the elevator is broken so we took the stairs",
    "he wrote a long letter to his old friend",
    "the festival attracts musicians from around the world",
    "the baby laughed when the puppy licked her hand",
    "a thick fog covered the harbour at sunrise",
    "the manager thanked everyone for their hard work",
    "the candles flickered during the family dinner",
    "the path along the cliff is narrow and steep",
    "she keeps her keys in a small blue box",
    "the orchestra rehearsed the symphony twice",
    "the shop assistant wrapped the gift in silver paper",
    "the clouds turned pink as the evening came",
    "our neighbours adopted a very shy rabbit",
    "the pilot announced that we would land shortly",
    "fresh strawberries taste best in early summer",
    "the museum guide told us about ancient pottery",
    "the garage smells of paint and motor oil",
    "he fixed the fence after the heavy wind",
    "the bookshop has a cosy corner with armchairs",
    "the market is crowded every saturday morning",
    "a violin and a piano played a quiet melody",
)
POOLS = {"eval": SENTENCES, "train": TRAINING_SENTENCES}
KINDS = ("speech", "noise", "music")
WEIGHTS = (0.55, 0.2, 0.25)  # share of segments of each kind
SEGMENT_S = (4.0, 20.0)


def forbidden_words() -> set[str]:
    """Words no negative may say: every task's class words (keywords, digits) and the training _unknown_ words."""
    return {w.lower() for w in (*KEYWORDS, *DIGITS, *UNKNOWN_WORDS)}


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def _speech(eng: _Espeak, rng: np.random.Generator, seconds: float, sentences=SENTENCES) -> np.ndarray:
    """One voice reading sentences, with pauses, for about `seconds`."""
    voice = VOICES[int(rng.integers(len(VOICES)))]
    rate, pitch, prange = int(rng.integers(130, 211)), int(rng.integers(20, 81)), int(rng.integers(25, 76))
    parts, n = [], 0
    while n < seconds * SR:
        text = sentences[int(rng.integers(len(sentences)))]
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


def make_negatives(hours: float, seed: int = 0, progress=None, pool: str = "eval") -> np.ndarray:
    """`hours` of keyword-free audio at 16 kHz, float32 in [-1, 1], from `pool` (POOLS); progress(done_s, total_s)
    after each segment."""
    if not hours > 0:
        raise ValueError(f"negatives need hours > 0, got {hours}")
    if pool not in POOLS:
        raise ValueError(f"unknown negatives pool {pool!r}; choose from {sorted(POOLS)}")
    stream = "negatives" if pool == "eval" else f"negatives-{pool}"  # the eval pool's draws as first made
    rng, eng, total = _rng(seed, stream, VERSION), None, int(hours * 3600 * SR)
    parts, n = [], 0
    while n < total:
        kind = KINDS[int(rng.choice(len(KINDS), p=WEIGHTS))]
        seconds = rng.uniform(*SEGMENT_S)
        if kind == "speech":
            eng = eng or _Espeak()
            seg = _speech(eng, rng, seconds, POOLS[pool])
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


def load_negatives(hours: float, seed: int = 0, cache_dir: str | Path | None = None, progress=None,
                   pool: str = "eval") -> np.ndarray:
    """make_negatives, cached as 16-bit PCM in cache_dir/negatives (written atomically) when cache_dir is given."""
    if cache_dir is None:
        return make_negatives(hours, seed, progress, pool)
    name = f"v{VERSION}-{hours:g}h-seed{seed}" + ("" if pool == "eval" else f"-{pool}")
    path = Path(cache_dir) / "negatives" / f"{name}.npy"
    if path.is_file():
        try:
            return np.load(path, allow_pickle=False).astype(np.float32) / 32767
        except (OSError, ValueError):
            path.unlink()  # a damaged cache file: made again below
    pcm = np.round(make_negatives(hours, seed, progress, pool) * 32767).astype(np.int16)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, pcm, allow_pickle=False)
    return pcm.astype(np.float32) / 32767  # as every later call reads it


def load_negatives_shown(hours: float, seed: int, cache_dir, desc: str, show: bool = True,
                         pool: str = "eval") -> np.ndarray:
    """load_negatives with a progress bar (seconds made) named `desc`, unless show is false."""
    from tqdm.auto import tqdm
    with tqdm(total=round(3600 * hours), unit="s", desc=desc, leave=False, disable=not show) as bar:
        return load_negatives(hours, seed, cache_dir, lambda done, total: bar.update(round(done) - bar.n), pool)


def with_unknown_class(data):
    """`data` with an _unknown_ class (no clips of it) if its task has none, e.g. FSDD's ten digits: what keyword-free
    audio trains a detector to say, and what a model trained so has beside the task's classes."""
    from ..config import UNKNOWN
    if UNKNOWN in data.classes:
        return data
    return dataclasses.replace(data, classes=(*data.classes, UNKNOWN))


def with_training_negatives(data, hours: float, seed: int, cache_dir: Path, progress: bool = True):
    """`data` plus `hours` of the training pool cut into 1 s clips labelled _unknown_, in the training split only
    (validation and test keep the dataset's own clips); a task without an _unknown_ class gets one
    (with_unknown_class)."""
    from ..config import UNKNOWN
    data = with_unknown_class(data)
    clip = data.audio.shape[1]
    x = load_negatives_shown(hours, seed, cache_dir, "training negatives", progress, pool="train")
    n = len(x) // clip
    audio = np.round(x[: n * clip].reshape(n, clip) * 32767).astype(np.int16)
    return data.extended(audio, np.full(n, data.classes.index(UNKNOWN)), np.full(n, "negatives"),
                         np.full(n, "train"), negatives=dict(clips=n, hours=hours, seed=seed, pool="train"))
