"""Features: shapes, bit-exact CMSIS constants, parity with cmsisdsp.arm_mfcc_f32 on real clips, checks."""
from pathlib import Path

import numpy as np
import pytest
import torch

from edgeosc.config import FeatureConfig
from edgeosc.features import LOG_OFFSET, FeatureExtractor, features_numpy, mfcc_constants

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
SPEECH = DATASETS / "speech_commands_sample" / "speech_commands_v0.01"
WORDS, PER_WORD = ("yes", "no", "up", "stop"), 4

# Parity tolerances, absolute, in log / MFCC units. Both sides are float32 but use different FFT
# algorithms (pocketfft vs CMSIS rfft_fast), so bands far below a frame's peak differ by round-off.
# Measured on all 300 clips of the sample set: max 6.1e-4 (log-mel), 2.0e-4 (MFCC, where c0 of a
# silent frame is -123.57 and one float32 ulp is 7.6e-6). This holds for recorded int16 speech, whose
# noise floor keeps every band well above round-off; synthetic tonal frames with ~100 dB of in-frame
# dynamic range can differ by ~1e-2 in their quietest bands (both sides are at round-off there).
LOGMEL_ATOL = 2e-3
MFCC_ATOL = 1e-3


def _clips() -> list[np.ndarray]:
    """A few real clips, padded/trimmed to 1 s, int16 scaled by 1/32768, plus one with a digital-zero gap."""
    if not SPEECH.is_dir():
        pytest.skip(f"Speech Commands sample not found at {SPEECH}")
    from scipy.io import wavfile

    clips = []
    for word in WORDS:
        for f in sorted((SPEECH / word).glob("*.wav"))[:PER_WORD]:
            sr, a = wavfile.read(f)
            assert sr == 16000 and a.dtype == np.int16, f
            a = np.pad(a[:16000], (0, max(0, 16000 - len(a))))
            clips.append(a.astype(np.float32) / 32768)
    if not clips:
        pytest.skip(f"no wav files for {WORDS} under {SPEECH}")
    gap = clips[0].copy()
    gap[4000:9000] = 0.0  # frames 13..26 lie wholly inside: mel energy 0 -> log floor
    clips.append(gap)
    return clips


def _cmsis_features(cfg: FeatureConfig, clip: np.ndarray) -> np.ndarray:
    """Reference: arm_mfcc_f32 frame by frame with the constants from mfcc_constants."""
    dsp = pytest.importorskip("cmsisdsp")
    c = mfcc_constants(cfg)
    inst = dsp.arm_mfcc_instance_f32()
    status = dsp.arm_mfcc_init_f32(inst, cfg.frame_length, cfg.n_mels, cfg.n_coeffs, c["dct"].ravel(),
                                   c["filter_pos"], c["filter_lengths"], c["filter_coefs"], c["window"])
    assert status == 0
    tmp = np.zeros(cfg.frame_length + 2, np.float32)  # RFFT-based build needs fftLen + 2
    starts = range(0, cfg.clip_samples - cfg.frame_length + 1, cfg.hop_length)
    return np.stack([dsp.arm_mfcc_f32(inst, clip[s:s + cfg.frame_length].copy(), tmp) for s in starts])


@pytest.mark.parametrize("n_mfcc", [0, 10, 13])
def test_shapes(n_mfcc):
    cfg = FeatureConfig(n_mfcc=n_mfcc)
    fe = FeatureExtractor(cfg)
    out = fe(torch.zeros(3, 16000))
    assert out.shape == (3, 49, n_mfcc or 40) and out.dtype == torch.float32
    assert cfg.n_frames == 49 and fe(torch.zeros(16000)).shape == (49, n_mfcc or 40)
    assert fe.state_dict() == {}  # constants are a function of cfg, never saved
    c = mfcc_constants(cfg)
    assert c["window"].shape == (512,) and c["mel"].shape == (40, 257)
    assert c["dct"].shape == (n_mfcc or 40, 40)
    assert c["filter_coefs"].size == c["filter_lengths"].sum()
    assert features_numpy(np.zeros((2, 16000)), cfg).shape == (2, 49, n_mfcc or 40)


