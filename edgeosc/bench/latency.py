"""Latency of exported models on their runtimes, batch 1: warm-up, then runs interleaved across models.

Torch-free (numpy plus the runtimes), so it also runs on a Raspberry Pi. Interleaving (model A, model B,
model A, ...) exposes the models to the same machine noise, so their ratio is robust on busy hosts.
"""
from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..runtime.tflite_file import NPU_FILE

ONNX_RUNTIME = "onnxruntime"


@dataclass
class Timed:
    """One model on one runtime: a closure running one inference on a fixed input."""
    path: Path
    runtime: str
    run: Callable[[], object]


def runtimes_for(path: str | Path) -> list[str]:
    """The installed runtimes that take this file: onnxruntime for .onnx, runtime.interpreters_for a .tflite."""
    if Path(path).suffix == ".onnx":
        return [ONNX_RUNTIME]
    from .. import runtime
    return runtime.interpreters_for(path)


def prepare(path: str | Path, runtime_name: str, threads: int = 1) -> Timed:
    path = Path(path)
    if runtime_name == ONNX_RUNTIME:
        from ..runtime.onnx import INPUT, OUTPUT, OnnxRunner
        runner = OnnxRunner(path, optimize=True, threads=threads)
        x = np.random.default_rng(0).standard_normal((1, *runner.shape[1:])).astype(np.float32)
        return Timed(path, runtime_name, lambda: runner.session.run([OUTPUT], {INPUT: x}))
    from .. import runtime
    runner = runtime.load(path, runtime_name, num_threads=threads)
    x = runner.inputs[0].quantize(np.random.default_rng(0).standard_normal(runner.input_shape))
    backend = runner._backend  # the bare invoke: no per-call conversion in the timed region
    return Timed(path, runner.interpreter, lambda: backend.run([x]))


def stats(ms: np.ndarray) -> dict:
    return dict(min_ms=float(ms.min()), median_ms=float(np.median(ms)), p90_ms=float(np.percentile(ms, 90)),
                p99_ms=float(np.percentile(ms, 99)), runs=int(len(ms)))


def measure(models: list[Timed], runs: int = 200, warmup: int = 20) -> list[dict]:
    """Latency statistics per model, its runs interleaved with the others'."""
    for m in models:
        for _ in range(warmup):
            m.run()
    times = np.empty((len(models), runs))
    for i in range(runs):
        for j, m in enumerate(models):
            t0 = time.perf_counter()
            m.run()
            times[j, i] = time.perf_counter() - t0
    return [dict(file=m.path.name, runtime=m.runtime, **stats(t * 1e3)) for m, t in zip(models, times)]


_RESIDENT = """
import sys
from edgeosc.bench import latency
def rss():  # resident set size now, bytes (Linux)
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
latency.prepare  # the runtime's modules are imported by the first prepare; import them first
if sys.argv[2] == "onnxruntime":
    import onnxruntime
else:
    from edgeosc import runtime
    runtime._module(sys.argv[2])
before = rss()
timed = latency.prepare(sys.argv[1], sys.argv[2])
for _ in range(10):
    timed.run()
print(rss() - before)
"""


def resident_memory(path: str | Path, runtime_name: str) -> int:
    """Bytes of resident memory a fresh process gains by loading the model and running it 10 times
    (after importing the runtime): weights, arena and interpreter state (Linux /proc/self/status)."""
    out = subprocess.run([sys.executable, "-c", _RESIDENT, str(path), runtime_name], capture_output=True,
                         text=True, timeout=300)
    if out.returncode:
        raise RuntimeError(f"{path} [{runtime_name}]: memory probe failed: {out.stderr.strip()[-300:]}")
    return max(int(out.stdout.split()[-1]), 0)


def measure_energy(timed: Timed, monitor, runs: int, idle_s: float = 1.0) -> dict:
    """Energy per inference: an idle window, then one long window of `runs` back-to-back inferences (slow
    monitors see many samples), integrated over the monitor's trace minus the idle power (bench/power.py)."""
    from .power import energy_per_inference, run_windows
    with monitor:
        t0 = time.perf_counter()
        time.sleep(idle_s)
        idle = (t0, time.perf_counter())
        windows, n = run_windows(timed.run, runs)
    return energy_per_inference(monitor.trace, windows, idle=idle, runs_per_window=n)


def bench(paths: list[str | Path], runtimes: list[str] | None = None, runs: int = 200, threads: int = 1,
          warmup: int = 20, memory: bool = True, power=None) -> dict:
    """Latency (interleaved across all models and runtimes), resident memory and size of each, with system
    info; with `power` (a PowerMonitor factory) also the measured energy per inference."""
    from .system import system_info
    timed = [prepare(p, rt, threads) for p in paths for rt in (runtimes or runtimes_for(p))
             if rt in runtimes_for(p)]
    if not timed:
        raise ValueError(f"no installed runtime takes {[str(p) for p in paths]}")
    rows = measure(timed, runs, warmup)
    for row, t in zip(rows, timed):
        row.update(path=str(t.path), bytes=t.path.stat().st_size, threads=threads,
                   memory_bytes=resident_memory(t.path, t.runtime) if memory else None)
        if power is not None:
            row["energy"] = measure_energy(t, power(), runs)
    return dict(system=system_info(), results=rows)


