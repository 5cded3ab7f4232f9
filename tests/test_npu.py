"""Ethos-U NPUs through Vela (bench/npu.py): placement and estimates of a real int8 file, clear errors otherwise."""
import pytest
import torch
from click.testing import CliRunner

from edgeosc.config import ModelConfig, QuantConfig

pytest.importorskip("ethosu.vela")


@pytest.fixture(scope="module")
def softmax_int8(tmp_path_factory):
    """An untrained, calibrated softmax network's int8.tflite (LayerNorms as L2_NORMALIZATION, which U55 lacks)."""
    from edgeosc.export.tflite import Graph
    from edgeosc.models.kws import build_model
    from edgeosc.quant import calibrate, quantize_model
    torch.manual_seed(0)
    qat = quantize_model(build_model(ModelConfig(attention="softmax", n_classes=3, dropout=0.0)).eval(), QuantConfig())
    calibrate(qat, [(torch.randn(4, 49, 40), None)], 1)
    path = tmp_path_factory.mktemp("npu") / "int8.tflite"
    with torch.no_grad():
        path.write_bytes(Graph(qat.eval().net, qat).build())
    return path


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
    assert res.exit_code == 1 and "no export-KIND/tflite/int8.tflite" in res.output
