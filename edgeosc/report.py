"""The oscillator-vs-softmax report of a pipeline run: Markdown, JSON and plots, every figure labelled
measured (on this machine or a board) or estimated (emulation x datasheet)."""
from __future__ import annotations

import json
import time
from pathlib import Path

from .io import atomic_path, write_json


def _stage(run_dir: Path, name: str) -> dict | None:
    path = run_dir / name / "stage.json"
    if not path.is_file():
        return None
    m = json.loads(path.read_text())
    return m.get("results") if m.get("status") == "done" else None


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def collect(run_dir: str | Path, board_results: list[str | Path] = ()) -> dict:
    """Everything the report shows, read from the stage outputs (and bench JSONs measured on boards)."""
    run_dir = Path(run_dir)
    kinds = [k for k in ("oscillator", "softmax") if (run_dir / f"qat-{k}").is_dir()]
    out = dict(run=str(run_dir), created=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), kinds=kinds,
               data=_stage(run_dir, "data"), models={}, bench=_json(run_dir / "bench" / "bench.json"),
               boards=[dict(_json(Path(p)) or {}, source=str(p)) for p in board_results])
    for k in kinds:
        out["models"][k] = dict(float=_stage(run_dir, f"train-{k}"), qat=_stage(run_dir, f"qat-{k}"),
                                export=_stage(run_dir, f"export-{k}"),
                                parity=_json(run_dir / f"parity-{k}" / "parity.json"))
    return out


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def _ratio(a, b) -> str:
    return "-" if not a or not b else f"{a / b:.2f}x"


def markdown(r: dict) -> str:
    kinds, m = r["kinds"], r["models"]
    lines = [f"# edgeosc report: oscillator vs softmax attention", "",
             f"Run `{r['run']}`, written {r['created']}."]
    if r["data"]:
        c = r["data"]["clips"]
        lines.append(f"Data: {len(r['data']['classes'])} classes, {c['train']} train / {c['val']} val / "
                     f"{c['test']} test clips (speakers or voices disjoint across splits).")
    names = _interpreters(m)
    lines += ["", "## Accuracy (measured, test split)", "",
              "| model | float | int8 QAT (torch) | " + " | ".join(f"int8.tflite, {n}" for n in names) + " |",
              "|---|---|---|" + "---|" * len(names)]
    for k in kinds:
        acc = (m[k]["parity"] or {}).get("int8_tflite_accuracy", {})
        lines.append(f"| {k} | {_pct((m[k]['float'] or {}).get('test_accuracy'))} | "
                     f"{_pct((m[k]['qat'] or {}).get('test_accuracy'))} | " +
                     " | ".join(_pct(acc.get(n)) for n in names) + " |")
    lines += ["", "## Model files (bytes)", "", "| file | " + " | ".join(kinds) + " | ratio |",
              "|---|" + "---|" * (len(kinds) + 1)]
    files = sorted({f for k in kinds for f in ((m[k]["export"] or {}).get("files") or {})
                    if not f.endswith("manifest.json")})
    for f in files:
        sizes = [((m[k]["export"] or {}).get("files") or {}).get(f) for k in kinds]
        ratio = _ratio(*sizes) if len(sizes) == 2 else ""
        lines.append(f"| {f} | " + " | ".join("-" if s is None else str(s) for s in sizes) + f" | {ratio} |")
    lines += ["", "## Parity of the exports (measured)", "",
              "int8.tflite against the QAT model in output LSBs (logits are int8); top-1 = same class as QAT.", "",
              "| model | interpreter | top-1 agreement | mean LSB | max LSB |", "|---|---|---|---|---|"]
    for k in kinds:
        p = (m[k]["parity"] or {}).get("int8_tflite", {})
        for name, v in p.get("interpreters", {}).items():
            lines.append(f"| {k} | {name} | {_pct(v['top1'])}% | {v['mean_lsb']:.3f} | {v['max_lsb']:.0f} |")
    for k in kinds:
        p = m[k]["parity"] or {}
        if p.get("float_tflite_max_abs"):
            worst = max(p["float_tflite_max_abs"].values())
            lines.append(f"\n{k}: float.tflite vs float torch, max |logit difference| {worst:.2e} over interpreters"
                         + (f"; int8_custom.tflite (EdgeOscAttention kernel) vs int8.tflite: max "
                            f"{p['custom_vs_int8_max_lsb']:.0f} LSB" if "custom_vs_int8_max_lsb" in p else "") + ".")
    if r["bench"]:
        s = r["bench"]["system"]
        lines += ["", f"## Latency, batch 1 (measured on this machine: {s['cpu']}, {s['cores']} cores, "
                      f"{r['bench']['config']['threads']} thread)", "",
                  "Median of interleaved runs, oscillator and softmax alternating.", "",
                  "| file | runtime | oscillator ms | softmax ms | oscillator / softmax |", "|---|---|---|---|---|"]
        for row in r["bench"]["latency"]:
            lines.append(f"| {row['file']} | {row['runtime']} | {row['oscillator']['median_ms']:.3f} | "
                         f"{row['softmax']['median_ms']:.3f} | {row['ratio']:.2f}x |")
    for board in r["boards"]:
        s = board.get("system", {})
        lines += ["", f"## Measured on a board: {s.get('cpu', '?')} (`{board['source']}`)", "",
                  "| model | runtime | median ms | p99 ms |", "|---|---|---|---|"]
        for row in board.get("results", []):
            lines.append(f"| {row['path']} | {row['runtime']} | {row['median_ms']:.3f} | {row['p99_ms']:.3f} |")
    lines += ["", "Measured: run here or on the named board. Estimated: emulated instruction counts x a core's "
              "published timing table x a device's datasheet power."]
    return "\n".join(lines) + "\n"


def _interpreters(models: dict) -> list[str]:
    names = []
    for v in models.values():
        for n in ((v["parity"] or {}).get("int8_tflite_accuracy") or {}):
            if n not in names:
                names.append(n)
    return names


def plot_latency(r: dict, path: Path) -> Path | None:
    if not r["bench"]:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = r["bench"]["latency"]
    labels = [f"{x['file']}\n{x['runtime']}" for x in rows]
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.9), 4))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [x["oscillator"]["median_ms"] for x in rows], 0.4, label="oscillator")
    ax.bar([x + 0.2 for x in xs], [x["softmax"]["median_ms"] for x in rows], 0.4, label="softmax")
    ax.set_xticks(list(xs), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("median latency, batch 1 (ms)")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("Latency per runtime (measured)")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    return path


def write_report(run_dir: str | Path, folder: str | Path | None = None, board_results=()) -> Path:
    run_dir = Path(run_dir)
    folder = Path(folder or run_dir / "report")
    folder.mkdir(parents=True, exist_ok=True)
    r = collect(run_dir, board_results)
    write_json(folder / "report.json", r)
    text = markdown(r)
    if plot_latency(r, folder / "latency.png"):
        text += "\n![latency per runtime](latency.png)\n"
    path = folder / "report.md"
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)
    return path
