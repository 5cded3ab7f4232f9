import json
import shutil
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from edgeosc import runtime
from edgeosc.cli import main
from edgeosc.pipeline import PipelineError, load_config, run_pipeline

from conftest import tone_clipset

pytestmark = pytest.mark.skipif(len(runtime.available_interpreters()) < 3, reason="needs the three TFLite interpreters")
FAST = {"train.epochs": 2, "train.batch_size": 8, "qat.epochs": 1, "qat.batch_size": 8, "quant.calibration_batches": 1,
        "train.augment.noise_prob": 0.0, "bench.runs": 3, "bench.warmup": 1, "model.dropout": 0.0,
        "bench.targets": ["cortex-m4"], "bench.scaling_tokens": [16], "bench.scaling_d_osc": [2],
        "bench.stream_windows": [16],
        "always_on.window": 16, "always_on.epochs": 1, "always_on.mine_epochs": 1, "always_on.negatives_hours": 0.005,
        "always_on.mine_hours": 0.002, "always_on.eval_hours": 0.005,
        "kinds": ["oscillator", "softmax", "ds-cnn", "kuramoto"]}


@pytest.fixture
def tone_data(tones, monkeypatch):
    monkeypatch.setattr("edgeosc.data._load", lambda *a, **k: tones)  # the keyword-free audio still joins
    torch.set_num_threads(1)
    return tones


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """One uninterrupted FAST pipeline run on tones."""
    tones = tone_clipset()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("edgeosc.data._load", lambda *a, **k: tones)
        torch.set_num_threads(1)
        run = tmp_path_factory.mktemp("whole")
        run_pipeline(load_config(None, FAST), run, echo=lambda *_: None)
    return run


def stage(run, name):
    return json.loads((run / name / "stage.json").read_text())


