"""Speech Commands and FSDD loaders on the shared real-data samples."""
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from scipy.io import wavfile

from edgeosc.config import DIGITS, KWS12_CLASSES, SILENCE, DataConfig
from edgeosc.data import load_dataset, recorded
from edgeosc.data import fsdd as fsdd_mod
from edgeosc.data import speech_commands as sc_mod
from edgeosc.data.clipset import SPLITS, DataError
from edgeosc.data.fsdd import load_fsdd
from edgeosc.data.mix import band_limit
from edgeosc.data.speech_commands import V1_WORDS, load_speech_commands
from edgeosc.data.synth import ENGINES

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
SC = DATA / "speech_commands_sample" / "speech_commands_v0.01"
FSDD = DATA / "fsdd" / "recordings"


def need(path):
    if not path.is_dir():
        pytest.skip(f"shared dataset absent: {path}")


@pytest.fixture(scope="module")
def sc12():
    need(SC)
    return load_speech_commands(SC.parent, task="12", progress=False)  # the parent folder is accepted


@pytest.fixture(scope="module")
def fsdd():
    need(FSDD)
    return load_fsdd(FSDD, progress=False)  # 2000 files decoded once for the module


def assert_speaker_disjoint(cs):
    groups = {s: set(cs.groups[cs.split == s]) for s in SPLITS}
    for a, b in ((0, 1), (0, 2), (1, 2)):
        assert not groups[SPLITS[a]] & groups[SPLITS[b]]


def listed_present(name):
    return sum((SC / ln.strip()).is_file() for ln in (SC / name).read_text().splitlines() if ln.strip())


def test_sc_task12(sc12):
    assert sc12.classes == KWS12_CLASSES and sc12.audio.shape[1:] == (16000,)
    assert sc12.meta["version"] == "v0.01" and sc12.meta["speaker_overlap"] == []
    counts = np.bincount(sc12.labels, minlength=12)
    assert counts[0] > 0 and counts[1] > 0 and counts.min() > 0
    sil = sc12.labels == KWS12_CLASSES.index(SILENCE)
    assert set(sc12.split[sil]) == set(SPLITS)  # silence in every split
    assert np.abs(sc12.audio[sil].astype(np.int64)).max() < 1000  # quiet synthetic noise: no bg folder
    for s in SPLITS:  # unknown and silence each about one average keyword class
        c = np.bincount(sc12.labels[sc12.split == s], minlength=12)
        assert abs(c[0] - c[2:].mean()) <= 1 and abs(c[1] - c[2:].mean()) <= 1
    assert_speaker_disjoint(sc12)


def test_sc_task_all_and_lists():
    need(SC)
    cs = load_speech_commands(SC, task="all", progress=False)
    assert cs.classes == tuple(sorted(V1_WORDS)) and len(cs.classes) == 30
    assert len(cs.audio) == 300 and np.all(np.bincount(cs.labels) == 10)
    for tag, name in (("val", "validation_list.txt"), ("test", "testing_list.txt")):
        info, present = cs.meta["lists"][tag], listed_present(name)
        assert info["present"] == present == len(cs.indices(tag))
        assert info["absent"] == info["listed"] - present > 1000  # absent entries are ignored
    assert len(cs.indices("train")) == 300 - len(cs.indices("val")) - len(cs.indices("test"))
    assert_speaker_disjoint(cs)


