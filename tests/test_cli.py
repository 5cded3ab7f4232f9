import pytest
from click.testing import CliRunner

from edgeosc.cli import main
from edgeosc.config import FeatureConfig, ModelConfig, TrainConfig
from edgeosc.train import train

from conftest import SHARED_DATA


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_one_line_error(res, *needles):
    assert res.exit_code != 0
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception  # no traceback
    for needle in needles:
        assert needle in res.output, res.output


COMMANDS = ([], ["data"], ["data", "synth"], ["data", "info"], ["train"], ["eval"], ["export"], ["bench"],
            ["bench", "models"], ["bench", "pair"], ["bench", "attention"], ["report"], ["report", "write"],
            ["report", "readme"], ["report", "seeds"], ["report", "paired"], ["deploy"], ["listen"], ["stream-eval"], ["pipeline"], ["sweep"],
            ["lab"], ["lab", "dynamics"], ["lab", "sharpness"], ["lab", "robustness"])


def test_help_explains_every_command():
    for cmd in COMMANDS:
        res = invoke(*cmd, "--help")
        assert res.exit_code == 0 and "Usage:" in res.output and len(res.output.splitlines()) > 3, cmd
    top = invoke("--help").output
    listed = [line.split()[0] for line in top.split("Commands:")[1].splitlines() if line.strip()]
    assert listed == ["data", "train", "eval", "export", "bench", "report", "deploy", "listen", "stream-eval",
                      "pipeline", "sweep", "lab"]  # the pipeline's order
    for cmd in COMMANDS:  # every one-line help fits its listing
        res = invoke(*cmd, "--help").output
        assert "Commands:" not in res or "..." not in res.split("Commands:")[1], cmd


def test_renamed_commands_say_their_new_name():
    for old, new in (("compare", "report write"), ("summary", "report seeds"), ("export-bench", "bench pair"),
                     ("microbench", "bench attention"), ("dynamics", "lab dynamics")):
        assert_one_line_error(invoke(old), f"edgeosc {new}")
    assert_one_line_error(invoke("bench", "model.tflite"), "models MODEL")


def test_the_readme_table_keeps_the_rows_a_report_has(tmp_path):
    """A report with accuracy only: its one row, a missing figure as -, no other row; --write needs the markers."""
    import json
    from edgeosc.report import README_MARKERS, readme_table
    r = {"run": "runs/x", "created": "2026-01-01 00:00 UTC", "kinds": ["oscillator", "softmax"],
         "models": {"oscillator": {"float": {"test_accuracy": 0.9}, "qat": {"test_accuracy": 0.95}},
                    "softmax": {"float": {"test_accuracy": 0.8}, "parity": None, "estimate": None}}}
    assert readme_table(r) == ("| | oscillator | softmax |\n|---|---|---|\n"
                               "| test accuracy, float / int8 QAT (measured) | 90.00 / 95.00 % | 80.00 / - % |\n")
    (tmp_path / "run" / "report").mkdir(parents=True)
    (tmp_path / "run" / "report" / "report.json").write_text(json.dumps(r))
    readme = tmp_path / "README.md"
    readme.write_text("a\n" + "\n".join(README_MARKERS) + "\nb\n")
    res = invoke("report", "readme", tmp_path / "run", "--write", readme)
    assert res.exit_code == 0 and not (tmp_path / "docs").exists(), res.output  # no plot in the run: none copied
    assert readme.read_text() == ("a\n" + README_MARKERS[0] + "\nRun `runs/x` (report written 2026-01-01 00:00 UTC):"
                                  "\n\n" + readme_table(r) + README_MARKERS[1] + "\nb\n")
    readme.write_text("a\n")
    assert_one_line_error(invoke("report", "readme", tmp_path / "run", "--write", readme), str(readme),
                          README_MARKERS[0])
    assert_one_line_error(invoke("report", "readme", tmp_path), "no ", "report.json", "edgeosc report write")


def print_config(*args):
    import tomllib
    res = invoke("train", "--print-config", *args)
    assert res.exit_code == 0, res.output
    return tomllib.loads(res.output)


def test_train_defaults_are_the_pipelines_per_kind():
    """The oscillator trains the shipped linear core; other kinds drop its own settings unless given."""
    osc = print_config()["model"]
    assert (osc["form"], osc["d_osc"], osc["key_gate"], osc["positive"]) == ("linear", 2, True, "taylor2")
    for kind in ("softmax", "kuramoto"):
        model = print_config("--attention", kind)["model"]
        assert (model["form"], model["key_gate"]) == ("direct", False), kind
    assert_one_line_error(invoke("train", "--attention", "softmax", "--key-gate", "--print-config"),
                          "key_gate is an oscillator setting")
    # DS-CNN reads MLPerf Tiny's 49 x 10 MFCC unless the features are given
    feats = print_config("--attention", "ds-cnn")["features"]
    assert (feats["n_mfcc"], feats["n_mels"], feats["f_max"]) == (10, 40, 4000.0)
    assert print_config("--attention", "ds-cnn", "--set", "features.n_mfcc=13")["features"]["n_mfcc"] == 13
    assert print_config()["features"]["n_mfcc"] == 0


