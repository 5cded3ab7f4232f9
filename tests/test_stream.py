"""Streaming KWS: incremental features, detection timing, refractory period, a real model end to end, errors."""
import subprocess
import sys
import types

import numpy as np
import pytest
import torch
from scipy.io import wavfile

from edgeosc.config import DIRECT_OSCILLATOR, AugmentConfig, DataConfig, FeatureConfig, ModelConfig, TrainConfig
from edgeosc.data import synth
from edgeosc.data.audio import AudioError
from edgeosc.data.clipset import ClipSet
from edgeosc.features import FeatureExtractor, mfcc_constants
from edgeosc.stream import (Listener, Model, StreamError, format_detections, listen_command, listen_microphone,
                            listen_wav, load_model)

SR = 16000
NOISE_DB = -55  # background between words, dBFS RMS


def noise(seconds: float, seed: int = 0) -> np.ndarray:
    x = synth._colored(np.random.default_rng(seed), int(seconds * SR), 1)  # pink noise
    return (x * 10 ** (NOISE_DB / 20)).astype(np.float32)


def write(path, x: np.ndarray):
    wavfile.write(path, SR, np.round(np.clip(x, -1, 1) * 32767).astype(np.int16))
    return path


# ----------------------------------------------------------- a test double for the timing logic only

TONE_HZ = {"_unknown_": 3000.0, "low": 500.0, "high": 1500.0}  # class -> tone; _silence_ is the rest
BAND_CFG = FeatureConfig(normalize="none")  # absolute log-mel: a loud band is loud whatever the window holds


def band_model() -> Model:
    """Stand-in for a KWS net, for the detection timing logic only: a class's tone burst is "recognised"
    (posterior 1) when the whole burst lies inside the window, i.e. its band is loud in some frame but
    not in the window's first or last frame, as a word is recognised once the window holds all of it."""
    mel = mfcc_constants(BAND_CFG)["mel"]
    classes = ("_silence_", *TONE_HZ)
    bands = [int(mel[:, round(f * BAND_CFG.frame_length / SR)].argmax()) for f in TONE_HZ.values()]

    def run(feats):
        loud = feats[0][:, bands] > 0.0  # tones sit near +4, the background near -4
        whole = (loud.any(0) & ~loud[0] & ~loud[-1]).astype(np.float64)
        post = np.concatenate([[1.0 - whole.max()], whole])
        return np.log(post / post.sum() + 1e-9)
    return Model("band-double", classes, BAND_CFG, run)


BURSTS = [("low", 1.25), ("high", 3.25), ("_unknown_", 5.25), ("low", 7.25)]  # (class, onset s), 0.3 s each


def burst_signal() -> np.ndarray:
    x = noise(9.5)
    t = np.arange(int(0.3 * SR)) / SR
    fade = np.minimum(1.0, np.minimum(t, t[::-1]) / 0.005)  # 5 ms ramps: no click spreads over other bands
    for name, onset in BURSTS:
        s = int(onset * SR)
        x[s:s + len(t)] += 0.3 * np.sin(2 * np.pi * TONE_HZ[name] * t) * fade
    return x


def wobbly() -> Model:
    """band_model's posteriors blurred by a hop-dependent amount: smoothed averages that land near thresholds."""
    double = band_model()

    def run(feats):
        post = np.exp(double.run(feats)) + np.abs(np.sin(feats.sum())) * 0.5
        return np.log(post / post.sum())
    return Model("wobbly", double.classes, double.feature_cfg, run)


@pytest.mark.parametrize("smooth", [1, 3])
def test_detections_within_one_hop_of_the_keyword_ends(smooth):
    lis = Listener(band_model(), hop_ms=100, threshold=0.5, smooth=smooth)
    x = burst_signal()
    for start in range(0, len(x), 700):  # chunks unaligned with the hop
        lis.push(x[start:start + 700])
    lis.flush()
    want = [(name, onset + 0.3) for name, onset in BURSTS if name != "_unknown_"]
    assert [d.keyword for d in lis.detections] == [name for name, _ in want]
    for d, (_, end) in zip(lis.detections, want):
        # the smoothing delay is taken out of the time: smooth=3 reports what smooth=1 does
        assert 0 <= d.time_s - end <= 0.1 + 1e-9, (d, end)
        assert d.score == pytest.approx(2 / 3 if smooth == 3 else 1.0, abs=1e-6)  # 2 of 3 hops at 1


