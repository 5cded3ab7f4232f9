"""The integer attention cores' parameters, defined once: each core's C struct as a list of fields.

Everything else is made from these lists:
  firmware_models/kernels/edgeosc_attention.h   the struct declarations between the GENERATED markers
                                                (`python -m edgeosc.integer.schema --write-header`)
  export/tflite_op/edgeosc_tflite_op.c          the custom op's option points (same command, same markers)
  edgeosc/integer/ckernels.py                   the ctypes mirrors (ctypes_struct)
  edgeosc/export/c/cores.py                     the parameter structs of the fused calls (ordered)
  edgeosc/export/tflite/custom_op.py            the option names <point>_scale / <point>_zero_point (POINTS)
tests/test_schema.py fails when a generated region differs from what this module writes now.

A field's role says where its value comes from: "shape" (tensor dims), "table" (an int8[256] lookup
table), "input" (an input or output tensor's zero point), "point" (an internal quantization point's zero
point: the custom op reads <point>_scale and <point>_zero_point options for it), "const", "requant"
(an EdgeoscRequant multiplier and shift), "softmax" (PreprocessSoftmaxScaling's integers), "rounding" (an
EdgeoscRounding), "lut" (an optional int32 table), "turn" (an optional int32 array, one value a head), "frame"
(a frame number).
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..cbuild import KERNELS, TFLITE_OP

CTYPES = {"int32": "int32_t", "int8*": "const int8_t *", "int32*": "const int32_t *", "Requant": "EdgeoscRequant"}


@dataclass(frozen=True)
class Field:
    name: str
    ctype: str  # a CTYPES key
    meaning: str
    role: str

    def __post_init__(self):
        if self.ctype not in CTYPES:
            raise ValueError(f"{self.name}: unknown C type {self.ctype!r}")


@dataclass(frozen=True)
class Core:
    struct: str  # the C typedef name
    fields: tuple[Field, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def role(self, role: str) -> tuple[str, ...]:
        """Names of the fields with this role, in struct order."""
        return tuple(f.name for f in self.fields if f.role == role)

    @property
    def zero_points(self) -> tuple[str, ...]:
        """The quantization points whose zero points the struct holds (zp_<point>), in struct order."""
        return tuple(n[3:] for n in self.names if n.startswith("zp_"))

    @property
    def points(self) -> tuple[str, ...]:
        """The internal quantization points (role "point"), without the zp_ prefix."""
        return tuple(n[3:] for n in self.role("point"))

    def ordered(self, values: dict) -> dict:
        """values in struct order; raises unless its keys are exactly the struct's fields."""
        missing, extra = set(self.names) - set(values), set(values) - set(self.names)
        if missing or extra:
            raise ValueError(f"{self.struct}: missing fields {sorted(missing)}, unknown fields {sorted(extra)}")
        return {n: values[n] for n in self.names}


def _f(name, ctype, meaning, role):
    return Field(name, ctype, meaning, role)


def _zp(point, meaning, role="point"):
    return Field(f"zp_{point}", "int32", meaning, role)


OSC = Core("EdgeoscOscParams", (
    _f("heads", "int32", "H: heads (BATCH_MATMUL's batch)", "shape"),
    _f("tokens", "int32", "T: tokens (queries = keys)", "shape"),
    _f("d_head", "int32", "q and k's last dim", "shape"),
    _f("d_osc", "int32", "r's last dim (oscillator state)", "shape"),
    _f("d_value", "int32", "v and out's last dim", "shape"),
    _f("table_w", "int8*", "step 2's positive map, 256 entries indexed by qk + 128", "table"),
    _f("table_c", "int8*", "step 6's (1 + zr)^p, indexed by zr + 128", "table"),
    _f("table_inv", "int8*", "step 8's 1/sum, indexed by sum + 128", "table"),
    _zp("q", "input zero points", "input"),
    _zp("k", "", "input"),
    _zp("v", "", "input"),
    _zp("r", "", "input"),
    _zp("qk", "step outputs; wn and z are fixed at (1/128, 0)"),
    _zp("w", ""),
    _zp("h", ""),
    _zp("zr", ""),
    _zp("c", ""),
    _zp("sum", "the model's csum"),
    _zp("inv", ""),
    _zp("a", ""),
    _zp("out", "the output tensor's", "input"),
    _f("ones", "int32", "value of step 7's int8 ones (zero point 0)", "const"),
    _f("rq_qk", "Requant", "step 1: q k^T", "requant"),
    _f("rq_h", "Requant", "step 3: wn r (wn's 1/128 times r's scale over h's)", "requant"),
    _f("rq_zr", "Requant", "step 5: z r^T", "requant"),
    _f("rq_sum", "Requant", "step 7: c ones", "requant"),
    _f("rq_a", "Requant", "step 9: MUL(c, inv)", "requant"),
    _f("rq_out", "Requant", "step 10: a v", "requant"),
    _f("round_matmul", "int32", "EdgeoscRounding of steps 1, 3, 5, 10", "rounding"),
    _f("round_sum", "int32", "... of step 7 (its op may be FULLY_CONNECTED)", "rounding"),
    _f("round_mul", "int32", "... of step 9", "rounding"),
))

