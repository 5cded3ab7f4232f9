"""Embedded default dataset: Speech-Commands-like keywords spoken by eSpeak NG voices, fully deterministic."""
from __future__ import annotations

import _ctypes
import ctypes
import hashlib
import math
import os
import zlib
from pathlib import Path

import numpy as np
from scipy.signal import resample_poly
from tqdm import tqdm

from ..config import DIGITS, KWS12_CLASSES, SILENCE, UNKNOWN, FeatureConfig
from . import recorded
from .audio import fade_edges, trim_word
from .clipset import ClipSet, DataError

GENERATOR_VERSION = 1  # bump whenever the recipe changes, so stale caches are regenerated
SR, N = FeatureConfig().sample_rate, FeatureConfig().clip_samples
NATIVE_SR = 22050
_UP, _DOWN = SR // math.gcd(SR, NATIVE_SR), NATIVE_SR // math.gcd(SR, NATIVE_SR)  # 160/441
MAX_WORD = int(0.95 * N)  # longest word kept, so every word fits whole with a little room to move
ACCENTS = ("en-us", "en", "en-gb-scotland", "en-gb-x-rp", "en-029", "en-gb-x-gbclan", "en-gb-x-gbcwmd",
           "en-us-nyc")
# The voices/!v variants shipped with eSpeak NG 1.52, minus robot/echo/whisper effects and test files.
VARIANTS = tuple(sorted("""
    adam Alex Alicia Andrea Andy Annie AnxiousAndy announcer antonio aunty belinda benjamin boris caleb croak
    david Denis Diogo ed edward edward2 f1 f2 f3 f4 f5 Gene Gene2 grandma grandpa gustave Henrique Hugo ian iven
    iven2 iven3 iven4 Jacky john kaukovalta klatt klatt2 klatt3 klatt4 klatt5 klatt6 Lee linda m1 m2 m3 m4 m5 m6
    m7 m8 marcelo Marco Mario max michel Michael miguel Mike mike2 Nguyen norbert pablo paul pedro quincy Reed rob
    robert sandro shelby steph steph2 steph3 Storm travis Tweaky victor zac""".split(), key=str.lower))
# Each variant (a timbre) appears once, with the accents taken in turn; then the 8 accents' own default voices.
VOICES = tuple(f"{ACCENTS[i % len(ACCENTS)]}+{v}" for i, v in enumerate(VARIANTS)) + ACCENTS
UNKNOWN_WORDS = ("bed", "bird", "cat", "dog", "eight", "five", "four", "happy", "house", "marvin", "nine", "one",
                 "seven", "sheila", "six", "three", "tree", "two", "wow", "zero", "learn", "follow", "forward",
                 "visual", "backward")
NOISE_SECONDS, BABBLE_SECONDS = 40, 20

_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)
_SYNCHRONOUS, _DONT_EXIT, _POS_CHARACTER, _CHARS_UTF8 = 2, 0x8000, 1, 1
_RATE, _PITCH, _RANGE = 1, 3, 4
_dlclose = getattr(_ctypes, "dlclose", None) or getattr(_ctypes, "FreeLibrary")


