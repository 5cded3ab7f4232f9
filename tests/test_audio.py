"""WAV decoding, clip conversion, tolerant batch loading and waveform augmentation."""
import dataclasses
import logging
import struct

import numpy as np
import pytest
import torch
from scipy.io import wavfile

from edgeosc.config import AugmentConfig
from edgeosc.data.audio import AudioError, load_clips, read_wav, to_clip
from edgeosc.data.augment import augment
from edgeosc.data.clipset import DataError


def sine(sr, seconds=0.5, f=440.0, amp=0.5):
    t = np.arange(int(sr * seconds)) / sr
    return (amp * np.sin(2 * np.pi * f * t)).astype(np.float32)


def raw_wav(path, sr, payload: bytes, bits, channels=1):
    """A PCM WAV written by hand: scipy cannot write 24-bit data."""
    block = channels * bits // 8
    fmt = struct.pack("<IHHIIHH", 16, 1, channels, sr, sr * block, block, bits)
    n = len(payload)
    path.write_bytes(b"RIFF" + struct.pack("<I", 36 + n) + b"WAVE" + b"fmt " + fmt
                     + b"data" + struct.pack("<I", n) + payload)
    return path


def good_files(d):
    x = sine(16000)
    wavfile.write(d / "int16.wav", 16000, (x * 32767).astype(np.int16))
    wavfile.write(d / "rate8k.wav", 8000, (sine(8000) * 32767).astype(np.int16))
    wavfile.write(d / "rate44k.wav", 44100, (sine(44100) * 32767).astype(np.int16))
    wavfile.write(d / "stereo.wav", 16000, np.stack([x, 0 * x], 1))
    wavfile.write(d / "float32.wav", 16000, x)
    wavfile.write(d / "uint8.wav", 16000, np.rint(x * 127 + 128).astype(np.uint8))
    v = np.rint(x * (2 ** 23 - 1)).astype(np.int64)
    raw_wav(d / "pcm24.wav", 16000, b"".join(int(s).to_bytes(3, "little", signed=True) for s in v), 24)
    return [d / f"{n}.wav" for n in ("float32", "int16", "pcm24", "rate44k", "rate8k", "stereo", "uint8")]


def bad_files(d):
    (d / "corrupt.wav").write_bytes(b"RIFF\x00\x00WAVEjunk" * 5)
    wavfile.write(d / "empty.wav", 16000, np.zeros(0, np.int16))
    wavfile.write(d / "full.wav", 16000, (sine(16000, 1.0) * 32767).astype(np.int16))
    (d / "truncated.wav").write_bytes((d / "full.wav").read_bytes()[:16000])
    (d / "full.wav").unlink()
    x = sine(16000)
    x[100] = np.nan
    wavfile.write(d / "nan.wav", 16000, x)
    wavfile.write(d / "short.wav", 16000, np.ones(320, np.int16))  # 20 ms
    return [d / f"{n}.wav" for n in ("corrupt", "empty", "nan", "short", "truncated")]


def test_formats_decode_to_the_same_signal(tmp_path):
    ref = sine(16000)
    for f in good_files(tmp_path):
        x, sr = read_wav(f)
        assert x.dtype == np.float32 and x.ndim == 1 and np.abs(x).max() <= 1.0
        if sr == 16000:
            want = ref / 2 if f.name == "stereo.wav" else ref  # stereo: mean of the channels
            assert np.allclose(x, want, atol=1e-2), f.name


@pytest.mark.parametrize("sr", [8000, 44100])
def test_other_rates_are_resampled(sr):
    clip = to_clip(sine(sr), sr)
    assert clip.dtype == np.int16 and clip.shape == (16000,)
    assert np.all(clip[:3000] == 0) and np.all(clip[-3000:] == 0)  # 0.5 s centred in 1 s
    assert abs(np.argmax(np.abs(np.fft.rfft(clip))) - 440) <= 2  # 1 Hz bins: the tone survives


def test_int16_round_trip_is_exact(tmp_path):
    x = (np.random.default_rng(0).standard_normal(16000) * 3000).astype(np.int16)
    wavfile.write(tmp_path / "a.wav", 16000, x)
    assert np.array_equal(to_clip(*read_wav(tmp_path / "a.wav")), x)


def test_long_clip_keeps_loudest_second():
    x = np.zeros(48000, np.float32)
    x[33000:37000] = 0.5  # a burst late in a 3 s recording
    clip = to_clip(x, 16000)
    assert np.abs(clip).astype(np.int64).sum() == 4000 * 16384


def test_bad_files_raise_naming_the_file(tmp_path):
    for f in bad_files(tmp_path):
        with pytest.raises(AudioError) as e:
            to_clip(*read_wav(f), file=f)
        assert e.value.file == str(f) and f.name in str(e.value)
    with pytest.raises(AudioError, match="truncated"):
        read_wav(tmp_path / "truncated.wav")
    with pytest.raises(AudioError, match="non-finite"):
        read_wav(tmp_path / "nan.wav")


def test_load_clips_skips_bad_files_and_keeps_going(tmp_path, caplog):
    good, bad = good_files(tmp_path), bad_files(tmp_path)
    files = sorted(good + bad)
    n = len(files)
    with caplog.at_level(logging.WARNING, logger="edgeosc.data"):
        cs = load_clips(files, np.arange(n) % 2, [f.stem for f in files], ["train"] * n, ("a", "b"),
                        progress=False)
    assert cs.audio.shape == (len(good), 16000) and cs.audio.dtype == np.int16
    assert sorted(cs.groups) == sorted(f.stem for f in good)  # labels/groups stay aligned with clips
    assert {f for f, _ in cs.skipped} == {str(f) for f in bad}
    assert f"skipped {len(bad)} of {n}" in caplog.text and bad[0].name in caplog.text