GATE = Core("EdgeoscGateParams", (
    _zp("pow", "table_c's output"),
    _zp("gated", "the MUL's output"),
    _f("rq_gate", "Requant", "the MUL, rounded as step 9 (round_mul)", "requant"),
))

SOFTMAX = Core("EdgeoscSoftmaxParams", (
    _f("heads", "int32", "H: heads", "shape"),
    _f("tokens", "int32", "T: tokens", "shape"),
    _f("d_head", "int32", "q and k's last dim", "shape"),
    _f("d_value", "int32", "v and out's last dim", "shape"),
    _zp("q", "input zero points", "input"),
    _zp("k", "", "input"),
    _zp("v", "", "input"),
    _zp("qk", "the scores'"),
    _zp("out", "the output's", "input"),
    _f("rq_qk", "Requant", "q k^T", "requant"),
    _f("rq_out", "Requant", "a v (a at 1/256, -128)", "requant"),
    _f("beta_multiplier", "int32", "PreprocessSoftmaxScaling (5 integer bits)", "softmax"),
    _f("beta_left_shift", "int32", "", "softmax"),
    _f("diff_min", "int32", "", "softmax"),
    _f("round_matmul", "int32", "EdgeoscRounding of both matmuls", "rounding"),
    _f("exp_lut", "int32*", "NULL: fixed-point exps; else edgeosc_softmax_row_lut_int8's table", "lut"),
    _f("queries", "int32", "query rows a head (0: tokens, every token's): a stream's 1 against a cache", "shape"),
))

# The linear oscillator core (d_osc 2, docs/maths.md#integer-linear-core): r and z at (1/128, 0), no tables.
LINEAR = Core("EdgeoscLinearParams", (
    _f("heads", "int32", "H: heads", "shape"),
    _f("tokens", "int32", "T: tokens (queries = keys)", "shape"),
    _f("d_head", "int32", "q and k's last dim", "shape"),
    _f("d_value", "int32", "v and out's last dim", "shape"),
    _f("p", "int32", "the readout's power, 1..8", "const"),
    _f("causal", "int32", "1: query i reads keys j <= i (prefix sums)", "const"),
    _f("window", "int32", "W > 0 (causal): keys j in (i - W, i] only, a stream's sliding window", "const"),
    _zp("q", "input zero points (r is a unit vector at 1/128, 0)", "input"),
    _zp("k", "", "input"),
    _zp("v", "", "input"),
    _zp("g", "the key gate's (read only with a gate)", "input"),
    _zp("out", "the output's", "input"),
    _f("c1", "int32", "round(2 / s), s = q's scale x k's / sqrt(d_head): the coupling's taylor2", "const"),
    _f("rq_out", "Requant", "v's scale over out's", "requant"),
    _f("turn", "int32*", "per head, the anchors' turn a frame on a 2^16-step circle (NULL: none)", "turn"),
    _f("t0", "int32", "token 0's frame number (uint32, wraps): token i's anchor turns by turn (t0 + i)", "frame"),
))

CORES = (OSC, GATE, SOFTMAX, LINEAR)

# The EdgeOscAttention custom op's option points (<point>_scale, <point>_zero_point): the oscillator core's
# internal points, then the key gate's (optional; their presence switches the gate on).
POINTS = OSC.points
GATE_POINTS = GATE.points


