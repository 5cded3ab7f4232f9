"""onnxruntime latency of exported models: batch 1, one thread, median of many runs, oscillator vs softmax."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..export.onnxrt import INPUT, OUTPUT, OnnxRunner


def export_dir(path: str | Path) -> Path:
    """An ONNX export folder, given it or the run folder holding export-onnx/."""
    path = Path(path)
    for cand in (path, path / "export-onnx"):
        if (cand / "float.onnx").is_file():
            return cand
    raise FileNotFoundError(f"{path}: no ONNX export here; run `edgeosc export --format onnx {path}` first")


def latency(path: str | Path, runs: int = 200, threads: int = 1, warmup: int = 20) -> dict:
    """Median (and p10/p90) wall time in ms of one batch-1 inference, graph optimisations on."""
    runner = OnnxRunner(path, optimize=True, threads=threads)
    x = np.random.default_rng(0).standard_normal((1, *runner.shape[1:])).astype(np.float32)
    run = runner.session.run
    for _ in range(warmup):
        run([OUTPUT], {INPUT: x})
    times = np.empty(runs)
    for i in range(runs):
        t0 = time.perf_counter()
        run([OUTPUT], {INPUT: x})
        times[i] = time.perf_counter() - t0
    ms = times * 1e3
    return dict(median_ms=float(np.median(ms)), p10_ms=float(np.percentile(ms, 10)),
                p90_ms=float(np.percentile(ms, 90)), runs=runs, threads=threads)


def compare(oscillator: str | Path, softmax: str | Path, runs: int = 200, threads: int = 1, echo=print) -> list[dict]:
    """Each oscillator file against the softmax file of the same kind (the *_op files against the plain ones)."""
    osc_dir, soft_dir = export_dir(oscillator), export_dir(softmax)
    pairs = [(f, soft_dir / f.name.replace("_op.onnx", ".onnx")) for f in sorted(osc_dir.glob("*.onnx"))]
    pairs = [(f, base) for f, base in pairs if base.is_file()]
    if not pairs:
        raise FileNotFoundError(f"{osc_dir} and {soft_dir} have no model file of the same kind")
    rows = []
    for f, base in pairs:
        osc, soft = latency(f, runs, threads), latency(base, runs, threads)
        rows.append(dict(file=f.name, softmax_file=base.name, oscillator=osc, softmax=soft,
                         ratio=osc["median_ms"] / soft["median_ms"]))
    echo(f"onnxruntime, batch 1, {threads} thread(s), median of {runs} runs (ms)")
    echo(f"{'file':<20}{'oscillator':>12}{'softmax':>10}{'ratio':>8}")
    for r in rows:
        osc, soft = r["oscillator"]["median_ms"], r["softmax"]["median_ms"]
        echo(f"{r['file']:<20}{osc:>12.3f}{soft:>10.3f}{r['ratio']:>7.2f}x")
    return rows