class _Espeak:
    """libespeak-ng through ctypes, reloaded before each utterance: it keeps static state (pitch flutter
    phase, gain control) that espeak_ng_SetRandSeed does not reset, so a clip would depend on its history."""

    def __init__(self):
        try:
            import espeakng_loader
            self.path, self.data = espeakng_loader.get_library_path(), espeakng_loader.get_data_path()
        except (ImportError, OSError) as e:
            raise DataError(f"eSpeak NG is unavailable ({e}); install espeakng-loader>=0.2.4") from e
        # libespeak-ng accepts an unknown "+variant" silently, so check the files are there
        missing = [v for v in VARIANTS if not os.path.isfile(os.path.join(self.data, "voices", "!v", v))]
        if missing:
            raise DataError(f"eSpeak NG data at {self.data} lacks {len(missing)} voice variants, e.g. {missing[:3]}")
        self.lib, self.chunks, self.cb = None, [], _CALLBACK(self._collect)
        self._reload()
        self.version = self.lib.espeak_Info(None).decode()
        probe = [self.say("en-us", "probe", 175, 50, 50, 1) for _ in range(2)]  # not Klatt: it has no such state
        if not np.array_equal(*probe):
            raise DataError("libespeak-ng could not be reset (another module holds it loaded); "
                            "synthesis would not be reproducible")

    def _collect(self, wav, n, events):
        if wav and n > 0:
            self.chunks.append(np.ctypeslib.as_array(wav, (n,)).copy())
        return 0  # 0 = continue synthesis

    def _reload(self):
        self.close()
        try:
            lib = ctypes.CDLL(self.path)
        except OSError as e:
            raise DataError(f"cannot load libespeak-ng from {self.path}: {e}") from e
        c = ctypes
        lib.espeak_Initialize.argtypes = [c.c_int, c.c_int, c.c_char_p, c.c_int]
        lib.espeak_Info.argtypes, lib.espeak_Info.restype = [c.c_void_p], c.c_char_p
        lib.espeak_SetSynthCallback.argtypes = [_CALLBACK]
        lib.espeak_SetVoiceByName.argtypes = [c.c_char_p]
        lib.espeak_SetParameter.argtypes = [c.c_int, c.c_int, c.c_int]
        lib.espeak_ng_SetRandSeed.argtypes = [c.c_long]
        lib.espeak_Synth.argtypes = [c.c_char_p, c.c_size_t, c.c_uint, c.c_int, c.c_uint, c.c_uint, c.c_void_p,
                                     c.c_void_p]
        # without DONT_EXIT a missing data folder makes the library call exit() and kill Python
        rate = lib.espeak_Initialize(_SYNCHRONOUS, 0, self.data.encode(), _DONT_EXIT)
        if rate != NATIVE_SR:
            raise DataError(f"espeak_Initialize failed (returned {rate}) with data at {self.data}")
        lib.espeak_SetSynthCallback(self.cb)
        self.lib = lib

    def close(self):
        if self.lib is not None:
            self.lib.espeak_Terminate()
            _dlclose(self.lib._handle)
            self.lib = None

    def say(self, voice: str, text: str, rate: int, pitch: int, prange: int, seed: int) -> np.ndarray:
        """`text` spoken by `voice` as int16 at 22050 Hz, from a freshly loaded engine."""
        self._reload()
        if self.lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise DataError(f"eSpeak NG has no voice {voice!r}")
        for param, value in ((_RATE, rate), (_PITCH, pitch), (_RANGE, prange)):
            self.lib.espeak_SetParameter(param, int(value), 0)
        self.lib.espeak_ng_SetRandSeed(int(seed))
        self.chunks = []
        b = text.encode()
        if self.lib.espeak_Synth(b, len(b) + 1, 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None) != 0:
            raise DataError(f"espeak_Synth failed for {text!r} in voice {voice!r}")
        return np.concatenate(self.chunks) if self.chunks else np.zeros(0, np.int16)

    def speak(self, voice: str, text: str, rng: np.random.Generator) -> np.ndarray:
        return _speech(self, voice, text, rng)


def _rng(seed: int, *keys) -> np.random.Generator:
    """A generator fixed by (seed, keys) alone, so any subset of clips is reproducible on its own."""
    return np.random.default_rng([seed, *(zlib.crc32(str(k).encode()) for k in keys)])


def _speech(eng: _Espeak, voice: str, text: str, rng: np.random.Generator) -> np.ndarray:
    """One rendition at 16 kHz (float), random rate/pitch/range, trimmed of silence, at most MAX_WORD long."""
    rate, pitch, prange = int(rng.integers(120, 221)), int(rng.integers(20, 81)), int(rng.integers(25, 76))
    seed = int(rng.integers(1, 2**31))
    for _ in range(8):
        x = eng.say(voice, text, rate, pitch, prange, seed).astype(np.float32)
        if not np.any(x):
            raise DataError(f"voice {voice!r} produced no audio for {text!r}")
        y = resample_poly(trim_word(x, NATIVE_SR), _UP, _DOWN)
        if len(y) <= MAX_WORD:
            return fade_edges(y, SR)
        rate = min(450, int(rate * len(y) / (0.9 * N)) + 10)  # speak faster rather than cut the word
    raise DataError(f"{text!r} in voice {voice!r} does not fit in {N} samples")


