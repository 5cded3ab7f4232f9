import numpy as np
import pytest

from edgeosc.config import KWS12_CLASSES
from edgeosc.data import synth
from edgeosc.data.clipset import SPLITS, DataError

SMALL = dict(seed=0, n_voices=6, renditions=2, progress=False)


@pytest.fixture(scope="module")
def small():
    return synth.synthesize(**SMALL)


def test_deterministic_and_seed_dependent(small):
    again = synth.synthesize(**SMALL)
    assert np.array_equal(small.audio, again.audio) and np.array_equal(small.noise, again.noise)
    assert small.meta["sha256"] == again.meta["sha256"]
    other = synth.synthesize(**{**SMALL, "seed": 1})
    assert not np.array_equal(small.audio, other.audio)


def test_subset_reproducible_independently(small):
    # each clip depends only on (seed, voice, class, rendition), not on what was synthesized before it
    sub = synth.synthesize(seed=0, n_voices=3, renditions=1, progress=False)
    first = np.isin(small.groups, synth.VOICES[:3]) & (np.arange(len(small.audio)) % 2 == 0)
    assert np.array_equal(sub.audio, small.audio[first])


def test_voices_disjoint_across_splits_and_all_classes_present(small):
    assert len(set(synth.VOICES)) == len(synth.VOICES) >= 90
    assert small.classes == KWS12_CLASSES
    owner = {}
    for g, s in zip(small.groups, small.split):
        assert owner.setdefault(g, s) == s
    for s in SPLITS:
        labels = small.labels[small.indices(s)]
        assert set(labels.tolist()) == set(range(len(KWS12_CLASSES)))
        assert np.all(np.bincount(labels) == np.bincount(labels)[0])  # balanced classes


def test_clip_shape_level_and_whole_words(small):
    assert small.audio.shape == (6 * 12 * 2, 16000) and small.audio.dtype == np.int16
    assert small.noise.dtype == np.int16 and len(small.noise) >= 50 * 16000
    x = small.audio.astype(np.float64)
    rms = np.sqrt(np.mean(x**2, axis=1))
    speech = small.labels != KWS12_CLASSES.index("_silence_")
    assert rms[speech].min() > 100  # about -50 dBFS
    assert rms[~speech].max() < 600  # _silence_ is at most -35 dBFS
    # the word lies inside the clip: the first and last samples are (near) silent
    assert np.abs(x[speech][:, [0, -1]]).max() <= 0.02 * np.abs(x[speech]).max()


def test_cache_written_reused_and_rebuilt_when_incomplete(tmp_path, monkeypatch):
    kw = dict(seed=0, n_voices=3, renditions=1, progress=False)
    first = synth.load_synth(tmp_path, **kw)
    folder = tmp_path / "synth-s0-v3-r1"
    assert (folder / "manifest.json").exists()

    real = synth.synthesize

    def fail(**_):
        raise AssertionError("resynthesized despite a valid cache")

    monkeypatch.setattr(synth, "synthesize", fail)
    cached = synth.load_synth(tmp_path, **kw)
    assert np.array_equal(cached.audio, first.audio) and np.array_equal(cached.noise, first.noise)
    assert np.array_equal(cached.split, first.split) and np.array_equal(cached.groups, first.groups)

    (folder / "manifest.json").unlink()  # as if the writer died before the manifest
    calls = []
    monkeypatch.setattr(synth, "synthesize", lambda **k: calls.append(k) or real(**k))
    rebuilt = synth.load_synth(tmp_path, **kw)
    assert len(calls) == 1 and (folder / "manifest.json").exists()
    assert np.array_equal(rebuilt.audio, first.audio)

    monkeypatch.setitem(synth.ENGINES, "espeak-ng", synth.ENGINES["espeak-ng"][1:])  # the engine's voices changed
    monkeypatch.setattr(synth, "synthesize", lambda **k: calls.append(k) or first)
    synth.load_synth(tmp_path, **kw)
    assert len(calls) == 2


def test_missing_library_is_a_data_error(monkeypatch):
    import espeakng_loader

    monkeypatch.setattr(espeakng_loader, "get_library_path", lambda: "/nonexistent/libespeak-ng.so")
    with pytest.raises(DataError, match="libespeak-ng"):
        synth.synthesize(seed=0, n_voices=1, renditions=1, progress=False)


def test_digits_task_speaks_fsdds_classes(tmp_path):
    from edgeosc.config import DIGITS, DataConfig
    cs = synth.load_synth(tmp_path, n_voices=3, renditions=1, task="digits", progress=False)
    assert cs.classes == DIGITS and len(cs.audio) == 30 and cs.meta["task"] == "digits"
    assert np.bincount(cs.labels).tolist() == [3] * 10
    assert (tmp_path / "synth-s0-v3-r1-digits").is_dir()  # cached apart from the keyword set
    with pytest.raises(ValueError, match="task 'digits' does not apply to fsdd"):
        DataConfig(dataset="fsdd", data_dir="x", task="digits")
