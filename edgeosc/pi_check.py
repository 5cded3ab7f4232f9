"""The Raspberry Pi bundle proven on 64-bit ARM Linux without a board: Raspberry Pi OS's own Debian
(bookworm, Python 3.11) arm64 userland, run by user-mode QEMU on this machine.

    edgeosc deploy --target rpi RUN --check        # or: make pi-check RUN=...; python -m edgeosc.pi_check BUNDLE

Steps (each named in the one-line message when it fails): `files` (what run_bench.sh and the custom op
need is in the bundle), `userland` (debootstrap --foreign of bookworm arm64 with python3, pip and gcc,
built once under $EDGEOSC_CACHE/pi-rootfs-bookworm and renamed into place), `requirements` (the
userland's own pip installs requirements.txt, as the bundle's README tells a Pi user), `bench`
(run_bench.sh to the end, results JSON written, marked emulated), `listen` (on a WAV), `custom-op` (the
EdgeOscAttention kernel built by the userland's gcc, run as ai-edge-litert's delegate and, where tflite-runtime has
wheels, registered with it; the OscillatorAttention
library for onnxruntime built likewise, and run where onnxruntime is installed) and `compare` (the
int8 models' raw outputs on fixed inputs, aarch64 against x86, per interpreter).

Two traps of user-mode QEMU, handled here: XNNPACK's CPU detection reads the host's x86 /proc/cpuinfo and
segfaults, so a Raspberry Pi 4 style cpuinfo and cpu folder are written inside the userland (QEMU's -L
prefix serves them first) and, as root, bind-mounted in a private mount namespace too; and an emulated
process cannot exec an aarch64 binary (no binfmt_misc), so the bench runs with --no-memory, its `python`
is a host wrapper script (PYTHON=...), and gcc runs its cc1/as/ld through a host wrapper (-wrapper),
collect2 replaced by ld. Timings under emulation mean nothing: the results are labelled LABEL.

This module is torch-free: the bundle carries it, and `python -m edgeosc.pi_check outputs|build-op` runs
inside the emulated userland.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path

import numpy as np

# Raspberry Pi OS's Debian releases and their Python: bookworm (Raspberry Pi OS 12), trixie (13)
SUITES = {"bookworm": "python3.11", "trixie": "python3.13"}
SUITE, PYTHON = "bookworm", SUITES["bookworm"]
PACKAGES = ("python3", "python3-venv", "python3-pip", "gcc", "libc6-dev")
LABEL = "emulated ARM64 (QEMU), functional check, not a measurement"
# the custom op registers with tflite-runtime's op resolver (the bundle's requirements name it for Python < 3.12)
CUSTOM_OP_RUNTIME = "tflite-runtime==2.14.0"
# raw int8 outputs may differ by this many LSB between the ARM (NEON) and x86 kernels: measured 0-1 LSB for
# int8.tflite (LiteRT, tflite-runtime), 2 for int8_custom.tflite (1 LSB upstream of the kernel, carried through it)
MAX_LSB = 2
# the Raspberry Pi 4's core (Pi 5: cortex-a76). Not QEMU's default `max`: with its SVE/SME/I8MM LiteRT 2.3's
# XNNPACK picks kernels whose emulation by QEMU 7.2 gives outputs 70-90 LSB off (tflite-runtime stays within 1)
CPU = os.environ.get("EDGEOSC_PI_CPU", "cortex-a72")
N_INPUTS = 8
BENCH_ARGS = ("--runs", "5", "--warmup", "1", "--no-memory")
QEMU = "qemu-aarch64-static"


class CheckFailed(RuntimeError):
    """A step of the check failed: one line naming the step."""

    def __init__(self, step: str, message: str):
        self.step = step
        super().__init__(f"pi-check failed at step {step}: {message}")


# ------------------------------------------------------------------------- the emulated board

def cpuinfo(cores: int = 4) -> str:
    """/proc/cpuinfo of a Raspberry Pi 4 (Cortex-A72, part 0xd08) as the arm64 kernel writes it."""
    cpu = ("processor\t: {i}\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\n"
           "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd08\nCPU revision\t: 3\n")
    return "\n".join(cpu.format(i=i) for i in range(cores)) + \
        "\nHardware\t: BCM2835\nRevision\t: c03111\nModel\t\t: Raspberry Pi 4 Model B Rev 1.1\n"


def cpu_folder(cores: int = 4) -> dict[str, str]:
    """The files of a minimal /sys/devices/system/cpu: online, possible and present."""
    span = f"0-{cores - 1}\n" if cores > 1 else "0\n"
    return {name: span for name in ("online", "possible", "present")}


def write_fake_cpu(root: Path, cores: int = 4) -> None:
    """The board's cpuinfo and cpu folder inside the userland (QEMU's -L prefix finds them before the host's)."""
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc" / "cpuinfo").write_text(cpuinfo(cores))
    folder = root / "sys" / "devices" / "system" / "cpu"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in cpu_folder(cores).items():
        (folder / name).write_text(text)


