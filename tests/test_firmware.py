"""Firmware models: generated C (host gcc build) == TFLite Micro bit-exactly; kernel accuracy; Cortex-M builds.

Models: the conftest's briefly trained QAT oscillator, key-gated oscillator and softmax nets exported to
int8.tflite (and the oscillators' int8_custom.tflite), generated fused and op by op, plus one small graph per
op kind and the oscillator core's builtin chain (test_integer_kernels). Every output is compared with TFLite
Micro on >= 100 inputs: real features, random bytes, saturating and all-zero inputs. No tolerance: bit-exact.
"""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import flatbuffers
import numpy as np
import pytest
import torch

from edgeosc.integer import reference as R
from edgeosc.config import FeatureConfig
from edgeosc.cbuild import FIRMWARE
from edgeosc.export.c import generate
from edgeosc.export.tflite.builder import TFLiteBuilder
from edgeosc.runtime.tflite_file import schema
from edgeosc.runtime import load

from conftest import SHARED_DATA

if not (shutil.which("gcc") and shutil.which("make")):
    pytest.skip("gcc and make are needed to build the firmware", allow_module_level=True)
pytest.importorskip("tflite_micro")

from test_integer_kernels import POINTS, degenerate_case, inputs as core_inputs, osc_chain_model, \
    realistic_scales, tables  # noqa: E402

MAKE = ["make", "-s", "-j2", "-C", str(FIRMWARE), f"PYTHON={sys.executable}"]
rng = np.random.default_rng(0)


