import json

import numpy as np
import pytest
from click.testing import CliRunner

from edgeosc import runtime
from edgeosc.cli import main
from edgeosc.config import ExportConfig
from edgeosc.export import export
from edgeosc.export.parity import custom_parity, float_parity, int8_parity
from edgeosc.export.tflite import CUSTOM_OP, FILES, NPU_FILE
from edgeosc.runtime.tflite_file import TYPE_NAMES, ModelFileError, check_tflite, schema

INTERPRETERS = ("ai-edge-litert", "tflite-runtime", "tflite-micro")
pytestmark = pytest.mark.skipif(any(i not in runtime.available_interpreters() for i in INTERPRETERS),
                                reason="needs all three TFLite interpreters (pip install -e '.[test]')")
# int8.tflite vs the QAT model, in output LSBs. ai-edge-litert's default XNNPACK delegate requantizes in
# float32 with round-half-to-even like Brevitas' fake quantization: it matches QAT (all but the odd tie).
# tflite-runtime and TFLite Micro requantize with TFLite's fixed-point multiplier, rounding twice (to 31 bits,
# then the shift, ties away from zero); a value within that rounding of a tie lands one step away, and a
# step of zr or csum moves the (1 + zr)^p and 1/csum tables by a few steps: a mean under one LSB, rare
# larger outliers.
MEAN_LSB, MAX_LSB, BETWEEN_LSB = 1.0, 12, 12


@pytest.fixture(scope="module")
def files(trained, tmp_path_factory):
    models, held = trained
    out = {kind: dict(m, dir=export(m["ckpt"], ExportConfig(), tmp_path_factory.mktemp(kind), "tflite"))
           for kind, m in models.items()}
    return out, held.numpy()


def tensors(path) -> list[tuple[str, str, list]]:
    """(name, type, scales) of every tensor, read with the schema."""
    model = schema.ModelT.InitFromPackedBuf(bytearray(path.read_bytes()), 0)
    return [(t.name.decode(), TYPE_NAMES[t.type], list(t.quantization.scale) if t.quantization is not None and
             t.quantization.scale is not None else []) for t in model.subgraphs[0].tensors]


@pytest.mark.parametrize("kind", ["oscillator", "gated", "softmax"])
def test_files_pass_the_structural_check(files, kind):
    files, _ = files
    folder = files[kind]["dir"]
    names = sorted(p.name for p in folder.glob("*.tflite"))
    assert names == sorted(FILES if kind != "softmax" else FILES[:3])
    for name in names:
        info = check_tflite(folder / name)
        (inp,), (out,) = info["subgraphs"][0]["inputs"], info["subgraphs"][0]["outputs"]
        assert inp["shape"] == [1, 49, 40] and out["shape"] == [1, 3]
        ts = tensors(folder / name)
        if name == "float.tflite":
            assert {t for _, t, _ in ts} <= {"FLOAT32", "INT32"} and not info["custom_ops"]
            continue
        assert inp["dtype"] == out["dtype"] == "int8" and inp["scale"] and out["scale"]
        assert all(scales for _, t, scales in ts if t == "INT8")  # quantization on every int8 tensor
        biases = [scales for n, t, scales in ts if t == "INT32" and n.endswith("/bias")]
        assert biases and all(biases)  # int32 biases with their scales
        ops = set(info["builtin_ops"])
        if name == "int8_custom.tflite":
            assert info["custom_ops"] == [CUSTOM_OP] and "L2_NORMALIZATION" in ops  # anchors and LayerNorm
        else:
            assert not info["custom_ops"]
            assert ("SOFTMAX" in ops) == (kind == "softmax")
            npu = {"SUM", "RSQRT"} if name == NPU_FILE else set()
            assert ops <= {"RESHAPE", "TRANSPOSE", "CONV_2D", "FULLY_CONNECTED", "ADD", "SUB", "MUL",
                           "L2_NORMALIZATION", "BATCH_MATMUL", "CAST", "GATHER", "SOFTMAX"} | npu, ops
            assert npu <= ops