@pytest.mark.parametrize("n_mfcc", [0, 10])
def test_constants_match_cmsis_builders(n_mfcc):
    mfcc = pytest.importorskip("cmsisdsp.mfcc")
    from cmsisdsp.datatype import F32
    from scipy.signal import get_window

    cfg = FeatureConfig(n_mfcc=n_mfcc)
    c = mfcc_constants(cfg)
    lengths, pos, coefs = mfcc.melFilterMatrix(F32, cfg.f_min, cfg.f_max, cfg.n_mels, cfg.sample_rate,
                                               cfg.frame_length)
    assert list(c["filter_lengths"]) == list(lengths) and list(c["filter_pos"]) == list(pos)
    np.testing.assert_array_equal(c["filter_coefs"], coefs)  # bit-identical
    dense = np.zeros_like(c["mel"])
    for row, p, k, start in zip(dense, pos, lengths, np.cumsum([0] + list(lengths))):
        row[p:p + k] = coefs[start:start + k]
    np.testing.assert_array_equal(c["mel"], dense)
    np.testing.assert_allclose(c["window"], get_window("hann", cfg.frame_length), atol=1e-7)  # periodic
    if n_mfcc:
        np.testing.assert_array_equal(c["dct"].ravel(), mfcc.dctMatrix(F32, n_mfcc, cfg.n_mels))
    else:
        np.testing.assert_array_equal(c["dct"], np.eye(cfg.n_mels, dtype=np.float32))


@pytest.mark.parametrize("n_mfcc,atol", [(0, LOGMEL_ATOL), (10, MFCC_ATOL)])
def test_parity_with_arm_mfcc_f32(n_mfcc, atol):
    cfg = FeatureConfig(n_mfcc=n_mfcc, normalize="none")
    clips = _clips()
    ref = np.stack([_cmsis_features(cfg, x) for x in clips])
    got = FeatureExtractor(cfg)(torch.from_numpy(np.stack(clips))).numpy()
    err = np.abs(got - ref).max()
    assert err <= atol, f"max abs error {err:.2e} > {atol:.0e}"
    if n_mfcc == 0:  # the digital-zero gap really reached the log floor on both sides
        floor = np.log(np.float32(LOG_OFFSET))
        assert np.all(ref[-1, 13:27] == floor) and np.all(got[-1, 13:27] == floor)


@pytest.mark.parametrize("n_mfcc", [0, 10])
def test_utterance_normalisation(n_mfcc):
    x = torch.from_numpy(np.random.default_rng(0).uniform(-0.5, 0.5, (4, 16000)).astype(np.float32))
    x[1, 3000:9000] = 0.0  # floor frames too
    raw = FeatureExtractor(FeatureConfig(n_mfcc=n_mfcc, normalize="none"))(x)
    norm = FeatureExtractor(FeatureConfig(n_mfcc=n_mfcc, normalize="utterance"))(x)
    torch.testing.assert_close(norm.mean(dim=1), torch.zeros(4, n_mfcc or 40), atol=1e-4, rtol=0)
    torch.testing.assert_close(norm, raw - raw.mean(dim=1, keepdim=True))


def test_floor_makes_digital_silence_and_a_quiet_noise_floor_alike():
    """floor_db: the log-mels never fall more than floor_db below the clip's peak, louder ones are untouched, so
    zero padding and -90 dBFS noise in it give the same features (before the mean, as after)."""
    rng = np.random.default_rng(0)
    x = np.zeros((2, 16000), np.float32)
    x[:, 4000:9000] = 0.3 * np.sin(2 * np.pi * 440 * np.arange(5000) / 16000)  # a tone in digital silence
    x[1, :4000] += 3e-5 * rng.standard_normal(4000).astype(np.float32)  # a quiet noise floor in the padding
    x[1, 9000:] += 3e-5 * rng.standard_normal(7000).astype(np.float32)
    raw = FeatureExtractor(FeatureConfig(normalize="none"))(torch.from_numpy(x))
    floored = FeatureExtractor(FeatureConfig(normalize="none", floor_db=30.0))(torch.from_numpy(x))
    lo = raw.amax(dim=(1, 2), keepdim=True) - 30.0 * np.log(10) / 20
    torch.testing.assert_close(floored, torch.maximum(raw, lo))
    assert (raw[0] < lo[0]).float().mean() > 0.5 and (raw[0] != raw[1]).any()  # the floor bites, and it matters:
    torch.testing.assert_close(floored[0], floored[1], atol=1e-3, rtol=0)  # the paddings now look alike
    norm = FeatureExtractor(FeatureConfig(floor_db=30.0))(torch.from_numpy(x))
    torch.testing.assert_close(norm, floored - floored.mean(dim=1, keepdim=True))