def make(build: Path, models, *targets, **variables) -> str:
    """make -C firmware_models with BUILD and MODELS set; its stdout (its stderr on failure)."""
    args = [f"BUILD={build}", f"MODELS={' '.join(map(str, models))}", *(f"{k}={v}" for k, v in variables.items())]
    res = subprocess.run([*MAKE, *args, *targets], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def host(exe: Path, samples: np.ndarray) -> np.ndarray:
    out = subprocess.run([str(exe)], input=np.ascontiguousarray(samples, np.int8).tobytes(), capture_output=True,
                         check=True).stdout.decode()
    return np.array([[int(v) for v in line.split()] for line in out.splitlines()], np.int64)


def tflm(path: Path, samples: np.ndarray) -> np.ndarray:
    """TFLite Micro on each sample (the graph inputs concatenated); outputs flattened and concatenated."""
    r = load(path, interpreter="tflite-micro")
    sizes = np.cumsum([int(np.prod(t.shape)) for t in r.inputs])[:-1]
    rows = []
    for s in samples:
        outs = r.run_raw(*[x.reshape(t.shape) for x, t in zip(np.split(s, sizes), r.inputs)])
        rows.append(np.concatenate([np.ravel(o) for o in (outs if isinstance(outs, list) else [outs])]))
    return np.array(rows, np.int64)


def random_samples(n: int, size: int) -> np.ndarray:
    x = rng.integers(-128, 128, (n, size))
    x[0], x[1], x[2] = 127, -128, 0  # saturating and all-zero inputs
    x[3, ::2], x[3, 1::2] = 127, -128
    return x.astype(np.int8)


# ---- one small graph per op kind -------------------------------------------------------------------------

def op_graphs() -> dict:
    """name -> .tflite bytes covering every kernel and option the exporter uses (and a few more)."""
    g = {}

    def graph(name, build):
        b = TFLiteBuilder()
        b.mark_output(build(b))
        g[name] = b.to_bytes()

    def fc(per_channel, act, zp_in, bias):
        def build(b):
            x = b.input("x", (1, 7, 24), np.int8, 0.07, zp_in)
            w = b.int8_weights("w", rng.standard_normal((10, 24)), axis=0) if per_channel else \
                b.const("w", rng.integers(-127, 128, (10, 24)), np.int8, 0.0123, 0)
            ws = b.quant(w)[0]
            bias_t = b.int32_bias("b", rng.standard_normal(10), 0.07, ws) if bias else None
            return b.fully_connected(x, w, bias_t, keep_num_dims=True, act=act, q=(0.09, -128 if act else 3))
        return build

    graph("fc_channel_relu", fc(True, "relu", -128, True))
    graph("fc_tensor_relu6", fc(False, "relu6", 5, True))
    graph("fc_tensor_nobias", fc(False, None, 0, False))
    for pad, stride, dil in (("SAME", 1, 1), ("VALID", 2, 1), ("SAME", (1, 2), (1, 2))):
        def conv(b, pad=pad, stride=stride, dil=dil):
            x = b.input("x", (1, 5, 19, 6), np.int8, 0.1, -3)
            w = b.int8_weights("w", rng.standard_normal((8, 3, 3, 6)), axis=0)
            bias = b.int32_bias("b", rng.standard_normal(8), 0.1, b.quant(w)[0])
            return b.conv_2d(x, w, bias, stride=stride, padding=pad, dilation=dil, q=(0.2, 1))
        graph(f"conv_{pad.lower()}_{np.prod(stride)}_{np.prod(dil)}", conv)
    for kind, sb in (("add", (1, 6, 16)), ("sub", (1, 6, 1)), ("mul", (3, 6, 1))):
        def binary(b, kind=kind, sb=sb):
            a = b.input("a", (3, 6, 16), np.int8, 0.05, -2)
            y = b.input("b", sb, np.int8, 0.31, 4)
            return getattr(b, kind)(a, y, q=(0.04 if kind == "mul" else 0.3, -5))
        graph(f"{kind}_broadcast", binary)
    graph("bmm_adj_y", lambda b: b.batch_matmul(b.input("a", (4, 9, 8), np.int8, 0.4, 0),
                                                  b.input("b", (4, 11, 8), np.int8, 0.05, 0), adj_y=True, q=(2.3, 0)))
    graph("bmm_const_rhs", lambda b: b.batch_matmul(b.input("a", (4, 9, 8), np.int8, 0.01, -128),
                                                      b.const("w", rng.integers(-128, 128, (8, 5)), np.int8, 0.02, 0),
                                                      q=(0.03, -128)))
    graph("l2norm", lambda b: b.l2_normalization(b.input("x", (6, 49), np.int8, 150.0, -128)))
    graph("softmax", lambda b: b.softmax(b.input("x", (5, 49), np.int8, 0.53, 0), beta=0.354))
    graph("transpose", lambda b: b.transpose(b.input("x", (2, 3, 4, 5), np.int8, 1.0, 0), [2, 0, 3, 1]))

    def lut_pool(b):  # CAST + ADD 128 + GATHER, then TRANSPOSE + one-valued FULLY_CONNECTED (the mean pool)
        x = b.input("x", (1, 49, 8), np.int8, 0.3, 0)
        idx = b.add(b.cast(x, np.int32), b.const("c128", np.array([128], np.int32)))
        t = b.gather(b.const("table", rng.integers(-128, 128, 256), np.int8, 0.02, -128), idx)
        t = b.transpose(t, [0, 2, 1])
        return b.fully_connected(t, b.const("ones", np.full((1, 49), 127, np.int8), np.int8, 1 / 49 / 127, 0),
                                 keep_num_dims=True, q=(0.01, -128))
    graph("lut_pool", lut_pool)
    return g


def single_output(model: bytes) -> bytes:
    """The model with only its first output (so the fused core pattern applies)."""
    m = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(model, 0))
    m.subgraphs[0].outputs = m.subgraphs[0].outputs[:1]
    b = flatbuffers.Builder(0)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def core_graphs() -> dict:
    """The oscillator core's builtin chain: every intermediate as an output (op by op), and out only (fused)."""
    shapes, sc, tabs, _ = degenerate_case()
    full = osc_chain_model(sc, shapes, tabs, "fully_connected")
    sc2 = realistic_scales(rng, 49, 8)
    return {"core_all": full, "core_fused": single_output(full),
            "core_bmm_fused": single_output(osc_chain_model(sc2, (4, 49, 8, 8, 8), tables(sc2, 8), "batch_matmul"))}


