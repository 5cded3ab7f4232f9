"""Voices built from recordings of real speakers, for data.synth_mix, each made into many.

eSpeak NG's voices are formant synthesis: one vocal-tract model with varied settings. These engines speak with
recorded people, so they bring real timbres (docs/results.md#levers):
  flite     CMU Flite (package flite): kal16 (US male, diphones), awb (Scottish male), rms (US male), slt (US
            female), clustergen voices from the CMU ARCTIC recordings
  mbrola    eSpeak NG's phonemes through MBROLA diphones (packages espeak-ng, mbrola, mbrola-us1, -us2, -us3,
            -en1; Debian contrib / non-free): us1 (US female), us2, us3 (US males), en1 (British male)
  pico      SVOX Pico (package libttspico-utils; Debian non-free): en-US and en-GB (two female speakers)
  festival  Festival (packages festival, festvox-kdlpc16k): ked (US male, diphones)
Each voice becomes 15 speakers by scaling its vocal-tract length (all formants) and its pitch independently
(a voice whose pitch cannot be set, only by vocal-tract length). Every engine runs as its own command.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from scipy.io import wavfile

from ..config import FeatureConfig
from .audio import fade_edges, resample, trim_word
from .clipset import DataError

FORMANT_SCALES = (0.88, 0.94, 1.0, 1.06, 1.12)  # vocal-tract length: ~ +-12%, adult to adolescent
PITCH_SCALES = (0.8, 1.0, 1.25)
SR = FeatureConfig().sample_rate  # the clips' rate, to which every engine's output is resampled


def warped(bases: tuple[str, ...], fixed_pitch: tuple[str, ...] = ()) -> tuple[str, ...]:
    """'base/vtl{s}/f0{g}' for every scale pair, base innermost: the first len(bases) voices hold every speaker."""
    return tuple(f"{v}/vtl{s}/f0{g}" for s in FORMANT_SCALES for g in PITCH_SCALES for v in bases
                 if g == 1.0 or v not in fixed_pitch)


def parse_voice(voice: str) -> tuple[str, float, float]:
    """'slt/vtl1.06/f01.25' -> ('slt', 1.06, 1.25)."""
    base, vtl, f0 = voice.split("/")
    return base, float(vtl[3:]), float(f0[2:])


class Engine:
    """One synthesiser: `say` renders a word at a duration and pitch factor, `speak` a warped voice's word."""

    BASES: tuple[str, ...] = ()
    FIXED_PITCH: tuple[str, ...] = ()
    PACKAGES = ""  # what to apt-get install
    version = "unknown"

    def __init__(self, *commands: str):
        self.exe = {}
        for c in commands:
            if (path := shutil.which(c)) is None:
                raise DataError(f"{c} is not installed; data.synth_mix also uses the {type(self).__name__.lower()} "
                                f"voices (apt-get install {self.PACKAGES}, or run make setup)")
            self.exe[c] = path
        self._tmp = tempfile.TemporaryDirectory(prefix="edgeosc-voices-")
        self.out = Path(self._tmp.name) / "word.wav"

    def run(self, *args: str, stdin: str | None = None) -> str:
        try:
            return subprocess.run([self.exe.get(args[0], args[0]), *args[1:]], input=stdin, capture_output=True,
                                  text=True, check=True, timeout=60).stdout
        except (subprocess.SubprocessError, OSError) as e:
            raise DataError(f"{' '.join(args)} failed: {e}") from e

    def read(self, base: str, text: str) -> np.ndarray:
        """The word just written to self.out, as float at SR (int16 range)."""
        rate, x = wavfile.read(self.out)
        if x.dtype != np.int16 or not np.any(x):
            raise DataError(f"{type(self).__name__} voice {base!r} gave silent or {x.dtype} audio for {text!r}")
        return resample(x.astype(np.float32), rate, SR)

    def say(self, base: str, text: str, duration: float, pitch: float) -> np.ndarray:
        raise NotImplementedError

    def speak(self, voice: str, text: str, rng: np.random.Generator) -> np.ndarray:
        """`text` in `voice` at a random speaking rate (0.85-1.2x the voice's), trimmed of silence, at 16 kHz."""
        base, vtl, f0 = parse_voice(voice)
        duration = rng.uniform(0.85, 1.2)
        # Played vtl times faster, a recording has formants and pitch times vtl and duration over vtl:
        # synthesised vtl times longer and at pitch f0 / vtl beforehand, only the formants move.
        x = self.say(base, text, duration * vtl, f0 / vtl)
        return fade_edges(resample(trim_word(x, SR), round(100 * vtl), 100), SR)  # rate 100 vtl read as 100

    def close(self):
        self._tmp.cleanup()