def format_table(report: dict) -> str:
    s = report["system"]
    lines = [f"{s['cpu']} ({s['cores']} cores, governor {s['governor']}), {s['os']}",
             f"{'model':<48}{'runtime':<16}{'min':>8}{'median':>8}{'p90':>8}{'p99':>8}  ms{'memory':>10}{'size':>10}"]
    for r in report["results"]:
        mem = f"{r['memory_bytes'] / 2**10:.0f}K" if r["memory_bytes"] is not None else "-"
        lines.append(f"{r['path'][-47:]:<48}{r['runtime']:<16}{r['min_ms']:>8.3f}{r['median_ms']:>8.3f}{r['p90_ms']:>8.3f}"
                     f"{r['p99_ms']:>8.3f}    {mem:>10}{r['bytes'] / 1024:>9.1f}K")
    for r in report["results"]:
        if "energy" in r:
            e = r["energy"]
            lines.append(f"{r['path'][-47:]:<48}{r['runtime']:<16}energy {1e3 * e['joules_per_inference']:.4f} mJ per "
                         f"inference (active {e['active_w']:.3f} W, idle {e['idle_w']:.3f} W; measured)"
                         + (f"  WARNING {e['warning']}" if e.get("warning") else ""))
    return "\n".join(lines)


def export_files(path: str | Path) -> list[Path]:
    """Model files of an export folder, or of a run folder's export-onnx/ and export-tflite/."""
    path = Path(path)
    folders = [path] + [path / f"export-{t}" for t in ("onnx", "tflite")]
    files = sorted(f for d in folders if d.is_dir() for f in d.iterdir() if f.suffix in (".onnx", ".tflite"))
    if not files:
        raise FileNotFoundError(f"{path}: no exported model here; run `edgeosc export {path}` first")
    return files


def baseline_name(name: str) -> str:
    """The softmax counterpart of an oscillator file: the custom-op variants compare with the plain ones."""
    return name.replace("_op.onnx", ".onnx").replace("_custom.tflite", ".tflite")


def compare(oscillator: str | Path, softmax: str | Path, runs: int = 200, threads: int = 1,
            echo=print, others: dict[str, str | Path] | None = None) -> list[dict]:
    """Each oscillator file against the softmax file of the same kind, on every runtime that takes both; each of
    `others` ({kind: export folder}, e.g. "ds-cnn", "kuramoto") with a file of the same kind runs in the same
    interleaved loop (row keys: the kind, and "ratio_<kind>" = oscillator / it). int8_npu.tflite, the NPUs' file
    (int8.tflite's function with its unit vectors in operators Vela places on an Ethos-U), is Vela's to price: skipped."""
    soft = {f.name: f for f in export_files(softmax)}
    extra = {k: {f.name: f for f in export_files(p)} for k, p in (others or {}).items()}
    rows = []
    for f in export_files(oscillator):
        base = soft.get(baseline_name(f.name))
        if base is None or f.name == NPU_FILE:
            continue
        candidates = {k: files[baseline_name(f.name)] for k, files in extra.items() if baseline_name(f.name) in files}
        for rt in runtimes_for(f):
            more = {k: p for k, p in candidates.items() if rt in runtimes_for(p)}
            models = [prepare(f, rt, threads), prepare(base, rt, threads)] + [prepare(p, rt, threads)
                                                                              for p in more.values()]
            osc, sm, *stats = measure(models, runs)
            rows.append(dict(file=f.name, softmax_file=base.name, runtime=rt, threads=threads, oscillator=osc,
                             softmax=sm, ratio=osc["median_ms"] / sm["median_ms"]))
            for k, st in zip(more, stats):
                rows[-1].update({k: st, f"ratio_{k}": osc["median_ms"] / st["median_ms"]})
    if not rows:
        raise FileNotFoundError(f"{oscillator} and {softmax} have no model file of the same kind")
    echo(f"batch 1, {threads} thread(s), median of {runs} interleaved runs (ms)")
    echo(f"{'file':<20}{'runtime':<16}{'oscillator':>11}{'softmax':>10}{'ratio':>8}"
         + "".join(f"{k:>11}" for k in extra))
    for r in rows:
        echo(f"{r['file']:<20}{r['runtime']:<16}{r['oscillator']['median_ms']:>11.3f}"
             f"{r['softmax']['median_ms']:>10.3f}{r['ratio']:>7.2f}x"
             + "".join(f"{r[k]['median_ms']:>11.3f}" if k in r else f"{'-':>11}" for k in extra))
    return rows
