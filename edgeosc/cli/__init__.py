"""The `edgeosc` command line, in the pipeline's order: data, train (float, QAT, PTQ), eval, export, bench, report,
deploy, listen; pipeline and sweep run the whole job; lab holds research tools.

Config fields reach the command line through one door, options.config_options.
"""
from __future__ import annotations

import functools
import json
import statistics
from collections import defaultdict
from pathlib import Path

import click

from ..bench.npu import ACCELERATORS as NPU_ACCELERATORS
from ..config import QAT_EPOCHS, QAT_LR, FeatureConfig, from_dict
from .options import config_options, sections


def friendly_errors(fn):
    """Known user-facing problems become one line on stderr and exit status 1, never a traceback."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from ..runtime import InterpreterUnavailable  # torch-free: `edgeosc bench models` runs without torch
        try:
            return fn(*args, **kwargs)
        except (ValueError, FileNotFoundError, InterpreterUnavailable) as e:  # bad data, checkpoints, model files
            raise click.ClickException(str(e)) from None
        except KeyboardInterrupt:
            raise click.ClickException("interrupted; rerun with --resume to continue from the last epoch") from None
    return wrapper


class Ordered(click.Group):
    """A group that lists its commands in the order they were added (the pipeline's), and names renamed ones."""

    def __init__(self, *args, renamed: dict[str, str] | None = None, **kw):
        super().__init__(*args, **kw)
        self.renamed = renamed or {}

    def list_commands(self, ctx):
        return list(self.commands)

    def resolve_command(self, ctx, args):
        if args and args[0] not in self.commands:
            for old, new in self.renamed.items():
                if args[0] == old or (old == "*" and not args[0].startswith("-")):
                    raise click.UsageError(f"`{ctx.command_path} {args[0]}`: {new}", ctx=ctx)
        return super().resolve_command(ctx, args)


RENAMED = {"compare": "now `edgeosc report write`", "summary": "now `edgeosc report seeds`",
           "export-bench": "now `edgeosc bench pair`", "microbench": "now `edgeosc bench attention`",
           "dynamics": "now `edgeosc lab dynamics`"}


@click.group(cls=Ordered, renamed=RENAMED, context_settings=dict(help_option_names=["-h", "--help"]))
def main():
    """Keyword spotting with softmax-free oscillator attention, from data to edge runtimes.

    The commands follow the pipeline (data, train, eval, export, bench, report, deploy); `edgeosc pipeline`
    runs it all, staged and resumable. Every config field is settable with --config FILE or --set
    SECTION.FIELD=VALUE; `edgeosc train --print-config` lists them.
    """


# ------------------------------------------------------------------------------------- data

DATA_FLAGS = [
    ("--dataset", "data.dataset", "synth: embedded eSpeak NG keywords (no download); speech-commands / fsdd: your download"),
    ("--data-dir", "data.data_dir", "Folder of the downloaded dataset"),
    ("--task", "data.task", "12: 10 words + unknown + silence; all: every Speech Commands word as a class; "
                            "digits: the synthetic set speaks FSDD's ten digits (to pretrain for FSDD)"),
    ("--data-seed", "data.seed", "Seed of the synthetic set / class balancing"),
    ("--n-voices", "data.n_voices", "Synthetic set: number of voice variants (default all)"),
    ("--renditions", "data.renditions", "Synthetic set: clips per voice and class"),
    ("--test-speakers", "data.test_speakers", "FSDD: speakers held out for test"),
    ("--val-speakers", "data.val_speakers", "FSDD: speakers held out for validation"),
    ("--synth-mix", "data.synth_mix", "Real speech: also train on every synthetic voice (eSpeak NG, 11 recorded "
                                      "speakers) saying the same classes, band-limited to the recordings' band"),
]
CACHE_DIR = click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
                         help="Decoded-clip cache (default $EDGEOSC_CACHE or ~/.cache/edgeosc).")
QUIET = click.option("--quiet", is_flag=True, help="No progress bars.")


def describe(data) -> str:
    import numpy as np
    counts = {s: len(data.indices(s)) for s in ("train", "val", "test")}
    groups = {s: len(np.unique(data.groups[data.split == s])) for s in counts}
    return (f"{len(data.audio)} clips, {len(data.classes)} classes; " +
            ", ".join(f"{s} {counts[s]} ({groups[s]} speakers)" for s in counts) +
            (f"; skipped {len(data.skipped)} files" if data.skipped else ""))


@main.group(cls=Ordered)
def data():
    """Make or inspect datasets (synthetic, Speech Commands, FSDD)."""