def test_the_default_smoothing_is_300_ms_of_hops_whatever_the_hop():
    """listen's 100 ms hops and stream-eval's 20 ms hops decide on the same span of posteriors by default."""
    assert [Listener(band_model(), hop_ms=h).smooth for h in (20, 60, 100, 400)] == [15, 5, 3, 1]
    assert Listener(band_model(), hop_ms=20, smooth=4).smooth == 4


def test_a_replay_makes_the_decisions_of_a_live_run_at_any_threshold_and_smoothing():
    """One recorded pass stands for every (threshold, smoothing) run: the same detections, scores bit for bit (the
    average's sums in the live order), times and emission times, flush included. Posteriors that vary hop by hop."""
    model, x = wobbly(), burst_signal()
    recorded = Listener(model, hop_ms=100, threshold=0.5, smooth=3, record=True)
    recorded.push(x)
    recorded.flush()
    assert recorded.replay() == recorded.detections
    for smooth in (1, 2, 5, 12):
        for threshold in (0.3, 0.45, 0.6):
            live = Listener(model, hop_ms=100, threshold=threshold, smooth=smooth, refractory_s=0.25)
            live.push(x)
            live.flush()
            recorded.refractory_s = 0.25
            assert recorded.replay(threshold, smooth) == live.detections, (smooth, threshold)
            recorded.refractory_s = 1.0
    assert recorded.replay(0.3, 1) != recorded.replay(0.3, 12)  # the smoothing is applied, not ignored
    with pytest.raises(StreamError, match="record=True"):
        Listener(model, hop_ms=100).replay(0.5, 3)


def test_refractory_period_gives_one_detection_per_utterance(write_tmp):
    x = burst_signal()
    one = listen_wav(band_model(), write_tmp(x), 100, threshold=0.5)[0]
    assert len(one) == 3
    many = listen_wav(band_model(), write_tmp(x), 100, threshold=0.5, refractory_s=0.0)[0]
    # without it a burst fires every hop it stays whole in the window (about 1 s - 0.3 s - 2 frames)
    assert len(many) >= 3 * 5 and {d.keyword for d in many} == {"low", "high"}
    short = listen_wav(band_model(), write_tmp(x), 100, threshold=0.5, refractory_s=0.35)[0]
    assert len(one) < len(short) < len(many)


@pytest.fixture
def write_tmp(tmp_path):
    paths = iter(tmp_path / f"{i}.wav" for i in range(100))
    return lambda x: write(next(paths), x)


# ----------------------------------------------------------- incremental front end

@pytest.mark.parametrize("cfg,hop_ms", [(FeatureConfig(), 100), (FeatureConfig(), 20), (FeatureConfig(), 980),
                                        (FeatureConfig(n_mfcc=13), 60), (FeatureConfig(normalize="none"), 200),
                                        (FeatureConfig(floor_db=30.0), 100), (FeatureConfig(normalize="active"), 100),
                                        (FeatureConfig(normalize="running"), 20)])