def debian_mirrors(files, codename: str = SUITE) -> list[str]:
    """URIs of the enabled `deb` entries of apt source files (deb822 .sources or one-line) with suite
    `codename` itself: the Debian mirror this machine's apt uses, never a name written here."""
    uris: list[str] = []

    def add(us, suites, types="deb", enabled="yes"):
        if "deb" in types.split() and enabled.lower() not in ("no", "false") and codename in suites.split():
            uris.extend(u for u in us.split() if u not in uris)

    for f in map(Path, files):
        if not f.is_file():
            continue
        text = f.read_text(errors="replace")
        if f.suffix == ".sources":
            for stanza in re.split(r"\n[ \t]*\n", text):
                fields, key = {}, None
                for line in stanza.splitlines():
                    if line.lstrip().startswith("#") or not line.strip():
                        continue
                    if line[0] in " \t" and key:
                        fields[key] += " " + line.strip()
                    elif ":" in line:
                        key, v = line.split(":", 1)
                        key = key.strip().lower()
                        fields[key] = v.strip()
                if "uris" in fields:
                    add(fields["uris"], fields.get("suites", ""), fields.get("types", ""), fields.get("enabled", "yes"))
        else:
            for line in text.splitlines():
                w = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
                if len(w) >= 3 and w[0] == "deb":
                    add(w[1], w[2])
    return uris


def suite_mirrors(files, suite: str) -> list[str]:
    """The mirrors for a suite's userland: this machine's entries of that suite, else (a host of another release)
    the first mirror of its entries of the other suites: one Debian archive holds every release."""
    return debian_mirrors(files, suite) or [u for other in SUITES for u in debian_mirrors(files, other)][:1]


def apt_source_files() -> list[Path]:
    d = Path("/etc/apt/sources.list.d")
    return [Path("/etc/apt/sources.list"), *sorted(d.glob("*.list")), *sorted(d.glob("*.sources"))]


def debootstrap_cmd(root, mirror: str, suite: str = SUITE) -> list[str]:
    return ["debootstrap", "--arch=arm64", "--foreign", "--variant=minbase", f"--include={','.join(PACKAGES)}",
            suite, str(root), mirror]


def rootfs_dir(cache=None, suite: str = SUITE) -> Path:
    base = cache or os.environ.get("EDGEOSC_CACHE") or \
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "edgeosc"
    return Path(base) / f"pi-rootfs-{suite}"


