"""The project's C build (edgeosc/cbuild.py): what its cache keys on."""
import subprocess

import pytest

from edgeosc.cbuild import build, compiler, compiler_target

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


def _fake_compiler(path, target):
    """A compiler that prints gcc 12's --version line and `target` for -dumpmachine, and writes its -o file."""
    path.write_text(f"""#!/bin/sh
case "$1" in
  --version) echo "gcc (Debian 12.2.0-14+deb12u1) 12.2.0"; exit 0;;
  -dumpmachine) echo {target}; exit 0;;
esac
while [ $# -gt 0 ]; do [ "$1" = -o ] && echo {target} > "$2"; shift; done
""")
    path.chmod(0o755)
    return str(path)


def test_build_key_holds_the_compilers_target(tmp_path):
    """One compiler command with the same --version line that builds for different machines (a host's gcc and an
    emulated aarch64 userland's, which finds host paths through QEMU): each machine gets its own output."""
    (tmp_path / "src.c").write_text("int f(void) { return 1; }\n")
    built = []
    for target in ("x86_64-linux-gnu", "aarch64-linux-gnu"):  # one command, "gcc", as both machines see it
        cc = _fake_compiler(tmp_path / "gcc", target)
        compiler_target.cache_clear()
        built.append(build([tmp_path / "src.c"], "libf.so", cc=[cc], cache=tmp_path / "cache"))
    assert built[0] != built[1]
    assert [p.read_text().strip() for p in built] == ["x86_64-linux-gnu", "aarch64-linux-gnu"]


def test_build_sees_a_changed_header_beside_a_source(tmp_path):
    """A header in a source's own folder (a kernel variant's private header, kernels/dsp/edgeosc_dsp.h) is part of
    the key: changing it rebuilds the source that includes it."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "src.c").write_text('#include <stdio.h>\n#include "near.h"\n'
                                           'int main(void) { printf("%d", N); }\n')
    outputs = []
    for value in (3, 4):
        (tmp_path / "sub" / "near.h").write_text(f"#define N {value}\n")
        exe = build([tmp_path / "sub" / "src.c"], "near", cache=tmp_path / "cache")
        outputs.append(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)
    assert outputs == ["3", "4"]
