"""Host instruction counts (valgrind callgrind, deterministic) of the int8 attention kernels and firmware models.

attention_instructions() compiles a one-call program per core (firmware_models/kernels, gcc -O2) with the
parameters of a plausible layer (the integer reference, TFLite Micro target) and fixed random inputs, and counts the
instructions (Ir) executed inside the core only (--toggle-collect): the oscillator core, the softmax core
with its fixed-point exp per element, and the softmax core with the 256-entry exp table.
model_instructions() counts one inference of a host harness build (firmware_models/Makefile host).

    python -m edgeosc.bench.callgrind [--tokens 49]
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ..integer import reference as R
from ..integer import schema as S
from ..cbuild import CORE_SOURCES, build

CORES = {"oscillator": "edgeosc_oscillator_core_int8", "softmax": "edgeosc_softmax_core_int8",
         "softmax_lut": "edgeosc_softmax_core_int8"}


def valgrind() -> str:
    path = shutil.which("valgrind")
    if path is None:
        raise RuntimeError("valgrind is not installed (apt-get install valgrind)")
    return path


def instructions(cmd: list, function: str, stdin: bytes = b"") -> int:
    """Ir executed inside `function` (and its callees) by one run of cmd under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run([valgrind(), "--tool=callgrind", f"--callgrind-out-file={out}", f"--toggle-collect={function}",
                        *map(str, cmd)], input=stdin, capture_output=True, check=True)
        m = re.search(r"^(?:summary|totals):\s+(\d+)", out.read_text(), re.M)
        return int(m.group(1))


def _layer(T: int, dh: int, p: int):
    """Scales and tables of a plausible oscillator layer (the shapes of the sample models)."""
    s = dict(q=0.42, k=0.05, v=0.07, r=1 / 128, qk=0.42 * 0.05 * 127 * np.sqrt(dh) / 4, w=4 * 0.42 / 255, h=0.03,
             zr=1 / 128, c=2.0 ** p / 255, sum=2.0 ** p * T / 255 / 2, inv=1 / 255 / 4, a=1 / 255, out=0.045)
    s = {k: float(np.float32(v)) for k, v in s.items()}
    return s, R.core_tables(s, dh, p)


def _c_array(ctype: str, name: str, values) -> str:
    return f"static const {ctype} {name}[] = {{{', '.join(str(int(v)) for v in np.ravel(values))}}};\n"


def _program(H: int, T: int, dh: int, dr: int, dv: int, p: int, seed: int) -> str:
    """C source: the layer's parameters and inputs, and a main running the core named by argv[1] once."""
    s, tables = _layer(T, dh, p)
    osc = R.osc_quant_from_scales(s, *tables, sum_op="fully_connected", ones=127, ones_scale=1 / 127,
                                  target_name="tflite-micro")
    sm = R.softmax_quant_from_scales(dict(q=s["q"], k=s["k"], v=s["v"], qk=0.5, out=s["out"]),
                                     beta=1 / np.sqrt(dh), target_name="tflite-micro")
    rng = np.random.default_rng(seed)
    r = rng.standard_normal((H, T, dr))
    arrays = dict(q=rng.integers(-128, 128, (H, T, dh)), k=rng.integers(-128, 128, (H, T, dh)),
                  v=rng.integers(-128, 128, (H, T, dv)),
                  r=np.clip(np.round(127 * r / np.linalg.norm(r, axis=-1, keepdims=True)), -128, 127),
                  table_w=tables[0], table_c=tables[1], table_inv=tables[2])
    osc_init = S.c_initializer(S.OSC, "o", dict(osc.fields(H, T, dh, dr, dv), table_w="table_w", table_c="table_c",
                                                  table_inv="table_inv"), qualifier="  ")
    sm_init = S.c_initializer(S.SOFTMAX, "sp", sm.fields(H, T, dh, dv, exp_lut="NULL"), qualifier="  ")
    lut = R.softmax_exp_table(sm.beta_multiplier, sm.beta_left_shift, sm.diff_min)
    return ('#include <string.h>\n#include "edgeosc_attention.h"\n'
            + "".join(_c_array("int8_t", n, a) for n, a in arrays.items()) + _c_array("int32_t", "exp_lut", lut)
            + f"static int8_t out[{H * T * dv}], scratch[{T + 2 * dr}];\n"
            "int main(int argc, char **argv) {\n" + osc_init + sm_init +
            '  if (argc > 1 && !strcmp(argv[1], "softmax_lut")) sp.exp_lut = exp_lut;\n'
            '  if (argc > 1 && !strcmp(argv[1], "oscillator")) return edgeosc_oscillator_core_int8(&o, q, k, v, r, out, '
            "scratch);\n  return edgeosc_softmax_core_int8(&sp, q, k, v, out, scratch);\n}\n")


def attention_instructions(tokens: int = 49, heads: int = 4, d_head: int = 8, d_osc: int = 8, d_value: int = 8,
                           p: int = 4, seed: int = 0) -> dict:
    """{"oscillator", "softmax", "softmax_lut": Ir of one core call, and the oscillator/softmax ratios}."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "bench.c"
        src.write_text(_program(heads, tokens, d_head, d_osc, d_value, p, seed))
        exe = build([src, *CORE_SOURCES], "bench", flags=("-std=c99", "-O2"), cache=tmp)
        ir = {kind: instructions([exe, kind], fn) for kind, fn in CORES.items()}
    return dict(**ir, ratio=ir["oscillator"] / ir["softmax"], ratio_lut=ir["oscillator"] / ir["softmax_lut"],
                shape=dict(heads=heads, tokens=tokens, d_head=d_head, d_osc=d_osc, d_value=d_value))


def model_instructions(exe, name: str, input_bytes: int) -> int:
    """Ir of one inference (<name>_run) of a host harness build on an all-zero input."""
    return instructions([exe], f"{name}_run", stdin=bytes(input_bytes))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=49)
    ap.add_argument("--heads", type=int, default=4)
    args = ap.parse_args()
    r = attention_instructions(args.tokens, args.heads)
    print(f"T={args.tokens} H={args.heads}: oscillator {r['oscillator']:,} Ir, softmax {r['softmax']:,} Ir "
          f"(exp table: {r['softmax_lut']:,}); oscillator/softmax {r['ratio']:.3f} (exp table: {r['ratio_lut']:.3f})")


if __name__ == "__main__":
    main()
