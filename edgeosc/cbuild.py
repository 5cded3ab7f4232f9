"""Where the project's C trees are, and one way to build them: a cached shared library per source hash.

Libraries are compiled (gcc/cc from PATH or $CC, -O2 -fPIC -shared) into a cache directory and renamed
into place atomically, so parallel test processes never load a half-written file.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRMWARE = ROOT / "firmware_models"          # portable C99 kernels, front end, harness, Makefile
KERNELS = FIRMWARE / "kernels"
FRONTEND = FIRMWARE / "frontend"
HARNESS = FIRMWARE / "harness"
TFLITE_OP = ROOT / "export" / "tflite_op"    # the EdgeOscAttention TFLite custom op's glue
CORE_SOURCES = (KERNELS / "edgeosc_fixedpoint.c", KERNELS / "edgeosc_attention.c")
CFLAGS = ("-std=c99", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror")


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


def build_shared(sources, name: str, include_dirs=(), extra_flags=(), libs=()) -> Path:
    """Compiles sources into lib<name>.so under the cache, keyed by the sources', headers' and flags' hash."""
    sources = [Path(s) for s in sources]
    include_dirs = [KERNELS, *map(Path, include_dirs)]
    cc = compiler()
    h = hashlib.sha256(" ".join([cc, *CFLAGS, *extra_flags, *libs]).encode())
    headers = sorted({p for d in include_dirs for p in d.glob("*.h")})
    for p in [*sources, *headers]:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    out = cache_dir() / h.hexdigest()[:16] / f"lib{name}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    cmd = [cc, *CFLAGS, *extra_flags, *[f"-I{d}" for d in include_dirs], *map(str, sources), "-o", tmp, *libs]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        os.unlink(tmp)
        raise RuntimeError(f"building {name} failed:\n{' '.join(cmd)}\n{res.stderr}")
    os.replace(tmp, out)
    return out