# ---- the C text made from the schema -------------------------------------------------------------------

BEGIN = "/* BEGIN GENERATED by `python -m edgeosc.integer.schema --write-header`: edit edgeosc/integer/schema.py */"
END = "/* END GENERATED */"
HEADER = KERNELS / "edgeosc_attention.h"
TFLITE_OP_C = TFLITE_OP / "edgeosc_tflite_op.c"


ROUNDING = {"away": 0, "up": 1, "single": 2}  # the C enum EdgeoscRounding, by integer reference mode


def c_rounding(mode: str) -> int:
    """The EdgeoscRounding of an integer reference mode (the float-requantizing modes have none)."""
    if mode not in ROUNDING:
        raise ValueError(f"the C kernels have no rounding mode {mode!r} (they use no float): {sorted(ROUNDING)}")
    return ROUNDING[mode]


def c_value(x) -> str:
    """A field's C initializer: a Requant as {multiplier, shift}, a name or a number as itself."""
    return f"{{{x[0]}, {x[1]}}}" if isinstance(x, tuple) else str(x)


def c_initializer(core: Core, name: str, values: dict, qualifier: str = "static const ") -> str:
    """`<qualifier><struct> name = {.field = value, ...};` in struct order (all fields: Core.ordered checks)."""
    body = ",\n".join(f"  .{n} = {c_value(x)}" for n, x in core.ordered(values).items())
    return f"{qualifier}{core.struct} {name} = {{\n{body}}};\n"


def c_struct(core: Core) -> str:
    """The typedef of one core's parameters, one field a line with its meaning."""
    lines = ["typedef struct {"]
    for f in core.fields:
        decl = f"  {CTYPES[f.ctype]}{'' if f.ctype.endswith('*') else ' '}{f.name};"
        lines.append(f"{decl:<40}/* {f.meaning} */" if f.meaning else decl)
    return "\n".join(lines + [f"}} {core.struct};"])


def header_block(core: Core) -> str:
    return f"{BEGIN}\n{c_struct(core)}\n{END}"


def tflite_op_block() -> str:
    """The custom op's option points and their indices."""
    enum = ", ".join(f"P_{p.upper()}" for p in POINTS)
    quoted = ", ".join(f'"{p}"' for p in POINTS)
    return (f"{BEGIN}\nenum {{ POINTS = {len(POINTS)} }};\n"
            f"static const char *const kPoints[POINTS] = {{{quoted}}}; /* sum: \"csum\" */\n"
            f"enum {{ {enum} }};\n{END}")


_BLOCK = re.compile(re.escape(BEGIN) + r"\n(?:.*?\n)??" + re.escape(END), re.S)


def generated_blocks(text: str) -> list[str]:
    """The generated regions of a C file (markers included), in order."""
    return [m.group(0) for m in _BLOCK.finditer(text)]


def expected(path: Path) -> list[str]:
    """What the generated regions of path must hold."""
    if path == TFLITE_OP_C:
        return [tflite_op_block()]
    return [header_block(c) for c in CORES]


def rewrite(path: Path) -> bool:
    """Replaces path's generated regions (as many as expected, in order); True if the file changed."""
    text = path.read_text()
    blocks, want = list(_BLOCK.finditer(text)), expected(path)
    if len(blocks) != len(want):
        raise ValueError(f"{path}: {len(blocks)} generated regions, expected {len(want)}")
    out, last = [], 0
    for m, new in zip(blocks, want):
        out += [text[last:m.start()], new]
        last = m.end()
    new_text = "".join(out) + text[last:]
    if new_text != text:
        path.write_text(new_text)
    return new_text != text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write-header", action="store_true", help="rewrite the generated regions of the C files")
    ap.add_argument("--check", action="store_true", help="exit 1 if a generated region is stale")
    args = ap.parse_args(argv)
    stale = []
    for path in (HEADER, TFLITE_OP_C):
        if args.write_header:
            if rewrite(path):
                print(f"wrote {path}")
        elif generated_blocks(path.read_text()) != expected(path):
            stale.append(path)
    if not (args.write_header or args.check):
        for c in CORES:
            print(c_struct(c), end="\n\n")
    for p in stale:
        print(f"stale: {p} (run python -m edgeosc.integer.schema --write-header)", file=sys.stderr)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