def test_load_clips_all_bad_raises(tmp_path):
    bad = bad_files(tmp_path)
    with pytest.raises(DataError, match=str(tmp_path)):
        load_clips(bad, [0] * len(bad), ["s"] * len(bad), ["train"] * len(bad), ("a",), progress=False)


def _batch():
    return torch.from_numpy(np.stack([sine(16000, 1.0, f, 0.1) for f in (300, 500, 700, 900)]))


def test_augment_is_deterministic_and_bounded():
    x, cfg = _batch(), AugmentConfig()
    run = lambda seed: augment(x, cfg, torch.Generator().manual_seed(seed), None)  # noqa: E731
    a, b, c = run(1), run(1), run(2)
    assert a.shape == x.shape and a.dtype == torch.float32
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.abs().max() <= 1.0


def test_augment_time_shift_zero_fills():
    x = torch.zeros(8, 16000)
    x[:, 8000] = 0.5
    cfg = AugmentConfig(time_shift_ms=100.0, noise_prob=0.0, gain_db=(0.0, 0.0))
    y = augment(x, cfg, torch.Generator().manual_seed(0), None)
    pos = y.abs().argmax(1) - 8000
    assert torch.all(pos.abs() <= 1600) and len(set(pos.tolist())) > 1
    assert torch.allclose(y.abs().sum(1), torch.full((8,), 0.5))


@pytest.mark.parametrize("bank", [None, "bank"])
def test_augment_snr(bank):
    x = _batch()
    noise = (torch.randn(50000, generator=torch.Generator().manual_seed(9)) * 3000).short() if bank else None
    cfg = AugmentConfig(time_shift_ms=0.0, noise_prob=1.0, snr_db=(10.0, 10.0), gain_db=(0.0, 0.0))
    y = augment(x, cfg, torch.Generator().manual_seed(0), noise)
    snr = 10 * torch.log10(x.pow(2).mean(1) / (y - x).pow(2).mean(1))
    assert torch.allclose(snr, torch.full_like(snr, 10.0), atol=0.3)


def test_augment_silent_clip_gets_finite_noise():
    cfg = AugmentConfig(noise_prob=1.0)
    y = augment(torch.zeros(3, 16000), cfg, torch.Generator().manual_seed(0), None)
    assert torch.isfinite(y).all() and (y.abs().sum(1) > 0).all()


def test_spec_augment_masks_bands_and_frames_deterministically():
    from edgeosc.config import AugmentConfig
    from edgeosc.data.augment import spec_augment
    cfg = AugmentConfig(freq_masks=2, freq_width=5, time_masks=2, time_width=6)
    x = torch.randn(16, 49, 40)
    a = spec_augment(x, cfg, torch.Generator().manual_seed(3))
    b = spec_augment(x, cfg, torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.shape == x.shape
    masked = a == x.mean(dim=1, keepdim=True)  # masked cells take their band's mean; the rest are untouched
    assert masked.float().mean() > 0.05 and torch.equal(a[~masked], x[~masked])
    # whole coefficient bands and whole frames: at most 2 x 5 bands and 2 x 6 frames per clip
    assert (masked.all(dim=1).sum(-1) <= 10).all() and (masked.all(dim=2).sum(-1) <= 12).all()
    assert (masked.all(dim=1).any(-1) | masked.all(dim=2).any(-1)).all()
    assert torch.equal(spec_augment(x, AugmentConfig(), torch.Generator()), x)


def test_speed_perturb_scales_pitch_and_keeps_length():
    from edgeosc.config import AugmentConfig
    from edgeosc.data.augment import speed_perturb
    t = torch.arange(16000) / 16000
    tone = torch.sin(2 * torch.pi * 500 * t).repeat(4, 1)
    cfg = AugmentConfig(speed=(1.2, 1.2))
    out = speed_perturb(tone, cfg, torch.Generator().manual_seed(0))
    assert out.shape == tone.shape
    peak = torch.fft.rfft(out[0, 4000:12000]).abs().argmax().item() * 2  # bins of 2 Hz over 0.5 s
    assert abs(peak - 600) <= 4  # 500 Hz played 1.2x faster
    assert torch.isfinite(out).all() and (out[:, :1000] == 0).all()  # sped up: the ends are silence
    same = speed_perturb(tone, AugmentConfig(speed=(1.0, 1.0)), torch.Generator())
    torch.testing.assert_close(same, tone)


def test_tilt_colours_the_spectrum_and_keeps_the_level():
    from edgeosc.data.augment import tilt
    t = torch.arange(16000) / 16000
    low, high = torch.sin(2 * torch.pi * 200 * t), torch.sin(2 * torch.pi * 6000 * t)
    x = (low + high).repeat(64, 1)
    y = tilt(x, 0.6, torch.Generator().manual_seed(0))
    rms = lambda v: v.square().mean(1).sqrt()  # noqa: E731
    torch.testing.assert_close(rms(y), rms(x))
    spec = torch.fft.rfft(y).abs()  # bins of 1 Hz: the two tones' share of the energy moves one way or the other
    ratio = spec[:, 6000] / spec[:, 200]
    assert (ratio > 1.5).any() and (ratio < 1 / 1.5).any() and ratio.max() < 1.6 / 0.4 + 1e-3
    off = AugmentConfig(noise_prob=0.0, time_shift_ms=0.0, gain_db=(0.0, 0.0))
    torch.testing.assert_close(augment(x, off, torch.Generator().manual_seed(1)), x.clamp(-1, 1))
    assert not torch.allclose(augment(x, dataclasses.replace(off, tilt=0.6), torch.Generator()), x.clamp(-1, 1))
    with pytest.raises(ValueError, match="tilt"):
        AugmentConfig(tilt=1.0)