# ---- fixtures --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built(trained, tmp_path_factory):
    """Every model generated and built for the host: name -> (tflite path, model folder, executable)."""
    from edgeosc.export.tflite import Graph
    nets, held = trained
    root = tmp_path_factory.mktemp("firmware")
    files = {name: (data, None) for name, data in {**op_graphs(), **core_graphs()}.items()}
    with torch.no_grad():
        for kind, short in (("oscillator", "osc"), ("gated", "gat"), ("softmax", "sof")):
            qat = nets[kind]["qat"].eval()
            files[short] = (Graph(qat.net, qat).build(), FeatureConfig())
            files[f"{short}_ops"] = (files[short][0], FeatureConfig())
        for kind, short in (("oscillator", "osc"), ("gated", "gat")):
            qat = nets[kind]["qat"]
            files[f"{short}_custom"] = (Graph(qat.net, qat, custom_core=True).build(), FeatureConfig())
    models = {}
    for name, (data, features) in files.items():
        path = root / "tflite" / f"{name}.tflite"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        info = generate(path, root / "models" / name, fuse=not name.endswith("_ops"), features=features)
        models[name] = dict(tflite=path, dir=info["dir"], exe=root / "build" / "host" / name, info=info)
    make(root / "build", [m["dir"] for m in models.values()], "host")
    x = np.asarray(held, np.float32)  # 120 real feature clips, quantized as the model's input
    models["_inputs"] = x
    models["_root"] = root
    return models


def builtin_tflite(built, name: str) -> Path:
    """The builtin-op .tflite a model's firmware must match (TFLite Micro runs no custom op)."""
    return built[name.removesuffix("_custom")]["tflite"]


def model_inputs(built, name: str) -> np.ndarray:
    info = load(builtin_tflite(built, name), interpreter="tflite-micro").inputs[0]
    real = info.quantize(built["_inputs"]).reshape(len(built["_inputs"]), -1)
    return np.concatenate([real, random_samples(16, real.shape[1])])


# ---- bit-exactness ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["osc", "osc_ops", "osc_custom", "gat", "gat_ops", "gat_custom", "sof", "sof_ops"])
def test_model_matches_tflite_micro(built, name):
    x = model_inputs(built, name)
    assert len(x) >= 100
    want = tflm(builtin_tflite(built, name), x)
    got = host(built[name]["exe"], x)
    assert got.shape == want.shape and len(np.unique(want, axis=0)) > 50  # varied logits
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", list(op_graphs()))
def test_op_kernel_matches_tflite_micro(built, name):
    size = sum(int(np.prod(t.shape)) for t in load(built[name]["tflite"], interpreter="tflite-micro").inputs)
    x = random_samples(100, size)
    np.testing.assert_array_equal(host(built[name]["exe"], x), tflm(built[name]["tflite"], x))


def test_oscillator_core_matches_reference_and_tflite_micro(built):
    """Every intermediate (op by op) and the fused core's output == the integer reference (TFLite Micro target) == TFLM,
    with rows whose h is 0 (z = 0: TFLite's L2 norm treats a zero sum of squares as 1) and saturating rows."""
    shapes, sc, tabs, xs = degenerate_case()
    p = R.osc_quant_from_scales(sc, *tabs, sum_op="fully_connected", target_name="tflite-micro")
    samples = [xs] + [core_inputs(rng, *shapes) for _ in range(99)]
    samples += [[np.full_like(x, v) for x in xs] for v in (127, -128, 0)]
    flat = np.array([np.concatenate([x.ravel() for x in s]) for s in samples], np.int8)

    def reference(s):  # the chain's graph outputs: out, then the intermediates
        out, t = R.oscillator_core_int8(p, *s, return_all=True)
        return np.concatenate([out.ravel()] + [t[n].ravel() for n in POINTS[1:]])

    want_all = np.array([reference(s) for s in samples], np.int64)
    assert np.all(R.oscillator_core_int8(p, *xs, return_all=True)[1]["h"][0, :5] == 0)
    np.testing.assert_array_equal(host(built["core_all"]["exe"], flat), want_all)
    np.testing.assert_array_equal(tflm(built["core_all"]["tflite"], flat), want_all)
    n_out = np.prod(xs[2].shape)
    np.testing.assert_array_equal(host(built["core_fused"]["exe"], flat), want_all[:, :n_out])
    assert "edgeosc_oscillator_core_int8" in (built["core_fused"]["dir"] / "core_fused_model.c").read_text()
    flat4 = np.array([np.concatenate([x.ravel() for x in core_inputs(rng, 4, 49, 8, 8, 8)]) for _ in range(50)])
    bmm = built["core_bmm_fused"]
    np.testing.assert_array_equal(host(bmm["exe"], flat4), tflm(bmm["tflite"], flat4))


