"""Accuracy under another channel (edgeosc/robustness.py, `edgeosc lab robustness`): each change does what its name
says, the accuracy as recorded is the model's, and the command prints the kinds side by side."""
import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from edgeosc.config import DataConfig, FeatureConfig, ModelConfig, TrainConfig
from edgeosc.robustness import CONDITIONS, robustness

from conftest import SHARED_DATA, tone_clipset

SR = 16000


def _tone(hz: float, seconds: float = 1.0) -> torch.Tensor:
    return 0.3 * torch.sin(2 * torch.pi * hz * torch.arange(int(SR * seconds)) / SR)[None]


def _peak_hz(wave: torch.Tensor) -> float:
    return float(np.fft.rfft(wave[0].numpy()).__abs__().argmax()) * SR / wave.shape[1]


def _rms(x: torch.Tensor) -> float:
    return float(x.square().mean().sqrt())


def test_each_change_does_what_its_name_says():
    gen = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    tone = _tone(1000.0)
    assert torch.equal(CONDITIONS["recorded"](tone, gen()), tone)
    assert _rms(CONDITIONS["-20 dB"](tone, gen())) == pytest.approx(0.1 * _rms(tone), rel=1e-5)
    noisy = CONDITIONS["noise 10 dB"](tone, gen())
    assert 10 * np.log10(_rms(tone) ** 2 / _rms(noisy - tone) ** 2) == pytest.approx(10.0, abs=0.2)
    assert torch.equal(noisy, CONDITIONS["noise 10 dB"](tone, gen()))  # the same noise for a seed
    silence = torch.zeros(1, SR)  # a fixed level whatever the clip's: digital zeros get the floor too
    assert 20 * np.log10(_rms(CONDITIONS["floor -50 dBFS"](silence, gen()))) == pytest.approx(-50.0, abs=0.1)
    assert _rms(CONDITIONS["floor -50 dBFS"](tone, gen()) - tone) == pytest.approx(_rms(
        CONDITIONS["floor -50 dBFS"](silence, gen())), rel=1e-5)
    # a 1 kHz tone played 10% slower sounds at 900 Hz (about its centre: the middle half of the clip)
    slower = CONDITIONS["speed 0.9"](tone, gen())[:, SR // 4: 3 * SR // 4]
    assert _peak_hz(slower) == pytest.approx(900.0, abs=4.0)
    assert _peak_hz(CONDITIONS["speed 1.1"](tone, gen())[:, SR // 4: 3 * SR // 4]) == pytest.approx(1100.0, abs=4.0)
    # x[n] - 0.9 x[n-1]: |H| is 0.1 at 0 Hz, 1.9 at 8 kHz; each clip keeps its RMS, so compare two tones in one clip
    both = _tone(100.0) + _tone(4000.0)
    spectrum = np.abs(np.fft.rfft(CONDITIONS["tilt 0.9"](both, gen())[0].numpy()))
    low, high = spectrum[100], spectrum[4000]
    gain = abs(1 - 0.9 * np.exp(-2j * np.pi * 100 / SR)) / abs(1 - 0.9 * np.exp(-2j * np.pi * 4000 / SR))
    assert low / high == pytest.approx(gain, rel=0.02)
    assert _rms(CONDITIONS["tilt 0.9"](both, gen())) == pytest.approx(_rms(both), rel=1e-5)


def test_accuracy_as_recorded_is_the_models():
    from edgeosc.features import FeatureExtractor
    from edgeosc.models.kws import build_model
    clips = tone_clipset(n_per_class=8)
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_classes=3, size="tiny")).eval()
    with torch.no_grad():
        feats = FeatureExtractor(FeatureConfig())(torch.as_tensor(clips.audio / 32768.0, dtype=torch.float32))
        want = (model(feats).argmax(-1) == torch.as_tensor(clips.labels)).float().mean().item()
    got = robustness(model, FeatureConfig(), clips.audio, clips.labels, batch_size=5)
    assert list(got) == list(CONDITIONS) and got["recorded"] == pytest.approx(want)
    assert got == robustness(model, FeatureConfig(), clips.audio, clips.labels)  # batches and calls alike


def test_the_command_prints_checkpoints_side_by_side(tmp_path):
    from edgeosc.cli import main
    from edgeosc.data import load_dataset
    from edgeosc.train import train
    fsdd = SHARED_DATA / "fsdd" / "recordings"
    if not fsdd.is_dir():
        pytest.skip(f"{fsdd} absent")
    data_cfg = DataConfig(dataset="fsdd", data_dir=str(fsdd))
    data = load_dataset(data_cfg, tmp_path / "cache", progress=False)
    train(data, tmp_path / "run", model_cfg=ModelConfig(size="tiny"), feature_cfg=FeatureConfig(),
          train_cfg=TrainConfig(epochs=1, batch_size=64), data_cfg=data_cfg, progress=False)
    ckpt, twin = tmp_path / "run" / "best.pt", tmp_path / "twin.pt"
    twin.write_bytes(ckpt.read_bytes())
    res = CliRunner().invoke(main, ["lab", "robustness", str(ckpt), str(twin), "--clips", "20", "--json",
                                    str(tmp_path / "r.json"), "--cache-dir", str(tmp_path / "cache")])
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert lines[1].split()[1:] == ["recorded", "speed", "0.9", "speed", "1.1", "-20", "dB", "noise", "10", "dB",
                                    "floor", "-50", "dBFS", "tilt", "0.9"]
    assert len(lines) == 4 and lines[2].split()[1:] == lines[3].split()[1:]  # a row per checkpoint; one model alike
    rows = json.loads((tmp_path / "r.json").read_text())
    assert list(rows) == [str(ckpt), str(twin)] and list(rows[str(ckpt)]) == list(CONDITIONS)
