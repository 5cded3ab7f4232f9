"""The recorded voices of data.synth_mix: real speakers' voices, each scaled in vocal-tract length and pitch."""

import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgeosc.config import DIGITS
from edgeosc.data import recorded, synth
from edgeosc.data.clipset import DataError

SR = recorded.SR
ROOT = Path(__file__).resolve().parents[1]


def open_engine(name: str) -> recorded.Engine:
    try:
        return recorded.ENGINES[name]()
    except DataError as e:  # make setup installs them where apt and root are at hand
        pytest.skip(f"{name} voices unavailable: {e}")


def f0(y: np.ndarray) -> float:
    """Median pitch of the voiced 40 ms frames (normalised autocorrelation peak over 0.5 at 60-400 Hz)."""
    loud = np.sqrt(np.mean(y**2))
    pitches = []
    for i in range(0, len(y) - 640, 160):
        s = y[i: i + 640] - y[i: i + 640].mean()
        if np.sqrt(np.mean(s**2)) < 0.3 * loud:
            continue
        ac = np.correlate(s, s, "full")[639:] / np.dot(s, s)
        lag = 40 + int(np.argmax(ac[40:267]))
        if ac[lag] > 0.5:
            pitches.append(SR / lag)
    return float(np.median(pitches))


GRID = np.geomspace(150, 5000, 400)  # a log-frequency axis: scaling the formants shifts a spectrum along it


def envelope(words: list[np.ndarray]) -> np.ndarray:
    """Long-term log spectrum of some words on GRID, smoothed over the harmonics (a third of an octave)."""
    power = sum(np.abs(np.fft.rfft(y, 1 << 15)) ** 2 / np.dot(y, y) for y in words)
    log_power = np.log(np.interp(GRID, np.fft.rfftfreq(1 << 15, 1 / SR), power) + 1e-12)
    window = np.hanning(27)
    return np.convolve(log_power, window / window.sum(), "same")


def formant_scale(low: np.ndarray, high: np.ndarray) -> float:
    """How many times higher high's formants lie: the shift along GRID that best aligns the two envelopes."""
    best = max(range(60), key=lambda s: np.corrcoef(low[60:-60], high[60 + s: len(high) - 60 + s])[0, 1])
    return float((GRID[1] / GRID[0]) ** best)


@pytest.fixture(scope="module", params=sorted(recorded.ENGINES))
def engine(request):
    eng = open_engine(request.param)
    yield eng
    eng.close()


def test_vocal_tract_and_pitch_scale_independently(engine):
    for base in engine.BASES:
        if base not in engine.FIXED_PITCH:
            check_scales(engine, base)


def check_scales(engine, base):
    def say(word, vtl, g):
        return engine.speak(f"{base}/vtl{vtl}/f0{g}", word, synth._rng(0, "same draw"))

    # formants over three words, pitch on "one" (voiced throughout)
    words = ("three", "seven", "eight")
    short, long = (envelope([say(w, vtl, 1.0) for w in words]) for vtl in (0.88, 1.12))
    assert 1.18 < formant_scale(short, long) < 1.38  # x 1.12 / 0.88
    short, long = say("one", 0.88, 1.0), say("one", 1.12, 1.0)
    assert 0.85 < f0(long) / f0(short) < 1.15  # ... at the same pitch
    assert 0.85 < len(long) / len(short) < 1.15  # ... and duration
    assert 1.1 < f0(say("one", 1.0, 1.25)) / f0(say("one", 1.0, 1.0)) < 1.45  # pitch x 1.25 alone


def test_fixed_pitch_voices_ignore_f0_shift(engine):
    for base in engine.BASES:  # what FIXED_PITCH says: flite's rms cannot be set, the others can
        same = np.array_equal(engine.say(base, "one", 1.0, 1.0), engine.say(base, "one", 1.0, 1.25))
        assert same == (base in engine.FIXED_PITCH), base


def test_voice_lists():
    assert all(recorded.parse_voice(v)[2] == 1.0 for v in recorded.VOICES["flite"] if v.startswith("rms/"))
    sizes = {name: len(set(v)) for name, v in recorded.VOICES.items()}
    assert sizes == dict(flite=50, mbrola=60, pico=30, festival=15)
    assert recorded.VOICES["flite"][:4] == ("kal16/vtl0.88/f00.8", "awb/vtl0.88/f00.8", "slt/vtl0.88/f00.8",
                                             "kal16/vtl0.88/f01.0")  # the order the cached flite sets were made in


def test_flite_digit_set_and_cache(tmp_path):
    open_engine("flite").close()
    cs = synth.load_synth(tmp_path, n_voices=6, renditions=1, task="digits", engine="flite", progress=False)
    assert cs.classes == DIGITS and len(cs.audio) == 60 and cs.noise is None
    assert {recorded.parse_voice(g)[0] for g in cs.groups} == set(recorded.Flite.BASES)  # first voices: all
    peaks = np.abs(cs.audio.astype(np.int32)).max(1)
    assert (peaks > 0.09 * 32767).all() and (peaks < 32767).all()  # placed at -20..-1 dBFS, not clipped
    again = synth.load_synth(tmp_path, n_voices=6, renditions=1, task="digits", engine="flite", progress=False)
    assert np.array_equal(again.audio, cs.audio) and (tmp_path / "synth-s0-v6-r1-digits-flite").is_dir()


@pytest.mark.parametrize("name", sorted(recorded.ENGINES))
def test_missing_engine_is_a_data_error(monkeypatch, name):
    monkeypatch.setattr(recorded.shutil, "which", lambda command: None)
    with pytest.raises(DataError, match=f"apt-get install {recorded.ENGINES[name].PACKAGES}"):
        synth.synthesize(n_voices=1, renditions=1, task="digits", engine=name, progress=False)


def test_unknown_engine():
    with pytest.raises(ValueError, match="unknown speech engine"):
        synth.synthesize(engine="sam")


def test_make_setup_installs_every_engine(tmp_path):
    # an engine whose packages make setup forgets would only ever skip its tests here
    database = subprocess.run(["make", "-np", "-f", str(ROOT / "Makefile")], cwd=tmp_path, capture_output=True,
                              text=True).stdout
    tools = [line.split(":=", 1)[1] for line in database.splitlines() if line.startswith(("SYSTOOLS :=", "NONFREE :="))]
    installed = {entry.rsplit(":", 1)[1] for entry in " ".join(tools).split()}
    for cls in recorded.ENGINES.values():
        assert set(cls.PACKAGES.split()) <= installed, cls.__name__