@pytest.mark.parametrize("kind", ["oscillator", "gated", "softmax"])
def test_the_npu_file_is_int8_tflite_with_its_layer_norms_as_npu_passes(files, kind):
    """int8_npu.tflite: each LayerNorm's L2_NORMALIZATION (2 a block and the last) becomes three RSQRT passes; the
    direct core's unit vectors (r, the rows of w, z; gn, cn) stay L2_NORMALIZATION; every other operator is
    int8.tflite's."""
    files, _ = files
    folder, blocks = files[kind]["dir"], len(files[kind]["qat"].net.blocks)
    ops = {name: check_tflite(folder / name)["subgraphs"][0]["operators"] for name in ("int8.tflite", NPU_FILE)}
    norms = 2 * blocks + 1
    assert "RSQRT" not in ops["int8.tflite"] and ops[NPU_FILE].count("RSQRT") == 3 * norms
    assert ops[NPU_FILE].count("L2_NORMALIZATION") == ops["int8.tflite"].count("L2_NORMALIZATION") - norms
    assert (kind == "softmax") == ("L2_NORMALIZATION" not in ops[NPU_FILE])  # softmax's were its LayerNorms only
    others = lambda o: sorted(op for op in o if op not in ("L2_NORMALIZATION", "MUL", "SUM", "RSQRT"))  # noqa: E731
    assert others(ops[NPU_FILE]) == others(ops["int8.tflite"])
    assert ops[NPU_FILE].count("MUL") == ops["int8.tflite"].count("MUL") + 6 * norms


@pytest.mark.parametrize("kind", ["oscillator", "gated", "softmax"])
def test_the_npu_file_agrees_with_int8_tflite_in_every_interpreter(files, kind):
    """int8_npu.tflite against int8.tflite on the held-out clips, in output LSBs. The passes leave a LayerNorm's unit
    vector ~1.2 steps off where L2_NORMALIZATION is 0.5 (test_tflite_builder), i.e. a step of a LayerNorm output here
    and there, which moves the logits as a requantization tie does between interpreters: measured mean 0.18-0.29,
    max 1-6 (the gated core's gate tables magnify a step most), the same class on every clip. Bounds: half of
    MEAN_LSB (QAT against int8.tflite), BETWEEN_LSB (one interpreter against another) and int8_parity's top-1."""
    files, held = files
    folder = files[kind]["dir"]
    for name in INTERPRETERS:
        a, b = (runtime.load(folder / f, name) for f in ("int8.tflite", NPU_FILE))
        x = a.inputs[0].quantize(held)
        ya, yb = a.run_raw(x).astype(int), b.run_raw(x).astype(int)
        d = np.abs(ya - yb)
        assert d.mean() <= MEAN_LSB / 2 and d.max() <= BETWEEN_LSB, (name, d.mean(), d.max())
        assert (ya.argmax(-1) == yb.argmax(-1)).mean() >= 0.99, name


@pytest.mark.parametrize("kind", ["oscillator", "gated", "softmax"])
def test_float_tflite_matches_the_float_model_in_every_interpreter(files, kind):
    files, held = files
    report = float_parity(files[kind]["float"], files[kind]["dir"] / "float.tflite", held[:16])
    assert set(report) >= set(INTERPRETERS)
    assert max(report.values()) <= 1e-4, report


@pytest.mark.parametrize("kind", ["oscillator", "gated", "softmax"])
def test_int8_tflite_matches_qat_in_every_interpreter(files, kind):
    files, held = files
    report = int8_parity(files[kind]["qat"], files[kind]["dir"] / "int8.tflite", held)
    per = report["interpreters"]
    assert set(per) >= set(INTERPRETERS)
    for name, r in per.items():
        assert r["top1"] >= 0.99 and r["mean_lsb"] <= MEAN_LSB and r["max_lsb"] <= MAX_LSB, (name, report)
    assert per["ai-edge-litert"]["mean_lsb"] <= 0.05, report  # float32 requantization, as QAT
    assert max(report["between"].values()) <= BETWEEN_LSB, report


@pytest.mark.parametrize("kind", ["oscillator", "gated"])
def test_custom_op_kernel_matches_the_builtin_graph(files, kind):
    files, held = files
    folder = files[kind]["dir"]
    assert custom_parity(folder / "int8.tflite", folder / "int8_custom.tflite", held)["max_lsb"] <= 1


def test_litert_runs_the_op_as_a_delegate_bit_for_bit(files):
    """ai-edge-litert cannot register EdgeOscAttention from Python; it loads the op's kernel as a delegate
    (export/tflite_op/edgeosc_tflite_delegate.c) and gives tflite-runtime's integers with the op registered."""
    files, held = files
    path = files["oscillator"]["dir"] / "int8_custom.tflite"
    litert, tfrt = (runtime.load(path, name, xnnpack=False) for name in ("ai-edge-litert", "tflite-runtime"))
    x = litert.inputs[0].quantize(held)
    np.testing.assert_array_equal(litert.run_raw(x), tfrt.run_raw(x))
    assert runtime.interpreters_for(path) == ["ai-edge-litert", "tflite-runtime"]


