"""Accuracy per joule: each (kind, size)'s test accuracy over run folders against its estimated cost on a Cortex-M4
(STM32L4R5): energy and latency per inference, flash and RAM, as a table and a plot
(docs/results.md#accuracy-per-joule).

The cost is an ESTIMATE: an untrained, calibrated int8 network of the run's model config as generated firmware,
emulated instruction by instruction (bench/estimate); random weights price a network as trained ones do. Each
config's cost is computed once and cached.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

from ..config import ModelConfig, to_dict
from ..io import save_figure, write_json

CORE, DEVICE = "cortex-m4", "stm32l4r5"
BASELINE = ("ds-cnn", "small")  # the yardstick of the "x DS-CNN small" column, where the runs have it


def cost(cfg: ModelConfig, n_frames: int, cache_dir: str | Path) -> dict:
    """Estimated cost of one inference of `cfg` on the Cortex-M4 (STM32L4R5): mcycles, ms, mj, flash and RAM
    (bytes: the firmware's weights, tables and parameters; its arena), MACs. Cached under cache_dir/joule."""
    from .estimate import estimate_model, random_firmware
    from .estimate.build import io_bytes
    cfg = dataclasses.replace(cfg, dropout=0.0)
    key = hashlib.sha256(json.dumps([to_dict(cfg), n_frames, CORE, DEVICE], sort_keys=True).encode()).hexdigest()[:16]
    path = Path(cache_dir) / "joule" / f"{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        fw, name = random_firmware(cfg, n_frames, tmp)
        n_in, _ = io_bytes(fw, name)
        est = estimate_model(fw, name, np.zeros(n_in, np.int8), (CORE,), work_dir=Path(tmp) / "work")
        info = json.loads((fw / "firmware.json").read_text())
    model = est["targets"][CORE]["model"]
    dev = model["devices"][DEVICE]
    out = dict(mcycles=model["cycles"] / 1e6, ms=dev["latency_ms"], mj=dev["energy_uj"] / 1e3, macs=model["macs"],
               flash=info["const_bytes"] + info["param_bytes"], ram=info["arena_bytes"])
    write_json(path, out)
    return out


def _narrowed(cfg) -> str:
    """', d_h N' for a transformer whose heads are narrower than its size preset's (more of them), else ''."""
    from ..models import kws
    if cfg.attention == "ds-cnn":
        return ""
    d, h, _ = kws.SIZES[cfg.size]
    full = kws.resolve(cfg)
    return f", d_h {full.d_model // full.heads}" if full.d_model // full.heads != d // h else ""


def collect(run_dirs) -> dict:
    """Run folders (or folders holding them) -> {(dataset, quant, kind, size): dict(acc=[...], cfg, n_frames)}, each
    run's test accuracy in percent; a run is a folder with results.json and best.pt. The size names the preset and,
    where they differ from it, the heads' width (ModelConfig.d_head) and a transformer's MFCC input."""
    from ..checkpoint import load_checkpoint
    from ..train import finished_runs
    groups: dict = defaultdict(lambda: dict(acc=[]))
    for folder, res in finished_runs(run_dirs):
        ckpt = load_checkpoint(folder / "best.pt")
        mfcc = ckpt.feature_cfg.n_mfcc if ckpt.model_cfg.attention != "ds-cnn" else 0  # DS-CNN: always MFCCs
        size = res["size"] + _narrowed(ckpt.model_cfg) + (f", {mfcc} MFCCs" if mfcc else "")
        g = groups[(res.get("dataset") or ckpt.data_cfg.dataset, res.get("quant") or "float", res["attention"], size)]
        g["acc"].append(100 * res["test_accuracy"])
        g.setdefault("cfg", ckpt.model_cfg)
        g.setdefault("n_frames", ckpt.feature_cfg.n_frames)
    return dict(groups)


def curve(run_dirs, cache_dir: str | Path, progress=None) -> list[dict]:
    """One row per (dataset, quant, kind, size) of the runs: accuracy mean, sd and runs; the cost (cost()); x the
    DS-CNN small's energy of the same dataset and quant, where the runs hold it."""
    groups = collect(run_dirs)
    rows = []
    for i, ((dataset, quant, kind, size), g) in enumerate(sorted(groups.items())):
        if progress:
            progress(i, len(groups), f"{kind} {size}")
        acc = g["acc"]
        rows.append(dict(dataset=dataset, quant=quant, kind=kind, size=size, n=len(acc), accuracy=statistics.mean(acc),
                         sd=statistics.stdev(acc) if len(acc) > 1 else 0.0, runs=acc,
                         **cost(g["cfg"], g["n_frames"], cache_dir)))
    base = {(r["dataset"], r["quant"]): r["mj"] for r in rows if (r["kind"], r["size"]) == BASELINE}
    for r in rows:
        r["x_baseline"] = r["mj"] / base[(r["dataset"], r["quant"])] if (r["dataset"], r["quant"]) in base else None
    return rows


def format_table(rows: list[dict]) -> str:
    """Markdown, one table per (dataset, quant)."""
    out = []
    for (dataset, quant) in sorted({(r["dataset"], r["quant"]) for r in rows}):
        out += [f"{dataset}, {quant}:", "",
                "| kind | size | runs | accuracy (mean +- sd) | MACs | Mcycles | ms | mJ | x DS-CNN small "
                "| flash / RAM (B) |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for r in sorted((r for r in rows if (r["dataset"], r["quant"]) == (dataset, quant)), key=lambda r: r["mj"]):
            x = "-" if r["x_baseline"] is None else f"{r['x_baseline']:.2f}x"
            out.append(f"| {r['kind']} | {r['size']} | {r['n']} | {r['accuracy']:.2f} +- {r['sd']:.2f} | "
                       f"{r['macs'] / 1e6:.2f} M | {r['mcycles']:.2f} | {r['ms']:.1f} | {r['mj']:.2f} | {x} | "
                       f"{r['flash']:,} / {r['ram']:,} |")
        out.append("")
    return "\n".join(out)


def plot(rows: list[dict], path: str | Path) -> Path:
    """Accuracy against estimated energy, one line per kind (its sizes in order of energy), error bars of the
    runs' sd; one panel per (dataset, quant)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FormatStrFormatter
    panels = sorted({(r["dataset"], r["quant"]) for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, (dataset, quant) in zip(axes[0], panels):
        for kind in sorted({r["kind"] for r in rows}):
            pts = sorted((r for r in rows if (r["dataset"], r["quant"], r["kind"]) == (dataset, quant, kind)),
                         key=lambda r: r["mj"])
            if not pts:
                continue
            ax.errorbar([r["mj"] for r in pts], [r["accuracy"] for r in pts], yerr=[r["sd"] for r in pts],
                        marker="o", capsize=3, label=kind)
            for r in pts:
                ax.annotate(r["size"], (r["mj"], r["accuracy"]), textcoords="offset points", xytext=(4, -10),
                            fontsize=7)
        ax.set(xscale="log", xlabel="energy per inference, mJ (Cortex-M4, STM32L4R5; estimated)",
               ylabel="test accuracy (%)", title=f"{dataset}, {quant}")
        for axis in (ax.xaxis.set_major_formatter, ax.xaxis.set_minor_formatter):
            axis(FormatStrFormatter("%g"))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)
