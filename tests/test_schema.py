"""The cores' parameter schema (edgeosc/integer/schema.py) is the one definition: the C structs, the ctypes
mirrors, the custom op's option points and the reference's names all follow it; and the golden vectors
the reference writes are what the C kernels compute."""
import ctypes
import re
import shutil
import subprocess

import numpy as np
import pytest

from edgeosc.integer import ckernels as K
from edgeosc.integer import golden as G
from edgeosc.integer import linear as L, reference as R
from edgeosc.integer import schema as S

C_TYPES = {"int32_t": "int32", "const int8_t *": "int8*", "const int32_t *": "int32*", "EdgeoscRequant": "Requant"}


def header_structs(text: str) -> dict[str, list[tuple[str, str]]]:
    """typedef struct {...} Name; of a C header: Name -> [(schema C type, field)] in declaration order
    (comments dropped, comma lists and pointer declarators split)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out = {}
    for body, name in re.findall(r"typedef struct \{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        fields = []
        for decl in filter(None, (d.strip() for d in body.split(";"))):
            m = re.match(r"((?:const\s+)?\w+)\s+(.*)", decl, flags=re.S)
            base, names = m.group(1), m.group(2)
            for n in (x.strip() for x in names.split(",")):
                ptr = n.startswith("*")
                ctype = f"{base} *" if ptr else base
                fields.append((C_TYPES.get(ctype, ctype), n.lstrip("* ")))
        out[name] = fields
    return out


@pytest.mark.parametrize("core", S.CORES, ids=lambda c: c.struct)
def test_header_struct_is_the_schema(core):
    """Field names, types and order of the C struct equal the schema's (parsed from the header itself)."""
    structs = header_structs(S.HEADER.read_text())
    assert structs[core.struct] == [(f.ctype, f.name) for f in core.fields], \
        f"{core.struct} in {S.HEADER} drifted from edgeosc/integer/schema.py: run python -m edgeosc.integer.schema --write-header"


@pytest.mark.parametrize("path", [S.HEADER, S.TFLITE_OP_C], ids=lambda p: p.name)
def test_generated_regions_are_current(path):
    assert S.generated_blocks(path.read_text()) == S.expected(path), \
        f"{path}: stale generated region: run python -m edgeosc.integer.schema --write-header"


def test_tflite_op_reads_the_schema_points():
    text = S.TFLITE_OP_C.read_text()
    points = re.search(r"kPoints\[POINTS\] = \{(.*?)\};", text).group(1)
    assert tuple(re.findall(r'"(\w+)"', points)) == S.POINTS
    for p in S.GATE_POINTS:  # the key gate's options, read by name
        assert f'"{p}_scale"' in text and f'"{p}_zero_point"' in text


@pytest.mark.parametrize("core", S.CORES, ids=lambda c: c.struct)
def test_ctypes_mirror_is_generated(core):
    mirror = K.MIRRORS[core.struct]
    assert [n for n, _ in mirror._fields_] == list(core.names)
    assert [t for _, t in mirror._fields_] == [K.CTYPES[f.ctype] for f in core.fields]


def test_mirror_sizes_match_c():
    """sizeof and offsetof of every field as the C compiler lays the structs out."""
    if not (shutil.which("gcc") or shutil.which("cc")):
        pytest.skip("no C compiler")
    from edgeosc.cbuild import build_shared
    lines = ['#include <stddef.h>', '#include "edgeosc_attention.h"']
    for c in S.CORES:
        offs = ", ".join(f"(long)offsetof({c.struct}, {n})" for n in c.names)
        lines.append(f"long {c.struct}_layout(int i) {{ static const long o[] = {{(long)sizeof({c.struct}), {offs}}}; "
                     f"return o[i]; }}")
    lines.append("long linear_state_words(int dh, int dv, int p) { return (long)EDGEOSC_LINEAR_STATE_WORDS(dh, dv, p); }")
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "layout.c"
        src.write_text("\n".join(lines) + "\n")
        lib = ctypes.CDLL(str(build_shared([src], "edgeosc_layout")))
    for c in S.CORES:
        f = getattr(lib, f"{c.struct}_layout")
        f.restype, f.argtypes = ctypes.c_long, [ctypes.c_int]
        mirror = K.MIRRORS[c.struct]
        assert f(0) == ctypes.sizeof(mirror)
        assert [f(i + 1) for i in range(len(c.names))] == [getattr(mirror, n).offset for n in c.names]
    words = lib.linear_state_words
    words.restype, words.argtypes = ctypes.c_long, [ctypes.c_int] * 3
    for shape in ((8, 8, 4), (5, 7, 1), (16, 3, 2)):  # the linear core's state, sized alike in C and Python
        assert words(*shape) == L.linear_state_words(*shape)


def test_names_elsewhere_follow_the_schema():
    from edgeosc.export.tflite import custom_op
    assert custom_op.POINTS == S.POINTS == ("qk", "w", "h", "zr", "c", "sum", "inv", "a")
    assert S.GATE_POINTS == ("pow", "gated")
    assert tuple(R.ZP_DEFAULT) == S.OSC.zero_points and tuple(R.SOFTMAX_ZP_DEFAULT) == S.SOFTMAX.zero_points
    osc = R.OscQuant.__dataclass_fields__
    assert set(S.OSC.role("table")) | set(S.OSC.role("requant")) <= set(osc)
    assert len(R.OscQuant(*[np.zeros(256, np.int8)] * 3, *[R.Requant(0, 0)] * 6).rounding) == len(S.OSC.role("rounding"))
    with pytest.raises(ValueError, match="missing fields"):
        S.OSC.ordered({"heads": 1})


# ---- golden vectors: written by the reference, read by the C test ------------------------------------------

def test_golden_file_is_what_the_reference_writes():
    assert G.PATH.exists(), f"missing {G.PATH}: run python -m edgeosc.integer.golden"
    assert G.PATH.read_text() == G.header(), f"{G.PATH} is stale: run python -m edgeosc.integer.golden"
    assert f"#define EDGEOSC_GOLDEN_FORMAT {G.FORMAT}" in G.PATH.read_text()
    assert G.PATH.stat().st_size < 12_000


def test_golden_vectors_through_ctypes():
    g = G.vectors()
    assert np.array_equal(K.oscillator_core(g["osc"], **g["osc_in"]), g["osc_out"])
    for lut in (False, True):
        assert np.array_equal(K.softmax_core(g["sm"], **g["sm_in"], lut=lut), g["sm_out"])
    assert len(np.unique(g["osc_out"])) > 20 and len(np.unique(g["sm_out"])) > 20  # not saturated


def test_c_golden_test_passes(tmp_path):
    """make -C firmware_models test-golden: the C kernels on the golden inputs, bit for bit."""
    from edgeosc.cbuild import FIRMWARE, compiler
    try:
        cc = compiler()
    except RuntimeError as e:
        pytest.skip(str(e))
    if not shutil.which("make"):
        pytest.skip("no make to run firmware_models/Makefile's test-golden")
    res = subprocess.run(["make", "-s", "-C", str(FIRMWARE), "test-golden", f"BUILD={tmp_path}", f"HOST_CC={cc}"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert [line.split(":")[1].split()[0] for line in res.stdout.splitlines() if ": " in line] == ["ok"] * 3, res.stdout