def test_active_mean_removes_a_channel_gain_despite_the_padding():
    """normalize "active": the mean over the frames within 30 dB of the clip's loudest removes a gain from the word's
    frames entirely; the mean over every frame removes it only in proportion to the word's share of the clip."""
    word = 0.1 * np.random.default_rng(0).standard_normal(5000) * np.hanning(5000)  # every band; fades: quiet frames
    x = np.zeros((2, 16000), np.float32)
    x[0, 2000:7000], x[1, 2000:7000] = word, 2 * word  # 6 dB louder, in the same digital silence
    feats = {n: FeatureExtractor(FeatureConfig(normalize=n))(torch.from_numpy(x)) for n in ("none", "utterance", "active")}
    raw = feats["none"][0]
    level = raw.amax(dim=1)
    active = level >= level.max() - 30 * np.log(10) / 20
    assert 5 < active.sum() < 20  # the fades and the padding are left out
    torch.testing.assert_close(feats["active"][0], raw - raw[active].mean(0), rtol=0, atol=1e-5)
    gain = (feats["active"][1] - feats["active"][0])[active]
    assert gain.abs().max() < 1e-3
    kept = (feats["utterance"][1] - feats["utterance"][0])[active]  # ln 2 less its share over the whole clip
    assert 0.3 < kept.min() <= kept.max() < np.log(2)


def test_active_mean_of_mfccs_picks_its_frames_by_the_log_mels():
    """MFCCs with normalize "active": the same frames as the log-mels' (each frame's level is its loudest log-mel,
    before the DCT), so the features are the DCT of the log-mels' (the DCT is linear); the numpy front end of the
    listener gives the same."""
    from edgeosc.frontend import mfcc_constants
    from edgeosc.stream import FrontEnd
    word = 0.1 * np.random.default_rng(1).standard_normal(5000) * np.hanning(5000)
    x = np.zeros((1, 16000), np.float32)
    x[0, 4000:9000] = word
    mfcc_cfg = FeatureConfig(n_mfcc=10, normalize="active")
    log_mel = FeatureExtractor(FeatureConfig(normalize="active"))(torch.from_numpy(x))[0]
    mfcc = FeatureExtractor(mfcc_cfg)(torch.from_numpy(x))[0]
    dct = torch.from_numpy(mfcc_constants(mfcc_cfg)["dct"].T.copy())
    torch.testing.assert_close(mfcc, log_mel @ dct, rtol=0, atol=1e-4)
    assert not torch.allclose(mfcc, FeatureExtractor(FeatureConfig(n_mfcc=10))(torch.from_numpy(x))[0], atol=1e-2)
    front = FrontEnd(mfcc_cfg)
    np.testing.assert_allclose(front.normalize(front.frames(x[0])), mfcc.numpy(), rtol=0, atol=1e-3)


def test_running_mean_is_causal_and_ends_on_the_clips_mean():
    """normalize "running": frame t less the mean of frames 0..t; a change after t leaves frames up to t as they
    were, and the last frame is the whole clip's mean's ("utterance")."""
    x = (0.1 * np.random.default_rng(2).standard_normal((1, 16000))).astype(np.float32)
    run, whole = (FeatureExtractor(FeatureConfig(normalize=n)) for n in ("running", "utterance"))
    raw = FeatureExtractor(FeatureConfig(normalize="none"))(torch.from_numpy(x))[0]
    got = run(torch.from_numpy(x))[0]
    torch.testing.assert_close(got[5], raw[5] - raw[:6].mean(0), rtol=0, atol=1e-5)
    torch.testing.assert_close(got[-1], whole(torch.from_numpy(x))[0][-1], rtol=0, atol=1e-5)
    later = x.copy()
    later[0, 8000:] *= 3  # frames from 8000 / 320 - 1 on see it
    changed = run(torch.from_numpy(later))[0]
    torch.testing.assert_close(changed[:23], got[:23], rtol=0, atol=0)
    assert not torch.allclose(changed[-1], got[-1])


@pytest.mark.parametrize("bad,match", [
    (torch.zeros(15999), "shape"),
    (torch.zeros(2, 16001), "shape"),
    (torch.zeros(2, 3, 16000), "shape"),
    (torch.zeros(2, 16000, dtype=torch.int16), "float"),
    (torch.full((16000,), float("nan")), "NaN"),
    (torch.zeros(16000).index_fill(0, torch.tensor([5]), float("inf")), "Inf"),
    (np.zeros(16000, np.float32), "torch.Tensor"),
])
def test_bad_input_raises(bad, match):
    with pytest.raises(ValueError, match=match):
        FeatureExtractor(FeatureConfig())(bad)


@pytest.mark.parametrize("kwargs", [dict(normalize="global"), dict(normalize="running", floor_db=30.0),
                                    dict(n_mfcc=41), dict(frame_length=500),
                                    dict(f_max=9000.0), dict(clip_samples=256), dict(floor_db=-1.0),
                                    dict(floor_db=30.0, n_mfcc=13)])
def test_bad_config_raises(kwargs):
    with pytest.raises(ValueError):
        FeatureExtractor(FeatureConfig(**kwargs))


def test_features_numpy_int16_rejected():
    with pytest.raises(ValueError, match="float"):
        features_numpy(np.zeros(16000, np.int16), FeatureConfig())