@pytest.mark.parametrize("name, core", [("osc", "oscillator"), ("gat", "oscillator_gated")])
def test_arena_is_planned(built, name, core):
    """Fused cores keep one row of scores instead of [H, T, T] tensors; reused buffers shrink the arena."""
    fused, ops = built[name]["info"], built[f"{name}_ops"]["info"]
    assert fused["arena_bytes"] < ops["arena_bytes"] and fused["arena_bytes"] < 12 * 1024
    header = (built[name]["dir"] / f"{name}_model.h").read_text()
    assert f"#define {name.upper()}_ARENA_BYTES {fused['arena_bytes']}" in header
    code = (built[name]["dir"] / f"{name}_model.c").read_text()
    assert code.count(f"edgeosc_{core}_core_int8(") == 2  # one per block


# ---- accuracy of the integer functions ---------------------------------------------------------------------

def test_rsqrt_exp_reciprocal_accuracy(built):
    """Bounds over the whole input ranges (edgeosc_accuracy.c): rsqrt relative 1.5e-6 on [2, 2^31) (exhaustive
    up to 2^24, every sum of squares a row of <= 258 int8 differences can give); exp 2.5e-7 absolute on
    [-32, 0]; 1/(1+x) 4e-9 absolute on [0, 1)."""
    out = subprocess.run([str(built["_root"] / "build" / "host" / "edgeosc_accuracy")], capture_output=True,
                         text=True, check=True).stdout
    err = {m[0]: float(m[1]) for m in re.findall(r"^(\w+) max_error (\S+)", out, re.M)}
    assert err["rsqrt"] < 1.5e-6 and err["exp"] < 2.5e-7 * 2 ** 31 and err["recip"] < 4e-9 * 2 ** 31, out


def test_exp_table_and_l2norm_accuracy(built):
    """The softmax model's exp tables: all 256 entries within 2.5e-7 of exp(-d s beta); l2norm within 1 LSB."""
    text = (built["sof"]["dir"] / "sof_settings.h").read_text()
    for beta_mult, shift, diff_min in re.findall(r"\.beta_multiplier = (\d+), \.beta_left_shift = (\d+), "
                                                 r"\.diff_min = (-?\d+)", text):
        table = R.softmax_exp_table(int(beta_mult), int(shift), int(diff_min)).astype(np.float64) / 2 ** 31
        x = -np.arange(256) * int(beta_mult) * 2.0 ** (int(shift) - 31 - 26)  # diff * s_qk * beta
        valid = -np.arange(256) >= int(diff_min)
        assert np.max(np.abs(table - np.exp(x))[valid]) < 2.5e-7 and np.all(table[~valid] == 0)
    for x in (rng.integers(-128, 128, (2000, 49)), rng.integers(-2, 3, (2000, 8)), np.full((2, 32), 127)):
        norm = np.sqrt((x.astype(np.float64) ** 2).sum(-1, keepdims=True))
        want = np.clip(np.round(128 * x / np.maximum(norm, 1)), -128, 127)  # all-zero rows stay 0
        assert np.max(np.abs(R.l2norm_int8(x.astype(np.int8)) - want)) <= 1


# ---- front end -------------------------------------------------------------------------------------------