def test_every_config_field_reaches_train(tmp_path):
    import dataclasses
    from edgeosc.config import AugmentConfig, DataConfig, QuantConfig
    cfg = print_config()
    assert cfg["model"]["dropout"] == ModelConfig.dropout and cfg["train"]["patience"] == TrainConfig.patience
    for name, cls in {"data": DataConfig, "features": FeatureConfig, "model": ModelConfig, "train": TrainConfig,
                      "quant": QuantConfig, "train.augment": AugmentConfig}.items():
        table = cfg
        for part in name.split("."):
            table = table[part]
        unset = {f.name for f in dataclasses.fields(cls) if f.default is None}  # printed as comments
        assert {f.name for f in dataclasses.fields(cls)} - unset == set(table), name
    # the flags that were missing, and --set for any field, nested ones included
    got = print_config("--dropout", 0.3, "--weight-decay", 0.01, "--patience", 5, "--set", "model.dropout=0.2",
                       "--set", "train.augment.freq_masks=2", "--set", "data.task=digits", "--set", "quant.preset=w4a8",
                       "--test-speakers", "george,jackson", "--no-augment")
    assert got["model"]["dropout"] == 0.2 and got["train"]["weight_decay"] == 0.01 and got["train"]["patience"] == 5
    assert got["train"]["augment"]["freq_masks"] == 2 and got["train"]["augment"]["noise_prob"] == 0.0
    assert got["data"]["task"] == "digits" and got["data"]["test_speakers"] == ["george", "jackson"]
    assert got["quant"]["preset"] == "w4a8"
    # a pipeline-style file, overridden by flags; its other tables are allowed
    (tmp_path / "c.toml").write_text('kinds = ["softmax"]\n[model]\nd_osc = 2\nkey_gate = true\n'
                                     '[train]\nepochs = 3\nmixup = 0.4\n[bench]\nruns = 5\n')
    got = print_config("--config", tmp_path / "c.toml", "--epochs", 1)
    assert got["model"]["d_osc"] == 2 and got["model"]["key_gate"] and got["train"]["mixup"] == 0.4
    assert got["train"]["epochs"] == 1


def test_bad_settings_name_the_setting(tmp_path):
    assert_one_line_error(invoke("train", "--set", "model.dropuot=0.2"), "model.dropuot", "dropout")
    assert_one_line_error(invoke("train", "--set", "bench.runs=3"), "bench", "data, features, model, train, quant")
    assert_one_line_error(invoke("train", "--set", "model.d_osc"), "SECTION.FIELD=VALUE")
    assert_one_line_error(invoke("train", "--set", "train.lr=fast"), "TrainConfig.lr must be float", "--set train.lr=fast")
    assert_one_line_error(invoke("train", "--set", "model.size=huge"), "tiny, small, base, medium")
    assert_one_line_error(invoke("train", "--key-gate", "--attention", "softmax"), "key_gate", "--key-gate")
    (tmp_path / "bad.toml").write_text("[model]\nd_os = 2\n")
    assert_one_line_error(invoke("train", "--config", tmp_path / "bad.toml"), "bad.toml", "d_os")
    assert_one_line_error(invoke("data", "synth", "--set", "data.dataset=fsdd", "--set", f"data.data_dir={tmp_path}"),
                          "data info")


@pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")  # the junk file below
def test_bad_arguments(tmp_path):
    assert_one_line_error(invoke("train", "--dataset", "imagenet"), "imagenet")
    assert_one_line_error(invoke("train", "--dataset", "fsdd"), "--data-dir")
    assert_one_line_error(invoke("train", "--dataset", "fsdd", "--data-dir", tmp_path / "nope"), "no such folder")
    assert_one_line_error(invoke("train", "--dataset", "fsdd", "--data-dir", tmp_path, "--cache-dir", tmp_path / "c"),
                          "no FSDD recordings")
    assert_one_line_error(invoke("train", "--attention", "linear"), "linear")
    assert_one_line_error(invoke("train", "--mixup", "-0.5"), "--mixup")
    assert_one_line_error(invoke("eval", tmp_path / "missing.pt"), "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"\x80\x04junk")
    assert_one_line_error(invoke("eval", tmp_path / "junk.pt"), "junk.pt", "not a readable")


def test_eval_rejects_checkpoint_for_other_classes(tones, data_cfg, tmp_path):
    train(tones, tmp_path / "run", model_cfg=ModelConfig(size="small"), feature_cfg=FeatureConfig(),
          train_cfg=TrainConfig(epochs=1, batch_size=8), data_cfg=data_cfg, progress=False)
    fsdd = SHARED_DATA / "fsdd" / "recordings"
    if not fsdd.is_dir():
        pytest.skip(f"{fsdd} absent")
    res = invoke("eval", tmp_path / "run" / "best.pt", "--dataset", "fsdd", "--data-dir", fsdd,
                 "--cache-dir", tmp_path / "cache")
    assert_one_line_error(res, "trained on classes")


def test_train_refuses_to_overwrite_a_run(tmp_path):
    (tmp_path / "last.pt").write_bytes(b"x")
    assert_one_line_error(invoke("train", "--out", tmp_path), "--resume")
