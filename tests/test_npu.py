"""Ethos-U NPUs through Vela (bench/npu.py): placement and estimates of a real int8 file, clear errors otherwise;
the export's NPU file (int8_npu.tflite), which the npu stage and `bench npu RUN` compile."""
import json

import pytest
import torch
from click.testing import CliRunner

from edgeosc.config import ExportConfig, FeatureConfig, ModelConfig, QuantConfig

pytest.importorskip("ethosu.vela")


@pytest.fixture(scope="module")
def softmax_run(tmp_path_factory):
    """A run folder with an untrained, calibrated softmax network's TFLite export: int8.tflite (LayerNorms as
    L2_NORMALIZATION, which the Ethos-U NPUs lack) and int8_npu.tflite (LayerNorms as the NPU passes)."""
    from edgeosc.checkpoint import Checkpoint
    from edgeosc.export import export
    from edgeosc.models.kws import build_model
    from edgeosc.quant import calibrate, quantize_model
    torch.manual_seed(0)
    qat = quantize_model(build_model(ModelConfig(attention="softmax", n_classes=3, dropout=0.0)).eval(), QuantConfig())
    calibrate(qat, [(torch.randn(4, 49, 40), None)], 1)
    run = tmp_path_factory.mktemp("run")
    with torch.no_grad():
        export(Checkpoint.of(qat.eval(), FeatureConfig(), ("a", "b", "c")), ExportConfig(),
               run / "export-softmax" / "tflite", "tflite")
    return run


@pytest.fixture(scope="module")
def softmax_int8(softmax_run):
    return softmax_run / "export-softmax" / "tflite" / "int8.tflite"


def test_vela_places_operators_and_names_the_ones_left_to_the_cpu(softmax_int8):
    from edgeosc.bench import npu
    row = npu.compile_model(softmax_int8, "ethos-u55-128")
    assert row["operators"] == row["npu_operators"] + row["cpu_operators"] > 0
    assert row["cpu_operators"] == len(row["on_cpu"]) > 0
    assert {o["op"] for o in row["on_cpu"]} == {"L2_NORMALIZATION"}
    assert row["cycles_total"] >= row["cycles_npu"] > 0 and row["inference_ms"] > 0 and row["sram_kib"] > 0
    assert row["system_config"] == "Ethos_U55_High_End_Embedded"


def test_bench_npu_cli_reports_each_accelerator_and_refuses_a_bad_file(softmax_int8, tmp_path):
    from edgeosc.cli import main
    res = CliRunner().invoke(main, ["bench", "npu", str(softmax_int8), "--json", str(tmp_path / "n.json")])
    assert res.exit_code == 0, res.output
    assert "ethos-u55-128" in res.output and "ethos-u85-256" in res.output and "L2_NORMALIZATION x" in res.output
    assert (tmp_path / "n.json").is_file()
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"not a flatbuffer")
    res = CliRunner().invoke(main, ["bench", "npu", str(bad)])
    assert res.exit_code == 1 and "bad.tflite: Vela could not compile it" in res.output
    res = CliRunner().invoke(main, ["bench", "npu", str(tmp_path)])
    assert res.exit_code == 1 and "no export-KIND/tflite/int8_npu.tflite or int8.tflite" in res.output


def test_bench_npu_of_a_run_compiles_the_npu_file_all_on_the_npus(softmax_run, tmp_path):
    """A run folder: each kind's int8_npu.tflite, named in the table; softmax's every operator on both NPUs."""
    from edgeosc.cli import main
    res = CliRunner().invoke(main, ["bench", "npu", str(softmax_run), "--json", str(tmp_path / "n.json")])
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "n.json").read_text())["rows"]
    assert sorted(r["accelerator"] for r in rows) == ["ethos-u55-128", "ethos-u85-256"]
    for r in rows:
        assert r["model"].endswith("export-softmax/tflite/int8_npu.tflite"), r["model"]
        assert r["cpu_operators"] == 0 and not r["on_cpu"] and r["npu_operators"] == r["operators"] > 100, r
    assert "| int8_npu.tflite | ethos-u55-128 |" in res.output and "on the CPU" not in res.output


def test_the_npu_stage_compiles_int8_npu_tflite_else_int8_tflite(tmp_path, monkeypatch):
    """The pipeline's npu stage: a transformer's int8_npu.tflite, DS-CNN's int8.tflite (it has no NPU file), nothing
    of a float-only kind."""
    from types import SimpleNamespace

    from edgeosc import stages
    from edgeosc.bench import npu
    run = tmp_path / "run"
    for kind, names in (("softmax", ("int8.tflite", "int8_npu.tflite")), ("ds-cnn", ("int8.tflite",)),
                        ("kuramoto", ("float.tflite",))):
        (run / f"export-{kind}" / "tflite").mkdir(parents=True)
        for name in names:  # only the names are read: compile_models is stubbed
            (run / f"export-{kind}" / "tflite" / name).write_bytes(b"")
    seen = {}
    monkeypatch.setattr(npu, "compile_models", lambda files: seen.update(files) or [])
    stages.npu(SimpleNamespace(kinds=("softmax", "ds-cnn", "kuramoto")), run, tmp_path)
    assert {k: (f.parent.parent.name, f.name) for k, f in seen.items()} == {
        "softmax": ("export-softmax", "int8_npu.tflite"), "ds-cnn": ("export-ds-cnn", "int8.tflite")}