def test_pipeline_runs_skips_and_resumes_an_interrupted_stage(whole, tone_data, tmp_path, monkeypatch):
    cfg = load_config(None, FAST)
    text = (whole / "report" / "report.md").read_text()
    for section in ("## Accuracy", "## Model files", "## Parity", "## Latency", "linear / softmax",
                    "### Builtin kernels alone", "portable loops only", "DS-CNN ms", "Each model / DS-CNN",
                    "The estimator's known error bar", "## Always-on", "Streaming oscillator / streaming softmax",
                    "## Ethos-U NPUs (Vela, estimated)", "| DS-CNN | int8.tflite | ethos-u55-128 | ",
                    "| softmax | int8_npu.tflite | ethos-u55-128 | "):  # the npu stage's files: bench.npu.format_table
        assert section in text
    # always on: each attention kind's streaming variant through the recipe's rounds (the second mined from the
    # first's false alarms, from its weights), then the protocol: recall at 1, 5, 10 false alarms an hour, DET curves
    from edgeosc.checkpoint import load_checkpoint
    for kind in ("oscillator", "softmax"):
        ao = json.loads((whole / f"always-on-{kind}" / "always-on.json").read_text())
        assert len(ao["rounds"]) == 2 and ao["window"] == 16 and ao["in_context"] and ao["events"] > 0
        assert set(ao["recall_at"]) == {"1", "5", "10"} and ao["negatives"]["hours"] == pytest.approx(0.005, rel=0.01)
        last = load_checkpoint(whole / f"always-on-{kind}" / "round-1" / "best.pt")
        assert last.model_cfg.window == 16 and last.feature_cfg.normalize == "running"
        assert last.data_cfg.hard_negatives_from == str(whole / f"always-on-{kind}" / "round-0" / "best.pt")
        assert f"| streaming {kind} | " in text
    assert not list(whole.glob("always-on-ds-cnn")) + list(whole.glob("always-on-kuramoto"))
    assert "## Always-on detection" in text and (whole / "report" / "det.png").is_file()
    header = next(line for line in text.splitlines() if line.startswith("| model | test clips in streams"))
    assert [int(cell.split()[3]) for cell in header.split(" | ") if cell.startswith("recall at <=")] == [1, 5, 10]
    # DS-CNN, the baseline: MLPerf's 49 x 10 MFCC, its builtin int8 file in every interpreter, its firmware
    ds = json.loads((whole / "parity-ds-cnn" / "parity.json").read_text())
    assert ds["int8_file"] == "int8.tflite" and len(ds["int8_tflite_accuracy"]) == 3
    assert stage(whole, "train-ds-cnn")["results"]["attention"] == "ds-cnn"
    assert json.loads((whole / "export-ds-cnn" / "kws_ds_cnn" / "firmware.json").read_text())["calls"] > 0
    # Kuramoto, float only: float ONNX and TFLite, parity, accuracy where it runs (no ATAN2 in TFLite Micro),
    # its diagnostics and its latency column
    ku = json.loads((whole / "parity-kuramoto" / "parity.json").read_text())
    assert sorted(ku["float_tflite_accuracy"]) == ["ai-edge-litert", "tflite-runtime"]
    assert max(ku["float_tflite_max_abs"].values()) < 1e-4
    assert not (whole / "qat-kuramoto").exists() and not (whole / "estimate-kuramoto").exists()
    assert {"export-kuramoto/onnx/float.onnx", "export-kuramoto/tflite/float.tflite"} <= {
        f"export-kuramoto/{f}" for f in stage(whole, "export-kuramoto")["results"]["files"]}
    for section in ("Kuramoto attention", "kuramoto runs in float only", "global order in", "Kuramoto ms"):
        assert section in text, section
    # the pipeline's oscillator is the linear core: its int8.tflite (the builtin twin) runs in every
    # interpreter, and is checked against int8_custom.tflite (the linear op) in tflite-runtime
    parity = json.loads((whole / "parity-oscillator" / "parity.json").read_text())
    assert parity["int8_file"] == "int8.tflite" and len(parity["int8_tflite_accuracy"]) == 3
    assert 0 <= parity["custom_vs_int8"]["top1"] <= 1 and parity["custom_vs_int8"]["max_lsb"] >= 0
    assert 0 <= parity["int8_custom_accuracy"] <= 1 and "int8_custom.tflite (each oscillator core" in text
    whole_train = stage(whole, "train-oscillator")

    lines = []
    run_pipeline(cfg, whole, echo=lines.append)  # nothing changed: every stage skipped
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
    assert stage(tmp_path / "cut", "train-oscillator")["results"] == whole_train["results"]
    for name in ("export-oscillator", "parity-softmax", "report"):
        assert stage(tmp_path / "cut", name)["status"] == "done"

    # a changed option re-runs the stages that depend on it, not the others
    lines = []
    changed = tmp_path / "changed"
    shutil.copytree(whole, changed)
    run_pipeline(load_config(None, {**FAST, "qat.epochs": 2}), changed, echo=lines.append)
    assert "[train-oscillator] up to date, skipped" in lines and "[qat-oscillator] running ..." in lines


