import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from edgeosc.config import DIRECT_OSCILLATOR, DataConfig, FeatureConfig, ModelConfig, QuantConfig
from edgeosc.data.clipset import ClipSet

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"


def run_custom(model: bytes, xs):
    """A .tflite (bytes) with the EdgeOscAttention op, in tflite-runtime with its kernel registered: the first output."""
    tfl = pytest.importorskip("tflite_runtime.interpreter")
    from edgeosc.runtime import custom_op

    it = tfl.InterpreterWithCustomOps(model_content=model, custom_op_registerers=[custom_op.register])
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), xs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def tone_clipset(n_per_class: int = 12, classes: int = 3, seed: int = 0) -> ClipSet:
    """A tiny learnable set: class c is a 0.4 s tone burst at 400 (c + 1) Hz in noise; speakers split by index."""
    rng = np.random.default_rng(seed)
    t = np.arange(16000) / 16000
    audio, labels, groups, split = [], [], [], []
    for c in range(classes):
        for i in range(n_per_class):
            burst = (t > 0.3) & (t < 0.7)  # not stationary: survives per-clip mean subtraction
            x = 0.3 * burst * np.sin(2 * np.pi * 400 * (c + 1) * t + rng.uniform(0, 6))
            x = x + 0.02 * rng.standard_normal(16000)
            audio.append((x * 32767).astype(np.int16))
            labels.append(c)
            spk = i % 4
            groups.append(f"spk{spk}")
            split.append("test" if spk == 3 else "val" if spk == 2 else "train")
    return ClipSet(np.stack(audio), np.array(labels), np.array(groups), np.array(split),
                   tuple(f"tone{c}" for c in range(classes)), meta=dict(source="tones"))


@pytest.fixture
def tones():
    return tone_clipset()


@pytest.fixture
def data_cfg():
    return DataConfig()


def features(clips):
    wave = torch.as_tensor(clips.audio, dtype=torch.float32) / 32768
    from edgeosc.features import FeatureExtractor
    return FeatureExtractor(FeatureConfig())(wave), torch.as_tensor(clips.labels)


def fit(model, x, y, steps, lr):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="session")
def trained():
    """The direct oscillator core, with the key gate ("gated") and without, and softmax: KWS nets trained briefly
    on tones, then QAT-tuned (also as checkpoints, for the exporters); a held-out feature batch. (The linear core's
    own tests train theirs: test_linear_core.)"""
    from edgeosc.checkpoint import Checkpoint
    from edgeosc.models.kws import build_model
    from edgeosc.quant import calibrate, float_model, quantize_model
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: threads only contend with whatever else the machine runs
    x, y = features(tone_clipset(n_per_class=12, seed=0))
    held, _ = features(tone_clipset(n_per_class=40, seed=1))  # 120 clips no model has seen
    out = {}
    for kind in ("oscillator", "gated", "softmax"):
        torch.manual_seed(0)
        cfg = ModelConfig(**{**DIRECT_OSCILLATOR, "key_gate": kind == "gated"}, n_classes=3, dropout=0.0,
                          attention="oscillator" if kind == "gated" else kind)
        net = fit(build_model(cfg), x, y, 30, 1e-2)
        qat = quantize_model(net, QuantConfig())
        calibrate(qat, [(x, y)], 1)
        qat = fit(qat, x, y, 5, 1e-3)
        out[kind] = dict(qat=qat, float=float_model(qat),
                         ckpt=Checkpoint.of(qat, FeatureConfig(), [f"tone{c}" for c in range(3)]))
    torch.set_num_threads(threads)
    return out, held


# Test tiers (markers registered in pyproject.toml): `make test` runs every test, `make test-fast` runs -m "not slow"
# (under a minute on 2 cores). Marked here, by module, by fixture and by name, so the test files need no edits;
# a new module is fast unless it is listed or uses a slow fixture.
SLOW_MODULES = {  # every test trains, synthesizes speech, builds firmware or emulates it
    "test_estimate",  # cycle estimates: builds the firmware for ARM cores and emulates it
    "test_firmware",  # builds the C firmware (host, Cortex-M with QEMU, callgrind)
    "test_pipeline",  # runs the whole pipeline (train, QAT, exports, estimates, bench)
    "test_recorded",  # the recorded speakers' voices (flite, MBROLA, Pico, Festival) speaking
    "test_synth",  # the synthetic eSpeak NG sets
}
SLOW_FIXTURES = {
    "trained",  # conftest's session fixture: three nets trained and QAT-tuned (~40 s), then exported by its users
    "real",  # test_stream: a keyword model trained on a synthetic set and exported (~60 s)
}
SLOW_TESTS = {  # module::function in otherwise fast modules
    "test_quant::test_qat_and_ptq_through_the_cli",  # trains, QAT-tunes and exports through the CLI (~35 s)
    "test_datasets::test_synth_mix_adds_band_limited_voices_to_training_only",  # synthesizes every voice (~25 s)
    "test_sweep::test_run_sweep_writes_table_and_plot_and_skips_finished_runs",  # trains every grid point (~10 s)
    "test_sweep::test_sweep_on_a_local_ray_instance",  # starts Ray and trains through it (~60 s)
    "test_train::test_training_learns_and_writes_artifacts",  # trains each kind (~1-2 s each)
    "test_train::test_resume_after_interruption_equals_uninterrupted_run",  # trains twice, once interrupted
    "test_cli::test_eval_rejects_checkpoint_for_other_classes",  # trains a model first (~5 s)
}
COMPILER_MODULES = {"test_cycles", "test_estimate", "test_firmware", "test_integer_kernels", "test_linear_core",
                    "test_pipeline"}
COMPILER_TESTS = {  # the TFLite custom op's kernel and the C struct layout are built with the host C compiler
    "test_tflite::test_custom_op_kernel_matches_the_builtin_graph",
    "test_schema::test_mirror_sizes_match_c",
}
NETWORK_TESTS = {"test_pipeline::test_rpi_bundle_runs_in_a_fresh_venv_with_only_its_requirements"}  # pip install


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rpartition(".")[2]
        name = f"{module}::{getattr(item, 'originalname', item.name)}"
        if module in SLOW_MODULES or name in SLOW_TESTS or SLOW_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.slow)
        if module in COMPILER_MODULES or name in COMPILER_TESTS:
            item.add_marker(pytest.mark.compiler)
        if name in NETWORK_TESTS:
            item.add_marker(pytest.mark.network)


@functools.cache
def package_index_error() -> str | None:
    """Why pip cannot reach its package index (the one pip is configured with), or None: one tiny download, once."""
    if os.environ.get("EDGEOSC_OFFLINE", "0") not in ("", "0"):
        return "EDGEOSC_OFFLINE is set"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-cache-dir", "--retries", "0",
               "--timeout", "10", "--disable-pip-version-check", "--dest", tmp, "six"]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            return "pip download timed out"
    if res.returncode == 0:
        return None
    lines = (res.stderr or res.stdout).strip().splitlines()
    return lines[-1] if lines else f"pip download exited {res.returncode}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A test marked network skips, before its fixtures are set up, when the package index is out of reach."""
    if item.get_closest_marker("network") is not None and (why := package_index_error()) is not None:
        pytest.skip(f"needs the package index, which pip cannot reach: {why}")