def rootfs(cache=None, suite: str = SUITE, echo=print) -> Path:
    """The arm64 userland, built once (debootstrap, then every downloaded .deb unpacked) aside and renamed
    into place; later calls return it at once."""
    root, python = rootfs_dir(cache, suite), SUITES[suite]
    if (root / "usr" / "bin" / python).is_file():
        return root
    missing = [t for t in ("debootstrap", QEMU, "dpkg-deb") if not shutil.which(t)]
    if missing:
        raise CheckFailed("userland", f"{', '.join(missing)} not found: apt-get install debootstrap qemu-user-static")
    mirrors = os.environ.get("EDGEOSC_DEBIAN_MIRROR", "").split() or suite_mirrors(apt_source_files(), suite)
    if not mirrors:
        raise CheckFailed("userland", f"no Debian {suite} entry in this machine's apt sources "
                                      "(set EDGEOSC_DEBIAN_MIRROR to a Debian mirror URI)")
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        echo(f"[userland] debootstrap {suite} arm64 from {mirrors[0]} -> {root} (once)")
        res = subprocess.run(debootstrap_cmd(tmp, mirrors[0], suite), capture_output=True, text=True, check=False)
        if res.returncode:
            raise CheckFailed("userland", "debootstrap failed: " + _last_line(res.stdout + res.stderr))
        for deb in sorted((tmp / "var" / "cache" / "apt" / "archives").glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp)], check=True, capture_output=True)
        if not (tmp / "usr" / "bin" / python).is_file():
            raise CheckFailed("userland", f"no /usr/bin/{python} in the unpacked userland")
        write_fake_cpu(tmp)
        os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("ERROR", "E:", "error", "Error", "fatal"))
              or " error:" in ln or "Error" in ln]  # pip, apt, python tracebacks, gcc's file:line: error:
    return (errors or lines or ["(no output)"])[-1]


# ------------------------------------------------------------------- host wrappers around QEMU

def qemu_cmd(root: Path, exe: str, *args: str) -> list[str]:
    """Run an aarch64 program of the userland (a path inside it, e.g. /usr/bin/python3.11)."""
    return [QEMU, "-cpu", CPU, "-L", str(root), str(root) + exe, *args]


def python_wrapper(root: Path, bind: bool, python: str = PYTHON) -> str:
    """A host sh script that runs the userland's python (python3.11 on bookworm) under QEMU; with bind, in a private
    mount namespace with the board's cpuinfo and cpu folder mounted over the host's."""
    run = " ".join(shlex.quote(a) for a in qemu_cmd(root, f"/usr/bin/{python}")) + ' "$@"'
    if not bind:
        return f"#!/bin/sh\nexec {run}\n"
    cpu, cpus = shlex.quote(str(root / "proc" / "cpuinfo")), shlex.quote(str(root / "sys/devices/system/cpu"))
    inner = f"mount --bind {cpu} /proc/cpuinfo && mount --bind {cpus} /sys/devices/system/cpu && exec {run}"
    return f"#!/bin/sh\nexec unshare -m sh -c {shlex.quote(inner)} sh \"$@\"\n"


def exec_wrapper(root: Path) -> str:
    """gcc's -wrapper: runs each of the driver's programs (cc1, as, collect2) of the userland under QEMU;
    collect2 would exec ld itself (Exec format error), so ld runs in its place."""
    r, q = shlex.quote(str(root)), shlex.quote(QEMU)
    return ("#!/bin/sh\np=$1; shift\n"
            'case "$p" in */*) ;; *) p=/usr/bin/$p ;; esac\n'
            'case "$p" in */collect2) p=/usr/bin/ld ;; esac\n'
            f'[ -e {r}"$p" ] && p={r}"$p"\n'
            f'exec {q} -cpu {shlex.quote(CPU)} -L {r} "$p" "$@"\n')


def gcc_wrapper(root: Path, exec_wrap: Path) -> str:
    """CC for cbuild inside the emulated python: the userland's gcc driver, its programs via exec_wrap."""
    run = " ".join(shlex.quote(a) for a in qemu_cmd(root, "/usr/bin/gcc"))
    return f'#!/bin/sh\nexec {run} -wrapper {shlex.quote(str(exec_wrap))} "$@"\n'


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


# ------------------------------------------------------------------------- the bundle's pieces

def bench_models(bundle: Path, every: bool = False) -> list[str]:
    """The model files run_bench.sh always benches (its `bench models` line), or with every those it names at all
    (the custom op's files join where the board has a C compiler, the ONNX files where onnxruntime is)."""
    text = (bundle / "run_bench.sh").read_text()
    if not every:
        text = next((line for line in text.splitlines() if "-m edgeosc bench models" in line), "")
    return re.findall(r"models/\S+?\.(?:tflite|onnx)\b", text)


