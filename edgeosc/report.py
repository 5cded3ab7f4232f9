"""The report of a pipeline run (oscillator against softmax, and DS-CNN when it ran): Markdown, JSON and plots,
every figure labelled measured (on this machine or a board) or estimated (emulation x datasheet)."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from .cbuild import firmware_name
from .config import FLOAT_ONLY
from .io import atomic_path, by_number, save_figure, write_json


LABELS = {"oscillator": "oscillator", "softmax": "softmax", "ds-cnn": "DS-CNN", "kuramoto": "Kuramoto"}


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
    kinds = [k for k in ("oscillator", "softmax", "ds-cnn", "kuramoto") if (run_dir / f"train-{k}").is_dir()]
    out = dict(run=str(run_dir), created=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), kinds=kinds,
               data=_stage(run_dir, "data"), models={}, bench=_json(run_dir / "bench" / "bench.json"),
               boards=[dict(_json(Path(p)) or {}, source=str(p)) for p in board_results])
    for k in kinds:
        out["models"][k] = dict(float=_stage(run_dir, f"train-{k}"), qat=_stage(run_dir, f"qat-{k}"),
                                export=_stage(run_dir, f"export-{k}"),
                                parity=_json(run_dir / f"parity-{k}" / "parity.json"),
                                estimate=_json(run_dir / f"estimate-{k}" / "estimate.json"),
                                firmware=_json(run_dir / f"export-{k}" / firmware_name(k) / "firmware.json"))
    out["scaling"] = _json(run_dir / "scaling" / "scaling.json")
    out["npu"] = _json(run_dir / "npu" / "npu.json")
    always_on = {k: _json(run_dir / f"always-on-{k}" / "always-on.json") for k in kinds}  # the streaming kinds'
    out["always_on"] = {k: v for k, v in always_on.items() if v}
    return out


def _estimates(r: dict) -> list[dict]:
    """One row per (core, device, model kind): cycles, latency, energy of the whole model and of attention."""
    rows = []
    for k in r["kinds"]:
        est = r["models"][k].get("estimate")
        for core, t in ((est or {}).get("targets") or {}).items():
            for dev, d in t["model"]["devices"].items():
                att = (t.get("attention") or {}).get("devices", {}).get(dev, {})
                rows.append(dict(kind=k, core=core, device=dev, clock_mhz=d["clock_mhz"], cycles=t["model"]["cycles"],
                                 attention_cycles=(t.get("attention") or {}).get("cycles"), latency_ms=d["latency_ms"],
                                 attention_ms=att.get("latency_ms"), energy_uj=d["energy_uj"],
                                 attention_uj=att.get("energy_uj"), macs=t["model"]["macs"],
                                 cycles_per_mac=t["model"]["cycles_per_mac"], compiler=t["compiler"]))
    return rows


# MLPerf Tiny v0.5, keyword spotting, DS-CNN on the STM32L4R5 (NUCLEO-L4R5ZI), the reference submission's
# measured latency and energy per inference (MLPerf Tiny inference v0.5 results).
MLPERF_DSCNN = dict(latency_ms=181.9, energy_uj=7372)


def _estimate_lines(r: dict) -> list[str]:
    rows = _estimates(r)
    if not rows:
        return []
    by = {(x["core"], x["device"], x["kind"]): x for x in rows}
    checked = {k: (r["models"][k]["estimate"] or {}).get("verified_against") for k in r["kinds"]}
    against = "; ".join(f"{k}'s logits equal to {'TFLite Micro' if v == 'expected' else 'its ' + v}'s"
                        for k, v in checked.items() if v)
    lines = ["", "## Cycles, latency and energy per inference (estimated)", "",
             f"The C firmware (`firmware_models/`; {against}) emulated instruction by instruction "
             "on each core (unicorn), instructions priced with the core's published timing table "
             "(`edgeosc/bench/cycles.py`), at the device's clock and measured power (`edgeosc/bench/devices.py`: "
             "MLPerf Tiny and Raspberry Pi figures). Whole model / attention cores alone.", "",
             "| core | device | model | Mcycles | latency ms | energy µJ | attention ms | attention µJ | cycles/MAC |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (core, dev, kind), x in by.items():
        att = "- | -" if x["attention_ms"] is None else f"{x['attention_ms']:.2f} | {x['attention_uj']:.0f}"
        lines.append(f"| {core} | {dev} @ {x['clock_mhz']:.0f} MHz | {kind} | {x['cycles'] / 1e6:.2f} | "
                     f"{x['latency_ms']:.2f} | {x['energy_uj']:.0f} | {att} | {x['cycles_per_mac']:.1f} |")
    refs = {k: (r["models"][k]["estimate"] or {}).get("portable_reference") for k in r["kinds"]}
    m4 = {k: next((x for (c, _, kk), x in by.items() if c == "cortex-m4" and kk == k), None) for k in r["kinds"]}
    pairs = [(k, refs[k], m4[k]) for k in r["kinds"] if refs[k] and m4[k]]
    if pairs:
        lines += ["", "The same C on Cortex-M4 with the portable loops only (`-DEDGEOSC_PORTABLE`) against the DSP "
                  "paths it ships with: " + "; ".join(
                      f"{k} {ref['cycles'] / 1e6:.2f} -> {x['cycles'] / 1e6:.2f} Mcycles "
                      f"({ref['cycles_per_mac']:.1f} -> {x['cycles_per_mac']:.1f} cycles/MAC)"
                      for k, ref, x in pairs) + "."]
    first = {}  # one device per core: the ratio does not depend on the clock
    for core, dev, kind in by:
        first.setdefault(core, dev)
    pairs = [(core, dev) for core, dev in first.items() if (core, dev, "oscillator") in by and (core, dev, "softmax") in by]
    if pairs:
        lines += ["", "Oscillator / softmax (estimated): " + "; ".join(
            f"{core}: energy {by[(core, dev, 'oscillator')]['energy_uj'] / by[(core, dev, 'softmax')]['energy_uj']:.2f}x"
            f" (attention {by[(core, dev, 'oscillator')]['attention_uj'] / by[(core, dev, 'softmax')]['attention_uj']:.2f}x)"
            for core, dev in dict.fromkeys(pairs) if by[(core, dev, 'softmax')]['attention_uj'])]
    ds = [(core, dev) for core, dev in first.items() if (core, dev, "ds-cnn") in by]
    if ds:
        energy = lambda core, dev, k: by[(core, dev, k)]["energy_uj"]  # noqa: E731
        lines += ["", "Each model / DS-CNN, energy per inference (estimated): " + "; ".join(
            f"{core}: " + ", ".join(f"{k} {energy(core, dev, k) / energy(core, dev, 'ds-cnn'):.2f}x"
                                    for k in r["kinds"] if k != "ds-cnn" and (core, dev, k) in by)
            for core, dev in ds)]
    cal = by.get(("cortex-m4", "stm32l4r5", "ds-cnn"))
    if cal:
        lat, uj = cal["latency_ms"] / MLPERF_DSCNN["latency_ms"], cal["energy_uj"] / MLPERF_DSCNN["energy_uj"]
        lines += ["", f"**The estimator's known error bar.** DS-CNN, the model MLPerf Tiny measured on this board: "
                      f"estimated here {cal['latency_ms']:.1f} ms and {cal['energy_uj']:,.0f} µJ, measured by "
                      f"MLPerf Tiny v0.5's reference (TFLite Micro with CMSIS-NN) {MLPERF_DSCNN['latency_ms']} ms and "
                      f"{MLPERF_DSCNN['energy_uj']:,} µJ: **{lat:.2f}x** the latency, **{uj:.2f}x** the energy. No "
                      "correction is applied; what the emulator leaves out (flash wait states, bus, the interpreter) "
                      "and the kernels' differences: docs/results.md#ds-cnn."]
    return lines


def _stream_lines(r: dict) -> list[str]:
    rows = (r.get("scaling") or {}).get("stream")
    if not rows:
        return []
    first = rows[0]
    by = {(x["kind"], x["window"]): x for x in rows}
    lines = ["", f"## Always-on ({first['core']}, {first['device']}, estimated)", "",
             f"A keyword spotter listening all day, one frame every {r['scaling'].get('hop_ms', 20):g} ms. Streaming: the "
             "streaming variant (`model.window = W`, docs/maths.md#streaming) runs one new frame per hop as its own "
             "firmware (stream_int8.tflite -> C, its state in the arena), its linear oscillator core adding the new "
             "key and subtracting the expired one (O(1) per frame), softmax reading W cached keys (O(W)), both "
             "pooling the last W frames by a running sum (O(1)). Recompute: the window model over all W frames on "
             "every hop. Untrained "
             "networks of the pipeline's shapes, emulated once the window is full "
             "(`edgeosc.bench.estimate.stream_cycles`); energy = the device's active power x time, idle not counted.",
             "",
             "| W | kind | per hop cycles | of which attention | recompute cycles | recompute / per hop | "
             "per hop ms | streaming uJ/s | recompute uJ/s | recompute keeps up |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for x in rows:
        lines.append(f"| {x['window']} | {x['kind']} | {x['per_hop_cycles']:,.0f} | {x['per_hop_attention_cycles']:,.0f} "
                     f"| {x['recompute_cycles']:,.0f} | {x['recompute_ratio']:.0f}x | {x['per_hop_latency_ms']:.2f} | "
                     f"{x['stream_uj_per_s']:,.0f} | {x['recompute_uj_per_s']:,.0f} | "
                     f"{'yes' if x['recompute_keeps_up'] else 'no'} |")
    ratios = [f"W = {w}: {by['oscillator', w]['per_hop_cycles'] / by['softmax', w]['per_hop_cycles']:.2f}x"
              for w in sorted({x["window"] for x in rows}) if ("oscillator", w) in by and ("softmax", w) in by]
    if ratios:
        lines += ["", "Streaming oscillator / streaming softmax per hop: " + ", ".join(ratios) + "."]
    return lines


def _always_on_schedule(runs: dict) -> tuple[float, str]:
    """The always-on stages' hours of keyword-free audio (the shortest) and their rounds' epochs, e.g. "6+3"."""
    first = next(iter(runs.values()))
    return min(x["negatives"]["hours"] for x in runs.values()), "+".join(str(x["epochs"]) for x in first["rounds"])


def _always_on_lines(r: dict) -> list[str]:
    runs = r.get("always_on") or {}
    if not runs:
        return []
    first = next(iter(runs.values()))
    (hours, epochs), targets = _always_on_schedule(runs), [t for t, _ in by_number(first["recall_at"])]
    lines = ["", "## Always-on detection (measured: the always-on protocol)", "",
             f"Each attention kind's streaming variant (W = {first['window']}), trained on streams of keyword-free audio "
             f"then a clip and mined for its false alarms in {len(first['rounds']) - 1} round(s), {epochs} epochs "
             "(`[always_on]`; its defaults are a short schedule, docs/results.md#always-on-streaming has the recipe's "
             f"figures). {first['events']} of the test split's keywords, each after 1-4 s of other speech, noise or "
             f"music; false alarms counted on {hours:.2g} h of keyword-free audio never trained on (`edgeosc "
             f"stream-eval always-on-KIND/round-N/best.pt --negatives-hours {hours:.2g} --in-context"
             + (f" --max-clips {first['max_clips']}" if first.get("max_clips") else "") + "`), the posterior "
             f"smoothed over {first['smooth']} hops of {first['hop_ms']:g} ms.", "",
             "| model | test clips in streams, accuracy | " + " | ".join(f"recall at <= {t} false alarm{'s' if t != '1' else ''} "
                                                            "an hour" for t in targets)
             + f" | at threshold {first['threshold']}: recall, false alarms an hour | median latency after the keyword |",
             "|---|---|" + "---|" * len(targets) + "---|---|"]
    for k, x in runs.items():
        lat = x["latency_ms"]
        at = [f"{_pct(v['recall'])}% (threshold {v['threshold']:g})" if v else "not reached"
              for _, v in by_number(x["recall_at"])]
        lines.append(f"| streaming {LABELS[k]} | {_pct(x['rounds'][-1]['test_stream_accuracy'])}% | " + " | ".join(at)
                     + f" | {_pct(x['recall'])}%, {x['negatives']['false_alarms_per_hour']:.1f} | "
                     + (f"{lat['median']:.0f} ms |" if lat else "- |"))
    return lines


def _npu_lines(r: dict) -> list[str]:
    if not (r.get("npu") or {}).get("rows"):
        return []
    from .bench.npu import format_table
    rows = [dict(row, name=LABELS.get(row["name"], row["name"])) for row in r["npu"]["rows"]]
    return ["", "## Ethos-U NPUs (Vela, estimated)", ""] + format_table(rows).splitlines()


def _scaling_lines(r: dict) -> list[str]:
    sc = r.get("scaling")
    if not sc:
        return []
    first = sc["rows"][0]
    shape = (first["heads"], first["d_head"])
    linear = (first.get("linear_heads", shape[0]), first.get("linear_d_head", shape[1]))  # the shipped oscillator's
    lines = ["", f"## Attention cores vs sequence length T and d_osc ({sc['core']}, estimated)", "",
             f"One call of the fused core ({shape[0]} heads, d_h {shape[1]}"
             + (f"; the linear core at the shipped oscillator's {linear[0]} heads of d_h {linear[1]}" if linear != shape
                else "") + "); softmax with its exp table as the firmware runs it. "
             "The linear core (d_osc 2, p 4, key gate; docs/maths.md#integer-linear-core) does the same work per token "
             "whatever T; its columns are on the d_osc 2 rows.", "",
             "| T | d_osc | direct oscillator cycles | linear oscillator cycles | softmax cycles | direct / softmax | "
             "linear / softmax |", "|---|---|---|---|---|---|---|"]
    for row in sc["rows"]:
        linear = row["d_osc"] == 2 and "oscillator_linear_cycles" in row
        lin_cycles, lin_ratio = (f"{row['oscillator_linear_cycles']:,.0f}", f"{row['ratio_linear']:.2f}x") if linear \
            else ("-", "-")
        lines.append(f"| {row['T']} | {row['d_osc']} | {row['oscillator_cycles']:,.0f} | {lin_cycles} | "
                     f"{row['softmax_cycles']:,.0f} | {row['ratio']:.2f}x | {lin_ratio} |")
    if sc.get("kernels"):
        lines += ["", f"### Builtin kernels alone ({sc['core']}, estimated)", "",
                  "At the default model's shapes, random int8 data; the DSP path (SXTB16 / SMLAD, "
                  "`firmware_models/kernels/edgeosc_simd.h`) checked equal to the portable reference path, bit for "
                  "bit. "
                  "The floor is about 1 cycle per MAC (docs/results.md#fast-kernels).", "",
                  "| op | layer | MACs | cycles/MAC | portable cycles/MAC | cycles/output | speedup |",
                  "|---|---|---|---|---|---|---|"]
        per_mac = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731  (ADD / SUB: no MACs)
        lines += [f"| {k['op']} | {k['name']} | {k['macs']:,} | {per_mac(k['cycles_per_mac'])} | "
                  f"{per_mac(k['reference_cycles_per_mac'])} | {k.get('cycles_per_output', 0):.1f} | "
                  f"{k['speedup']:.1f}x |" for k in sc["kernels"]]
    return lines


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def _ratio(a, b) -> str:
    return "-" if not a or not b else f"{a / b:.2f}x"


def markdown(r: dict) -> str:
    kinds, m = r["kinds"], r["models"]
    lines = ["# edgeosc report: " + " vs ".join({"oscillator": "oscillator attention", "softmax": "softmax attention",
                                                   "ds-cnn": "DS-CNN", "kuramoto": "Kuramoto attention"}.get(k, k)
                                                  for k in kinds), "",
             f"Run `{r['run']}`, written {r['created']}."]
    if r["data"]:
        c = r["data"]["clips"]
        lines.append(f"Data: {len(r['data']['classes'])} classes, {c['train']} train / {c['val']} val / "
                     f"{c['test']} test clips (speakers or voices disjoint across splits).")
    names = _interpreters(m)
    lines += ["", "## Accuracy (measured, test split)", "",
              "| model | float | int8 QAT (torch) | " + " | ".join(f"int8 .tflite, {n}" for n in names) + " |",
              "|---|---|---|" + "---|" * len(names)]
    for k in kinds:
        acc = (m[k]["parity"] or {}).get("int8_tflite_accuracy", {})
        lines.append(f"| {k} | {_pct((m[k]['float'] or {}).get('test_accuracy'))} | "
                     f"{_pct((m[k]['qat'] or {}).get('test_accuracy'))} | " +
                     " | ".join(_pct(acc.get(n)) for n in names) + " |")
    floats = {k: (m[k]["parity"] or {}).get("float_tflite_accuracy") for k in kinds if k in FLOAT_ONLY}
    for k, acc in floats.items():
        lines += ["", f"{k} runs in float only (no int8 path; docs/results.md#kuramoto-attention): float.tflite "
                      + ", ".join(f"{_pct(v)} in {n}" for n, v in (acc or {}).items()) + "."]
    lines += _diagnostics_lines(m)
    ops = {k: m[k]["parity"]["int8_custom_accuracy"] for k in kinds if "int8_custom_accuracy" in (m[k]["parity"] or {})}
    if ops:
        lines += ["", "int8_custom.tflite (each oscillator core one EdgeOscAttention op; for the linear core its exact "
                      "integer core, the one the C firmware runs) in tflite-runtime: "
                      + ", ".join(f"{k} {_pct(v)}" for k, v in ops.items()) + ". A linear core's int8.tflite is its "
                      "builtin twin (docs/maths.md#builtin-twin)."]
    custom = [k for k in kinds if (m[k]["parity"] or {}).get("int8_file", "int8.tflite") != "int8.tflite"]
    if custom:
        lines += ["", f"The int8 file of {', '.join(custom)} is int8_custom.tflite: its linear core is the EdgeOscAttention "
                      "op, which tflite-runtime (its kernel registered) and ai-edge-litert (the kernel as a delegate) run from "
                      "Python; no builtin graph holds the core's int64 sums, so TFLite Micro has no entry."]
    lines += ["", "## Model files (bytes)", "", "| file | " + " | ".join(kinds) + " | ratio |",
              "|---|" + "---|" * (len(kinds) + 1)]
    files = sorted({f for k in kinds for f in ((m[k]["export"] or {}).get("files") or {})
                    if f.split("/")[0] in ("onnx", "tflite")})  # the C sources: see the firmware table
    for f in files:
        sizes = [((m[k]["export"] or {}).get("files") or {}).get(f) for k in kinds]
        ratio = _ratio(*sizes) if len(sizes) == 2 else ""
        lines.append(f"| {f} | " + " | ".join("-" if s is None else str(s) for s in sizes) + f" | {ratio} |")
    fw = {k: m[k].get("firmware") for k in kinds if m[k].get("firmware")}
    if fw:
        lines += ["", "## C firmware memory (from the generated model)", "",
                  "Flash: int8 weights, tables and kernel parameters (the Cortex-M4 image adds ~4 KB of kernel and harness code, "
                  "`make -C firmware_models cortex-m4 sizes`); RAM: the static arena (activations, input, output, "
                  "scratch), planned at generation time; stack: the deepest stack of one inference, measured on the "
                  "emulated Cortex-M4 (the firmware image reserves 2 KiB).", "",
                  "| model | flash bytes | RAM bytes | stack bytes | kernel calls |", "|---|---|---|---|---|"]
        for k, f in fw.items():
            stack = (((r["models"][k]["estimate"] or {}).get("targets") or {}).get("cortex-m4") or {}).get("stack_bytes")
            lines.append(f"| {k} | {f['const_bytes'] + f['param_bytes']} | {f['arena_bytes']} | "
                         f"{'-' if stack is None else stack} | {f['calls']} |")
        for k, f in fw.items():
            if f.get("slow_layers"):
                lines += ["", f"{k}: the trained scales keep layers off their fast kernels ("
                          + "; ".join(f"{n}: {why}" for n, why in f["slow_layers"].items())
                          + "): its estimates are above its kernels' full care."]
    lines += ["", "## Parity of the exports (measured)", "",
              "The int8 .tflite against the QAT model in output LSBs (logits are int8); top-1 = same class as QAT.", "",
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
                            f"{p['custom_vs_int8']['max_lsb']:.0f} LSB, mean {p['custom_vs_int8']['mean_lsb']:.2f}, "
                            f"same class on {_pct(p['custom_vs_int8']['top1'])}% of clips"
                            if "custom_vs_int8" in p else "") + ".")
    if r["bench"]:
        s = r["bench"]["system"]
        lines += ["", f"## Latency, batch 1 (measured on this machine: {s['cpu']}, {s['cores']} cores, "
                      f"{r['bench']['config']['threads']} thread)", "",
                  "Median of interleaved runs, the models alternating.", ""]
        others = [k for k in ("ds-cnn", "kuramoto") if any(k in row for row in r["bench"]["latency"])]
        lines += ["| file | runtime | oscillator ms | softmax ms | oscillator / softmax |"
                  + "".join(f" {LABELS[k]} ms | oscillator / {LABELS[k]} |" for k in others),
                  "|---|---|---|---|---|" + "---|---|" * len(others)]
        for row in r["bench"]["latency"]:
            lines.append(f"| {row['file']} | {row['runtime']} | {row['oscillator']['median_ms']:.3f} | "
                         f"{row['softmax']['median_ms']:.3f} | {row['ratio']:.2f}x |"
                         + "".join(f" {row[k]['median_ms']:.3f} | {row['ratio_' + k]:.2f}x |" if k in row
                                   else " - | - |" for k in others))
    lines += _estimate_lines(r) + _npu_lines(r) + _scaling_lines(r) + _stream_lines(r) + _always_on_lines(r)
    for board in r["boards"]:
        s = board.get("system", {})
        if board.get("emulated"):  # edgeosc.pi_check: ran under QEMU; its timings are no measurement, no table
            lines += ["", f"## {board.get('label', 'emulated ARM64 (QEMU), functional check, not a measurement')} "
                          f"(`{board['source']}`)", "", "Ran to the end: " +
                      ", ".join(f"{row['path']} [{row['runtime']}]" for row in board.get("results", [])) + "."]
            continue
        lines += ["", f"## Measured on a board: {s.get('cpu', '?')} (`{board['source']}`)", "",
                  "| model | runtime | median ms | p99 ms |", "|---|---|---|---|"]
        for row in board.get("results", []):
            lines.append(f"| {row['path']} | {row['runtime']} | {row['median_ms']:.3f} | {row['p99_ms']:.3f} |")
    lines += ["", "Measured: run here or on the named board. Estimated: emulated instruction counts x a core's "
              "published timing table x a device's datasheet power."]
    return "\n".join(lines) + "\n"


def _diagnostics_lines(m: dict) -> list[str]:
    """The Kuramoto network's diagnostics on the test split (models/kws.py KWSKuramoto.diagnostics)."""
    lines = []
    for k, v in m.items():
        diag = (v["float"] or {}).get("diagnostics")
        if not diag:
            continue
        lines += ["", f"{k}, the seed paper's diagnostics on the test split (float model; the paper: local order near "
                      "1, global order falling with depth, omega higher in early layers):", "",
                  "| block | local order | global order in | global order out | mean abs omega (rad/frame) |",
                  "|---|---|---|---|---|"]
        lines += [f"| {d['block']} | {d['local_order']:.3f} | {d['global_order_in']:.3f} | "
                  f"{d['global_order_out']:.3f} | {d['omega_abs']:.3f} |" for d in diag]
    return lines


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
    kinds = ["oscillator", "softmax"] + [k for k in ("ds-cnn", "kuramoto") if any(k in x for x in rows)]
    width = 0.8 / len(kinds)
    for i, k in enumerate(kinds):
        ax.bar([x + (i - (len(kinds) - 1) / 2) * width for x in xs],
               [x[k]["median_ms"] if k in x else 0.0 for x in rows], width, label=k)
    ax.set_xticks(list(xs), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("median latency, batch 1 (ms)")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("Latency per runtime (measured)")
    fig.tight_layout()
    return save_figure(fig, path)


def plot_estimates(r: dict, path: Path) -> Path | None:
    """Energy per inference vs int8 accuracy per target, and the cores' cycles vs T and d_osc."""
    rows, sc = _estimates(r), r.get("scaling")
    if not rows and not sc:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for kind, marker in (("oscillator", "o"), ("softmax", "s"), ("ds-cnn", "D")):
        acc = (r["models"].get(kind, {}).get("qat") or {}).get("test_accuracy")
        pts = [x for x in rows if x["kind"] == kind]
        if acc is not None and pts:
            axes[0].scatter([x["energy_uj"] for x in pts], [100 * acc] * len(pts), marker=marker, label=kind)
            for x in pts:
                axes[0].annotate(x["device"], (x["energy_uj"], 100 * acc), fontsize=6, rotation=30)
    axes[0].set_xscale("log")
    axes[0].set(xlabel="energy per inference, µJ (estimated)", ylabel="int8 test accuracy, %",
                title="Energy vs accuracy per target")
    axes[0].legend()
    if sc:
        for d in sorted({row["d_osc"] for row in sc["rows"]}):
            pts = [row for row in sc["rows"] if row["d_osc"] == d]
            axes[1].plot([p["T"] for p in pts], [p["oscillator_cycles"] for p in pts], "o-", label=f"oscillator d_osc {d}")
        soft = {row["T"]: row["softmax_cycles"] for row in sc["rows"]}
        linear = {row["T"]: row["oscillator_linear_cycles"] for row in sc["rows"] if "oscillator_linear_cycles" in row}
        if linear:
            axes[1].plot(list(linear), list(linear.values()), "^-", label="linear oscillator d_osc 2")
        axes[1].plot(list(soft), list(soft.values()), "k--", label="softmax")
        axes[1].set(xscale="log", yscale="log", xlabel="tokens T", ylabel=f"cycles per call ({sc['core']})",
                    title="Attention core cost vs T and d_osc (estimated)")
        axes[1].legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_det_curves(curves: dict[str, list[dict]], hours: float, title: str, path: str | Path,
                    marks=()) -> Path:
    """DET curves ({label: [{recall, false_alarms_per_hour}, ...]}): keywords missed against false alarms per hour
    of `hours` of keyword-free audio (log axis; none drawn at half a false alarm in the whole recording), a dotted
    line at each rate of `marks`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    floor = 0.5 / hours
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for label, det in curves.items():
        points = [d for d in det if d["recall"] is not None]  # a recording without keywords has no recall
        ax.plot([max(d["false_alarms_per_hour"], floor) for d in points], [100 * (1 - d["recall"]) for d in points],
                marker="o", ms=3, label=label)
    if len(curves) > 1:
        ax.legend(fontsize=8)
    for rate in marks:
        ax.axvline(rate, color="grey", lw=0.5, ls=":")
    ax.set(xscale="log", xlabel=f"false alarms per hour ({hours:.2g} h without keywords)", ylabel="keywords missed (%)",
           title=title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path)


def write_report(run_dir: str | Path, folder: str | Path | None = None, board_results=()) -> Path:
    run_dir = Path(run_dir)
    folder = Path(folder or run_dir / "report")
    folder.mkdir(parents=True, exist_ok=True)
    r = collect(run_dir, board_results)
    write_json(folder / "report.json", r)
    text = markdown(r)
    if plot_latency(r, folder / "latency.png"):
        text += "\n![latency per runtime](latency.png)\n"
    if plot_estimates(r, folder / "estimates.png"):
        text += "\n![energy vs accuracy; cost vs T and d_osc](estimates.png)\n"
    if r["always_on"]:
        runs = r["always_on"]
        marks = [int(t) for t, _ in by_number(next(iter(runs.values()))["recall_at"])]
        plot_det_curves({f"streaming {LABELS[k]}": x["det"] for k, x in runs.items()}, _always_on_schedule(runs)[0],
                        "Always on: DET curves", folder / "det.png", marks)
        text += "\n![always-on: DET curves](det.png)\n"
    path = folder / "report.md"
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)
    return path


# The README's summary table (`edgeosc report readme`): the block between these markers is generated.
README_MARKERS = ("<!-- demo-table:begin -->", "<!-- demo-table:end -->")
README_PLOT = Path("docs/images/demo-estimates.png")  # beside the README: a copy of RUN/report/estimates.png
HEADERS = dict(LABELS, **{"ds-cnn": "DS-CNN (MLPerf Tiny's KWS model)"})


def _core(name: str) -> str:
    return "Cortex-" + name.split("-", 1)[1].upper() if name.startswith("cortex-") else name


def _latency_row(r: dict, runtime: str, file: str) -> dict | None:
    """The bench row of `runtime` where the oscillator (the row's `file`) ran `file`: the kinds alternated in it."""
    return next((x for x in (r.get("bench") or {}).get("latency") or ()
                 if x.get("runtime") == runtime and x.get("file") == file), None)


def readme_table(r: dict) -> str:
    """The README's summary table (Markdown) from a report dict (`collect`, report.json): a column per model kind, a
    row per figure the report holds (a row without data is left out), each labelled measured or estimated."""
    kinds, rows = r["kinds"], []

    def get(k: str, *keys):
        v = r["models"].get(k)
        for key in keys:
            v = (v or {}).get(key)
        return v

    def row(label: str, cell):  # cell(kind): the kind's figure, or None
        cells = [cell(k) for k in kinds]
        if any(cells):
            rows.append(f"| {label} | " + " | ".join(c or "" for c in cells) + " |")

    def num(v, fmt: str = ",") -> str:
        return "-" if v is None else format(v, fmt)

    def acc(k, *pairs):  # "a / b %" of two accuracies, or None
        a, b = (get(k, *p) for p in pairs)
        return None if a is None and b is None else f"{_pct(a)} / {_pct(b)} %"

    row("test accuracy, float / int8 QAT (measured)", lambda k: acc(k, ("float", "test_accuracy"),
                                                                    ("qat", "test_accuracy")))

    def int8_file(k):  # the file the firmware runs: int8_custom.tflite where the kind has one
        custom = get(k, "parity", "int8_custom_accuracy")
        if custom is not None:
            return f"{_pct(custom)} % (int8_custom.tflite, its exact core)"
        rt = get(k, "parity", "int8_tflite_accuracy", "tflite-runtime")
        return None if rt is None else f"{_pct(rt)} %"
    row("int8 file, tflite-runtime (measured)", int8_file)
    row("int8.tflite, builtin ops, ai-edge-litert / TFLite Micro (measured)",
        lambda k: acc(k, ("parity", "int8_tflite_accuracy", "ai-edge-litert"),
                      ("parity", "int8_tflite_accuracy", "tflite-micro")))

    def size(k):
        params, macs = get(k, "float", "parameters"), get(k, "estimate", "macs", "total")
        return None if params is None and macs is None else \
            f"{num(params)} / " + ("-" if macs is None else f"{macs / 1e6:.2f} M")
    row("parameters / MACs per inference", size)

    def file_size(k):
        files = get(k, "export", "files") or {}
        custom, int8 = files.get("tflite/int8_custom.tflite"), files.get("tflite/int8.tflite")
        return " / ".join(([f"{custom:,} B (int8_custom)"] if custom else [])
                          + ([f"{int8:,} B" + (" (int8)" if custom else "")] if int8 else []))
    row("int8 file size", file_size)

    def firmware(k):
        fw = get(k, "firmware")
        return fw and (f"{fw['const_bytes'] + fw['param_bytes']:,} / {fw['arena_bytes']:,} / "
                       f"{num(get(k, 'estimate', 'targets', 'cortex-m4', 'stack_bytes'))} B")
    row("C firmware: flash (weights, tables, parameters) / RAM arena / stack (measured)", firmware)
    for runtime, file, what in (("tflite-runtime", "int8_custom.tflite", "int8 file"),
                                ("ai-edge-litert", "int8_custom.tflite", "int8 file"),  # the op as a delegate
                                ("ai-edge-litert", "int8.tflite", "int8.tflite")):
        x = _latency_row(r, runtime, file) or (runtime == "tflite-runtime" and _latency_row(r, runtime, "int8.tflite"))
        if x:
            row(f"latency, {what}, {runtime} (measured here)",
                lambda k: isinstance(x.get(k), dict) and f"{x[k]['median_ms']:.3f} ms" + (
                    f" ({x[k]['file'].removesuffix('.tflite')})" if x[k]["file"] != "int8.tflite" else ""))
    est = _estimates(r)
    for core in ("cortex-m4", "cortex-m7"):
        dev = next((x["device"] for x in est if x["core"] == core), None)  # the core's first device
        by = {x["kind"]: x for x in est if x["core"] == core and x["device"] == dev}
        if not by:
            continue
        cycles = core == "cortex-m4"
        row(f"{_core(core)}, {dev.upper()} @ {next(iter(by.values()))['clock_mhz']:.0f} MHz, whole model (estimated)",
            lambda k: k in by and (f"{by[k]['cycles'] / 1e6:.2f} Mcycles, " if cycles else "")
            + f"{by[k]['latency_ms']:.1f} ms, {by[k]['energy_uj'] / 1e3:.2f} mJ")
        osc, others = by.get("oscillator"), [k for k in kinds if k != "oscillator" and k in by]
        if cycles and osc and others:
            row(", ".join(f"oscillator / {LABELS.get(k, k)}" for k in others) + f", {_core(core)} energy (estimated)",
                lambda k: k in others and f"**{_ratio(osc['energy_uj'], by[k]['energy_uj'])}**" + (
                    f" (attention cores {_ratio(osc['attention_uj'], by[k]['attention_uj'])})"
                    if osc["attention_uj"] and by[k]["attention_uj"] else ""))
    stream = (r.get("scaling") or {}).get("stream")
    if stream:
        w = min(x["window"] for x in stream)
        by = {x["kind"]: x for x in stream if x["window"] == w}
        soft = (by.get("softmax") or {}).get("stream_uj_per_s")
        row(f"always on, one frame a {r['scaling'].get('hop_ms', 20):g} ms hop, {w}-frame window, "
            f"{stream[0]['device'].upper()} (estimated)",
            lambda k: k in by and f"{by[k]['per_hop_cycles'] / 1e3:.0f}k cycles a hop, "
            f"{by[k]['stream_uj_per_s'] / 1e3:.2f} mJ/s"
            + (f" ({_ratio(by[k]['stream_uj_per_s'], soft)} softmax)" if soft and k != "softmax" else ""))
    on = r.get("always_on") or {}
    if on:
        hours, epochs = _always_on_schedule(on)
        row(f"always on, recall at <= 5 false alarms an hour (measured; {hours:.2g} h of keyword-free audio, trained "
            f"{epochs} epochs: `[always_on]`)", lambda k: k in on and (f"{_pct(on[k]['recall_at']['5']['recall'])}%"
                                                         if on[k]["recall_at"].get("5") else "not reached"))
    return "\n".join(["| | " + " | ".join(HEADERS.get(k, k) for k in kinds) + " |", "|---|" + "---|" * len(kinds)]
                     + rows) + "\n"


def readme_heading(r: dict) -> str:
    """One line naming the run, the report's date and the machine that measured (bench.json's system)."""
    s = (r.get("bench") or {}).get("system")
    where = (f", measured on {s.get('cpu', '?')} ({s.get('machine', '?')}, {s.get('cores', '?')} cores, "
             f"{r['bench'].get('config', {}).get('threads', '?')} thread)") if s else ""
    return f"Run `{r.get('run', '?')}` (report written {r.get('created', '?')}){where}:"


def write_readme(run_dir: str | Path, path: str | Path) -> list[Path]:
    """Replace the block between README_MARKERS in `path` with the run's heading and table (atomically); where the
    run has report/estimates.png, copy it (atomically) to README_PLOT beside `path` and show it under the table.
    Returns the files written. ValueError, naming `path`, if the markers are missing, repeated or out of order."""
    run_dir, path = Path(run_dir), Path(path)
    r = json.loads((run_dir / "report" / "report.json").read_text())
    text, (begin, end) = path.read_text(), README_MARKERS
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"{path}: needs the markers {begin} and {end} once each, in that order, around the table "
                         f"(found {text.count(begin)} and {text.count(end)})")
    block = [readme_heading(r), "", readme_table(r).rstrip()]
    written = [path]
    plot = run_dir / "report" / "estimates.png"
    if plot.is_file():
        with atomic_path(path.parent / README_PLOT) as tmp:
            shutil.copyfile(plot, tmp)
        written.append(path.parent / README_PLOT)
        block += ["", f"![energy vs accuracy; attention cost vs T and d_osc]({README_PLOT.as_posix()})", "",
                  f"*From `{r.get('run', run_dir)}/report/estimates.png`: energy per inference (estimated) against "
                  "int8 QAT accuracy (measured) per target, and the attention cores' cycles against T and d_osc "
                  "(estimated).*"]
    head, rest = text.split(begin)
    tail = rest.split(end)[1]
    with atomic_path(path) as tmp:
        tmp.write_text(f"{head}{begin}\n" + "\n".join(block) + f"\n{end}{tail}")
    return written
