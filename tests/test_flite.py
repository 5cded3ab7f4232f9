"""The flite voices of data.synth_mix: recorded speakers, each scaled in vocal-tract length and pitch."""
import shutil

import numpy as np
import pytest

from edgeosc.config import DIGITS
from edgeosc.data import flite, synth
from edgeosc.data.clipset import DataError

pytestmark = pytest.mark.skipif(shutil.which("flite") is None, reason="flite is not installed (make setup installs it)")
SR = flite.SR


def f0(y: np.ndarray) -> float:
    """Pitch of the loudest 50 ms (autocorrelation, 60-400 Hz, preferring the longer of two octave candidates)."""
    i = int(np.argmax(np.convolve(y**2, np.ones(800), "same")))
    s = y[i - 400: i + 400] - y[i - 400: i + 400].mean()
    ac = np.correlate(s, s, "full")[len(s) - 1:]
    lag = 40 + int(np.argmax(ac[40:267]))
    if 2 * lag < 267 and ac[2 * lag] > 0.8 * ac[lag]:
        lag *= 2
    return SR / lag


def centroid(y: np.ndarray) -> float:
    """Spectral centroid below 4 kHz: it moves with the formants."""
    power, freq = np.abs(np.fft.rfft(y, 1 << 15)) ** 2, np.fft.rfftfreq(1 << 15, 1 / SR)
    keep = freq < 4000
    return float((power[keep] * freq[keep]).sum() / power[keep].sum())


@pytest.fixture(scope="module")
def engine():
    eng = flite.Flite()
    yield eng
    eng.close()


@pytest.mark.parametrize("base", ["kal16", "awb", "slt"])
def test_vocal_tract_and_pitch_scale_independently(engine, base):
    say = {(vtl, g): engine.speak(f"{base}/vtl{vtl}/f0{g}", "three", synth._rng(0, "same draw"))
           for vtl, g in [(0.88, 1.0), (1.12, 1.0), (1.0, 1.0), (1.0, 1.25)]}
    short, long = say[0.88, 1.0], say[1.12, 1.0]
    assert 1.1 < centroid(long) / centroid(short) < 1.45  # formants x 1.12 / 0.88 = 1.27
    assert 0.85 < f0(long) / f0(short) < 1.15  # ... at the same pitch
    assert 0.85 < len(long) / len(short) < 1.15  # ... and duration
    assert 1.1 < f0(say[1.0, 1.25]) / f0(say[1.0, 1.0]) < 1.45  # pitch x 1.25 alone


def test_fixed_pitch_voices_ignore_f0_shift(engine):
    for base in flite.BASE_VOICES:  # what FIXED_PITCH says: rms's pitch cannot be set, the others' can
        same = np.array_equal(engine.say(base, "one", 1.0, 1.0), engine.say(base, "one", 1.0, 1.25))
        assert same == (base in flite.FIXED_PITCH), base
    assert all(flite.parse_voice(v)[2] == 1.0 for v in flite.VOICES if v.startswith("rms/"))
    assert len(set(flite.VOICES)) == len(flite.VOICES) == 50


def test_flite_digit_set_and_cache(tmp_path):
    cs = synth.load_synth(tmp_path, n_voices=6, renditions=1, task="digits", engine="flite", progress=False)
    assert cs.classes == DIGITS and len(cs.audio) == 60 and cs.noise is None
    assert {flite.parse_voice(g)[0] for g in cs.groups} == set(flite.BASE_VOICES)  # first voices: every speaker
    peaks = np.abs(cs.audio.astype(np.int32)).max(1)
    assert (peaks > 0.09 * 32767).all() and (peaks < 32767).all()  # placed at -20..-1 dBFS, not clipped
    again = synth.load_synth(tmp_path, n_voices=6, renditions=1, task="digits", engine="flite", progress=False)
    assert np.array_equal(again.audio, cs.audio) and (tmp_path / "synth-s0-v6-r1-digits-flite").is_dir()


def test_missing_flite_is_a_data_error(monkeypatch):
    monkeypatch.setattr(flite.shutil, "which", lambda name: None)
    with pytest.raises(DataError, match="apt-get install flite"):
        synth.synthesize(n_voices=1, renditions=1, task="digits", engine="flite", progress=False)
    with pytest.raises(ValueError, match="unknown speech engine"):
        synth.synthesize(engine="festival")