class Flite(Engine):
    BASES = ("kal16", "awb", "rms", "slt")
    FIXED_PITCH = ("rms",)  # its pitch model (spamf0) ignores f0_shift, so its pitch moves with its vocal tract
    PACKAGES = "flite"

    def __init__(self):
        super().__init__("flite")
        listed = self.run("flite", "-lv").split()
        if missing := [v for v in self.BASES if v not in listed]:
            raise DataError(f"{self.exe['flite']} lacks the voices {missing} (it lists {listed[2:]})")
        about = subprocess.run([self.exe["flite"], "--version"], capture_output=True, text=True).stdout  # exits 1
        self.version = next((line.split("version:")[1].strip() for line in about.splitlines() if "version:" in line),
                            "unknown")

    def say(self, base, text, duration, pitch):
        self.run("flite", "-voice", base, "--setf", f"duration_stretch={duration:.4f}", "--setf",
                 f"f0_shift={pitch:.4f}", "-t", text, "-o", str(self.out))
        return self.read(base, text)


class Mbrola(Engine):
    BASES = ("us1", "us2", "us3", "en1")
    PACKAGES = "espeak-ng mbrola " + " ".join(f"mbrola-{v}" for v in BASES)
    DATABASES = Path("/usr/share/mbrola")

    def __init__(self):
        super().__init__("espeak-ng", "mbrola")
        if missing := [v for v in self.BASES if not (self.DATABASES / v / v).is_file()]:
            raise DataError(f"no MBROLA databases {missing} in {self.DATABASES} "
                            f"(apt-get install {' '.join('mbrola-' + v for v in missing)})")
        self.version = self.run("espeak-ng", "--version").split(":")[1].split()[0] + " + mbrola"

    def say(self, base, text, duration, pitch):
        # eSpeak NG's phonemes and prosody for this database, then MBROLA scales every duration and pitch point
        pho = self.run("espeak-ng", "-v", f"mb-{base}", "-q", "--pho", text)
        self.run("mbrola", "-e", "-t", f"{duration:.4f}", "-f", f"{pitch:.4f}", str(self.DATABASES / base / base),
                 "-", str(self.out), stdin=pho)
        return self.read(base, text)


class Pico(Engine):
    BASES = ("en-US", "en-GB")
    PACKAGES = "libttspico-utils"

    def __init__(self):
        super().__init__("pico2wave")

    def say(self, base, text, duration, pitch):
        markup = f'<speed level="{round(100 / duration)}"><pitch level="{round(100 * pitch)}">{text}</pitch></speed>'
        self.run("pico2wave", "-l", base, "-w", str(self.out), markup)
        return self.read(base, text)


class Festival(Engine):
    BASES = ("ked",)
    PACKAGES = "festival festvox-kdlpc16k"
    F0 = dict(ked=(105, 15))  # the voice's own intonation target, mean and sd in Hz (festvox ked_diphone.scm)

    def __init__(self):
        super().__init__("text2wave")
        if shutil.which("festival"):
            self.version = self.run("festival", "--version").strip()

    def say(self, base, text, duration, pitch):
        mean, sd = self.F0[base]
        intonation = (f"(set! int_lr_params '((target_f0_mean {mean * pitch:.2f}) (target_f0_std {sd * pitch:.2f}) "
                      "(model_f0_mean 170) (model_f0_std 34)))")
        self.run("text2wave", "-eval", f"(voice_{base}_diphone)", "-eval",
                 f"(Parameter.set 'Duration_Stretch {duration:.4f})", "-eval", intonation, "-o", str(self.out),
                 stdin=text)
        return self.read(base, text)


ENGINES = {cls.__name__.lower(): cls for cls in (Flite, Mbrola, Pico, Festival)}
VOICES = {name: warped(cls.BASES, cls.FIXED_PITCH) for name, cls in ENGINES.items()}
