"""What each pipeline stage does (pipeline.py orders, hashes, skips and resumes them)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from .config import FLOAT_ONLY, model_of_kind, to_dict
from .cbuild import firmware_name
from .io import write_json


def _dataset(cfg, cache_dir, progress=False):
    from .mining import training_data
    return training_data(cfg.data, cache_dir, progress=progress)


def data(cfg, folder: Path, cache_dir, progress: bool) -> dict:
    """Decode (or synthesize) the dataset into the cache; record what it holds and a content hash."""
    ds = _dataset(cfg, cache_dir, progress)
    digest = hashlib.sha256()
    for arr in (ds.audio, ds.labels, ds.split.astype("U"), ds.groups.astype("U")):
        digest.update(np.ascontiguousarray(arr).tobytes())
    counts = {s: int(len(ds.indices(s))) for s in ("train", "val", "test")}
    return dict(classes=list(ds.classes), clips=counts, skipped=len(ds.skipped), sha256=digest.hexdigest())


def train_float(cfg, model_cfg, run_dir: Path, folder: Path, cache_dir, progress: bool) -> dict:
    from .train import train
    res = train(_dataset(cfg, cache_dir), folder, model_cfg=model_cfg,
                feature_cfg=cfg.features_of(model_cfg.attention), train_cfg=cfg.train, data_cfg=cfg.data, resume=True,
                progress=progress)
    return _accuracy(res)


def train_qat(cfg, float_dir: Path, folder: Path, cache_dir, progress: bool) -> dict:
    from .train import qat_builder
    from .checkpoint import load_checkpoint
    from .train import train
    source = float_dir / "best.pt"
    ckpt = load_checkpoint(source)
    res = train(_dataset(cfg, cache_dir), folder, model_cfg=ckpt.model_cfg, feature_cfg=ckpt.feature_cfg,
                train_cfg=cfg.qat, data_cfg=cfg.data, resume=True, progress=progress,
                build=qat_builder(source, cfg.quant))
    return _accuracy(res)


def _accuracy(res: dict) -> dict:
    keep = ("attention", "parameters", "epochs", "best_val_accuracy", "test_accuracy", "quant", "diagnostics")
    return {k: res[k] for k in keep if k in res}


def export_all(cfg, kind: str, source_dir: Path, folder: Path) -> dict:
    """ONNX and TFLite files of the QAT model, and its C firmware (export-<kind>/kws_<kind>/); a float-only kind's
    float ONNX and TFLite files."""
    from .export import TARGETS, export_checkpoint
    files = {}
    for target in [t for t in TARGETS if not (kind in FLOAT_ONLY and t == "c")]:
        sub = firmware_name(kind) if target == "c" else target
        out = export_checkpoint(source_dir / "best.pt", folder / sub, target, cfg.export)
        files.update({f"{sub}/{p.name}": p.stat().st_size for p in sorted(out.iterdir())
                      if p.is_file() and p.suffix in (".onnx", ".tflite", ".c", ".h")})
    return dict(files=files)


def parity(cfg, run_dir: Path, kind: str, folder: Path, cache_dir) -> dict:
    """Exports against the QAT model on held-out clips; the int8 file's accuracy in every interpreter that runs it."""
    import torch
    from .export.parity import custom_parity, float_parity, int8_parity
    from .export.tflite import int8_file
    from .features import FeatureExtractor
    from .quant import float_model
    from .checkpoint import load_checkpoint
    from .evaluate import Batches, evaluate_tflite
    ckpt = load_checkpoint(run_dir / f"qat-{kind}" / "best.pt")
    ds = _dataset(cfg, cache_dir)
    feats = next(Batches(ds, "test", FeatureExtractor(ckpt.feature_cfg), torch.device("cpu"))(200))[0].numpy()
    tfl = run_dir / f"export-{kind}" / "tflite"
    int8 = int8_file(tfl)  # int8.tflite (a linear core's: its builtin twin), or int8_custom.tflite where it is alone
    res = dict(float_tflite_max_abs=float_parity(float_model(ckpt.model), tfl / "float.tflite", feats[:32]),
               int8_file=int8.name, int8_tflite=int8_parity(ckpt.model, int8, feats))
    if int8.name == "int8.tflite" and (tfl / "int8_custom.tflite").is_file():
        res["custom_vs_int8"] = custom_parity(int8, tfl / "int8_custom.tflite", feats)
        # the op file's own accuracy: for a linear core the exact integer core, the one its firmware runs
        res["int8_custom_accuracy"] = evaluate_tflite(tfl / "int8_custom.tflite", ds, ckpt.feature_cfg, ckpt.classes,
                                                      "test", "tflite-runtime")["accuracy"]
    res["int8_tflite_accuracy"] = {
        name: evaluate_tflite(int8, ds, ckpt.feature_cfg, ckpt.classes, "test", name)["accuracy"]
        for name in res["int8_tflite"]["interpreters"] if "no XNNPACK" not in name}
    write_json(folder / "parity.json", res)
    return res