def check_files(bundle: Path) -> None:
    """What the Pi user runs must be there: README, requirements, run_bench.sh and the models it names,
    the edgeosc sources, the custom op's C sources (the core units, every kernel file they include and the DSP
    variants' assembly)."""
    from .cbuild import CORE_SOURCES, KERNELS, ROOT
    kernels = sorted({*CORE_SOURCES, *KERNELS.rglob("*.[chS]")})
    need = ["README.md", "requirements.txt", "run_bench.sh", "edgeosc/__main__.py",
            "export/tflite_op/edgeosc_tflite_op.c", *(str(p.relative_to(ROOT)) for p in kernels)]
    if list((bundle / "models").glob("*/*.onnx")):  # the ONNX op's kernel source, where the bundle has ONNX files
        need.append("export/ort_op/edgeosc_ort_op.c")
    if (bundle / "run_bench.sh").is_file():
        models = bench_models(bundle, every=True)
        if not models:
            raise CheckFailed("files", "run_bench.sh names no models/*.tflite")
        need += models
    for rel in need:
        if not (bundle / rel).is_file():
            raise CheckFailed("files", f"missing file {rel} in {bundle}")


def write_wav(path: Path, seconds: float = 1.5, rate: int = 16000, seed: int = 0) -> Path:
    """A fixed clip: a 440 Hz tone under low noise, 16-bit mono."""
    t = np.arange(int(seconds * rate)) / rate
    x = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.02 * np.random.default_rng(seed).standard_normal(t.size)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def fixed_inputs(shape, dtype, n: int = N_INPUTS, seed: int = 0) -> np.ndarray:
    """n raw inputs over the whole integer range of an int8 model's input tensor (batch axis first)."""
    info = np.iinfo(np.dtype(dtype))
    return np.random.default_rng(seed).integers(info.min, info.max + 1, size=(n, *shape[1:]), dtype=np.dtype(dtype))


def model_cases(bundle: Path) -> list[tuple[str, str]]:
    """(model file, interpreter) to compare: each int8.tflite under LiteRT and tflite-runtime, each int8_custom.tflite
    likewise with the EdgeOscAttention kernel (runtime.load gives it: a delegate in LiteRT, registered in
    tflite-runtime)."""
    return [(str(m.relative_to(bundle)), interp)
            for name in ("int8.tflite", "int8_custom.tflite") for m in sorted((bundle / "models").glob(f"*/{name}"))
            for interp in ("ai-edge-litert", "tflite-runtime")]


def outputs(bundle: Path, inputs: Path, out: Path, interpreters=None) -> dict:
    """Raw outputs of every case on the inputs (npz keyed by model file), saved as npz; runs on either side."""
    from . import runtime
    have = runtime.available_interpreters()
    data, res, versions = np.load(inputs), {}, {}
    for rel, interp in model_cases(bundle):
        if interp not in have or (interpreters and interp not in interpreters):
            continue
        runner = runtime.load(bundle / rel, interpreter=interp)  # int8_custom's op: its kernel without asking
        res[f"{rel}|{interp}"] = np.asarray(runner.run_raw(data[rel]))
        versions[interp] = _version(interp)
    np.savez(out, **res)
    return versions