def _clip(word: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The word at a random place in a 1 s clip, peak at -20..-1 dBFS."""
    gain = 10 ** (rng.uniform(-20, -1) / 20) * 32767 / np.abs(word).max()
    out = np.zeros(N, np.float32)
    start = int(rng.integers(0, N - len(word) + 1))
    out[start: start + len(word)] = word * gain
    return np.round(out).astype(np.int16)


def _colored(rng: np.random.Generator, n: int, alpha: float) -> np.ndarray:
    """Unit-RMS noise with power spectrum 1/f**alpha (0 white, 1 pink, 2 brown), flat below 20 Hz."""
    f = np.maximum(np.fft.rfftfreq(n, 1 / SR), 20.0)
    x = np.fft.irfft(np.fft.rfft(rng.standard_normal(n)) / f ** (alpha / 2), n)
    return x / np.sqrt(np.mean(x**2))


def _hum(rng: np.random.Generator, n: int) -> np.ndarray:
    """Unit-RMS mains hum (50 or 60 Hz and harmonics 2, 3, 5) over a little white noise."""
    t, f0 = np.arange(n) / SR, (50, 60)[int(rng.integers(2))]
    x = sum(rng.uniform(0.1, 1) / h * np.sin(2 * np.pi * h * f0 * t + rng.uniform(0, 2 * np.pi)) for h in (1, 2, 3, 5))
    return x / np.sqrt(np.mean(x**2)) + 0.05 * _colored(rng, n, 0)


def _silence(rng: np.random.Generator) -> np.ndarray:
    """A _silence_ clip: digital silence, or white/pink/brown noise or mains hum at -75..-35 dBFS RMS."""
    kind = int(rng.integers(5))
    if kind == 0:
        return np.zeros(N, np.int16)
    if kind == 4:
        x = _hum(rng, N)
    else:
        x = _colored(rng, N, kind - 1)
    return np.round(x * 10 ** (rng.uniform(-75, -35) / 20) * 32767).astype(np.int16)


def _noise_bank(eng: _Espeak, voices: list[str], rng: np.random.Generator) -> np.ndarray:
    """Augmentation noise: 5 s segments of mixed white/pink/brown noise, then babble of overlapping words."""
    parts = []
    for _ in range(NOISE_SECONDS // 5):
        x = sum(w * _colored(rng, 5 * SR, a) for w, a in zip(rng.dirichlet(np.ones(3)), (0, 1, 2)))
        parts.append(x / np.sqrt(np.mean(x**2)))
    babble = np.zeros(BABBLE_SECONDS * SR)
    for _ in range(12 * BABBLE_SECONDS):  # ~5 talkers at once
        voice, word = voices[int(rng.integers(len(voices)))], UNKNOWN_WORDS[int(rng.integers(len(UNKNOWN_WORDS)))]
        y = _speech(eng, voice, word, rng)
        start = int(rng.integers(0, len(babble) - len(y)))
        babble[start: start + len(y)] += y / np.abs(y).max() * 10 ** (rng.uniform(-12, 0) / 20)
    babble = babble / np.sqrt(np.mean(babble**2)) + 0.1 * _colored(rng, len(babble), 1)
    parts.append(babble / np.sqrt(np.mean(babble**2)))
    # -25 dBFS RMS leaves headroom for noise peaks; augmentation rescales to its SNR anyway
    return np.clip(np.round(np.concatenate(parts) * 10 ** (-25 / 20) * 32767), -32768, 32767).astype(np.int16)


# task -> classes: the 12 Speech Commands classes, or the 10 spoken digits (FSDD's classes, to pretrain for it)
TASKS = {"12": KWS12_CLASSES, "digits": DIGITS}


# engine -> its voices; the eSpeak NG set is the embedded default, the recorded speakers' join it in data.synth_mix
ENGINES = {"espeak-ng": VOICES, **recorded.VOICES}


def synthesize(*, seed: int = 0, n_voices: int | None = None, renditions: int = 4, progress: bool = True,
               task: str = "12", engine: str = "espeak-ng") -> ClipSet:
    """The synthetic set of `task`: the first n_voices of the engine's voices, `renditions` clips per voice and
    class. The eSpeak set also holds the augmentation noise."""
    if task not in TASKS:
        raise ValueError(f"unknown synthetic task {task!r}; choose from {sorted(TASKS)}")
    classes = TASKS[task]
    if engine not in ENGINES:
        raise ValueError(f"unknown speech engine {engine!r}; choose from {sorted(ENGINES)}")
    if n_voices is not None and not 1 <= n_voices <= len(ENGINES[engine]):
        raise ValueError(f"n_voices must be in 1..{len(ENGINES[engine])}")
    if renditions < 1:
        raise ValueError("renditions must be >= 1")
    voices = list(ENGINES[engine][:n_voices])
    # voices (not clips) are split, so no voice is heard in two splits; val/test get >= 1 voice each when n >= 3
    n_hold = max(1, round(0.15 * len(voices))) if len(voices) >= 3 else 0
    order = _rng(seed, "split").permutation(len(voices))
    split_of = {voices[i]: "val" if k < n_hold else "test" if k < 2 * n_hold else "train" for k, i in enumerate(order)}
    n = len(voices) * len(classes) * renditions
    audio, labels, groups = np.empty((n, N), np.int16), np.empty(n, np.int64), []
    eng = _Espeak() if engine == "espeak-ng" else recorded.ENGINES[engine]()
    noise = None
    try:
        with tqdm(total=n, disable=not progress, desc=f"{engine} voices", unit="clip") as bar:
            k = 0
            for voice in voices:
                for c, name in enumerate(classes):
                    for r in range(renditions):
                        rng = _rng(seed, voice, name, r)
                        if name == SILENCE:
                            audio[k] = _silence(rng)
                        else:
                            word = UNKNOWN_WORDS[int(rng.integers(len(UNKNOWN_WORDS)))] if name == UNKNOWN else name
                            y = eng.speak(voice, word, rng)
                            if len(y) > MAX_WORD:
                                raise DataError(f"{word!r} in {engine} voice {voice!r} lasts {len(y) / SR:.2f} s, "
                                                f"over {MAX_WORD / SR:.2f} s")
                            audio[k] = _clip(y, rng)
                        labels[k], k = c, k + 1
                        groups.append(voice)
                        bar.update()
            if engine == "espeak-ng":
                noise = _noise_bank(eng, [v for v in voices if split_of[v] == "train"] or voices,
                                    _rng(seed, "noise"))
        version = eng.version
    finally:
        eng.close()
    groups = np.array(groups)
    meta = dict(source=engine, generator=GENERATOR_VERSION, task=task, seed=seed, n_voices=n_voices,
                renditions=renditions, engine_version=version, voices=voices, sample_rate=SR,
                sha256=hashlib.sha256(audio.tobytes()).hexdigest())
    return ClipSet(audio=audio, labels=labels, groups=groups, split=np.array([split_of[g] for g in groups]),
                   classes=tuple(classes), noise=noise, meta=meta)


def load_synth(cache_dir: str | Path, *, seed: int = 0, n_voices: int | None = None, renditions: int = 4,
               progress: bool = True, task: str = "12", engine: str = "espeak-ng") -> ClipSet:
    """The cached synthetic set if complete and made with these settings, else synthesize it and cache it."""
    folder = Path(cache_dir) / (f"synth-s{seed}-v{n_voices}-r{renditions}" + ("" if task == "12" else f"-{task}")
                                + ("" if engine == "espeak-ng" else f"-{engine}"))
    want = dict(generator=GENERATOR_VERSION, seed=seed, n_voices=n_voices, renditions=renditions, task=task,
                source=engine, voices=list(ENGINES.get(engine, ())[:n_voices]))  # an engine may gain voices
    cs = ClipSet.load(folder)
    if (cs is not None and all(cs.meta.get(k, "12" if k == "task" else None) == v for k, v in want.items())
            and cs.meta.get("sha256") == hashlib.sha256(cs.audio.tobytes()).hexdigest()):
        return cs
    cs = synthesize(seed=seed, n_voices=n_voices, renditions=renditions, progress=progress, task=task,
                    engine=engine)
    cs.save(folder)
    return cs
