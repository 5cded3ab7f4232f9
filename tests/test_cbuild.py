"""The project's C build (edgeosc/cbuild.py): what its cache keys on."""
import subprocess

import pytest

from edgeosc.cbuild import build, compiler

try:
    compiler()
except RuntimeError:
    pytest.skip("no C compiler", allow_module_level=True)


def test_build_sees_a_changed_header_in_an_include_flag(tmp_path):
    """A header in a directory named by an -I flag (a generated firmware's settings, as estimate.build passes them)
    is part of the build's key: regenerating it in place rebuilds the objects that include it."""
    (tmp_path / "src.c").write_text('#include <stdio.h>\n#include "value.h"\nint main(void) { printf("%d", VALUE); }\n')
    outputs = []
    for value in (1, 2):
        (tmp_path / "value.h").write_text(f"#define VALUE {value}\n")
        exe = build([tmp_path / "src.c"], "value", flags=[f"-I{tmp_path}"], cache=tmp_path / "cache")
        outputs.append(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)
    assert outputs == ["1", "2"]
