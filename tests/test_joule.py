"""Accuracy per joule (bench/joule.py, `edgeosc report joule`): runs grouped by kind and size beside each config's
estimated Cortex-M4 cost, cached; the table and the plot."""
import dataclasses

from click.testing import CliRunner

from edgeosc.bench import joule
from edgeosc.cli import main
from edgeosc.config import FeatureConfig, ModelConfig
from edgeosc.train import train

from test_train import TRAIN


def test_runs_meet_their_estimated_cost_in_a_table_and_a_plot(tones, data_cfg, tmp_path):
    cfg = dataclasses.replace(TRAIN, epochs=1)
    for kind, seed in (("oscillator", 0), ("oscillator", 1), ("softmax", 0)):
        train(tones, tmp_path / "runs" / f"{kind}-s{seed}", model_cfg=ModelConfig(attention=kind, size="tiny"),
              feature_cfg=FeatureConfig(), train_cfg=dataclasses.replace(cfg, seed=seed), data_cfg=data_cfg,
              progress=False)
    rows = joule.curve([tmp_path / "runs"], tmp_path / "cache")
    osc, soft = (next(r for r in rows if r["kind"] == k) for k in ("oscillator", "softmax"))
    assert (osc["n"], soft["n"]) == (2, 1) and osc["size"] == "tiny" and osc["x_baseline"] is None
    assert 0 < osc["mj"] < soft["mj"] and osc["macs"] < soft["macs"] and osc["flash"] > 0 and osc["ram"] > 0
    assert abs(osc["ms"] - osc["mcycles"] * 1e3 / 120.0) < 1e-6  # cycles at the STM32L4R5's 120 MHz
    cached = sorted((tmp_path / "cache" / "joule").glob("*.json"))
    assert len(cached) == 2 and joule.curve([tmp_path / "runs"], tmp_path / "cache") == rows  # the cache serves
    res = CliRunner().invoke(main, ["report", "joule", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
                                    "--plot", str(tmp_path / "joule.png")])
    assert res.exit_code == 0, res.output
    assert "| oscillator | tiny | 2 |" in res.output and (tmp_path / "joule.png").stat().st_size > 1000
    empty = CliRunner().invoke(main, ["report", "joule", str(tmp_path / "cache")])
    assert empty.exit_code != 0 and "no run" in empty.output
