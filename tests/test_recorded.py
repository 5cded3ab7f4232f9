"""The recorded voices of data.synth_mix: real speakers' voices, each scaled in vocal-tract length and pitch."""

import numpy as np
import pytest

from edgeosc.config import DIGITS
from edgeosc.data import recorded, synth
from edgeosc.data.clipset import DataError

SR = recorded.SR


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


def centroid(y: np.ndarray) -> float:
    """Spectral centroid below 4 kHz: it moves with the formants."""
    power, freq = np.abs(np.fft.rfft(y, 1 << 15)) ** 2, np.fft.rfftfreq(1 << 15, 1 / SR)
    keep = freq < 4000
    return float((power[keep] * freq[keep]).sum() / power[keep].sum())


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
    # formants on "three" (a front vowel after a fricative), pitch on "one" (voiced throughout)
    say = {(word, vtl, g): engine.speak(f"{base}/vtl{vtl}/f0{g}", word, synth._rng(0, "same draw"))
           for word in ("three", "one") for vtl, g in [(0.88, 1.0), (1.12, 1.0), (1.0, 1.0), (1.0, 1.25)]}
    assert 1.1 < centroid(say["three", 1.12, 1.0]) / centroid(say["three", 0.88, 1.0]) < 1.45  # x 1.12 / 0.88
    short, long = say["one", 0.88, 1.0], say["one", 1.12, 1.0]
    assert 0.85 < f0(long) / f0(short) < 1.15  # ... at the same pitch
    assert 0.85 < len(long) / len(short) < 1.15  # ... and duration
    assert 1.1 < f0(say["one", 1.0, 1.25]) / f0(say["one", 1.0, 1.0]) < 1.45  # pitch x 1.25 alone


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