def test_the_readme_table_and_block_come_from_the_runs_report(whole, tmp_path):
    from edgeosc.report import README_MARKERS, readme_table
    r = json.loads((whole / "report" / "report.json").read_text())
    table = readme_table(r).splitlines()
    assert table[0] == "| | oscillator | softmax | DS-CNN (MLPerf Tiny's KWS model) | Kuramoto |"
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in table[2:]}
    assert all(len(cells) == 4 for cells in rows.values()), table  # a cell per kind
    # a row per figure the FAST run has (Cortex-M4 only: no M7 row); Kuramoto, float only, has its accuracy
    assert list(rows) == [
        "test accuracy, float / int8 QAT (measured)", "int8 file, tflite-runtime (measured)",
        "int8.tflite, builtin ops, ai-edge-litert / TFLite Micro (measured)", "parameters / MACs per inference",
        "int8 file size", "C firmware: flash (weights, tables, parameters) / RAM arena / stack (measured)",
        "latency, int8 file, tflite-runtime (measured here)", "latency, int8 file, ai-edge-litert (measured here)",
        "latency, int8.tflite, ai-edge-litert (measured here)",
        "Cortex-M4, STM32L4R5 @ 120 MHz, whole model (estimated)",
        "oscillator / softmax, oscillator / DS-CNN, Cortex-M4 energy (estimated)",
        f"always on, one frame a 20 ms hop, {r['scaling']['stream'][0]['window']}-frame window, STM32L4R5 (estimated)",
        "always on, recall at <= 5 false alarms an hour (measured; 0.005 h of keyword-free audio, trained 1+1 epochs: "
        "`[always_on]`)"]
    m = r["models"]
    for i, k in enumerate(r["kinds"]):  # the figures are the report's
        assert rows["test accuracy, float / int8 QAT (measured)"][i].startswith(
            f"{100 * m[k]['float']['test_accuracy']:.2f} / ")
    custom = m["oscillator"]["export"]["files"]["tflite/int8_custom.tflite"]
    assert rows["int8 file size"][0].startswith(f"{custom:,} B")
    assert rows["int8 file size"][3].strip(" |") == ""  # Kuramoto: no int8 file
    assert rows["latency, int8 file, ai-edge-litert (measured here)"][0].endswith("ms (int8_custom)")  # a delegate
    recall = r["always_on"]["oscillator"]["recall_at"]["5"]  # the streaming kinds' cells, the DS-CNN's none
    assert rows[list(rows)[-1]][0] == (f"{100 * recall['recall']:.2f}%" if recall else "not reached")
    assert rows[list(rows)[-1]][2].strip(" |") == ""

    # --write replaces the marked block and nothing else, and copies the run's plot beside the file
    begin, end = README_MARKERS
    before, after = "# title\n\ntext before\n\n", "\n\ntext after\n"
    readme = tmp_path / "README.md"
    readme.write_text(f"{before}{begin}\nan old table\n{end}{after}")
    res = CliRunner().invoke(main, ["report", "readme", str(whole), "--write", str(readme)])
    assert res.exit_code == 0, res.output
    text = readme.read_text()
    assert text.startswith(before + begin + "\n") and text.endswith(end + after) and "an old table" not in text
    block = text[len(before + begin):-len(end + after)]
    assert block.startswith(f"\nRun `{r['run']}` (report written {r['created']})") and readme_table(r) in block
    plot = tmp_path / "docs" / "images" / "demo-estimates.png"
    assert plot.read_bytes() == (whole / "report" / "estimates.png").read_bytes()
    assert "](docs/images/demo-estimates.png)" in block
    res = CliRunner().invoke(main, ["report", "readme", str(whole)])  # printed: the run's line, then the table
    assert res.exit_code == 0 and res.output.startswith("Run `") and res.output.endswith(readme_table(r))
    # without the markers, or with one twice: a one-line error naming the file, the file untouched
    for body in ("no markers here\n", f"{begin}\n{end}\n{begin}\n{end}\n"):
        bare = tmp_path / "bare.md"
        bare.write_text(body)
        res = CliRunner().invoke(main, ["report", "readme", str(whole), "--write", str(bare)])
        assert res.exit_code == 1 and str(bare) in res.output and begin in res.output, res.output
        assert bare.read_text() == body


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
                         ('kinds = ["transformer"]\n', "kinds must be"),
                         ('[always_on]\nmining_rounds = -1\n', "mining_rounds and eval_clips >= 0"),
                         ('[train\n', "cannot read the pipeline config")):
        bad.write_text(text)
        res = CliRunner().invoke(main, ["pipeline", "--config", str(bad), "--out", str(tmp_path / "run")])
        assert res.exit_code == 1 and needle in res.output and "bad.toml" in res.output, (text, res.output)
    res = CliRunner().invoke(main, ["pipeline", "--set", "train.lr=fast", "--out", str(tmp_path / "run")])
    assert res.exit_code == 1 and "TrainConfig.lr must be float" in res.output, res.output


