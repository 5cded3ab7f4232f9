"""CMU Flite voices for data.synth_mix: voices built from recordings of real speakers, each made into many.

eSpeak NG's voices are formant synthesis: one vocal tract model with varied settings. Flite's are built
from recorded people (kal16: a US male, diphones; awb: a Scottish male, rms: a US male, slt: a US female,
clustergen voices from the CMU ARCTIC recordings), so they bring real timbres. Each becomes 15 speakers by
scaling its vocal-tract length (all formants) and its pitch independently (rms only by vocal-tract length): 50
voices (docs/ablations.md section 20).
Flite is the `flite` command (Debian/Ubuntu package flite, which make setup installs).
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

BASE_VOICES = ("kal16", "awb", "rms", "slt")
FORMANT_SCALES = (0.88, 0.94, 1.0, 1.06, 1.12)  # vocal-tract length: ~ +-12%, adult to adolescent
PITCH_SCALES = (0.8, 1.0, 1.25)
FIXED_PITCH = ("rms",)  # its pitch model (spamf0) ignores f0_shift, so its pitch moves with its vocal tract
# base voice innermost: the first 6 voices (DataConfig.n_voices) already hold every recorded speaker
VOICES = tuple(f"{v}/vtl{s}/f0{g}" for s in FORMANT_SCALES for g in PITCH_SCALES for v in BASE_VOICES
               if g == 1.0 or v not in FIXED_PITCH)
SR = FeatureConfig().sample_rate  # flite's 16 kHz voices, the clips' rate


def parse_voice(voice: str) -> tuple[str, float, float]:
    """'slt/vtl1.06/f01.25' -> ('slt', 1.06, 1.25)."""
    base, vtl, f0 = voice.split("/")
    return base, float(vtl[3:]), float(f0[2:])


class Flite:
    """The flite command; `speak` returns one rendition of a word at 16 kHz (float, unscaled int16 range)."""

    version: str

    def __init__(self):
        self.exe = shutil.which("flite")
        if self.exe is None:
            raise DataError("flite is not installed; data.synth_mix also uses its voices "
                            "(apt-get install flite, or run make setup)")
        listed = self._run("-lv").split()
        missing = [v for v in BASE_VOICES if v not in listed]
        if missing:
            raise DataError(f"{self.exe} lacks the voices {missing} (it lists {listed[2:]})")
        about = subprocess.run([self.exe, "--version"], capture_output=True, text=True).stdout  # exits 1
        self.version = next((line.split("version:")[1].strip() for line in about.splitlines() if "version:" in line),
                            "unknown")
        self._tmp = tempfile.TemporaryDirectory(prefix="edgeosc-flite-")

    def _run(self, *args: str) -> str:
        try:
            return subprocess.run([self.exe, *args], capture_output=True, text=True, check=True, timeout=60).stdout
        except (subprocess.SubprocessError, OSError) as e:
            raise DataError(f"{self.exe} {' '.join(args)} failed: {e}") from e

    def say(self, base: str, text: str, duration: float, pitch: float) -> np.ndarray:
        out = Path(self._tmp.name) / "word.wav"
        self._run("-voice", base, "--setf", f"duration_stretch={duration:.4f}", "--setf", f"f0_shift={pitch:.4f}",
                  "-t", text, "-o", str(out))
        rate, x = wavfile.read(out)
        if rate != SR or x.dtype != np.int16 or not np.any(x):
            raise DataError(f"flite voice {base!r} gave {x.dtype} audio at {rate} Hz for {text!r}; expected "
                            f"non-silent int16 at {SR} Hz")
        return x.astype(np.float32)

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