@data.command("synth")
@config_options(("data",), [("--seed", "data.seed", "Seed of the synthetic set"), DATA_FLAGS[4], DATA_FLAGS[5]])
@CACHE_DIR
@friendly_errors
def data_synth(settings, cache_dir):
    """Generate (once, then cached) the synthetic keyword set.

    12 classes spoken by eSpeak NG voice variants (and recorded-speaker voices), split by voice.
    """
    from ..data import load_dataset
    cfg = settings.load().data
    if cfg.dataset != "synth":
        raise click.ClickException(f"`edgeosc data synth` makes the synthetic set, not {cfg.dataset} "
                                   "(see `edgeosc data info`)")
    click.echo(describe(load_dataset(cfg, cache_dir)))


@data.command("info")
@config_options(("data",), DATA_FLAGS)
@CACHE_DIR
@friendly_errors
def data_info(settings, cache_dir):
    """Load a dataset and print its splits and skipped files.

    Decodes and caches it on first use.
    """
    from ..data import load_dataset
    ds = load_dataset(settings.load().data, cache_dir)
    click.echo(describe(ds))
    for f, why in ds.skipped[:20]:
        click.echo(f"  skipped {f}: {why}")


# ------------------------------------------------------------------------------------ train

TRAIN_FLAGS = DATA_FLAGS + [
    ("--attention", "model.attention", "Model kind: an attention layer, or ds-cnn (MLPerf Tiny's KWS reference, no "
     "attention; its features default to MLPerf's 49 x 10 MFCC)"),
    ("--size", "model.size", "tiny / small / base: about 0.5x / 1x / 3x the MACs (small: ~23k parameters); "
     "medium: ~170k"),
    ("--d-osc", "model.d_osc", "Oscillator dimension"),
    ("--p", "model.p", "Readout sharpening power"),
    ("--positive", "model.positive", "Positive map of the coupling weights"),
    ("--key-gate", "model.key_gate", None),
    ("--form", "model.form", None),
    ("--dropout", "model.dropout", "Dropout rate"),
    ("--phase-map", "model.phase_map", "Kuramoto: how features become phases"),
    ("--max-step", "model.max_step", "Kuramoto: norm cap on each phase increment, radians per coordinate (RMS)"),
    ("--phase-readout", "model.phase_readout", None),
    ("--feed-forward", "model.feed_forward", None),
    ("--window", "model.window", "The streaming variant: > 0 makes the network causal, each attention layer "
     "reading the last WINDOW frames, so a stream costs one frame's work per hop (softmax, or the linear "
     "oscillator core at d_osc 2); 0: whole-clip attention"),
    ("--rotate-anchors", "model.rotate_anchors", None),
    ("--distance-bias", "model.distance_bias", "Streaming softmax: a fixed penalty per frame of distance on each "
     "head's scores (ALiBi's relative position); off: the causal stem is its only position signal"),
    ("--n-mfcc", "features.n_mfcc", "0: 40 log-mel bands; >0: that many MFCCs"),
    ("--normalize", "features.normalize", "Per-clip mean subtraction of the features: over every frame "
     "(utterance) or over the frames within 30 dB of the clip's loudest (active, log-mel only)"),
    ("--floor-db", "features.floor_db", "Floor the log-mels this many dB below each clip's peak (0: off), so "
     "digital-silence padding looks like a quiet noise floor"),
    ("--epochs", "train.epochs", f"Training epochs (--qat: default {QAT_EPOCHS}; 0: PTQ only)"),
    ("--batch-size", "train.batch_size", "Batch size"),
    ("--lr", "train.lr", f"Peak learning rate (--qat: default {QAT_LR})"),
    ("--weight-decay", "train.weight_decay", "AdamW weight decay"),
    ("--patience", "train.patience", None),
    ("--mixup", "train.mixup", None),
    ("--stream-clips", "train.stream_clips", "Streaming models: train on streams, each clip after this many others "
     "as one recording with the listener's features, so its frames see the past a stream gives them (0: off; "
     "needs --normalize running)"),
    ("--seed", "train.seed", "Training seed"),
    ("--device", "train.device", "Device"),
    ("--init-from", "train.init_from", "Start from the weights of a float checkpoint of the same network (e.g. "
     "trained on the synthetic set before real speech); a classifier for other classes starts afresh"),
    ("--preset", "quant.preset", "--qat: quantization preset (edgeosc/quant.py)"),
    ("--calib-batches", "quant.calibration_batches", "--qat: training batches that calibrate the activation scales"),
]
NO_AUGMENT = {"train.augment.noise_prob": 0.0, "train.augment.time_shift_ms": 0.0, "train.augment.gain_db": [0.0, 0.0]}


@main.command(epilog="Every field of the data, features, model, train (train.augment.*) and quant configs is "
                     "settable: --set SECTION.FIELD=VALUE or a --config TOML table; --print-config lists them "
                     "with their values. With --qat, the file's [qat] table is the QAT run's training config.")
