"""The pieces of the emulated Raspberry Pi check (edgeosc.pi_check): fast, no network, no QEMU.

The full check (`edgeosc deploy --target rpi RUN --check`, `make pi-check RUN=...`) builds a Debian arm64
userland and runs for minutes; it is a documented command, not part of `make test`."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from edgeosc import pi_check as pc
from edgeosc.report import collect, markdown


def test_the_emulated_board_is_a_raspberry_pi_4(tmp_path):
    text = pc.cpuinfo()
    assert text.count("processor\t:") == 4 and text.count("CPU part\t: 0xd08") == 4
    assert text.count("CPU implementer\t: 0x41") == 4 and "Features\t: fp asimd evtstrm crc32 cpuid" in text
    assert pc.cpu_folder() == {"online": "0-3\n", "possible": "0-3\n", "present": "0-3\n"}
    assert pc.cpu_folder(1)["online"] == "0\n"
    pc.write_fake_cpu(tmp_path)
    assert (tmp_path / "proc" / "cpuinfo").read_text() == text
    assert (tmp_path / "sys/devices/system/cpu/possible").read_text() == "0-3\n"


def test_the_mirror_comes_from_this_machines_apt_sources(tmp_path):
    (tmp_path / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n\n"
        "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nEnabled: no\n")
    (tmp_path / "sources.list").write_text(
        "# deb http://commented.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://oneline.example/debian bookworm main\n"
        "deb http://old.example/debian bullseye main\n")
    files = [tmp_path / "sources.list", tmp_path / "missing.list", tmp_path / "debian.sources"]
    assert pc.debian_mirrors(files) == ["http://oneline.example/debian", "http://mirror.example/debian"]
    assert pc.debian_mirrors(files, "trixie") == []
    # a bookworm host builds the trixie userland from its own Debian mirror: one archive holds every release
    assert pc.suite_mirrors(files, "trixie") == ["http://oneline.example/debian"]
    assert pc.suite_mirrors(files, "bookworm") == pc.debian_mirrors(files)
    cmd = pc.debootstrap_cmd("/r", "http://m/debian")
    assert cmd == ["debootstrap", "--arch=arm64", "--foreign", "--variant=minbase",
                   "--include=python3,python3-venv,python3-pip,gcc,libc6-dev", "bookworm", "/r", "http://m/debian"]


def test_the_userland_is_named_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEOSC_CACHE", str(tmp_path))
    root = pc.rootfs_dir()
    assert root == tmp_path / "pi-rootfs-bookworm"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "python3.11").write_text("")
    monkeypatch.setattr(pc.subprocess, "run", lambda *a, **k: pytest.fail("a cached userland is not rebuilt"))
    assert pc.rootfs() == root


def test_no_tools_fail_the_userland_step(tmp_path, monkeypatch):
    monkeypatch.setattr(pc.shutil, "which", lambda name: None)
    with pytest.raises(pc.CheckFailed, match=r"^pi-check failed at step userland: debootstrap, qemu-aarch64-static"):
        pc.rootfs(tmp_path)


def _fake_qemu(tmp_path, monkeypatch):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    pc._script(bin_ / pc.QEMU, '#!/bin/sh\necho "$@"\n')
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")


def test_the_wrappers_run_the_userlands_programs_under_qemu(tmp_path, monkeypatch):
    _fake_qemu(tmp_path, monkeypatch)
    root = tmp_path / "root"
    for p in ("usr/bin/as", "usr/bin/ld", "usr/lib/gcc/aarch64-linux-gnu/12/cc1"):
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        (root / p).write_text("")
    wrap = pc._script(tmp_path / "exec", pc.exec_wrapper(root))
    run = lambda *a: subprocess.run([*a], capture_output=True, text=True, check=True).stdout.split()
    head = ["-cpu", "cortex-a72", "-L", str(root)]
    assert run(wrap, "as", "-o", "x.o") == [*head, f"{root}/usr/bin/as", "-o", "x.o"]
    assert run(wrap, "/usr/lib/gcc/aarch64-linux-gnu/12/collect2", "-shared") == [*head, f"{root}/usr/bin/ld", "-shared"]
    assert run(wrap, "/usr/lib/gcc/aarch64-linux-gnu/12/cc1", "a.c") == \
        [*head, f"{root}/usr/lib/gcc/aarch64-linux-gnu/12/cc1", "a.c"]
    gcc = pc._script(tmp_path / "gcc", pc.gcc_wrapper(root, wrap))
    assert run(gcc, "-O2", "a.c") == [*head, f"{root}/usr/bin/gcc", "-wrapper", str(wrap), "-O2", "a.c"]
    py = pc._script(tmp_path / "py", pc.python_wrapper(root, bind=False))
    assert run(py, "-c", "print(1)") == [*head, f"{root}/usr/bin/python3.11", "-c", "print(1)"]
    bound = pc.python_wrapper(root, bind=True)
    assert "unshare -m" in bound and f"mount --bind {root}/proc/cpuinfo /proc/cpuinfo" in bound
    assert f"mount --bind {root}/sys/devices/system/cpu /sys/devices/system/cpu" in bound


def test_outputs_are_compared_in_lsb():
    a = np.array([[1, -5, 7], [0, 0, 0]], np.int8)
    rows = pc.compare({"m|litert": a, "m|tflrt": a, "c|tflrt": a, "x86only|litert": a},
                      {"m|litert": a.copy(), "m|tflrt": a + np.int8(1), "c|tflrt": a - np.int8(3)}, max_lsb=2)
    by = {(r["model"], r["interpreter"]): r for r in rows}
    assert by["m", "litert"]["bit_exact"] and by["m", "litert"]["ok"] and by["m", "litert"]["equal_samples"] == 2
    assert by["m", "tflrt"] == dict(model="m", interpreter="tflrt", inputs=2, bit_exact=False, equal_samples=0,
                                    max_lsb=1.0, ok=True)
    assert by["c", "tflrt"]["max_lsb"] == 3 and not by["c", "tflrt"]["ok"]
    assert not by["x86only", "litert"]["ok"] and "x86 only" in by["x86only", "litert"]["note"]
    assert not pc.compare({"m|t": a}, {"m|t": a[:1]})[0]["ok"]
    lines = pc.compare_lines(rows)
    assert any("bit-exact" in ln for ln in lines) and any("max 3 LSB" in ln and "FAIL" in ln for ln in lines)
    x = pc.fixed_inputs((1, 49, 10), "int8")
    assert x.shape == (pc.N_INPUTS, 49, 10) and x.dtype == np.int8 and (x == pc.fixed_inputs((1, 49, 10), "int8")).all()


def _bundle(tmp_path):
    from edgeosc.cbuild import KERNELS, ROOT
    b = tmp_path / "bundle"
    kernels = [str(p.relative_to(ROOT)) for p in KERNELS.rglob("*.[chS]")]  # the core units, what they include, assembly
    for rel in ("README.md", "requirements.txt", "edgeosc/__main__.py", "export/tflite_op/edgeosc_tflite_op.c",
                *kernels, "models/oscillator/int8.tflite"):
        (b / rel).parent.mkdir(parents=True, exist_ok=True)
        (b / rel).write_text("")
    (b / "run_bench.sh").write_text('"${PYTHON:-python}" -m edgeosc bench models models/oscillator/int8.tflite '
                                    'models/softmax/int8.tflite --runs 500\n')
    return b


def test_a_broken_bundle_names_the_missing_file(tmp_path):
    b = _bundle(tmp_path)
    with pytest.raises(pc.CheckFailed, match=r"^pi-check failed at step files: missing file "
                                             r"models/softmax/int8.tflite in "):
        pc.check_bundle(b)
    (b / "models/softmax").mkdir()
    (b / "models/softmax/int8.tflite").write_text("")
    pc.check_files(b)
    for rel in ("firmware_models/kernels/dsp/edgeosc_linear_dsp.c", "firmware_models/kernels/edgeosc_attention.c",
                "firmware_models/kernels/dsp/edgeosc_linear_dsp.S"):
        (b / rel).unlink()  # a variant file the core unit includes, the unit itself, a variant's assembly
        with pytest.raises(pc.CheckFailed, match=f"step files: missing file {rel}"):
            pc.check_files(b)
        (b / rel).write_text("")
    with pytest.raises(pc.CheckFailed, match="step files: no bundle folder"):
        pc.check_bundle(tmp_path / "nowhere")


def test_a_wrong_pin_fails_the_requirements_step_in_one_line():
    pip = ("echo 'ERROR: Could not find a version that satisfies the requirement ai-edge-litert==9.9 (from versions: "
           "2.0.2, 2.3.0)' >&2; echo 'ERROR: No matching distribution found for ai-edge-litert==9.9' >&2; exit 1")
    with pytest.raises(pc.CheckFailed) as e:
        pc._Steps(print).run("requirements", ["sh", "-c", pip])
    assert str(e.value) == ("pi-check failed at step requirements: ERROR: No matching distribution found for "
                            "ai-edge-litert==9.9")


def test_a_custom_op_that_does_not_build_fails_its_step(tmp_path):
    cc = pc._script(tmp_path / "cc", "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'gcc 12'; exit 0; }\n"
                                     "echo 'edgeosc_attention.c:1:1: error: unknown type name oops' >&2; echo '    1 | oops' >&2; "
                                     "echo '      | ^~~~' >&2; exit 1\n")
    env = dict(os.environ, CC=str(cc), EDGEOSC_CACHE=str(tmp_path / "cache"))
    with pytest.raises(pc.CheckFailed, match=r"^pi-check failed at step custom-op: error: custom op does not build: "
                                             r".*error: unknown type name oops"):
        pc._Steps(print).run("custom-op", [sys.executable, "-m", "edgeosc.pi_check", "build-op"], cwd=tmp_path,
                             env=env)


def test_emulated_results_are_labelled_and_kept_out_of_timing_tables(tmp_path):
    bench = dict(config=dict(runs=5), system=dict(cpu="", machine="aarch64"), results=[
        dict(path="models/oscillator/int8.tflite", runtime="ai-edge-litert", min_ms=9.0, median_ms=10.0, p90_ms=11.0,
             p99_ms=12.0, energy_mj=1.0, memory_bytes=None, bytes=64032)])
    marked = pc.mark_emulated(bench, "Linux-aarch64")
    assert marked["emulated"] is True and marked["label"] == pc.LABEL == \
        "emulated ARM64 (QEMU), functional check, not a measurement"
    assert marked["results"] == [dict(path="models/oscillator/int8.tflite", runtime="ai-edge-litert",
                                      memory_bytes=None, bytes=64032)]
    assert marked["system"]["cpu"].startswith(pc.LABEL)
    board = tmp_path / "bench-emulated-arm64.json"
    board.write_text(json.dumps(dict(marked, results=bench["results"])))  # timings left in: still no table
    text = markdown(collect(tmp_path, [board]))
    assert f"## {pc.LABEL}" in text and "models/oscillator/int8.tflite [ai-edge-litert]" in text
    assert "Measured on a board" not in text and "10.000" not in text and "| model | runtime | median ms" not in text


def test_the_bundle_bench_takes_a_python_override(tmp_path):
    text = (_bundle(tmp_path) / "run_bench.sh").read_text()
    assert pc.bench_models(tmp_path / "bundle") == ["models/oscillator/int8.tflite", "models/softmax/int8.tflite"]
    from pathlib import Path

    from edgeosc import deploy
    assert 'PY="${{PYTHON:-python}}"' in Path(deploy.__file__).read_text() and text
    assert "scipy" in deploy.REQUIREMENTS  # listen --wav reads WAVs with scipy: found by the emulated check


def test_the_bundle_carries_the_onnx_files_and_their_ops_source(tmp_path):
    """Each kind's int8 ONNX files join the TFLite ones; run_bench.sh times them where onnxruntime is installed, the
    oscillator's *_op.onnx with its OscillatorAttention kernel built from the bundle's export/ort_op."""
    from edgeosc.deploy import build_bundle
    run = tmp_path / "run"
    for kind, names in (("oscillator", ("tflite/int8.tflite", "tflite/int8_custom.tflite", "onnx/int8_qcdq.onnx",
                                        "onnx/int8_qcdq_op.onnx")),
                        ("softmax", ("tflite/int8.tflite", "onnx/int8_qcdq.onnx", "onnx/float.onnx"))):
        for name in names:
            (run / f"export-{kind}" / name).parent.mkdir(parents=True, exist_ok=True)
            (run / f"export-{kind}" / name).write_text("")
    b = build_bundle(run, tmp_path / "bundle", archive=False)
    assert sorted(p.relative_to(b).as_posix() for p in (b / "models").rglob("*.onnx")) == [
        "models/oscillator/int8_qcdq.onnx", "models/oscillator/int8_qcdq_op.onnx", "models/softmax/int8_qcdq.onnx"]
    script = (b / "run_bench.sh").read_text()
    assert 'import onnxruntime, onnx' in script and "$ONNX" in script
    assert "command -v cc" in script and "models/oscillator/int8_custom.tflite" in pc.bench_models(b, every=True)
    custom = [interp for rel, interp in pc.model_cases(b) if rel.endswith("int8_custom.tflite")]
    assert custom == ["ai-edge-litert", "tflite-runtime"]  # the op: a delegate, or registered
    assert pc.bench_models(b) == ["models/oscillator/int8.tflite", "models/softmax/int8.tflite"]  # always
    assert "models/oscillator/int8_qcdq_op.onnx" in pc.bench_models(b, every=True)
    pc.check_files(b)
    (b / "export/ort_op/edgeosc_ort_op.c").unlink()
    with pytest.raises(pc.CheckFailed, match="step files: missing file export/ort_op/edgeosc_ort_op.c"):
        pc.check_files(b)