def _version(interp: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(interp)
    except PackageNotFoundError:
        return "?"


def compare(x86: dict, arm: dict, max_lsb: int = MAX_LSB) -> list[dict]:
    """Per case (model|interpreter present on both sides): inputs, outputs equal bit for bit, max |difference|
    in LSB of the raw outputs, and whether that is within max_lsb."""
    rows = []
    for key in sorted(set(x86) | set(arm)):
        model, interp = key.split("|")
        if key not in x86 or key not in arm:
            rows.append(dict(model=model, interpreter=interp, ok=False,
                             note=f"ran on {'x86' if key in x86 else 'aarch64'} only"))
            continue
        a, b = np.asarray(x86[key]), np.asarray(arm[key])
        if a.shape != b.shape or a.dtype != b.dtype:
            rows.append(dict(model=model, interpreter=interp, ok=False,
                             note=f"outputs differ in shape/dtype: {a.shape} {a.dtype} vs {b.shape} {b.dtype}"))
            continue
        d = np.abs(a.astype(np.int64) - b.astype(np.int64)) if np.issubdtype(a.dtype, np.integer) else \
            np.abs(a.astype(np.float64) - b.astype(np.float64))
        worst = float(d.max()) if d.size else 0.0
        rows.append(dict(model=model, interpreter=interp, inputs=int(a.shape[0]), bit_exact=bool(worst == 0),
                         equal_samples=int((d.reshape(len(d), -1).max(axis=1) == 0).sum()) if d.size else 0,
                         max_lsb=worst, ok=worst <= max_lsb))
    return rows


def compare_lines(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        if "note" in r:
            out.append(f"  {r['model']:<34} {r['interpreter']:<15} FAIL: {r['note']}")
        else:
            verdict = "bit-exact" if r["bit_exact"] else f"max {r['max_lsb']:g} LSB ({r['equal_samples']}/" \
                                                         f"{r['inputs']} inputs identical)"
            out.append(f"  {r['model']:<34} {r['interpreter']:<15} {verdict}{'' if r['ok'] else '  FAIL'}")
    return out


def mark_emulated(bench: dict, userland: str) -> dict:
    """The bench JSON as the check writes it: emulated, labelled, and without timings or energy."""
    drop = re.compile(r"(_ms|_mj|_uj|_j|_w|_mw|energy|power|latency)", re.IGNORECASE)
    results = [{k: v for k, v in r.items() if not drop.search(k)} for r in bench.get("results", [])]
    system = dict(bench.get("system", {}), cpu=f"{LABEL}: {userland}")
    return dict({k: v for k, v in bench.items() if k not in ("results", "system", "power", "energy")},
                results=results, system=system, emulated=True, label=LABEL)


# --------------------------------------------------------------------------------- the check

class _Steps:
    def __init__(self, echo):
        self.echo, self.times = echo, {}

    def run(self, step: str, cmd, timeout: int = 1800, **kw) -> subprocess.CompletedProcess:
        t = time.monotonic()
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, **kw)
        except subprocess.TimeoutExpired:
            raise CheckFailed(step, f"timed out after {timeout} s: {' '.join(map(str, cmd))}") from None
        self.times[step] = round(self.times.get(step, 0) + time.monotonic() - t, 1)
        if res.returncode:
            raise CheckFailed(step, _last_line(res.stderr + "\n" + res.stdout))
        return res


def check_bundle(bundle, work=None, cache=None, echo=print, max_lsb: int = MAX_LSB, suite: str = SUITE) -> dict:
    """Run every step on a copy of the bundle in the userland of Debian `suite`; returns (and writes to
    WORK/pi-check.json) the summary. Where tflite-runtime has no wheels for the suite's Python (3.12 on), the
    custom op runs as ai-edge-litert's delegate alone, and the outputs are compared in the interpreters both sides
    ran."""
    t0 = time.monotonic()
    bundle = Path(bundle).resolve()
    if not bundle.is_dir():
        raise CheckFailed("files", f"no bundle folder {bundle}")
    check_files(bundle)
    work = Path(work or bundle.with_name(bundle.name + "-pi-check" + ("" if suite == SUITE else f"-{suite}"))).resolve()
    python = SUITES[suite]
    custom = python in ("python3.9", "python3.10", "python3.11")  # tflite-runtime 2.14's wheels
    shutil.rmtree(work, ignore_errors=True)
    copy = work / "bundle"
    shutil.copytree(bundle, copy, ignore=shutil.ignore_patterns("results", "__pycache__"))
    (copy / "results").mkdir()
    steps = _Steps(echo)

    t = time.monotonic()
    root = rootfs(cache, suite, echo=echo)
    steps.times["userland"] = round(time.monotonic() - t, 1)
    bind = os.geteuid() == 0 and shutil.which("unshare") is not None
    py = _script(work / "python-aarch64", python_wrapper(root, bind, python))
    gcc = _script(work / "gcc-aarch64", gcc_wrapper(root, _script(work / "exec-aarch64", exec_wrapper(root))))
    userland = steps.run("userland", [py, "-c", "import platform; print(platform.platform())"]).stdout.strip()
    echo(f"[userland] {userland}")

    site, extra = work / "site", work / "site-custom-op"
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-warn-script-location",
           "--only-binary=:all:"]
    echo("[requirements] pip install -r requirements.txt (the userland's pip, aarch64 wheels)")
    steps.run("requirements", [*pip, "--target", site, "-r", copy / "requirements.txt"])
    if custom:
        echo(f"[requirements] + {CUSTOM_OP_RUNTIME} for the custom op (not in the bundle's requirements)")
        steps.run("requirements", [*pip, "--no-deps", "--target", extra, CUSTOM_OP_RUNTIME])
    # CC: the emulated python builds the op's kernel (run_bench.sh times int8_custom.tflite) with the userland's gcc
    env = dict(os.environ, PYTHONPATH=str(site), PYTHON=str(py), PYTHONDONTWRITEBYTECODE="1", CC=str(gcc))
    env.pop("VIRTUAL_ENV", None)
    # every step's builds in a cache of the check's own: QEMU's user mode finds host paths where the userland has no
    # file, so a shared ~/.cache/edgeosc would hand the emulated python the host's x86-64 libraries
    env["EDGEOSC_CACHE"] = str(work / "cache")

    echo("[bench] run_bench.sh " + " ".join(BENCH_ARGS) + " (PYTHON = the emulated python)")
    steps.run("bench", ["sh", copy / "run_bench.sh", *BENCH_ARGS], cwd=copy, env=env)
    found = sorted((copy / "results").glob("bench-*.json"))
    if not found:
        raise CheckFailed("bench", "run_bench.sh wrote no results/bench-*.json")
    bench = json.loads(found[0].read_text())
    ran = {(Path(r["path"]).as_posix(), r["runtime"]) for r in bench.get("results", [])}
    models = bench_models(copy)
    if len({p for p, _ in ran}) < len(models):
        raise CheckFailed("bench", f"results cover {sorted(ran)}, not every model of run_bench.sh: {models}")
    marked = work / "bench-emulated-arm64.json"
    marked.write_text(json.dumps(mark_emulated(bench, userland), indent=1))

    wav = write_wav(work / "clip.wav")
    echo(f"[listen] python -m edgeosc listen {models[0]} --wav clip.wav")
    heard = steps.run("listen", [py, "-m", "edgeosc", "listen", models[0], "--wav", wav], cwd=copy, env=env)

    env_op = dict(env, PYTHONPATH=f"{site}:{extra}" if custom else str(site))
    echo("[custom-op] EdgeOscAttention built by the userland's gcc (cc1, as, ld under QEMU): ai-edge-litert's "
         "delegate" + (", registered with tflite-runtime" if custom else
                       f" (tflite-runtime has no wheels for {python})"))
    op = steps.run("custom-op", [py, "-m", "edgeosc.pi_check", "build-op"], cwd=copy, env=env_op).stdout.strip()
    echo(f"[custom-op] {op.splitlines()[-1] if op else ''}")

    echo(f"[compare] raw int8 outputs on {N_INPUTS} fixed inputs per model, aarch64 vs x86")
    inputs = work / "inputs.npz"
    _write_inputs(copy, inputs)
    t = time.monotonic()
    steps.run("compare", [py, "-m", "edgeosc.pi_check", "outputs", inputs, work / "arm.npz"], cwd=copy,
              env=env_op)
    arm_versions = json.loads((work / "arm.npz.json").read_text())
    try:  # x86 in the interpreters the userland has (trixie: no tflite-runtime)
        host_versions = outputs(copy, inputs, work / "x86.npz", interpreters=set(arm_versions))
    except Exception as e:  # noqa: BLE001 - named as the step
        raise CheckFailed("compare", f"x86 outputs: {e}") from None
    steps.times["compare"] = round(time.monotonic() - t, 1)
    rows = compare(dict(np.load(work / "x86.npz")), dict(np.load(work / "arm.npz")), max_lsb)
    for line in compare_lines(rows):
        echo(line)
    summary = dict(emulated=True, label=LABEL, suite=suite, userland=userland, qemu=f"{_qemu_version()}, -cpu {CPU}",
                   bundle=str(bundle),
                   bench=str(marked), listen=heard.stdout.strip().splitlines()[-3:], custom_op=op,
                   interpreters=dict(x86=host_versions, aarch64=arm_versions), max_lsb_allowed=max_lsb,
                   compare=rows, step_seconds=steps.times, wall_s=round(time.monotonic() - t0, 1))
    (work / "pi-check.json").write_text(json.dumps(summary, indent=1))
    bad = [r for r in rows if not r["ok"]]
    if bad or not rows:
        raise CheckFailed("compare", "no model ran on both sides" if not rows else
                          f"{bad[0]['model']} [{bad[0]['interpreter']}]: " +
                          bad[0].get("note", f"aarch64 differs from x86 by {bad[0]['max_lsb']:g} LSB > {max_lsb}"))
    echo(f"pi-check passed on {suite} in {summary['wall_s']:.0f} s ({LABEL}): {work / 'pi-check.json'}")
    return summary