@config_options(("data", "features", "model", "train", "quant"), TRAIN_FLAGS,
                presets=[("--no-augment", NO_AUGMENT, "Disable time shift, noise mixing and gain.")])
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Run folder (default runs/<dataset>-<attention>-<size>-s<seed>).")
@click.option("--resume", is_flag=True, help="Continue an interrupted run from OUT/last.pt.")
@click.option("--qat", is_flag=True, help=f"Quantization-aware fine-tuning of --from (default {QAT_EPOCHS} epochs, "
              f"lr {QAT_LR}); --epochs 0: post-training quantization, calibration only.")
@click.option("--from", "from_ckpt", type=click.Path(dir_okay=False), default=None,
              help="Float checkpoint --qat starts from; its model, features and data are used.")
@CACHE_DIR
@QUIET
@friendly_errors
def train(settings, out, resume, qat, from_ckpt, cache_dir, quiet):
    """Train a model: float, or QAT / PTQ of a float one with --qat.

    Keeps the best checkpoint by validation accuracy and reports test accuracy.
    """
    from ..data import load_dataset
    from ..evaluate import format_confusion
    from ..train import train as run_train
    build = None
    if qat or from_ckpt:
        from ..checkpoint import load_checkpoint
        from ..train import qat_builder
        fixed = settings.describe("model") + settings.describe("features")
        if not (qat and from_ckpt) or fixed:
            raise click.ClickException("--qat needs --from CHECKPOINT, which sets the model and features "
                                       f"(drop {', '.join(fixed) or '--from'})")
        src = load_checkpoint(from_ckpt)
        cfg = settings.load(rename={"train": "qat"}, base={"data": src.data_cfg})  # this run's training: [qat]
        data_cfg, model_cfg, feature_cfg, train_cfg = cfg.data, src.model_cfg, src.feature_cfg, cfg.qat
        build = qat_builder(from_ckpt, cfg.quant)
        out = out or f"{Path(from_ckpt).parent}-{cfg.quant.preset}-{'qat' if train_cfg.epochs else 'ptq'}"
    else:
        cfg = settings.load()
        data_cfg, model_cfg, feature_cfg, train_cfg = cfg.data, cfg.model, cfg.features, cfg.train
    out = Path(out or f"runs/{data_cfg.dataset}-{model_cfg.attention}-{model_cfg.size}-s{train_cfg.seed}")
    if not resume and (out / "last.pt").exists():
        raise click.ClickException(f"{out} already holds a run: pass --resume to continue it, or choose another --out")
    ds = load_dataset(data_cfg, cache_dir, progress=not quiet)
    click.echo(f"data: {describe(ds)}")
    res = run_train(ds, out, model_cfg=model_cfg, feature_cfg=feature_cfg, train_cfg=train_cfg, data_cfg=data_cfg,
                    resume=resume, progress=not quiet, build=build)
    click.echo(format_confusion(res["test_confusion"], res["classes"]))
    click.echo(f"{res['attention']} ({res['size']}{', ' + res['quant'] if res.get('quant') else ''}, "
               f"{res['parameters']} parameters): test accuracy {res['test_accuracy']:.4f} "
               f"on {res['test_n']} clips; best val {res['best_val_accuracy']:.4f}; run folder {out}")


# ------------------------------------------------------------------------------------- eval