def frontend_lib(tables_c: Path, symbol: str):
    """The C front end with a generated tables file (<name>_frontend.c), loaded with ctypes; its EdgeoscFrontend."""
    import ctypes

    from edgeosc.cbuild import FRONTEND, build_shared

    lib = ctypes.CDLL(str(build_shared([FRONTEND / "edgeosc_frontend.c", tables_c], "edgeosc_frontend_test",
                                       include_dirs=[FRONTEND])))
    return lib, ctypes.c_void_p(ctypes.addressof(ctypes.c_char.in_dll(lib, symbol)))


def tables_of(cfg: FeatureConfig, tmp_path: Path) -> Path:
    from edgeosc.export.c import frontend_source

    (tmp_path / "fe_frontend.c").write_text(frontend_source(cfg, "fe", ""))
    return tmp_path / "fe_frontend.c"


def frontend_error(lib, frontend, cfg: FeatureConfig) -> float:
    """Largest |C front end - features.py| over real speech clips with digital silence."""
    import ctypes

    from edgeosc.features import features_numpy
    from scipy.io import wavfile

    clips = sorted((SHARED_DATA / "speech_commands_sample").rglob("*.wav"))[:8]
    if not clips:
        pytest.skip(f"no Speech Commands clips under {SHARED_DATA}")
    scratch = np.zeros(cfg.frame_length + cfg.frame_length // 2 + 1 + cfg.n_frames, np.float32)  # CLIP_SCRATCH
    worst = 0.0
    for f in clips:
        pcm = wavfile.read(f)[1][:cfg.clip_samples]
        pcm = np.ascontiguousarray(np.pad(pcm, (0, cfg.clip_samples - len(pcm))), np.int16)
        pcm[12000:] = 0  # digital silence: the log's floor, below any floor_db
        got = np.zeros((cfg.n_frames, cfg.n_coeffs), np.float32)
        lib.edgeosc_frontend_clip(frontend, pcm.ctypes.data_as(ctypes.c_void_p), got.ctypes.data_as(ctypes.c_void_p),
                                  scratch.ctypes.data_as(ctypes.c_void_p))
        worst = max(worst, float(np.abs(got - features_numpy(pcm.astype(np.float32) / 32768, cfg)).max()))
    return worst


@pytest.mark.parametrize("cfg", [FeatureConfig(), FeatureConfig(floor_db=30.0), FeatureConfig(normalize="active"),
                                 FeatureConfig(floor_db=40.0, normalize="active"), FeatureConfig(normalize="running"),
                                 FeatureConfig(n_mfcc=10, f_max=4000.0, normalize="active")],
                         ids=["log-mel", "floor-30dB", "active-mean", "floor-40dB-active-mean", "running-mean",
                              "mfcc-active-mean"])
def test_frontend_matches_features(cfg, tmp_path):
    """edgeosc_frontend_clip (float32 C) == features.py within 2e-3 (as arm_mfcc_f32 is) on real speech with
    digital silence."""
    assert frontend_error(*frontend_lib(tables_of(cfg, tmp_path), "fe_frontend"), cfg) < 2e-3


@pytest.mark.parametrize("cfg", [FeatureConfig(normalize="active", floor_db=30.0), FeatureConfig(n_mfcc=13),
                                 FeatureConfig(n_mfcc=10, normalize="none", hop_length=640)],
                         ids=["active-floor-30dB", "mfcc-13", "mfcc-10-hop-40ms-no-mean"])
def test_exported_firmware_computes_the_checkpoints_features(cfg, tmp_path):
    """`export(checkpoint, ..., "c")` writes the front end of the features the model was trained with, not a
    default one: the generated <name>_frontend.c equals features.py on real clips."""
    from edgeosc.checkpoint import Checkpoint
    from edgeosc.config import DIRECT_OSCILLATOR, ExportConfig, ModelConfig, QuantConfig
    from edgeosc.export import export
    from edgeosc.models.kws import build_model
    from edgeosc.quant import calibrate, quantize_model

    torch.manual_seed(0)
    net = build_model(ModelConfig(n_classes=3, n_frames=cfg.n_frames, n_coeffs=cfg.n_coeffs, dropout=0.0,
                                  **DIRECT_OSCILLATOR))
    qat = quantize_model(net, QuantConfig())
    calibrate(qat, [(torch.randn(8, cfg.n_frames, cfg.n_coeffs), None)], 1)
    out = export(Checkpoint.of(qat.eval(), cfg, ["a", "b", "c"]), ExportConfig(), tmp_path / "kws", "c")
    assert frontend_error(*frontend_lib(out / "kws_frontend.c", "kws_frontend"), cfg) < 2e-3


def test_logf_accuracy(tmp_path):
    import ctypes

    lib, _ = frontend_lib(tables_of(FeatureConfig(), tmp_path), "fe_frontend")
    lib.edgeosc_logf.restype, lib.edgeosc_logf.argtypes = ctypes.c_float, [ctypes.c_float]
    xs = np.float32(10.0) ** rng.uniform(-7, 4, 2000).astype(np.float32)
    logs = np.array([lib.edgeosc_logf(float(v)) for v in xs], np.float32)
    assert np.max(np.abs(logs - np.log(xs.astype(np.float64))) / np.spacing(np.abs(np.log(xs)))) <= 2


# ---- Cortex-M --------------------------------------------------------------------------------------------

def cross_compiler() -> str | None:
    if shutil.which("arm-none-eabi-gcc"):
        return "arm-none-eabi-gcc"
    zig = subprocess.run([sys.executable, "-m", "ziglang", "version"], capture_output=True)
    return "ziglang" if zig.returncode == 0 else None


@pytest.mark.parametrize("cpu, board", [("cortex-m4", "mps2-an386"), ("cortex-m7", "mps2-an500")])
def test_cortex_m_build_sizes_and_qemu(built, cpu, board):
    """-Wall -Wextra -Werror cross build; sizes; on QEMU (if installed) the outputs equal the host build's."""
    if cross_compiler() is None:
        pytest.skip("neither arm-none-eabi-gcc nor ziglang (pip install ziglang) is installed")
    names = ["osc", "sof"]
    build, dirs = built["_root"] / "build", [built[n]["dir"] for n in names]
    make(build, dirs, cpu)
    sizes = make(build, dirs, "sizes", CPU=cpu)
    print(sizes)
    for n in names:
        row = next(line for line in sizes.splitlines() if line.endswith(f"{n}.elf")).split()
        text, data, bss = map(int, row[:3])
        assert 30_000 < text < 200_000 and bss >= built[n]["info"]["arena_bytes"]
    if shutil.which("qemu-system-arm") is None:
        pytest.skip("qemu-system-arm is not installed: built and sized, not run")
    for n in names:
        x = model_inputs(built, n)[::4]
        inputs = build / f"{n}_inputs.bin"
        inputs.write_bytes(x.tobytes())
        run = subprocess.run(["qemu-system-arm", "-M", board, "-nographic", "-monitor", "none", "-serial", "none",
                              "-semihosting-config", "enable=on,target=native", "-kernel",
                              str(build / cpu / f"{n}.elf"), "-append", str(inputs)],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-500:]
        got = np.array([[int(v) for v in line.split()] for line in run.stderr.splitlines()])
        np.testing.assert_array_equal(got, host(built[n]["exe"], x))


# ---- CLI and instruction counts --------------------------------------------------------------------------

def test_cli_export_c(built, tmp_path):
    from click.testing import CliRunner

    from edgeosc.cli import main
    args = ["export", "--format", "c", str(built["sof"]["tflite"]), "--out", str(tmp_path / "kws")]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "RAM:" in res.output and (tmp_path / "kws" / "kws_model.c").is_file()


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_callgrind_counts_are_deterministic():
    from edgeosc.bench.callgrind import attention_instructions
    a, b = attention_instructions(tokens=12, heads=2), attention_instructions(tokens=12, heads=2)
    assert a == b and a["softmax_lut"] < a["softmax"] and a["oscillator"] > 0