def test_incremental_features_equal_batch_features_of_the_window(cfg, hop_ms):
    seen = []
    model = Model("recorder", ("_silence_", "kw"), cfg, lambda f: seen.append(f[0].copy()) or np.zeros(2))
    rng = np.random.default_rng(1)
    t = np.arange(4 * SR) / SR
    x = (0.2 * np.sin(2 * np.pi * 700 * t) * (np.sin(2 * np.pi * 0.7 * t) > 0.3)
         + 0.02 * rng.standard_normal(len(t))).astype(np.float32)  # bursts of tone in noise
    x[SR + SR // 4:2 * SR] = 0  # and digital silence, which the floor raises and the active mean leaves out
    lis = Listener(model, hop_ms)
    for start in range(0, len(x), 1234):
        lis.push(x[start:start + 1234])
    hop = lis.hop
    ends = range(-(-SR // hop) * hop, len(x) + 1, hop)  # decisions start once a whole window is in
    assert len(seen) == len(ends) > 0
    extractor = FeatureExtractor(cfg)
    for got, end in zip(seen, ends):
        want = extractor(torch.from_numpy(x[end - SR:end])).numpy()
        assert got.dtype == np.float32 and got.shape == (49, cfg.n_coeffs)
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


def test_stats_report_per_hop_latency_and_the_front_end_saving(write_tmp):
    dets, stats = listen_wav(band_model(), write_tmp(burst_signal()), 100, threshold=0.5)
    assert stats["hops"] == 86 and stats["new_frames"] == 5 and stats["frames"] == 49  # 9.5 s: 95 hops - 9
    for key in ("features", "full_features", "model_run", "total"):
        assert 0 < stats[key]["median_ms"] <= stats[key]["p90_ms"] <= stats[key]["max_ms"]
    assert stats["features_saving"] > 1.0  # 5 new frames per hop instead of 49
    text = format_detections(dets, stats)
    assert "low" in text and "incremental" in text and "cheaper" in text


# ----------------------------------------------------------- a real model end to end

KEYWORDS = ("_silence_", "_unknown_", "yes", "no", "stop")
SPOKEN = [("yes", 1.3), ("stop", 3.3), ("no", 5.3), ("yes", 7.3)]  # (word, onset s), voices never trained on


def tiny_synth_set(n_voices: int = 40, renditions: int = 4):
    """synth.py's recipe for a 5-class subset (no noise bank: most of load_synth's time), and a WAV of SPOKEN."""
    eng = synth._Espeak()
    audio, labels, groups = [], [], []
    try:
        for voice in synth.VOICES[:n_voices]:
            for c, name in enumerate(KEYWORDS):
                for r in range(renditions):
                    rng = synth._rng(0, voice, name, r)
                    if name == "_silence_":
                        audio.append(synth._silence(rng))
                    else:
                        word = synth.UNKNOWN_WORDS[int(rng.integers(len(synth.UNKNOWN_WORDS)))] \
                            if name == "_unknown_" else name
                        audio.append(synth._clip(synth._speech(eng, voice, word, rng), rng))
                    labels.append(c)
                    groups.append(voice)
        spoken, words = noise(9.5, seed=2), []
        for i, (word, onset) in enumerate(SPOKEN):
            y = synth._speech(eng, synth.VOICES[60 + 3 * i], word, np.random.default_rng(i))
            s = int(onset * SR)
            spoken[s:s + len(y)] += 0.3 * y / np.abs(y).max()
            words.append((word, onset, onset + len(y) / SR))
    finally:
        eng.close()
    groups = np.array(groups)
    split = np.where(np.isin(groups, synth.VOICES[:n_voices:5]), "val", "train")
    split[:len(KEYWORDS) * renditions] = "test"  # train() evaluates a test split; its score is not used here
    return ClipSet(np.stack(audio), np.array(labels), groups, split, KEYWORDS, meta={}), spoken, words


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """A small oscillator net trained briefly on 5 synthetic classes, its float .tflite, and a WAV of 4 words."""
    from edgeosc.export import export_checkpoint
    from edgeosc.train import train
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: threads only contend
    try:
        data, spoken, words = tiny_synth_set()
        out = tmp_path_factory.mktemp("run")
        # the direct core, as when these timings were set: the listener is under test here; 15 epochs of the linear
        # core on these 5 classes fire "stop" again a window after the word (stream-eval measures the models)
        train(data, out, model_cfg=ModelConfig(size="small", dropout=0.0, **DIRECT_OSCILLATOR),
              feature_cfg=FeatureConfig(),
              train_cfg=TrainConfig(epochs=15, batch_size=32, lr=1e-2, patience=100,
                                    augment=AugmentConfig(noise_prob=0.5)),
              data_cfg=DataConfig(), progress=False)
        tflite = export_checkpoint(out / "best.pt", out / "export", "tflite") / "float.tflite"
        wav = write(out / "spoken.wav", spoken)
        yield out / "best.pt", tflite, wav, words
    finally:
        torch.set_num_threads(threads)


def test_trained_model_detects_spoken_keywords(real):
    pt, _, wav, words = real
    dets, stats = listen_wav(pt, wav, 100)
    # a whole-window classifier fires once most of the word is in: around the word's end, give or take
    near = lambda d, w: w[1] <= d.time_s <= w[2] + 0.3  # noqa: E731
    assert all(any(near(d, w) and d.keyword == w[0] for w in words) for d in dets), (dets, words)
    assert sum(any(near(d, w) and d.keyword == w[0] for d in dets) for w in words) >= 3, (dets, words)
    assert stats["hops"] == 86 and stats["model_run"]["median_ms"] > 0 and stats["features_saving"] > 1.0


def test_exported_tflite_streams_like_its_checkpoint(real):
    from edgeosc import runtime
    if not runtime.available_interpreters():
        pytest.skip("no TFLite interpreter installed")
    pt, tflite, wav, _ = real
    ref = listen_wav(pt, wav, 100)[0]
    got, stats = listen_wav(tflite, wav, 100)
    assert [(d.keyword, d.time_s) for d in got] == [(d.keyword, d.time_s) for d in ref]
    np.testing.assert_allclose([d.score for d in got], [d.score for d in ref], atol=1e-3)
    assert "tflite" in stats["model"]


# ----------------------------------------------------------- microphone, CLI helper, errors

def fake_sounddevice(signal: np.ndarray) -> types.ModuleType:
    """sounddevice.InputStream that delivers `signal` in the requested blocks as soon as it is entered."""
    class InputStream:
        def __init__(self, *, samplerate, channels, dtype, blocksize, device, callback):
            assert samplerate == SR and channels == 1 and dtype == "float32"
            self.blocksize, self.callback = blocksize, callback

        def __enter__(self):
            for start in range(0, len(signal) - self.blocksize + 1, self.blocksize):
                self.callback(signal[start:start + self.blocksize, None], self.blocksize, None, None)
            return self

        def __exit__(self, *exc):
            return False
    return types.SimpleNamespace(InputStream=InputStream, PortAudioError=OSError)


def test_microphone_stream_through_a_fake_device(monkeypatch):
    x = burst_signal()
    monkeypatch.setitem(sys.modules, "sounddevice", fake_sounddevice(x))
    live = []
    dets, stats = listen_microphone(band_model(), 100, threshold=0.5, seconds=len(x) / SR, on_detection=live.append)
    assert [d.keyword for d in dets] == ["low", "high", "low"] and live == dets and stats["hops"] == 86


def test_microphone_without_sounddevice_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "sounddevice", None)  # import raises ImportError
    with pytest.raises(StreamError, match="pip install sounddevice"):
        listen_microphone(band_model())


def test_listen_command_echoes_detections_and_latency(write_tmp):
    lines = []
    dets, _ = listen_command(band_model(), write_tmp(burst_signal()), 100, threshold=0.5, smooth=3,
                             echo=lines.append)
    assert len(dets) == 3 and "high" in lines[0] and "model" in lines[0]
    with pytest.raises(StreamError, match="either"):
        listen_command(band_model(), None, mic=False)


def test_bad_inputs_are_clear_errors(tmp_path, write_tmp):
    with pytest.raises(AudioError, match="missing.wav"):
        listen_wav(band_model(), tmp_path / "missing.wav")
    (tmp_path / "odd.wav").write_bytes(b"RIFF....WAVEnot really a wav file")
    with pytest.raises(AudioError, match="odd.wav"):
        listen_wav(band_model(), tmp_path / "odd.wav")
    (tmp_path / "model.tflite").write_bytes(b"\0" * 64)
    with pytest.raises(StreamError, match="no manifest.json"):
        load_model(tmp_path / "model.tflite")
    with pytest.raises(StreamError, match=r"\.pt\) or an exported"):
        load_model(tmp_path / "model.onnx")
    with pytest.raises(StreamError, match="multiple of the 20 ms"):
        Listener(band_model(), hop_ms=30)
    with pytest.raises(StreamError, match="no keyword"):
        Listener(Model("m", ("_silence_", "_unknown_"), FeatureConfig(), lambda f: np.zeros(2)))
    short, _ = listen_wav(band_model(), write_tmp(noise(0.3)), 100)  # shorter than a window: padded, heard once
    assert short == []


def test_module_imports_without_torch():
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'torch': raise ImportError(name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "import edgeosc.stream\n"
            "assert 'torch' not in sys.modules\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


# ----------------------------------------------------------- a streaming model, one frame at a time

def band_stream_model() -> Model:
    """band_model as a streaming model: each step takes one frame, keeps the last n_frames, and answers what
    band_model answers on them, so the listener's frame-at-a-time path must detect what its window path does."""
    window = band_model()
    kept: list = []

    def step(frame):
        kept.append(frame)
        del kept[:-BAND_CFG.n_frames]
        return window.run(np.stack(kept)[None])
    return Model("band-stream", window.classes, BAND_CFG, window.run, step, kept.clear, BAND_CFG.n_frames)


@pytest.mark.parametrize("hop_ms", [20, 100])
def test_a_streaming_model_steps_every_new_frame_and_detects_as_its_window(hop_ms, write_tmp):
    wav = write_tmp(burst_signal())
    stream_model, calls = band_stream_model(), []
    step = stream_model.step
    stepped = Model(stream_model.name, stream_model.classes, BAND_CFG, stream_model.run,
                    lambda f: calls.append(f) or step(f), stream_model.reset, stream_model.window)
    want, _ = listen_wav(band_model(), wav, hop_ms, threshold=0.5)
    got, stats = listen_wav(stepped, wav, hop_ms, threshold=0.5)
    assert [(d.keyword, d.time_s) for d in got] == [(d.keyword, d.time_s) for d in want] and len(got) == 3
    n = int(np.ceil(len(burst_signal()) / SR / (hop_ms / 1000)))  # hops, the last partial one padded
    assert len(calls) == n * hop_ms // 20 and stats["window"] == BAND_CFG.n_frames
    assert "streaming, " in format_detections(got, stats)


def checkpoint_file(path, cfg: ModelConfig, feature_cfg: FeatureConfig):
    from edgeosc.checkpoint import CHECKPOINT_FORMAT, CHECKPOINT_VERSION, save_checkpoint
    from edgeosc.config import to_dict
    from edgeosc.models.kws import build_model
    torch.manual_seed(0)
    save_checkpoint(path, dict(
        format=CHECKPOINT_FORMAT, version=CHECKPOINT_VERSION, model_config=to_dict(cfg),
        feature_config=to_dict(feature_cfg), data_config=to_dict(DataConfig()), train_config=to_dict(TrainConfig()),
        classes=["_silence_", "low", "high"], quant=None, model=build_model(cfg).state_dict()))
    return path


def test_listen_streams_a_streaming_checkpoint_and_checks_its_window(tmp_path, write_tmp):
    ckpt = checkpoint_file(tmp_path / "stream.pt", ModelConfig(attention="softmax", window=49, n_classes=3),
                           FeatureConfig(normalize="none"))
    model = load_model(ckpt, window=25)
    assert model.step is not None and model.window == 25
    lines = []
    listen_command(model, write_tmp(noise(2.0)), hop_ms=40, echo=lines.append)
    assert "attention over the last 25 frames" in lines[-1]
    with pytest.raises(StreamError, match="trained with 49 frames"):
        load_model(ckpt, window=50)
    plain = checkpoint_file(tmp_path / "plain.pt", ModelConfig(attention="softmax", n_classes=3), FeatureConfig())
    with pytest.raises(StreamError, match="needs a streaming model"):
        load_model(plain, window=25)
