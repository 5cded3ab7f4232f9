import json

import pytest
import torch
from click.testing import CliRunner

from edgeosc import runtime
from edgeosc.cli import main
from edgeosc.pipeline import PipelineError, load_config, run_pipeline

pytestmark = pytest.mark.skipif(len(runtime.available_interpreters()) < 3, reason="needs the three TFLite interpreters")
FAST = {"train.epochs": 2, "train.batch_size": 8, "qat.epochs": 1, "qat.batch_size": 8, "quant.calibration_batches": 1,
        "train.augment.noise_prob": 0.0, "bench.runs": 3, "bench.warmup": 1, "model.dropout": 0.0}


@pytest.fixture
def tone_data(tones, monkeypatch):
    monkeypatch.setattr("edgeosc.data.load_dataset", lambda *a, **k: tones)
    torch.set_num_threads(1)
    return tones


def stage(run, name):
    return json.loads((run / name / "stage.json").read_text())


def test_pipeline_runs_skips_and_resumes_an_interrupted_stage(tone_data, tmp_path, monkeypatch):
    cfg = load_config(None, FAST)
    report = run_pipeline(cfg, tmp_path / "whole", echo=lambda *_: None)
    text = report.read_text()
    for section in ("## Accuracy", "## Model files", "## Parity", "## Latency"):
        assert section in text
    whole = stage(tmp_path / "whole", "train-oscillator")

    lines = []
    run_pipeline(cfg, tmp_path / "whole", echo=lines.append)  # nothing changed: every stage skipped
    assert lines and all("skipped" in line for line in lines)

    # a stage killed midway (after one epoch) ...
    import edgeosc.train as train_mod
    real = train_mod.train

    def killed(*a, **k):
        real(*a, **k, stop_after_epochs=1)
        raise KeyboardInterrupt
    monkeypatch.setattr(train_mod, "train", killed)
    with pytest.raises(PipelineError, match="stage train-oscillator interrupted"):
        run_pipeline(cfg, tmp_path / "cut", echo=lambda *_: None)
    assert stage(tmp_path / "cut", "data")["status"] == "done"  # earlier outputs kept
    assert stage(tmp_path / "cut", "train-oscillator")["status"] == "running"
    monkeypatch.setattr(train_mod, "train", real)
    # ... resumes from its last epoch and ends where the uninterrupted run ended
    lines = []
    run_pipeline(cfg, tmp_path / "cut", echo=lines.append)
    assert "[train-oscillator] resuming ..." in lines
    assert stage(tmp_path / "cut", "train-oscillator")["results"] == whole["results"]
    for name in ("export-oscillator", "parity-softmax", "report"):
        assert stage(tmp_path / "cut", name)["status"] == "done"

    # a changed option re-runs the stages that depend on it, not the others
    lines = []
    run_pipeline(load_config(None, {**FAST, "qat.epochs": 2}), tmp_path / "whole", echo=lines.append)
    assert "[train-oscillator] up to date, skipped" in lines and "[qat-oscillator] running ..." in lines


def test_a_failing_stage_is_named_and_earlier_outputs_kept(tone_data, tmp_path, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("disk full")
    monkeypatch.setattr("edgeosc.stages.export_all", broken)
    with pytest.raises(PipelineError, match="stage export-oscillator failed: disk full"):
        run_pipeline(load_config(None, FAST), tmp_path, echo=lambda *_: None)
    assert stage(tmp_path, "qat-oscillator")["status"] == "done"
    assert (tmp_path / "qat-oscillator" / "best.pt").is_file()
    assert stage(tmp_path, "export-oscillator")["status"] == "failed"


def test_wrong_config_keys_and_values_give_clear_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    for text, needle in (('[train]\nepoch = 3\n', "TrainConfig has no field 'epoch'"),
                         ('[train]\nepochs = "many"\n', "TrainConfig.epochs must be int"),
                         ('[modle]\nsize = "small"\n', "no field 'modle'"),
                         ('kinds = ["kuramoto"]\n', "kinds must be"),
                         ('[train\n', "cannot read the pipeline config")):
        bad.write_text(text)
        res = CliRunner().invoke(main, ["pipeline", "--config", str(bad), "--out", str(tmp_path / "run")])
        assert res.exit_code == 1 and needle in res.output and "bad.toml" in res.output, (text, res.output)
    res = CliRunner().invoke(main, ["pipeline", "--set", "train.lr=fast", "--out", str(tmp_path / "run")])
    assert res.exit_code == 1 and "TrainConfig.lr must be float" in res.output, res.output
