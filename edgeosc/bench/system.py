"""What a benchmark ran on: CPU, cores, governor, OS, Python and runtime versions (torch-free)."""
from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path

RUNTIMES = ("onnxruntime", "ai-edge-litert", "tflite-runtime", "tflite-micro", "numpy")


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def cpu_model() -> str:
    """The CPU's marketing name (x86 'model name'), or the board's ('Model' on a Raspberry Pi)."""
    info = _read("/proc/cpuinfo") or ""
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    return fields.get("Model") or fields.get("model name") or _read("/proc/device-tree/model") or \
        platform.processor() or platform.machine()


def versions() -> dict:
    out = {}
    for name in RUNTIMES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def system_info() -> dict:
    return dict(cpu=cpu_model(), machine=platform.machine(), cores=os.cpu_count(),
                governor=_read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
                max_mhz=(int(f) // 1000 if (f := _read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"))
                         else None),
                os=platform.platform(), python=platform.python_version(), runtimes=versions())