def test_rpi_bundle_runs_in_a_fresh_venv_with_only_its_requirements(whole, tmp_path):
    res = CliRunner().invoke(main, ["deploy", str(whole), "--out", str(tmp_path / "bundle")])
    assert res.exit_code == 0, res.output
    bundle = tmp_path / "bundle"
    # every kind's int8.tflite runs in ai-edge-litert, the bundle's one interpreter; the oscillator's int8_custom.tflite
    # (its kernel built on the board with cc) only where tflite-runtime is installed besides
    assert (tmp_path / "bundle.tar.gz").is_file() and (bundle / "models" / "oscillator" / "int8_custom.tflite").is_file()
    reqs = (bundle / "requirements.txt").read_text()
    assert "torch" not in reqs and "tflite-runtime>" not in reqs and "ai-edge-litert" in reqs
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([venv / "bin" / "pip", "install", "-q", "-r", bundle / "requirements.txt"],
                         capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([bundle / "run_bench.sh", "--runs", "5", "--no-memory"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    results = list((bundle / "results").glob("bench-*.json"))
    assert len(results) == 1
    report = json.loads(results[0].read_text())
    runs = {(r["path"].split("/")[-2], r["runtime"]) for r in report["results"]}
    assert runs == {("oscillator", "ai-edge-litert"), ("softmax", "ai-edge-litert")}
    # back home: the board's numbers join the report, labelled with the board
    res = CliRunner().invoke(main, ["report", "write", str(whole), "--board", str(results[0])])
    assert res.exit_code == 0, res.output
    assert "## Measured on a board" in (whole / "report" / "report.md").read_text()


def planned_stages(overrides: dict, run) -> dict:
    """The pipeline's stages before the report, by name -> their inputs, without running them."""
    from edgeosc.pipeline import stages
    gen, planned = stages(load_config(None, overrides), run), {}
    stage = next(gen)
    while stage.name != "report":
        planned[stage.name] = stage.inputs
        stage = gen.send(dict(key=stage.name))
    return planned


def test_the_key_gate_is_the_oscillators_alone(tmp_path):
    planned = planned_stages({"model.key_gate": True}, tmp_path)
    assert planned["train-oscillator"]["model"]["key_gate"] and not planned["train-softmax"]["model"]["key_gate"]


def test_the_always_on_stage_is_each_streaming_kinds_and_can_be_turned_off(tmp_path):
    def names(overrides):
        return [n for n in planned_stages(overrides, tmp_path) if n.startswith("always-on")]
    assert names({}) == ["always-on-oscillator", "always-on-softmax"]  # DS-CNN has no streaming variant
    assert names({"model.form": "direct"}) == ["always-on-softmax"]  # nor the direct oscillator core
    assert names({"always_on.enabled": False}) == []


def test_fsdd_whole_clip_models_default_to_the_real_speech_front_end(tmp_path):
    """FSDD's whole-clip models, every kind alike, take the active-frame mean unless normalize is given and DS-CNN's
    10 MFCCs to 4 kHz unless n_mfcc or f_max is; the synthetic set and streaming models keep theirs; sweeps resolve
    the same way."""
    from edgeosc import sweep
    from edgeosc.config import FeatureConfig
    fsdd = {"data.dataset": "fsdd", "data.data_dir": str(tmp_path)}
    cfg = load_config(None, fsdd)
    assert cfg.features.normalize == cfg.dscnn_features.normalize == "active" and cfg.dscnn_features.n_mfcc == 10
    assert cfg.features == cfg.dscnn_features  # every kind on DS-CNN's front end: 10 MFCCs to 4 kHz
    logmel = load_config(None, {**fsdd, "features.n_mfcc": 0}).features  # given: the front end's group is the user's
    assert (logmel.n_mfcc, logmel.f_max, logmel.normalize) == (0, FeatureConfig().f_max, "active")
    assert load_config(None, {**fsdd, "model.attention": "ds-cnn"}).features.normalize == "active"
    assert load_config(None, {**fsdd, "features.normalize": "utterance"}).features.normalize == "utterance"
    assert load_config(None, {**fsdd, "model.window": 49, "model.attention": "softmax"}).features.normalize == \
        "utterance"
    assert load_config(None, {}).features.normalize == "utterance"
    data = {"dataset": "fsdd", "data_dir": str(tmp_path)}
    runs = sweep.expand({"data": data}, {"model.attention": ["oscillator", "ds-cnn"]})
    assert [cfgs["features"].normalize for _, cfgs in runs] == ["active", "active"]
    base = {"data": data, "features": {"normalize": "utterance"}}
    assert sweep.expand(base, {"train.seed": [0]})[0][1]["features"].normalize == "utterance"
