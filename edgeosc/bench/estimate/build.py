"""The estimator's builds: bare ELFs of the kernels with a driver for each emulated core (cycles.build_elf), and
host builds of the same C whose outputs the emulated ones must equal; all cached by the hash of what goes into them
(cbuild.build), under a work folder (cache_dir() unless given)."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from ...cbuild import FRONTEND, HARNESS, KERNEL_SOURCES, KERNELS
from .. import cycles as C

CFLAGS = ("-std=c99", "-O2", "-fno-math-errno")
INCLUDES = [KERNELS, HARNESS, FRONTEND]
# What the builds call and price apart: the harness's entry points (harness/estimate_driver.c: one inference, a
# stream of frames) and the fused attention cores' functions
ENTRY, STREAM_ENTRY = "edgeosc_estimate_infer", "edgeosc_estimate_stream"
ATTENTION = ("edgeosc_oscillator_core_int8", "edgeosc_softmax_core_int8", "edgeosc_oscillator_gated_core_int8",
             "edgeosc_linear_core_int8", "edgeosc_linear_stream_int8")


def cache_dir() -> Path:
    """Where builds live without a work_dir: next to cbuild's cache."""
    from ...cbuild import cache_dir as ck
    return ck().parent / "estimate"


def work_folder(work_dir: str | Path | None) -> Path:
    """work_dir, or cache_dir() where none is given."""
    return Path(work_dir) if work_dir else cache_dir()


def generated_source(work: str | Path, stem: str, text: str) -> Path:
    """A generated C source under work, named by its content (written aside, then renamed into place)."""
    out = Path(work) / f"{stem}_{hashlib.sha256(text.encode()).hexdigest()[:12]}.c"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".c", dir=out.parent)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, out)
    return out


def build(sources: Sequence[Path], core: str, work: Path, includes: Sequence[Path] = (),
          flags: Sequence[str] = CFLAGS) -> Path:
    """A bare ELF for `core` (cycles.build_elf), cached under work by the hash of what goes into it."""
    includes = [*INCLUDES, *map(Path, includes)]
    return C.build_elf(sources, core, [*flags, *(f"-I{d}" for d in includes)], name=f"{core}.elf", cache=work)


def model_elf(firmware_dir: str | Path, name: str, core: str, work: str | Path | None = None,
              flags: Sequence[str] = CFLAGS) -> Path:
    """A generated model with the kernels, the harness and its entry points (harness/estimate_driver.c), for core."""
    fw, work = Path(firmware_dir), work_folder(work)
    sources = [*KERNEL_SOURCES, HARNESS / "edgeosc_harness.c", fw / f"{name}_model.c", HARNESS / "estimate_driver.c"]
    return build(sources, core, work, [fw], [*flags, f"-DEDGEOSC_MODEL={name}_model"])


def host_logits(firmware_dir: str | Path, name: str, inputs: np.ndarray, work: str | Path | None = None) -> np.ndarray:
    """The host build's (gcc, firmware_models/harness/main_host.c) outputs for rows of int8 inputs."""
    from ...cbuild import build as build_host
    fw = Path(firmware_dir)
    sources = [*KERNEL_SOURCES, *(HARNESS / f for f in ("edgeosc_harness.c", "platform_host.c", "main_host.c")),
               fw / f"{name}_model.c"]
    exe = build_host(sources, f"host-{name}", flags=[*CFLAGS, f"-DEDGEOSC_MODEL={name}_model"],
                     include_dirs=[*INCLUDES, fw], cache=work or cache_dir())
    x = np.ascontiguousarray(inputs, np.int8)
    out = subprocess.run([str(exe)], input=x.tobytes(), capture_output=True, check=True).stdout.decode()
    return np.array([[int(v) for v in line.split()] for line in out.splitlines()], np.int8)


def io_bytes(fw: Path, name: str) -> tuple[int, int]:
    """A generated model's input and output sizes (<name>_model.h)."""
    text = (Path(fw) / f"{name}_model.h").read_text()
    get = lambda what: int(re.search(rf"#define {name.upper()}_{what}_BYTES (\d+)", text).group(1))  # noqa: E731
    return get("INPUT"), get("OUTPUT")