def _write_inputs(bundle: Path, path: Path) -> None:
    from .runtime.tflite_file import check_tflite
    arrays = {}
    for rel, _ in model_cases(bundle):
        if rel not in arrays:
            t = check_tflite((bundle / rel).read_bytes(), name=rel)["subgraphs"][0]["inputs"][0]
            arrays[rel] = fixed_inputs(t["shape"], t["dtype"], seed=len(arrays))
    np.savez(path, **arrays)


def _qemu_version() -> str:
    try:
        return subprocess.run([QEMU, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[0]
    except (OSError, IndexError):
        return "?"


def check_run(run, cache=None, echo=print) -> dict:
    """Bundle a pipeline run (RUN/rpi-bundle) and check the bundle."""
    from .deploy import build_bundle
    return check_bundle(build_bundle(run), cache=cache, echo=echo)


def _build_op() -> str:
    """Inside the userland: build the kernel with $CC (the userland's gcc), run int8_custom.tflite with it as
    ai-edge-litert's delegate and, where tflite-runtime is installed, registered; build the OscillatorAttention
    library for onnxruntime too, and run the *_op.onnx files with it where onnxruntime is."""
    import ctypes
    import importlib.util
    import platform

    from .cbuild import compiler_version
    from .runtime import custom_op, ort_op
    try:
        lib = custom_op.build()
    except RuntimeError as e:
        raise SystemExit("error: custom op does not build: " + _last_line(str(e)))
    assert ctypes.CDLL(str(lib)).edgeosc_tflite_registration  # the kernel's entry point is there
    line = f"{lib.name} for {platform.machine()} built by {compiler_version((os.environ.get('CC', 'gcc'),))}"
    from . import runtime
    models = sorted(Path("models").glob("*/int8_custom.tflite"))
    for interp in runtime.OP_INTERPRETERS:  # a delegate in ai-edge-litert, registered in tflite-runtime
        if interp not in runtime.available_interpreters():
            continue
        for m in models:
            r = runtime.load(m, interpreter=interp)
            r.run_raw(*[np.zeros(t.shape, t.dtype) for t in r.inputs])
        line += f"; {interp} {_version(interp)}: {len(models)} int8_custom.tflite ran"
    try:
        ort_lib = ort_op.build()
    except RuntimeError as e:
        raise SystemExit("error: the ONNX custom op does not build: " + _last_line(str(e)))
    assert ctypes.CDLL(str(ort_lib)).RegisterCustomOps  # onnxruntime's entry point
    onnx_models = sorted(Path("models").glob("*/*_op.onnx"))
    if importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None:
        return line + f"; {ort_lib.name} built (onnxruntime not installed: {len(onnx_models)} *_op.onnx not run)"
    from .runtime.onnx import OnnxRunner
    for m in onnx_models:
        r = OnnxRunner(m, custom_op=True)
        r(np.zeros((1, *r.shape[1:]), np.float32))
    return line + f"; {ort_lib.name} registered with onnxruntime {_version('onnxruntime')}: {len(onnx_models)} ran"

def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["build-op"]:
        print(_build_op())
        return 0
    if argv[:1] == ["outputs"]:
        inputs, out = map(Path, argv[1:3])
        versions = outputs(Path.cwd(), inputs, out)
        Path(str(out) + ".json").write_text(json.dumps(versions))
        return 0
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m edgeosc.pi_check BUNDLE   (or: edgeosc deploy --target rpi RUN --check)",
              file=sys.stderr)
        return 2
    try:
        check_bundle(argv[0])
    except CheckFailed as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
