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


def test_help_explains_every_command():
    for cmd in ([], ["train"], ["eval"], ["data", "synth"], ["data", "info"], ["pipeline"], ["compare"], ["bench"], ["listen"],
                ["summary"], ["microbench"], ["export"], ["export-bench"]):
        res = invoke(*cmd, "--help")
        assert res.exit_code == 0 and "Usage:" in res.output and len(res.output.splitlines()) > 3


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
