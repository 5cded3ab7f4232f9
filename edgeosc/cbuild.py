"""Where the project's C trees are, and the one way to build them: build(), cached by the hash of its inputs.

Outputs (host shared libraries for ctypes, host executables, bare ELFs for emulated ARM cores) go to a cache
directory and are renamed into place atomically, so parallel processes never load a half-written file.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
FIRMWARE = ROOT / "firmware_models"          # portable C99 kernels, front end, harness, Makefile
KERNELS = FIRMWARE / "kernels"
FRONTEND = FIRMWARE / "frontend"
HARNESS = FIRMWARE / "harness"
DETECTOR = FIRMWARE / "detector"                # the always-on decision rule (stream.py's Listener) in C
TFLITE_OP = ROOT / "export" / "tflite_op"    # the EdgeOscAttention TFLite custom op's glue
ORT_OP = ROOT / "export" / "ort_op"          # the ai.edgeosc::OscillatorAttention onnxruntime custom op
# The kernels' units: each C file with the assembly of its DSP variants (kernels/dsp/*.S, Thumb-2: assembled to nothing
# for any other target, so every build lists them); the variants' C files compile inside the units (as headers).
# CORE_SOURCES: the attention cores (what the custom ops and the host library need); KERNEL_SOURCES: every kernel.
CORE_SOURCES = (KERNELS / "edgeosc_fixedpoint.c", KERNELS / "edgeosc_attention.c",
                KERNELS / "dsp" / "edgeosc_attention_dsp.S", KERNELS / "dsp" / "edgeosc_linear_dsp.S")
OPS_SOURCES = (KERNELS / "edgeosc_ops.c", KERNELS / "dsp" / "edgeosc_matrix_dsp.S",
               KERNELS / "dsp" / "edgeosc_depthwise_dsp.S")
KERNEL_SOURCES = (*CORE_SOURCES, *OPS_SOURCES)
CFLAGS = ("-std=c99", "-O2", "-funroll-loops", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror")  # build_shared's


def firmware_name(kind: str) -> str:
    """A pipeline run's firmware of a model kind (its folder and C prefix): kws_<kind> as a C identifier."""
    return "kws_" + "".join(c if c.isalnum() else "_" for c in kind)


def cache_dir() -> Path:
    """Where built libraries live ($EDGEOSC_CACHE or ~/.cache/edgeosc)."""
    base = os.environ.get("EDGEOSC_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "edgeosc"
    return Path(base) / "ckernels"


def compiler() -> str:
    """The C compiler: $CC, else gcc or cc from PATH."""
    for cc in (os.environ.get("CC"), "gcc", "cc"):
        if cc and shutil.which(cc):
            return cc
    raise RuntimeError("no C compiler found (set CC, or install gcc) to build the edgeosc C kernels")


@lru_cache(maxsize=None)
def compiler_target(cmd: tuple) -> str:
    """What the compiler builds for (`-dumpmachine`, e.g. x86_64-linux-gnu): part of each build's identity, since two
    compilers can print the same --version line (a host's gcc and an emulated aarch64 userland's); "" where the
    compiler has no such flag (its target is then in the flags)."""
    done = subprocess.run([*cmd, "-dumpmachine"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


@lru_cache(maxsize=None)
def compiler_version(cmd: tuple) -> str:
    """First line of a compiler's --version: part of each build's identity, and of reports."""
    done = subprocess.run([*cmd, "--version"], capture_output=True, text=True)
    line = (done.stdout or done.stderr).strip().splitlines()[0] if done.returncode == 0 else " ".join(cmd)
    return f"zig cc: {line}" if "ziglang" in cmd else line


def build(sources, name: str, *, cc: Sequence[str] | None = None, flags: Sequence[str] = (), include_dirs=(),
          libs=(), cache: str | Path | None = None) -> Path:
    """Compile sources into <cache>/<hash>/<name>, keyed by the compiler (its version and target), the flags and the
    sources' and headers' contents; a later call with the same inputs returns the file without building. Each
    source compiles to an object of its own, shared by every build (_object): only the changed sources compile.

    The one C build of the project: host shared libraries (build_shared), host executables and bare ELFs for
    emulated ARM cores (cc = bench.cycles.compiler(core)). The output is renamed into place atomically.
    """
    sources = [Path(s) for s in sources]
    include_dirs = [KERNELS, *map(Path, include_dirs)]
    cmd = list(cc or [compiler()])
    base = hashlib.sha256("\0".join([*cmd, compiler_version(tuple(cmd)), compiler_target(tuple(cmd)), *flags]).encode())
    # the headers of -I flags' folders too (bench.estimate.build.build passes a generated firmware's folder so), those beside
    # each source, and the C files of their subfolders (kernels/dsp/*.c and kernels/neon/*.c compile inside
    # edgeosc_ops.c and edgeosc_attention.c; kernels/dsp/*.S are sources of their own)
    searched = [*include_dirs, *(Path(f[2:]) for f in flags if f.startswith("-I")), *(p.parent for p in sources)]
    for p in sorted({p for d in searched for p in (*d.glob("*.h"), *d.glob("*/*.[ch]"))}):
        base.update(p.name.encode() + b"\0" + p.read_bytes())
    h = base.copy()
    h.update("\0".join(libs).encode())
    for p in sources:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    out = Path(cache or cache_dir()) / h.hexdigest()[:16] / name
    if out.exists():
        return out
    objects = [_object(src, cmd, flags, include_dirs, base.copy()) for src in sources]
    _run([*cmd, *flags, *map(str, objects), "-o", "{out}", *libs], out, f"linking {name}")
    return out


def _object(src: Path, cmd: list, flags: Sequence[str], include_dirs: list, h) -> Path:
    """src compiled alone (-c), in the shared cache by the hash of the compiler, flags, headers and its text: a
    kernel source compiles once for every model, library and executable built from it."""
    h.update(src.name.encode() + b"\0" + src.read_bytes())
    out = cache_dir() / "objects" / h.hexdigest()[:16] / f"{src.stem}.o"
    if not out.exists():
        quiet = ["-Wno-unused-command-line-argument"] if "ziglang" in cmd else []  # link flags, unused by -c
        _run([*cmd, *flags, *quiet, *[f"-I{d}" for d in include_dirs], "-c", str(src), "-o", "{out}"], out,
             f"compiling {src.name}")
    return out


def _run(command: list, out: Path, what: str) -> None:
    """Runs command with "{out}" a temporary file beside out, then renames it into place (atomic)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=out.suffix, dir=out.parent)
    os.close(fd)
    full = [tmp if a == "{out}" else a for a in command]
    res = subprocess.run(full, capture_output=True, text=True)
    if res.returncode:
        Path(tmp).unlink(missing_ok=True)  # a failed link may have removed it
        raise RuntimeError(f"{what} failed:\n{' '.join(full)}\n{res.stderr[-3000:]}")
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)


def build_shared(sources, name: str, include_dirs=(), extra_flags=(), libs=()) -> Path:
    """lib<name>.so of sources for ctypes (-O2 -fPIC -shared, warnings are errors)."""
    return build(sources, f"lib{name}.so", flags=[*CFLAGS, *extra_flags], include_dirs=include_dirs, libs=libs)