def test_sc_bad_roots(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_speech_commands(tmp_path / "missing")
    with pytest.raises(DataError, match="no Speech Commands word folders"):
        load_speech_commands(tmp_path)
    (tmp_path / "yes").mkdir()
    wavfile.write(tmp_path / "yes" / "abc_nohash_0.wav", 16000, np.ones(16000, np.int16))
    with pytest.raises(DataError, match="validation_list.txt"):
        load_speech_commands(tmp_path)


def test_sc_background_noise_makes_silence_and_bank(tmp_path):
    rng, words = np.random.default_rng(0), ("yes", "no", "bed", "marvin")
    speakers = [f"{i:08x}" for i in range(12)]
    for word in words:
        (tmp_path / word).mkdir()
        for spk in speakers:
            wav = (rng.standard_normal(16000) * 2000).astype(np.int16)
            wavfile.write(tmp_path / word / f"{spk}_nohash_0.wav", 16000, wav)
    val = [f"{w}/{speakers[0]}_nohash_0.wav" for w in words] + ["no/gone_nohash_0.wav"]
    (tmp_path / "validation_list.txt").write_text("\n".join(val) + "\n")
    (tmp_path / "testing_list.txt").write_text("\n".join(f"{w}/{speakers[1]}_nohash_0.wav" for w in words))
    bg = tmp_path / "_background_noise_"
    bg.mkdir()
    wavfile.write(bg / "hum.wav", 32000, (rng.standard_normal(64000) * 8000).astype(np.int16))
    (bg / "broken.wav").write_bytes(b"not a wav")
    cs = load_speech_commands(tmp_path, progress=False)
    assert cs.meta["silence"] == "background" and cs.noise.dtype == np.int16 and len(cs.noise) == 32000
    assert [Path(f).name for f, _ in cs.skipped] == ["broken.wav"]
    assert cs.meta["lists"]["val"] == dict(listed=5, present=4, absent=1)
    train = np.bincount(cs.labels[cs.split == "train"], minlength=12)
    assert train[:4].tolist() == [2, 2, 10, 10]  # 20 keyword clips: silence = unknown = 20 / 10
    assert_speaker_disjoint(cs)


def test_sc_cache_round_trip(tmp_path, monkeypatch):
    need(SC)
    a = load_speech_commands(SC, cache_dir=tmp_path, progress=False)
    monkeypatch.setattr(sc_mod, "_build", lambda *a, **k: pytest.fail("cache missed"))
    b = load_speech_commands(SC, cache_dir=tmp_path, progress=False)
    for k in ("audio", "labels", "groups", "split"):
        assert np.array_equal(getattr(a, k), getattr(b, k))
    assert a.classes == b.classes and a.meta == b.meta


def test_fsdd_default_split(fsdd):
    assert fsdd.audio.shape == (2000, 16000) and fsdd.classes == DIGITS
    assert np.all(np.bincount(fsdd.labels) == 200)
    assert set(fsdd.groups[fsdd.split == "test"]) == {"nicolas"}
    # leave-one-speaker-out: the other three train; their recordings 0-4 validate
    assert set(fsdd.groups[fsdd.split == "val"]) == set(fsdd.groups[fsdd.split == "train"]) == {"george", "jackson", "lucas"}
    assert len(fsdd.indices("val")) == 3 * 10 * 5 and len(fsdd.indices("test")) == 500
    assert fsdd.skipped == []
    assert not set(fsdd.groups[fsdd.split == "test"]) & set(fsdd.groups[fsdd.split != "test"])


@pytest.fixture
def small_fsdd(tmp_path):
    """A few real recordings per speaker plus a misnamed file, in an FSDD-repo layout."""
    need(FSDD)
    rec = tmp_path / "repo" / "recordings"
    rec.mkdir(parents=True)
    for f in sorted(FSDD.glob("[0-2]_*_0.wav")):
        (rec / f.name).symlink_to(f)
    (rec / "notes.wav").write_bytes(b"")
    return tmp_path / "repo"


def test_fsdd_explicit_split_and_misnamed(small_fsdd):
    cs = load_fsdd(small_fsdd, test_speakers=["george"], val_speakers=["jackson", "lucas"], progress=False)
    assert len(cs.audio) == 12 and [Path(f).name for f, _ in cs.skipped] == ["notes.wav"]
    assert set(cs.groups[cs.split == "train"]) == {"nicolas"}
    assert set(cs.groups[cs.split == "val"]) == {"jackson", "lucas"}
    assert_speaker_disjoint(cs)


def test_fsdd_bad_arguments(small_fsdd, tmp_path):
    with pytest.raises(DataError, match="unknown FSDD test speakers"):
        load_fsdd(small_fsdd, test_speakers=["alice"], progress=False)
    with pytest.raises(DataError, match="both test and val"):
        load_fsdd(small_fsdd, test_speakers=["george"], val_speakers=["george"], progress=False)
    with pytest.raises(DataError, match="no training speaker"):
        load_fsdd(small_fsdd, test_speakers=["george", "jackson"], val_speakers=["lucas", "nicolas"],
                  progress=False)
    with pytest.raises(DataError, match="not found"):
        load_fsdd(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no FSDD recordings"):
        load_fsdd(tmp_path / "empty")


def test_fsdd_cache_round_trip(small_fsdd, tmp_path, monkeypatch):
    a = load_fsdd(small_fsdd, cache_dir=tmp_path / "cache", progress=False)
    assert len(list((tmp_path / "cache").glob("fsdd-*/manifest.json"))) == 1
    monkeypatch.setattr(fsdd_mod, "load_clips", lambda *a, **k: pytest.fail("cache missed"))
    b = load_fsdd(small_fsdd, cache_dir=tmp_path / "cache", progress=False)
    for k in ("audio", "labels", "groups", "split"):
        assert np.array_equal(getattr(a, k), getattr(b, k))
    assert a.classes == b.classes and a.skipped == b.skipped
    monkeypatch.undo()
    extra = next(FSDD.glob("3_george_0.wav"))
    (small_fsdd / "recordings" / extra.name).symlink_to(extra)  # the download changed: cache is stale
    c = load_fsdd(small_fsdd, cache_dir=tmp_path / "cache", progress=False)
    assert len(c.audio) == len(a.audio) + 1


def test_band_limit_keeps_the_recordings_band_only():
    t = np.arange(16000) / 16000
    tones = (8000 * np.stack([np.sin(2 * np.pi * 1000 * t), np.sin(2 * np.pi * 6000 * t)])).astype(np.int16)
    out = band_limit(tones, 8000).astype(np.float64)
    rms = np.sqrt((out[:, 1000:-1000] ** 2).mean(1)) / np.sqrt((tones[:, 1000:-1000].astype(float) ** 2).mean(1))
    assert rms[0] > 0.99 and rms[1] < 1e-3  # 1 kHz passes, 6 kHz (above FSDD's 4 kHz band) is gone
    assert band_limit(tones, 16000) is tones


def test_synth_mix_adds_band_limited_voices_to_training_only(small_fsdd, tmp_path):
    for name, engine in recorded.ENGINES.items():
        try:
            engine().close()
        except DataError as e:
            pytest.skip(f"{name} voices unavailable (make setup installs them): {e}")
    cfg = DataConfig(dataset="fsdd", data_dir=str(small_fsdd), test_speakers=("nicolas",), n_voices=3,
                     renditions=1, synth_mix=True)
    real = load_dataset(dataclasses.replace(cfg, synth_mix=False), tmp_path / "cache", progress=False)
    mixed = load_dataset(cfg, tmp_path / "cache", progress=False)
    added = len(mixed.audio) - len(real.audio)
    assert added == len(ENGINES) * 3 * len(DIGITS) and mixed.classes == real.classes  # 3 voices of each engine
    extra = slice(len(real.audio), None)
    engines = [g.split(":")[0] for g in mixed.groups[extra]]
    assert set(mixed.split[extra]) == {"train"} and all(engines.count(e) == 30 for e in ENGINES)
    for split in ("val", "test"):
        assert np.array_equal(mixed.audio[mixed.indices(split)], real.audio[real.indices(split)])
    power = (np.abs(np.fft.rfft(mixed.audio[extra].astype(float), axis=1)) ** 2).sum(0)  # 1 Hz bins
    assert power[4500:].sum() < 1e-5 * power.sum()  # nothing above the 8 kHz recordings' band
    with pytest.raises(ValueError, match="synth_mix"):
        DataConfig(synth_mix=True)