def float_parity(cfg, run_dir: Path, kind: str, folder: Path, cache_dir) -> dict:
    """A float-only kind: float.tflite against the float model, and its accuracy in every interpreter that runs it."""
    import torch
    from .export.parity import float_parity as parity_of
    from .features import FeatureExtractor
    from .checkpoint import load_checkpoint
    from .evaluate import Batches, evaluate_tflite
    ckpt = load_checkpoint(run_dir / f"train-{kind}" / "best.pt")
    ds = _dataset(cfg, cache_dir)
    feats = next(Batches(ds, "test", FeatureExtractor(ckpt.feature_cfg), torch.device("cpu"))(32))[0].numpy()
    path = run_dir / f"export-{kind}" / "tflite" / "float.tflite"
    res = dict(float_tflite_max_abs=parity_of(ckpt.model, path, feats))
    res["float_tflite_accuracy"] = {
        name: evaluate_tflite(path, ds, ckpt.feature_cfg, ckpt.classes, "test", name)["accuracy"]
        for name in res["float_tflite_max_abs"]}
    write_json(folder / "parity.json", res)
    return res


def estimate(cfg, run_dir: Path, kind: str, folder: Path, cache_dir) -> dict:
    """Cycles, latency and energy of one inference of the C firmware on Cortex-M and Cortex-A cores
    (emulated, priced with each core's timing table and device profiles: estimated), on a test clip."""
    import torch
    from . import runtime
    from .bench.estimate import CFLAGS, estimate_model
    from .features import FeatureExtractor
    from .checkpoint import load_checkpoint
    from .evaluate import Batches
    from .export.tflite import int8_file, linear_form
    ckpt = load_checkpoint(run_dir / f"qat-{kind}" / "best.pt")
    feats = next(Batches(_dataset(cfg, cache_dir), "test", FeatureExtractor(ckpt.feature_cfg),
                         torch.device("cpu"))(1))[0].numpy()
    tfl = run_dir / f"export-{kind}" / "tflite"
    # the firmware's own file: a linear core's is int8_custom.tflite (its int8.tflite, the builtin twin, rounds apart)
    tflite = tfl / "int8_custom.tflite" if linear_form(ckpt.model) else int8_file(tfl)
    # TFLite Micro cannot run the EdgeOscAttention op (a linear model's int8_custom.tflite): the firmware's
    # logits are then checked against its host build, its linear core against the reference (tests)
    micro = runtime.load(tflite, "tflite-micro") if tflite.name == "int8.tflite" else None
    x = (micro or runtime.load(tflite)).inputs[0].quantize(feats)
    fw, name, expected = run_dir / f"export-{kind}" / firmware_name(kind), firmware_name(kind), \
        micro.run_raw(x) if micro else None
    res = estimate_model(fw, name, x, targets=cfg.bench.targets, work_dir=folder / "build", tflite=tflite,
                         expected=expected)
    if "cortex-m4" in res["targets"]:  # the same C with the portable loops only: what the DSP paths save
        ref = estimate_model(fw, name, x, targets=("cortex-m4",), work_dir=folder / "build", tflite=tflite,
                             expected=res["logits"], flags=(*CFLAGS, "-DEDGEOSC_PORTABLE"))["targets"]["cortex-m4"]
        res["portable_reference"] = dict(core="cortex-m4", cycles=ref["model"]["cycles"],
                                         cycles_per_mac=ref["model"]["cycles_per_mac"])
    write_json(folder / "estimate.json", res)
    return dict(targets=list(res["targets"]), verified_against="tflite-micro" if micro else res["verified_against"])