def test_malformed_files_give_clear_errors(files, tmp_path):
    files, held = files
    good = (files["oscillator"]["dir"] / "int8.tflite").read_bytes()
    for name, data in (("empty.tflite", b""), ("cut.tflite", good[: len(good) // 3]),
                       ("junk.tflite", bytes(np.random.default_rng(0).integers(0, 256, 4096, np.uint8)))):
        (tmp_path / name).write_bytes(data)
        for interp in INTERPRETERS:
            with pytest.raises(ModelFileError, match=name):
                runtime.load(tmp_path / name, interp)
    with pytest.raises(runtime.InterpreterUnavailable, match="custom op"):
        runtime.load(files["oscillator"]["dir"] / "int8_custom.tflite", "tflite-micro")


def test_export_command_writes_tflite_with_a_manifest(tmp_path, tones, data_cfg, monkeypatch):
    from edgeosc.config import FeatureConfig, ModelConfig, TrainConfig
    from edgeosc.train import train
    train(tones, tmp_path / "float", model_cfg=ModelConfig(size="small"), feature_cfg=FeatureConfig(),
          train_cfg=TrainConfig(epochs=1, batch_size=8, lr=1e-2), data_cfg=data_cfg, progress=False)
    res = CliRunner().invoke(main, ["export", str(tmp_path / "float"), "--format", "tflite"])
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "float" / "export-tflite" / "manifest.json").read_text())
    assert list(manifest["files"]) == ["float.tflite"] and manifest["target"] == "tflite"
    assert manifest["tools"]["tflite-runtime"] and "float.tflite" in res.output


def test_latency_compare_covers_every_interpreter(files):
    from edgeosc.bench.latency import compare
    files, _ = files
    lines = []
    rows = compare(files["oscillator"]["dir"], files["softmax"]["dir"], runs=3, echo=lines.append)
    got = {(r["file"], r["runtime"]) for r in rows}
    assert {(f, i) for f in ("float.tflite", "int8.tflite") for i in INTERPRETERS} <= got
    assert {("int8_custom.tflite", "tflite-runtime"), ("int8_custom.tflite", "ai-edge-litert")} <= got  # vs int8
    assert all(r["oscillator"]["median_ms"] > 0 and r["ratio"] > 0 for r in rows) and "ratio" in lines[1]


def test_bench_reports_latency_memory_and_system(files, tmp_path):
    files, _ = files
    model = files["oscillator"]["dir"] / "int8.tflite"
    res = CliRunner().invoke(main, ["bench", "models", str(model), "--runs", "5", "--runtime", "tflite-micro",
                                    "--runtime", "tflite-runtime", "--json", str(tmp_path / "b.json")])
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "b.json").read_text())
    assert set(report["system"]) >= {"cpu", "cores", "governor", "os", "python", "runtimes"}
    assert report["system"]["runtimes"]["tflite-micro"]
    assert [r["runtime"] for r in report["results"]] == ["tflite-micro", "tflite-runtime"]
    for r in report["results"]:
        assert 0 < r["min_ms"] <= r["median_ms"] <= r["p90_ms"] <= r["p99_ms"] and r["runs"] == 5
        assert r["bytes"] == model.stat().st_size and r["memory_bytes"] > 0 and r["threads"] == 1


class StepMonitor:
    """A fake power monitor: 1 W for the first second (the idle window), 3 W after; a trace spanning the run."""

    name = "fake"

    def __enter__(self):
        import time
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        import time
        from edgeosc.bench.power import PowerTrace
        # 10 us samples: the 1 W -> 3 W step is interpolated over one sample, which at 1 ms cost a short
        # active window (50 fast runs, ~18 ms) 3.6% of its power (active 2.964 W measured, against 3 +- 0.01)
        t = np.arange(self.t0 - 0.1, time.perf_counter() + 0.1, 1e-5)
        self.trace = PowerTrace(t, np.where(t < self.t0 + 1.0, 1.0, 3.0), "fake")


def test_bench_measures_energy_per_inference_with_a_power_monitor(files):
    from edgeosc.bench.latency import bench
    files, _ = files
    report = bench([files["softmax"]["dir"] / "int8.tflite"], ["tflite-runtime"], runs=50, warmup=2, memory=False,
                   power=StepMonitor)
    e = report["results"][0]["energy"]
    assert e["idle_w"] == pytest.approx(1.0, abs=0.01) and e["active_w"] == pytest.approx(3.0, abs=0.01)
    assert e["joules_per_inference"] == pytest.approx(2.0 * e["seconds"] / e["runs"], rel=0.02) and e["runs"] == 50


def test_bench_without_its_power_sensor_says_so_in_one_line(files, monkeypatch):
    files, _ = files
    monkeypatch.setattr("edgeosc.bench.power._vcgencmd_pmic", lambda: (_ for _ in ()).throw(
        RuntimeError("vcgencmd not found")))
    res = CliRunner().invoke(main, ["bench", "models", str(files["softmax"]["dir"] / "int8.tflite"), "--power", "pmic"])
    assert res.exit_code == 1 and "--power pmic: vcgencmd not found" in res.output and len(res.output.splitlines()) == 1