@main.command("eval")
@click.argument("checkpoint", type=click.Path(dir_okay=False))
@config_options(("data",), DATA_FLAGS, printable=False)
@click.option("--split", type=click.Choice(["train", "val", "test"]), default="test", show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--interpreter", type=click.Choice(["ai-edge-litert", "tflite-runtime", "tflite-micro"]), default=None,
              help="For a .tflite: the interpreter (default: the first installed).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@CACHE_DIR
@friendly_errors
def eval_cmd(checkpoint, settings, cache_dir, split, device, interpreter, as_json):
    """Accuracy of a checkpoint or exported .tflite on a data split.

    CHECKPOINT is a .pt, or an exported .tflite beside its manifest.json. It is evaluated on a split of its own
    dataset; data settings given here change it, another --dataset replaces it.
    """
    from ..data import load_dataset
    from ..checkpoint import load_checkpoint
    from ..evaluate import evaluate_checkpoint, evaluate_tflite, format_confusion
    model_file = Path(checkpoint)
    if model_file.suffix == ".tflite":
        manifest = model_file.parent / "manifest.json"
        if not manifest.is_file():
            raise click.ClickException(f"{model_file}: no manifest.json beside it (export with `edgeosc export`)")
        checkpoint = json.loads(manifest.read_text())["source"]["path"]
    ckpt = load_checkpoint(checkpoint)
    data = load_dataset(settings.load(base={"data": ckpt.data_cfg}).data, cache_dir)
    if model_file.suffix == ".tflite":
        res = evaluate_tflite(model_file, data, ckpt.feature_cfg, ckpt.classes, split, interpreter)
    else:
        res = evaluate_checkpoint(checkpoint, data, split, device)
    if as_json:
        click.echo(json.dumps(res))
        return
    click.echo(format_confusion(res["confusion"], res["classes"]))
    loss = f"loss {res['loss']:.4f}" if "loss" in res else res["interpreter"]
    click.echo(f"{split} accuracy {res['accuracy']:.4f} on {res['n']} clips ({loss})")
    if res.get("diagnostics"):  # a Kuramoto network: the seed paper's diagnostics (docs/maths.md#kuramoto-attention)
        click.echo("block  local order  global order in -> out  mean |omega| (rad/frame)")
        for d in res["diagnostics"]:
            click.echo(f"{d['block']:>5}  {d['local_order']:>11.3f}  {d['global_order_in']:>8.3f} -> "
                       f"{d['global_order_out']:.3f}  {d['omega_abs']:>12.3f}")


# ---------------------------------------------------------------------------------- export

@main.command("export")
@click.argument("source", type=click.Path())
@click.option("--format", "target", type=click.Choice(["onnx", "tflite", "c"]), default="onnx", show_default=True)
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Export folder (default <run folder>/export-<format>; c: firmware_models/<name>).")
@config_options(("export",), [("--opset", "export.opset", "ONNX opset")], printable=False)
@click.option("--name", default=None, help="c: the model's C name (default the --out folder's, or SOURCE's stem).")
@click.option("--no-fuse", is_flag=True, help="c: run the attention cores op by op, not as fused row kernels.")
@friendly_errors
def export_cmd(source, settings, target, out, name, no_fuse):
    """Export a checkpoint as ONNX, TFLite or C firmware.

    SOURCE is a run folder's best.pt, or a checkpoint; for c also an int8 .tflite.

    ONNX: float.onnx, int8_qcdq.onnx (QAT/PTQ checkpoints) and, for oscillator networks, *_op.onnx with
    the core as one ai.edgeosc::OscillatorAttention node (export/oscillator_attention.md).

    TFLite: float.tflite, int8.tflite (QAT/PTQ checkpoints; full-integer, builtin ops, the QAT scales) and,
    for oscillator networks, int8_custom.tflite with the core as one EdgeOscAttention custom op
    (export/edgeosc_attention_tflite.md). Run them with edgeosc.runtime in any installed interpreter. A
    streaming network (trained with --window, then --qat): stream_int8.tflite, one frame a call with its state as
    extra inputs and outputs (`edgeosc listen` runs it), and window_int8.tflite over a recording.

    C: firmware_models/<name>/ (int8 TFLite graph -> C99 kernels calls, weights, generated settings,
    static arena; bit-exact with TFLite Micro), from int8.tflite, int8_custom.tflite or a QAT checkpoint.
    """
    if target == "c":
        return export_c(Path(source), out, name, not no_fuse)
    from ..export import MANIFEST, export_checkpoint
    folder = export_checkpoint(source, out, target, settings.load().export)
    manifest = json.loads((folder / MANIFEST).read_text())
    for name, info in manifest["files"].items():
        click.echo(f"{folder / name}  {info['bytes']:>9} bytes  sha256 {info['sha256'][:12]}")


def export_c(source: Path, out, name, fuse: bool) -> None:
    from ..cbuild import FIRMWARE
    from ..export import MANIFEST, export_checkpoint
    from ..export import c as firmware
    if source.suffix == ".tflite":
        name = firmware.c_name(name or (Path(out).name if out else source.stem))
        folder = Path(out or FIRMWARE / name)
        manifest = source.parent / MANIFEST  # written beside the .tflite by an export of its checkpoint
        features = (from_dict(FeatureConfig, json.loads(manifest.read_text())["feature_config"])
                    if manifest.is_file() else None)
        if features is None:
            click.echo(f"no {MANIFEST} beside {source}: its features are unknown, so no front end is written "
                       "(export the checkpoint instead to get one)", err=True)
        firmware.generate(source, folder, name, fuse=fuse, features=features)
    else:
        run = source if source.is_dir() else source.parent
        folder = Path(out or FIRMWARE / firmware.c_name(name or run.name))
        export_checkpoint(source, folder, "c")
    info = json.loads((folder / firmware.INFO).read_text())
    click.echo(f"{folder}: {info['name']}, {info['calls']} kernel calls for {info['ops']} TFLite ops")
    click.echo(f"flash: {info['const_bytes'] + info['param_bytes']} bytes of weights, tables and parameters "
               f"(+ kernel code: make -C firmware_models cortex-m4 sizes)")
    click.echo(f"RAM:   {info['arena_bytes']} bytes of arena (activations, input, output, scratch; + stack)")


# ------------------------------------------------------------------------------------ bench

@main.group(cls=Ordered, renamed={"*": "name what to time: `models MODEL...`, `pair OSC SOFTMAX` or `attention`"})
def bench():
    """Time exported models, oscillator vs softmax, attention cores.

    models: latency, memory and energy of model files (torch-free, also on a Pi); pair: oscillator vs softmax
    exports on every runtime, as ratios; attention: the attention cores alone in torch.
    """


@bench.command("models")
@click.argument("models", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--runtime", "runtimes", multiple=True,
              type=click.Choice(["onnxruntime", "ai-edge-litert", "tflite-runtime", "tflite-micro"]),
              help="Runtimes to time (repeatable; default every installed one that takes the file).")
@click.option("--runs", type=int, default=200, show_default=True, help="Timed runs per model, after warm-up.")
@click.option("--warmup", type=int, default=20, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True)
@click.option("--no-memory", is_flag=True, help="Skip the peak-memory probe (a subprocess per model).")
@click.option("--power", type=click.Choice(["ina219", "ina260", "pmic"]), default=None,
              help="Measure energy per inference: an INA219/INA260 on I2C (smbus2) or the Raspberry Pi 5 PMIC.")
@click.option("--power-log", type=click.Path(dir_okay=False), default=None,
              help="Or: a power meter's CSV log (timestamp + watts, or volts and amps) written during the run.")
@click.option("--power-offset", type=float, default=0.0, show_default=True,
              help="Seconds to add to the log's timestamps to reach this machine's monotonic clock.")
@click.option("--i2c-bus", type=int, default=1, show_default=True)
@click.option("--shunt-ohms", type=float, default=0.1, show_default=True, help="INA219 shunt resistor.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Also write results here.")
@friendly_errors
def bench_models(models, runtimes, runs, warmup, threads, no_memory, power, power_log, power_offset, i2c_bus,
                 shunt_ohms, json_path):
    """Latency, memory, energy of .tflite / .onnx files (torch-free).

    Batch 1, runs as is on a Raspberry Pi. Min/median/p90/p99 of interleaved runs, resident memory, size and the system; with --power or --power-log
    the energy per inference (measured, idle power subtracted). Needs only numpy and a runtime.
    """
    from ..bench import power as pw
    from ..bench.latency import bench as run_bench, format_table
    monitor = {"ina219": lambda: pw.INA219Monitor(i2c_bus, shunt_ohms=shunt_ohms),
               "ina260": lambda: pw.INA260Monitor(i2c_bus), "pmic": pw.PMICMonitor, None: None}[power]
    if power_log:
        monitor = lambda: pw.CSVLogMonitor(power_log, offset_s=power_offset)  # noqa: E731
    elif monitor is not None:  # fail before the benchmark, in one line, when the sensor is not there
        try:
            probe = monitor()
            probe.start()
            probe.stop()
        except (RuntimeError, ImportError, OSError) as e:
            raise click.ClickException(f"--power {power}: {e}") from None
    report = run_bench(list(models), list(runtimes) or None, runs, threads, warmup, memory=not no_memory,
                       power=monitor)
    click.echo(format_table(report))
    if json_path:
        from ..io import write_json
        write_json(json_path, report)
        click.echo(f"results: {json_path}")


@bench.command("pair")
@click.argument("oscillator", type=click.Path(exists=True, file_okay=False))
@click.argument("softmax", type=click.Path(exists=True, file_okay=False))
@click.option("--runs", type=int, default=200, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@friendly_errors
def bench_pair(oscillator, softmax, runs, threads, as_json):
    """Oscillator vs softmax exports on every runtime, as ratios.

    Batch 1, interleaved runs. OSCILLATOR and SOFTMAX are run or export folders; onnxruntime times their .onnx files, ai-edge-litert,
    tflite-runtime and tflite-micro their .tflite files.
    """
    from ..bench.latency import compare
    rows = compare(oscillator, softmax, runs, threads, echo=(lambda *_: None) if as_json else click.echo)
    if as_json:
        click.echo(json.dumps(rows, indent=1))


@bench.command("npu")
@click.argument("models", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--accelerator", "accelerators", multiple=True, type=click.Choice(sorted(NPU_ACCELERATORS)),
              help="Ethos-U configuration (repeatable; default all).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Also write results here.")
@friendly_errors
def bench_npu(models, accelerators, json_path):
    """Ethos-U NPUs: int8 .tflite files compiled by Arm's Vela.

    MODELS are .tflite files or pipeline run folders (their export-KIND/tflite/int8.tflite). Per file and
    accelerator: operators on the NPU, those left to the CPU (named), Vela's estimated cycles, inference time, SRAM
    and flash, with the system configurations of Vela's Arm/vela.ini (edgeosc/bench/npu.py).
    """
    from ..bench import npu
    files = {}
    for m in map(Path, models):
        if m.is_dir():
            found = sorted(m.glob("export-*/tflite/int8.tflite"))
            if not found:
                raise click.ClickException(f"{m}: no export-KIND/tflite/int8.tflite in this folder")
            files.update({f"{f.parents[1].name.removeprefix('export-')} ({m.name})": f for f in found})
        else:
            files[str(m)] = m
    rows = npu.compile_models(files, accelerators or tuple(NPU_ACCELERATORS), echo=click.echo)
    click.echo(npu.format_table(rows))
    if json_path:
        from ..io import write_json
        write_json(json_path, dict(rows=rows))
        click.echo(f"results: {json_path}")


@bench.command("attention")
@click.option("--repeats", type=int, default=20, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True)
def bench_attention(repeats, threads):
    """Attention cores alone in torch, as ratios.

    Direct vs linear oscillator attention (taylor2) vs softmax attention, one run.
    """
    from ..bench.microbench import attention_microbench
    attention_microbench(repeats=repeats, threads=threads, echo=click.echo)


# ----------------------------------------------------------------------------------- report

@main.group(cls=Ordered)
def report():
    """Oscillator-vs-softmax report; accuracy over seeds.

    write: (re)write a pipeline run's report, with board measurements; seeds: mean +- std of test accuracy
    over seeds, per setting, of any run folders.
    """


@report.command("write")
@click.argument("run", type=click.Path(exists=True, file_okay=False))
@click.option("--board", "boards", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A bench JSON measured on a board (`edgeosc bench models --json` on a Raspberry Pi); repeatable.")
@friendly_errors
def report_write(run, boards):
    """(Re)write a pipeline run's report, with board measurements.

    RUN/report/: the oscillator-vs-softmax report (Markdown, JSON, plots), merging the bench JSONs measured
    on boards.
    """
    from ..report import write_report
    click.echo(f"report: {write_report(run, None, boards)}")


@report.command("seeds")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True)
@friendly_errors
def report_seeds(run_dirs, as_json):
    """Mean +- std of test accuracy over seeds, per setting.

    Grouped by dataset, attention, size, d_osc, p. RUN_DIRS are run folders or folders holding them (searched for results.json).
    """
    from ..checkpoint import load_checkpoint
    from ..train import read_results
    groups = defaultdict(list)
    for root in run_dirs:
        for res_file in sorted(Path(root).rglob("results.json")):
            if not (res_file.parent / "best.pt").is_file():
                continue  # a sweep's own table, not a run
            res = read_results(res_file.parent)
            dataset = res.get("dataset") or load_checkpoint(res_file.parent / "best.pt").data_cfg.dataset
            attention = res["attention"] + (f" {res['quant']}" if res.get("quant") else "")  # QAT/PTQ apart
            key = (dataset, attention, res["size"], res["d_osc"] if res["attention"] == "oscillator" else "-",
                   res["p"] if res["attention"] == "oscillator" else "-")
            groups[key].append(100 * res["test_accuracy"])
    if not groups:
        raise click.ClickException(f"no results.json under {', '.join(run_dirs)}")
    rows = [dict(dataset=k[0], attention=k[1], size=k[2], d_osc=k[3], p=k[4], n=len(v), mean=statistics.mean(v),
                 std=statistics.stdev(v) if len(v) > 1 else 0.0, runs=v) for k, v in sorted(groups.items(), key=str)]
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    aw = max(12, 1 + max(len(r["attention"]) for r in rows))
    click.echo(f"{'dataset':<16}{'attention':<{aw}}{'size':<8}{'d_osc':>6}{'p':>3}{'n':>4}  test accuracy %")
    for r in rows:
        click.echo(f"{r['dataset']:<16}{r['attention']:<{aw}}{r['size']:<8}{r['d_osc']:>6}{r['p']:>3}{r['n']:>4}  "
                   f"{r['mean']:6.2f} +- {r['std']:.2f}")


# ---------------------------------------------------------------------------- deploy, listen

@main.command()
@click.argument("run", type=click.Path(exists=True, file_okay=False))
@click.option("--target", type=click.Choice(["rpi"]), default="rpi", show_default=True)
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Bundle folder (default RUN/rpi-bundle).")
@click.option("--check", is_flag=True,
              help="Then prove the bundle on Raspberry Pi OS's Debian arm64 userland under QEMU (built once, cached): "
                   "pip install, run_bench.sh, listen, custom op by its gcc, outputs vs x86. Functional only.")
@click.option("--suite", "suites", multiple=True, type=click.Choice(["bookworm", "trixie"]),
              help="--check: the Debian release(s) of the userland (Raspberry Pi OS 12 and 13; repeatable; default "
                   "bookworm).")
@friendly_errors
def deploy(run, target, out, check, suites):
    """Bundle a pipeline run for a Raspberry Pi.

    A folder (and .tar.gz) made from RUN holds the int8 models, a lean requirements.txt (numpy + ai-edge-litert, no torch), the bench and
    power-measurement entry point (run_bench.sh) and a README; `edgeosc report write RUN --board
    results/bench-<host>.json` merges what it measures.
    """
    from ..deploy import build_bundle
    folder = build_bundle(run, out)
    click.echo(f"bundle: {folder} (and {folder.with_suffix('.tar.gz')}); on the Pi: see {folder / 'README.md'}")
    if check:
        from ..pi_check import CheckFailed, check_bundle
        for suite in suites or ("bookworm",):
            try:
                check_bundle(folder, echo=click.echo, suite=suite)
            except CheckFailed as e:
                raise click.ClickException(f"{suite}: {e}") from None


@main.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("--wav", type=click.Path(exists=True, dir_okay=False), default=None, help="Audio file (any rate).")
@click.option("--mic", is_flag=True, help="Listen to the microphone (needs `pip install sounddevice`).")
@click.option("--hop-ms", type=float, default=100.0, show_default=True,
              help="Window step (the window is the model's 1 s); a multiple of 20 ms.")
@click.option("--threshold", type=float, default=0.7, show_default=True, help="Smoothed posterior to detect.")
@click.option("--smooth", type=int, default=3, show_default=True, help="Posteriors averaged over this many hops.")
@click.option("--window", type=click.IntRange(min=1), default=None,
              help="A streaming checkpoint (trained with --window): frames its attention reads (default and at most "
                   "the trained window).")
@friendly_errors
def listen(model, wav, mic, hop_ms, threshold, smooth, window):
    """Streaming keyword spotting on a WAV file or the microphone.

    MODEL is a .pt checkpoint, or an exported .tflite beside its manifest.json. A sliding window every hop, smoothed
    posteriors, detections with timestamps and per-hop latency. Only the new feature frames are computed each hop; a
    streaming checkpoint (edgeosc train --window) also runs only them through its network, one frame at a time.
    """
    from ..stream import listen_command
    if model.endswith(".pt"):
        import torch
        torch.set_num_threads(1)  # batch-1 windows: more threads only add jitter
    listen_command(model, wav, hop_ms, threshold, smooth, mic, echo=click.echo, window=window)


@main.command("stream-eval")
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@config_options(("data",), DATA_FLAGS, printable=False)
@click.option("--split", type=click.Choice(["train", "val", "test"]), default="test", show_default=True)
@click.option("--hop-ms", type=float, default=20.0, show_default=True, help="Decision step; a multiple of 20 ms.")
@click.option("--threshold", type=float, default=0.7, show_default=True, help="Smoothed posterior to detect.")
@click.option("--smooth", type=int, default=3, show_default=True, help="Posteriors averaged over this many hops.")
@click.option("--refractory-s", type=float, default=None,
              help="No detection for this long after one (default: the window, 1 s).")
@click.option("--max-clips", type=click.IntRange(min=1), default=None,
              help="A random subset of the split's clips (default all: about 17 min of audio for the synthetic test).")
@click.option("--seed", type=int, default=0, show_default=True, help="The clips' order and the gaps between them.")
@click.option("--window", type=click.IntRange(min=1), default=None,
              help="A streaming checkpoint: frames its attention reads (default and at most the trained window).")
@click.option("--wav-out", type=click.Path(dir_okay=False), default=None,
              help="Also write the recording (16-bit WAV) and its keyword events (the same name, .json).")
@click.option("--sweep", is_flag=True, help="Also the operating curve from the same pass: recall and false alarms "
              "per hour at thresholds 0.3 to 0.99.")
@click.option("--negatives-hours", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Also stream this many hours of keyword-free audio (sentences of other words in the synthetic "
              "voices, noise, music-like tones; made once and cached) and report recall at 1, 5 and 10 false alarms "
              "per hour of it and the DET curve, as wake-word evaluations do.")
@click.option("--det-plot", type=click.Path(dir_okay=False), default=None,
              help="With --negatives-hours: write the DET curve here (.png, .svg or .pdf).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@CACHE_DIR
@friendly_errors
def stream_eval(model, settings, split, hop_ms, threshold, smooth, refractory_s, max_clips, seed, window, wav_out,
                sweep, negatives_hours, det_plot, as_json, cache_dir):
    """Always-on accuracy: a split's clips as one long recording.

    MODEL is a .pt checkpoint, or an exported .tflite beside its manifest.json (its data set is the one of the
    checkpoint the manifest names). The split's clips, keywords and others alike, follow each other in a random
    order with short gaps of quiet noise; `edgeosc listen`'s listener runs over them. A detection naming the keyword
    of a clip between the clip's start and 1 s after its speech ends is a hit; every other detection is a false
    alarm. Prints recall, false alarms per hour and the latency after each keyword's end. With --negatives-hours,
    false alarms are also counted on keyword-free audio, and recall is read at 1, 5 and 10 of them per hour.
    """
    from ..checkpoint import load_checkpoint
    from ..data import load_dataset
    from ..stream import load_model
    from ..stream_eval import SWEEP, evaluate_stream, format_result
    from tqdm.auto import tqdm
    net = load_model(model, window=window)  # a .tflite without its manifest is refused here
    source = Path(model)
    if source.suffix == ".tflite":
        source = Path(json.loads((source.parent / "manifest.json").read_text())["source"]["path"])
    else:
        import torch
        torch.set_num_threads(1)  # batch-1 windows: more threads only add jitter
    if det_plot and not negatives_hours:
        raise click.UsageError("--det-plot needs --negatives-hours (the DET curve's false alarms are counted there)")
    data = load_dataset(settings.load(base={"data": load_checkpoint(source).data_cfg}).data, cache_dir)
    negatives = None
    if negatives_hours:
        from ..data import default_cache_dir
        from ..data.negatives import load_negatives
        with tqdm(total=round(3600 * negatives_hours), unit="s", desc="keyword-free audio", leave=False,
                  disable=as_json) as bar:
            negatives = load_negatives(negatives_hours, seed, cache_dir or default_cache_dir(),
                                       progress=lambda done, total: bar.update(round(done) - bar.n))
    with tqdm(total=0, unit="s", desc="streaming", leave=False, disable=as_json) as bar:
        def progress(done, total):
            bar.total = round(total / net.feature_cfg.sample_rate)
            bar.n = round(done / net.feature_cfg.sample_rate)
            bar.refresh()
        res = evaluate_stream(net, data, split, hop_ms, threshold, smooth, refractory_s, max_clips, seed,
                              wav_out=wav_out, progress=progress, thresholds=SWEEP if sweep else (),
                              negatives=negatives)
    click.echo(json.dumps(res) if as_json else format_result(res))
    if det_plot:
        from ..stream_eval import plot_det
        click.echo(f"DET curve: {plot_det(res, det_plot)}", err=as_json)


# --------------------------------------------------------------------------- pipeline, sweep

@main.command()
@config_options(tuple(sections()), [DATA_FLAGS[0], DATA_FLAGS[1], ("--epochs", "train.epochs", "Float training epochs"),
                                    ("--qat-epochs", "qat.epochs", "QAT epochs")])
@click.option("--out", type=click.Path(file_okay=False), default="runs/pipeline", show_default=True)
@CACHE_DIR
@QUIET
@friendly_errors
def pipeline(settings, out, cache_dir, quiet):
    """The whole job, staged and resumable: data to report.

    data -> float training (oscillator and softmax) -> QAT -> exports -> parity -> latency -> report. Re-running skips what is done and resumes what was cut; the config file is TOML with one table per
    section (edgeosc/pipeline.py).
    """
    from ..pipeline import PipelineError, run_pipeline
    cfg = settings.load()
    try:
        path = run_pipeline(cfg, out, cache_dir, progress=not quiet, echo=click.echo)
    except PipelineError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"report: {path}")


@main.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Sweep folder (default runs/sweep-<name>).")
@CACHE_DIR
@click.option("--ray-address", default=None,
              help="Run the grid as Ray Tune trials: 'local' starts Ray here, else a cluster address (ray://... or host:port).")
@click.option("--gpus-per-run", type=float, default=0.0, show_default=True, help="GPUs per Ray trial.")
@QUIET
@friendly_errors
def sweep(config, out, cache_dir, ray_address, gpus_per_run, quiet):
    """Train a grid of runs over config fields (TOML; Ray optional).

    CONFIG is a sweep file (see sweeps/); the runs train in-process, or as Ray Tune trials. Writes results.csv/json, accuracy.png and training.png (loss and largest gradient norm per epoch).
    Finished runs are skipped and unfinished ones resumed, so an interrupted sweep continues where it stopped.
    """
    from ..sweep import run_sweep
    out = Path(out or f"runs/sweep-{Path(config).stem}")
    rows = run_sweep(config, out, cache_dir, progress=not quiet, echo=click.echo, ray_address=ray_address,
                     gpus_per_run=gpus_per_run)
    click.echo(f"{len(rows)} runs; table {out / 'results.csv'}, plots {out / 'accuracy.png'}, {out / 'training.png'}")


# -------------------------------------------------------------------------------------- lab

@main.group(cls=Ordered)
def lab():
    """Research tools (oscillator dynamics)."""


@lab.command()
@click.option("--samples", type=int, default=2000, show_default=True)
@click.option("--delta", type=float, default=0.1, show_default=True, help="Failure-mode threshold.")
def dynamics(samples, delta):
    """Lohe flow: closed-form check, convergence vs d_osc.

    Integrates the flow: closed-form error, convergence time and failure modes for each d_osc.
    """
    from ..dynamics import convergence_study
    click.echo(f"{'d_osc':>5} {'max rel err':>12} {'mean t':>8} {'p95 t':>8} {'P(|h|<delta)':>13} {'P(near -z*)':>12}")
    for d in (2, 3, 4, 8, 16, 32):
        r = convergence_study(d, samples, delta=delta)
        click.echo(f"{d:>5} {r.max_rel_error:>12.2e} {r.mean_time:>8.2f} {r.p95_time:>8.2f} "
                   f"{r.p_small_h:>13.4f} {r.p_near_antipode:>12.4f}")


if __name__ == "__main__":
    main()
