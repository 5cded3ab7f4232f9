"""A self-contained Raspberry Pi bundle of a pipeline run: the int8 models, the torch-free bench and power
measurement, a lean requirements file and a README; the results it writes merge into the run's report."""
from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

from .cbuild import ROOT
from .io import atomic_path

# numpy and one TFLite interpreter, ai-edge-litert, which runs every kind's int8.tflite (builtin ops only); click for
# the command line, flatbuffers for the model check, scipy for `edgeosc listen --wav` (edgeosc.data.audio reads and
# resamples WAVs with it; found by the emulated check, pi_check). numpy 1.x has no wheels for Python 3.13.
REQUIREMENTS = """numpy>=1.24,<2; python_version < "3.12"
numpy>=1.26; python_version >= "3.12"
click>=8.1
flatbuffers>=24.3
scipy>=1.10
ai-edge-litert>=2.0
# ai-edge-litert also runs int8_custom.tflite, the oscillator's EdgeOscAttention op, as a delegate (its kernel built
# here with cc); optional: tflite-runtime (Python <= 3.11) runs it with the kernel registered; onnxruntime and onnx run
# the int8 ONNX files, the oscillator's int8_qcdq_op.onnx with its
# OscillatorAttention kernel (built here with cc); smbus2 (INA219/INA260 power monitor on I2C); sounddevice
# (edgeosc listen --mic)
"""
MODEL_FILES = ("int8.tflite", "int8_custom.tflite", "float.tflite", "manifest.json")
ONNX_FILES = ("int8_qcdq.onnx", "int8_qcdq_op.onnx")  # from export-<kind>/onnx, beside the TFLite files
# the C sources of the EdgeOscAttention kernel (built on first use with cc, for ai-edge-litert and tflite-runtime)
# and of the OscillatorAttention kernel for onnxruntime (built likewise)
C_SOURCES = ("export/tflite_op", "export/ort_op", "firmware_models/kernels")


def _readme(kinds: list[str]) -> str:
    return f"""# edgeosc Raspberry Pi bundle

Int8 keyword-spotting models ({", ".join(kinds)}) and the torch-free benchmark that measured them on
the build machine. Run it on the Pi, bring `results/` back, and `edgeosc report write RUN --board
results/bench-<host>.json` adds the Pi's measurements (labelled measured, with the board named) to the
report.

## Set up (Raspberry Pi OS 64-bit: ai-edge-litert has aarch64 wheels; Python 3.9+)

    python3 -m venv .venv && . .venv/bin/activate
    pip install -r requirements.txt

## Measure

    ./run_bench.sh                                 # latency, memory, system info -> results/
    ./run_bench.sh --power pmic                    # + energy per inference (Raspberry Pi 5 PMIC)
    ./run_bench.sh --power ina219 --shunt-ohms 0.1 # + energy from an INA219 on I2C bus 1 (pip install smbus2)
    ./run_bench.sh --power-log meter.csv           # + energy from a USB power meter's CSV log

Keep the Pi otherwise idle; set the governor to `performance` for stable numbers
(`echo performance | sudo tee /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor`).
Energy is the integral of power over the timed runs minus the idle power measured just before.

## Listen

    python -m edgeosc listen models/oscillator/int8.tflite --wav some.wav   # or --mic (pip install sounddevice)

Every kind's int8.tflite has builtin ops only: ai-edge-litert runs it. The oscillator's int8_custom.tflite holds each
of its cores as one EdgeOscAttention op, the fast path: where the board has a C compiler (`cc`) run_bench.sh times it
too, in ai-edge-litert with the op's kernel as a delegate (and in tflite-runtime, Python <= 3.11, where installed, the
kernel registered), the kernel compiled on first use from `export/tflite_op` and `firmware_models/kernels` (no
torch).

With onnxruntime and onnx installed (`pip install onnxruntime onnx`) run_bench.sh also times the int8 ONNX files:
each kind's int8_qcdq.onnx and the oscillator's int8_qcdq_op.onnx, whose OscillatorAttention nodes run in edgeosc's
custom-op library, compiled on first use from `export/ort_op` with the board's `cc` and registered with onnxruntime.
"""


def build_bundle(run_dir: str | Path, out: str | Path | None = None, archive: bool = True) -> Path:
    """Write the bundle folder (and a .tar.gz beside it) from a pipeline run's TFLite exports."""
    run_dir = Path(run_dir)
    kinds = [k for k in ("oscillator", "softmax") if (run_dir / f"export-{k}" / "tflite").is_dir()]
    if not kinds:
        raise FileNotFoundError(f"{run_dir}: no export-<kind>/tflite folders; run `edgeosc pipeline` first")
    out = Path(out or run_dir / "rpi-bundle")
    if out.exists():
        shutil.rmtree(out)
    for kind in kinds:
        for folder, names in (("tflite", MODEL_FILES), ("onnx", ONNX_FILES)):
            for name in names:
                src = run_dir / f"export-{kind}" / folder / name
                if src.is_file():
                    (out / "models" / kind).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, out / "models" / kind / name)
    shutil.copytree(ROOT / "edgeosc", out / "edgeosc", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for rel in C_SOURCES:
        shutil.copytree(ROOT / rel, out / rel, ignore=shutil.ignore_patterns("*.o", "*.so", "build"))
    (out / "requirements.txt").write_text(REQUIREMENTS)
    (out / "README.md").write_text(_readme(kinds))
    models = " ".join(f"models/{k}/int8.tflite" for k in kinds if (out / "models" / k / "int8.tflite").is_file())
    custom = " ".join(f"models/{k}/int8_custom.tflite" for k in kinds
                      if (out / "models" / k / "int8_custom.tflite").is_file())  # the op's fast path (cc builds it)
    onnx = " ".join(f"models/{k}/{name}" for k in kinds for name in ONNX_FILES
                    if (out / "models" / k / name).is_file())  # onnxruntime's, where it is installed
    script = out / "run_bench.sh"
    script.write_text(f"""#!/bin/sh
# Latency (and, with --power/--power-log, energy) of the int8 models on this board -> results/
# (PYTHON=... picks the interpreter; default: python from PATH, e.g. the activated .venv)
set -e
cd "$(dirname "$0")"
mkdir -p results
PY="${{PYTHON:-python}}"
CUSTOM=""
if command -v cc >/dev/null 2>&1; then CUSTOM="{custom}"; fi  # the EdgeOscAttention op's files: its kernel needs cc
ONNX=""
if "$PY" -c "import onnxruntime, onnx" 2>/dev/null; then ONNX="{onnx}"; fi  # the ONNX files
"$PY" -m edgeosc bench models {models} $CUSTOM $ONNX --runs 500 --json "results/bench-$(hostname).json" "$@"
""")
    script.chmod(0o755)
    (out / "results").mkdir()
    if archive:
        with atomic_path(out.with_suffix(".tar.gz")) as tmp, tarfile.open(tmp, "w:gz") as tar:
            tar.add(out, arcname=out.name)
    return out