def always_on(cfg, model_cfg, folder: Path, cache_dir, progress: bool) -> dict:
    """One kind's streaming variant through the always-on recipe (config.AlwaysOnConfig: streams after keyword-free
    audio, then mining rounds from each model's weights, each round's windows beside the earlier ones'), then the
    always-on protocol on the last model: always-on.json (recall at 1, 5 and 10 false alarms per hour, the DET
    curve), det.png."""
    import dataclasses
    import torch
    from .mining import training_data
    from .stream import load_model
    from .stream_eval import plot_det, protocol_data, run_protocol
    from .train import train
    ao = cfg.always_on
    model = dataclasses.replace(model_cfg, window=ao.window)
    features = dataclasses.replace(cfg.features_of(model_cfg.attention), normalize="running")  # what a stream has
    data_cfg = dataclasses.replace(cfg.data, negatives_hours=ao.negatives_hours)
    train_cfg = dataclasses.replace(cfg.train, epochs=ao.epochs, stream_clips=2, stream_after="keyword-free")
    rounds = []
    for r in range(ao.mining_rounds + 1):
        if r:  # the previous round's false alarms (and the windows it was trained on) join its training split
            last = str(run / "best.pt")
            data_cfg = dataclasses.replace(data_cfg, hard_negatives_hours=ao.mine_hours, hard_negatives_from=last)
            train_cfg = dataclasses.replace(train_cfg, epochs=ao.mine_epochs, init_from=last)
        run = folder / f"round-{r}"
        res = train(training_data(data_cfg, cache_dir, progress), run, model_cfg=model, feature_cfg=features,
                    train_cfg=train_cfg, data_cfg=data_cfg, resume=True, progress=progress)
        rounds.append(dict(epochs=res["epochs"], test_accuracy=res["test_accuracy"],
                           test_stream_accuracy=res.get("test_stream_accuracy")))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # batch-1 windows: more threads only add jitter
    try:
        res = run_protocol(load_model(str(run / "best.pt")), protocol_data(data_cfg, cache_dir), "test",
                           ao.eval_hours, in_context=True, max_clips=ao.eval_clips or None, cache_dir=cache_dir,
                           show=progress, hop_ms=ao.hop_ms)
    finally:
        torch.set_num_threads(threads)
    write_json(folder / "always-on.json", dict(res, rounds=rounds, checkpoint=str(run / "best.pt"),
                                               max_clips=ao.eval_clips or None))
    plot_det(res, folder / "det.png")
    return dict(rounds=rounds, recall_at=res["recall_at"], negatives=res["negatives"], events=res["events"])


def scaling(cfg, folder: Path) -> dict:
    """Cycles of the fused oscillator and softmax cores on a Cortex-M4 as T and d_osc vary, and of each builtin
    kernel at the default model's shapes on its DSP path and its portable path (estimated)."""
    from .bench.estimate import core_scaling, kernel_cycles, stream_cycles
    from .models.kws import resolve
    osc = resolve(model_of_kind(cfg.model, "oscillator"))  # the linear core at the shipped oscillator's heads
    rows = core_scaling(cfg.bench.scaling_tokens, cfg.bench.scaling_d_osc, work_dir=folder / "build",
                        linear_heads=(osc.heads, osc.d_model // osc.heads))
    kernels = [{k: v for k, v in row.items() if k != "output"} for row in kernel_cycles(work_dir=folder / "build")]
    stream = stream_cycles(windows=cfg.bench.stream_windows, hop_ms=cfg.bench.hop_ms, work_dir=folder / "build",
                           model=cfg.model) if cfg.model.form == "linear" else []
    write_json(folder / "scaling.json", dict(core="cortex-m4", rows=rows, kernels=kernels, stream=stream,
                                             hop_ms=cfg.bench.hop_ms))
    return dict(rows=len(rows), kernels=len(kernels), stream=len(stream))


def bench(cfg, run_dir: Path, folder: Path) -> dict:
    """Latency of every exported file on every installed runtime, oscillator, softmax (DS-CNN, Kuramoto) interleaved."""
    from .bench.latency import compare
    if not {"oscillator", "softmax"} <= set(cfg.kinds):
        return dict(skipped="the latency comparison needs the oscillator and softmax")
    rows = []
    for fmt in ("tflite", "onnx"):
        others = {k: run_dir / f"export-{k}" / fmt for k in ("ds-cnn", "kuramoto") if k in cfg.kinds}
        rows += compare(run_dir / "export-oscillator" / fmt, run_dir / "export-softmax" / fmt, cfg.bench.runs,
                        cfg.bench.threads, echo=lambda *_: None, others=others)
    from .bench.system import system_info
    report = dict(system=system_info(), latency=rows, config=to_dict(cfg.bench))
    write_json(folder / "bench.json", report)
    return dict(rows=len(rows))


def npu(cfg, run_dir: Path, folder: Path) -> dict:
    """Each kind's NPU file (int8_npu.tflite, DS-CNN's int8.tflite: export.tflite.npu_file) compiled by Vela for the
    Ethos-U NPUs: operators on the NPU and the CPU, estimates."""
    from .bench import npu as vela
    from .export.tflite import npu_file
    if vela.vela_version() is None:
        return dict(skipped="Vela (ethos-u-vela) is not installed")
    files = {k: npu_file(run_dir / f"export-{k}" / "tflite") for k in cfg.kinds}
    rows = vela.compile_models({k: f for k, f in files.items() if f.is_file()})
    write_json(folder / "npu.json", dict(rows=rows))
    return dict(rows=len(rows))


def report(cfg, run_dir: Path, folder: Path) -> dict:
    from .report import write_report
    path = write_report(run_dir, folder)
    return dict(report=str(path))
