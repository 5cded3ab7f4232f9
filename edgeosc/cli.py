"""The `edgeosc` command line: data, train (float, QAT, PTQ), eval, pipeline, compare, summary, exports, benchmarks."""
from __future__ import annotations

import functools
import json
import statistics
from collections import defaultdict
from pathlib import Path

import click

from .config import ATTENTION_KINDS, DATASETS, NORMALIZE_MODES, POSITIVE_MAPS, QAT_EPOCHS, QAT_LR, QUANT_PRESETS, AugmentConfig, \
    DataConfig, ExportConfig, FeatureConfig, ModelConfig, QuantConfig, TrainConfig



def friendly_errors(fn):
    """Known user-facing problems become one line on stderr and exit status 1, never a traceback."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from .runtime import InterpreterUnavailable  # torch-free: `edgeosc bench` runs without torch
        try:
            return fn(*args, **kwargs)
        except (ValueError, FileNotFoundError, InterpreterUnavailable) as e:  # bad data, checkpoints, model files
            raise click.ClickException(str(e)) from None
        except KeyboardInterrupt:
            raise click.ClickException("interrupted; rerun with --resume to continue from the last epoch") from None
    return wrapper


@click.group(context_settings=dict(help_option_names=["-h", "--help"]))
def main():
    """Keyword spotting with softmax-free oscillator attention, from data to edge runtimes."""


# ------------------------------------------------------------------------------------- data

def data_options(fn):
    opts = [
        click.option("--dataset", type=click.Choice(DATASETS), default="synth", show_default=True,
                     help="synth: embedded eSpeak NG keywords (no download); speech-commands / fsdd: your download."),
        click.option("--data-dir", type=click.Path(file_okay=False), help="Folder of the downloaded dataset."),
        click.option("--task", type=click.Choice(["12", "all", "digits"]), default="12", show_default=True,
                     help="12: 10 words + unknown + silence; all: every Speech Commands word as a class; "
                          "digits: the synthetic set speaks FSDD's ten digits (to pretrain for FSDD)."),
        click.option("--data-seed", type=int, default=0, show_default=True, help="Seed of the synthetic set / balancing."),
        click.option("--n-voices", type=int, default=None, help="Synthetic set: number of voice variants (default all)."),
        click.option("--renditions", type=int, default=4, show_default=True,
                     help="Synthetic set: clips per voice and class."),
        click.option("--test-speakers", default="", help="FSDD: comma-separated speakers held out for test."),
        click.option("--val-speakers", default="", help="FSDD: comma-separated speakers held out for validation."),
        click.option("--synth-mix", is_flag=True,
                     help="Real speech: also train on every synthetic voice (eSpeak NG, 11 recorded speakers) "
                          "saying the same classes, band-limited to the recordings' band (more speakers than a "
                          "small real set has)."),
        click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
                     help="Decoded-clip cache (default $EDGEOSC_CACHE or ~/.cache/edgeosc)."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def make_data_cfg(dataset, data_dir, task, data_seed, n_voices, renditions, test_speakers, val_speakers,
                  synth_mix=False) -> DataConfig:
    if data_dir is not None and not Path(data_dir).is_dir():
        raise click.ClickException(f"--data-dir {data_dir}: no such folder")
    split = lambda s: tuple(x.strip() for x in s.split(",") if x.strip())  # noqa: E731
    return DataConfig(dataset=dataset, data_dir=str(Path(data_dir).resolve()) if data_dir else None, task=task,
                      seed=data_seed, n_voices=n_voices, renditions=renditions,
                      test_speakers=split(test_speakers), val_speakers=split(val_speakers), synth_mix=synth_mix)


def describe(data) -> str:
    import numpy as np
    counts = {s: len(data.indices(s)) for s in ("train", "val", "test")}
    groups = {s: len(np.unique(data.groups[data.split == s])) for s in counts}
    return (f"{len(data.audio)} clips, {len(data.classes)} classes; " +
            ", ".join(f"{s} {counts[s]} ({groups[s]} speakers)" for s in counts) +
            (f"; skipped {len(data.skipped)} files" if data.skipped else ""))


@main.group()
def data():
    """Make or inspect datasets."""


@data.command("synth")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--n-voices", type=int, default=None, help="Number of voice variants (default all).")
@click.option("--renditions", type=int, default=4, show_default=True, help="Clips per voice and class.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None)
@friendly_errors
def data_synth(seed, n_voices, renditions, cache_dir):
    """Generate (once, then cached) the synthetic 12-class keyword set with eSpeak NG."""
    from .data import load_dataset
    ds = load_dataset(DataConfig(seed=seed, n_voices=n_voices, renditions=renditions), cache_dir)
    click.echo(describe(ds))


@data.command("info")
@data_options
@friendly_errors
def data_info(cache_dir, **kw):
    """Load a dataset (decoding and caching it) and print its splits and skipped files."""
    from .data import load_dataset
    ds = load_dataset(make_data_cfg(**kw), cache_dir)
    click.echo(describe(ds))
    for f, why in ds.skipped[:20]:
        click.echo(f"  skipped {f}: {why}")


# ------------------------------------------------------------------------------------ train

@main.command()
@data_options
@click.option("--attention", type=click.Choice(ATTENTION_KINDS), default="oscillator", show_default=True)
@click.option("--size", type=click.Choice(["small", "medium"]), default="small", show_default=True,
              help="small: ~23k parameters; medium: ~170k.")
@click.option("--d-osc", type=int, default=ModelConfig.d_osc, show_default=True, help="Oscillator dimension.")
@click.option("--p", "p", type=int, default=ModelConfig.p, show_default=True, help="Readout sharpening power.")
@click.option("--positive", type=click.Choice(POSITIVE_MAPS), default=ModelConfig.positive, show_default=True,
              help="Positive map of the coupling weights.")
@click.option("--key-gate", is_flag=True, help="Oscillator: a learned weight per key in the readout "
              "(docs/ablations.md sections 43-44).")
@click.option("--n-mfcc", type=int, default=FeatureConfig.n_mfcc, show_default=True,
              help="0: 40 log-mel bands; >0: that many MFCCs.")
@click.option("--normalize", type=click.Choice(NORMALIZE_MODES), default=FeatureConfig.normalize,
              show_default=True, help="Per-clip mean subtraction of the features: over every frame (utterance) or "
                                      "over the frames within 30 dB of the clip's loudest (active, log-mel only), "
                                      "so padding and pauses leave the mean alone.")
@click.option("--floor-db", type=click.FloatRange(min=0), default=FeatureConfig.floor_db, show_default=True,
              help="Floor the log-mels this many dB below each clip's peak (0: off), so digital-silence "
                   "padding looks like a quiet noise floor. On FSDD 30-40 helps softmax, not the oscillator "
                   "(docs/ablations.md section 36).")
@click.option("--epochs", type=int, default=TrainConfig.epochs, show_default=True)
@click.option("--batch-size", type=int, default=TrainConfig.batch_size, show_default=True)
@click.option("--lr", type=float, default=TrainConfig.lr, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--no-augment", is_flag=True, help="Disable time shift, noise mixing and gain.")
@click.option("--mixup", type=click.FloatRange(min=0), default=TrainConfig.mixup, show_default=True,
              help="Mixup alpha: blend each feature batch with a shuffled copy, weight Beta(alpha, alpha); 0 = off. "
                   "0.4 helps the oscillator on unseen real speakers (docs/ablations.md section 33).")
@click.option("--init-from", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Start from the weights of a float checkpoint of the same network (e.g. trained on the "
                   "synthetic set before real speech); a classifier for other classes starts afresh.")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Run folder (default runs/<dataset>-<attention>-<size>-s<seed>).")
@click.option("--resume", is_flag=True, help="Continue an interrupted run from OUT/last.pt.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
@click.option("--qat", is_flag=True, help=f"Quantization-aware fine-tuning of --from (default {QAT_EPOCHS} epochs, "
              f"lr {QAT_LR}); --epochs 0: post-training quantization, calibration only.")
@click.option("--from", "from_ckpt", type=click.Path(dir_okay=False), default=None,
              help="Float checkpoint --qat starts from; its model, features and data are used.")
@click.option("--preset", type=click.Choice(QUANT_PRESETS), default=QuantConfig.preset, show_default=True,
              help="Quantization preset (edgeosc/quant.py).")
@click.option("--calib-batches", type=int, default=QuantConfig.calibration_batches, show_default=True,
              help="Training batches that calibrate the activation scales before QAT.")
@friendly_errors
def train(cache_dir, attention, size, d_osc, p, positive, key_gate, n_mfcc, normalize, floor_db, epochs, batch_size,
          lr, seed, device, no_augment, mixup, init_from, out, resume, quiet, qat, from_ckpt, preset, calib_batches,
          **data_kw):
    """Train a KWS model, keep the best checkpoint by validation accuracy, report test accuracy."""
    from .data import load_dataset
    from .evaluate import format_confusion
    from .train import train as run_train
    data_cfg = make_data_cfg(**data_kw)
    model_cfg = ModelConfig(attention=attention, size=size, d_osc=d_osc, p=p, positive=positive, key_gate=key_gate)
    feature_cfg, build = FeatureConfig(n_mfcc=n_mfcc, normalize=normalize, floor_db=floor_db), None
    if qat or from_ckpt:
        from .checkpoint import load_checkpoint
        from .train import qat_builder
        is_default = lambda name: click.get_current_context().get_parameter_source(name).name == "DEFAULT"  # noqa: E731
        given = [n for n in ("attention", "size", "d_osc", "p", "positive", "key_gate", "n_mfcc", "normalize",
                             "floor_db") if not is_default(n)]
        if not (qat and from_ckpt) or given:
            raise click.ClickException("--qat needs --from CHECKPOINT, which sets the model and features "
                                       f"(drop {', '.join('--' + n.replace('_', '-') for n in given) or '--from'})")
        src = load_checkpoint(from_ckpt)
        model_cfg, feature_cfg = src.model_cfg, src.feature_cfg
        if is_default("dataset") and not data_kw["data_dir"]:
            data_cfg = src.data_cfg
        epochs = QAT_EPOCHS if is_default("epochs") else epochs
        lr = QAT_LR if is_default("lr") else lr
        build = qat_builder(from_ckpt, QuantConfig(preset=preset, calibration_batches=calib_batches))
        out = out or f"{Path(from_ckpt).parent}-{preset}-{'qat' if epochs else 'ptq'}"
    out = Path(out or f"runs/{data_cfg.dataset}-{attention}-{size}-s{seed}")
    if not resume and (out / "last.pt").exists():
        raise click.ClickException(f"{out} already holds a run: pass --resume to continue it, or choose another --out")
    ds = load_dataset(data_cfg, cache_dir, progress=not quiet)
    click.echo(f"data: {describe(ds)}")
    aug = AugmentConfig(noise_prob=0.0, time_shift_ms=0.0, gain_db=(0.0, 0.0)) if no_augment else AugmentConfig()
    res = run_train(ds, out, model_cfg=model_cfg, feature_cfg=feature_cfg,
                    train_cfg=TrainConfig(epochs=epochs, batch_size=batch_size, lr=lr, seed=seed, device=device,
                                          augment=aug, mixup=mixup, init_from=init_from and str(Path(init_from).resolve())),
                    data_cfg=data_cfg, resume=resume, progress=not quiet, build=build)
    click.echo(format_confusion(res["test_confusion"], res["classes"]))
    click.echo(f"{res['attention']} ({res['size']}{', ' + res['quant'] if res.get('quant') else ''}, "
               f"{res['parameters']} parameters): test accuracy {res['test_accuracy']:.4f} "
               f"on {res['test_n']} clips; best val {res['best_val_accuracy']:.4f}; run folder {out}")


@main.command("eval")
@click.argument("checkpoint", type=click.Path(dir_okay=False))
@data_options
@click.option("--split", type=click.Choice(["train", "val", "test"]), default="test", show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--interpreter", type=click.Choice(["ai-edge-litert", "tflite-runtime", "tflite-micro"]), default=None,
              help="For a .tflite: the interpreter (default: the first installed).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@friendly_errors
def eval_cmd(checkpoint, cache_dir, split, device, interpreter, as_json, **data_kw):
    """Evaluate CHECKPOINT (a .pt, or an exported .tflite beside its manifest.json) on a split of its own
    dataset (or of --dataset/--data-dir when given)."""
    from .data import load_dataset
    from .checkpoint import load_checkpoint
    from .evaluate import evaluate_checkpoint, evaluate_tflite, format_confusion
    model_file = Path(checkpoint)
    if model_file.suffix == ".tflite":
        manifest = model_file.parent / "manifest.json"
        if not manifest.is_file():
            raise click.ClickException(f"{model_file}: no manifest.json beside it (export with `edgeosc export`)")
        checkpoint = json.loads(manifest.read_text())["source"]["path"]
    ckpt = load_checkpoint(checkpoint)
    given = click.get_current_context().get_parameter_source("dataset").name != "DEFAULT" or data_kw["data_dir"]
    data = load_dataset(make_data_cfg(**data_kw) if given else ckpt.data_cfg, cache_dir)
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


# ----------------------------------------------------------------------------- pipeline, compare

@main.command()
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="TOML file with every option (edgeosc/pipeline.py); the options below override it.")
@click.option("--dataset", type=click.Choice(DATASETS), default=None, help="Overrides [data] dataset.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Overrides [data] data_dir.")
@click.option("--epochs", type=int, default=None, help="Overrides [train] epochs (float training).")
@click.option("--qat-epochs", type=int, default=None, help="Overrides [qat] epochs.")
@click.option("--set", "settings", multiple=True, metavar="SECTION.FIELD=VALUE",
              help="Any other override, e.g. --set model.d_osc=2 (value parsed as TOML).")
@click.option("--out", type=click.Path(file_okay=False), default="runs/pipeline", show_default=True)
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None)
@click.option("--quiet", is_flag=True)
@friendly_errors
def pipeline(config_path, dataset, data_dir, epochs, qat_epochs, settings, out, cache_dir, quiet):
    """The main job: data -> float training of the oscillator and softmax models -> QAT -> every export ->
    parity checks -> latency -> the compare report. Re-running skips what is done and resumes what was cut."""
    import tomllib
    from .pipeline import PipelineError, load_config, run_pipeline
    overrides = {k: v for k, v in (("data.dataset", dataset), ("data.data_dir", data_dir), ("train.epochs", epochs),
                                   ("qat.epochs", qat_epochs)) if v is not None}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r}: expected SECTION.FIELD=VALUE", param_hint="--set")
        try:
            overrides[key.strip()] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            overrides[key.strip()] = value  # a bare word: a string
    cfg = load_config(config_path, overrides)
    try:
        report = run_pipeline(cfg, out, cache_dir, progress=not quiet, echo=click.echo)
    except PipelineError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"report: {report}")


@main.command()
@click.argument("run", type=click.Path(exists=True, file_okay=False))
@click.option("--board", "boards", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A bench JSON measured on a board (`edgeosc bench --json` on a Raspberry Pi); repeatable.")
@friendly_errors
def compare(run, boards):
    """(Re)write RUN's oscillator-vs-softmax report (Markdown, JSON, plots), merging board measurements."""
    from .report import write_report
    click.echo(f"report: {write_report(run, None, boards)}")


# ------------------------------------------------------------------------------------ summary

@main.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True)
@friendly_errors
def summary(run_dirs, as_json):
    """Mean and spread of test accuracy over seeds, grouped by dataset, attention, size, d_osc, p.

    RUN_DIRS are run folders or folders holding them (searched for results.json).
    """
    from .checkpoint import load_checkpoint
    from .train import read_results
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


@main.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Sweep folder (default runs/sweep-<name>).")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None)
@click.option("--ray-address", default=None,
              help="Run the grid as Ray Tune trials: 'local' starts Ray here, else a cluster address (ray://... or host:port).")
@click.option("--gpus-per-run", type=float, default=0.0, show_default=True, help="GPUs per Ray trial.")
@click.option("--quiet", is_flag=True)
@friendly_errors
def sweep(config, out, cache_dir, ray_address, gpus_per_run, quiet):
    """Train a grid of runs from a TOML sweep file (see sweeps/); write results.csv/json, accuracy.png
    and training.png (loss and largest gradient norm per epoch).

    Finished runs are skipped and unfinished ones resumed, so an interrupted sweep continues where it stopped.
    """
    from .sweep import run_sweep
    out = Path(out or f"runs/sweep-{Path(config).stem}")
    rows = run_sweep(config, out, cache_dir, progress=not quiet, echo=click.echo, ray_address=ray_address,
                     gpus_per_run=gpus_per_run)
    click.echo(f"{len(rows)} runs; table {out / 'results.csv'}, plots {out / 'accuracy.png'}, {out / 'training.png'}")


# ---------------------------------------------------------------------------------- export

@main.command("export")
@click.argument("source", type=click.Path())
@click.option("--format", "target", type=click.Choice(["onnx", "tflite", "c"]), default="onnx", show_default=True)
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Export folder (default <run folder>/export-<format>; c: firmware_models/<name>).")
@click.option("--opset", type=int, default=ExportConfig.opset, show_default=True, help="ONNX opset.")
@click.option("--name", default=None, help="c: the model's C name (default the --out folder's, or SOURCE's stem).")
@click.option("--no-fuse", is_flag=True, help="c: run the attention cores op by op, not as fused row kernels.")
@friendly_errors
def export_cmd(source, target, out, opset, name, no_fuse):
    """Export SOURCE (a run folder's best.pt, or a checkpoint; for c also an int8 .tflite) as model files.

    ONNX: float.onnx, int8_qcdq.onnx (QAT/PTQ checkpoints) and, for oscillator networks, *_op.onnx with
    the core as one ai.edgeosc::OscillatorAttention node (export/oscillator_attention.md).

    TFLite: float.tflite, int8.tflite (QAT/PTQ checkpoints; full-integer, builtin ops, the QAT scales) and,
    for oscillator networks, int8_custom.tflite with the core as one EdgeOscAttention custom op
    (export/edgeosc_attention_tflite.md). Run them with edgeosc.runtime in any installed interpreter.

    C: firmware_models/<name>/ (int8 TFLite graph -> C99 kernels calls, weights, generated settings,
    static arena; bit-exact with TFLite Micro), from int8.tflite, int8_custom.tflite or a QAT checkpoint.
    """
    if target == "c":
        return export_c(Path(source), out, name, not no_fuse)
    from .export import MANIFEST, export_checkpoint
    folder = export_checkpoint(source, out, target, ExportConfig(opset=opset))
    manifest = json.loads((folder / MANIFEST).read_text())
    for name, info in manifest["files"].items():
        click.echo(f"{folder / name}  {info['bytes']:>9} bytes  sha256 {info['sha256'][:12]}")


def export_c(source: Path, out, name, fuse: bool) -> None:
    from .cbuild import FIRMWARE
    from .config import from_dict
    from .export import MANIFEST, export_checkpoint
    from .export import c as firmware
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


@main.command("export-bench")
@click.argument("oscillator", type=click.Path(exists=True, file_okay=False))
@click.argument("softmax", type=click.Path(exists=True, file_okay=False))
@click.option("--runs", type=int, default=200, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@friendly_errors
def export_bench(oscillator, softmax, runs, threads, as_json):
    """Latency at batch 1 of OSCILLATOR vs SOFTMAX exports (run or export folders) on every installed
    runtime (onnxruntime for .onnx; ai-edge-litert, tflite-runtime, tflite-micro for .tflite), interleaved, as ratios."""
    from .bench.latency import compare
    rows = compare(oscillator, softmax, runs, threads, echo=(lambda *_: None) if as_json else click.echo)
    if as_json:
        click.echo(json.dumps(rows, indent=1))


@main.command("bench")
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
def bench_cmd(models, runtimes, runs, warmup, threads, no_memory, power, power_log, power_offset, i2c_bus,
              shunt_ohms, json_path):
    """Latency of exported MODELS (.onnx, .tflite) at batch 1: min/median/p90/p99 of interleaved runs,
    resident memory, size and the system; with --power or --power-log the energy per inference (measured,
    idle power subtracted). Needs only numpy and a runtime (no torch): it runs as is on a Raspberry Pi."""
    from .bench import power as pw
    from .bench.latency import bench, format_table
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
    report = bench(list(models), list(runtimes) or None, runs, threads, warmup, memory=not no_memory, power=monitor)
    click.echo(format_table(report))
    if json_path:
        from .io import write_json
        write_json(json_path, report)
        click.echo(f"results: {json_path}")


@main.command()
@click.argument("run", type=click.Path(exists=True, file_okay=False))
@click.option("--target", type=click.Choice(["rpi"]), default="rpi", show_default=True)
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Bundle folder (default RUN/rpi-bundle).")
@friendly_errors
def deploy(run, target, out):
    """Make a self-contained folder (and .tar.gz) from a pipeline RUN to copy onto a Raspberry Pi: the int8
    models, a lean requirements.txt (numpy + ai-edge-litert, no torch), the bench and power-measurement entry
    point (run_bench.sh) and a README; `edgeosc compare RUN --board results/bench-<host>.json` merges what it measures."""
    from .deploy import build_bundle
    folder = build_bundle(run, out)
    click.echo(f"bundle: {folder} (and {folder.with_suffix('.tar.gz')}); on the Pi: see {folder / 'README.md'}")


@main.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("--wav", type=click.Path(exists=True, dir_okay=False), default=None, help="Audio file (any rate).")
@click.option("--mic", is_flag=True, help="Listen to the microphone (needs `pip install sounddevice`).")
@click.option("--hop-ms", type=float, default=100.0, show_default=True,
              help="Window step (the window is the model's 1 s); a multiple of 20 ms.")
@click.option("--threshold", type=float, default=0.7, show_default=True, help="Smoothed posterior to detect.")
@click.option("--smooth", type=int, default=3, show_default=True, help="Posteriors averaged over this many hops.")
@friendly_errors
def listen(model, wav, mic, hop_ms, threshold, smooth):
    """Streaming keyword spotting with MODEL (a .pt checkpoint, or an exported .tflite beside its
    manifest.json): a sliding window every hop, smoothed posteriors, detections with timestamps and
    per-hop latency. Only the new feature frames are computed each hop."""
    from .stream import listen_command
    if model.endswith(".pt"):
        import torch
        torch.set_num_threads(1)  # batch-1 windows: more threads only add jitter
    listen_command(model, wav, hop_ms, threshold, smooth, mic, echo=click.echo)


# --------------------------------------------------------------------------- core benchmarks

@main.command()
@click.option("--repeats", type=int, default=20, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True)
def microbench(repeats, threads):
    """Time direct vs factorized oscillator attention vs softmax attention (one run, as ratios)."""
    from .bench.microbench import attention_microbench
    attention_microbench(repeats=repeats, threads=threads, echo=click.echo)


@main.command()
@click.option("--samples", type=int, default=2000, show_default=True)
@click.option("--delta", type=float, default=0.1, show_default=True, help="Failure-mode threshold.")
def dynamics(samples, delta):
    """Integrate the Lohe flow: closed-form error, convergence time and failure modes vs d_osc."""
    from .dynamics import convergence_study
    click.echo(f"{'d_osc':>5} {'max rel err':>12} {'mean t':>8} {'p95 t':>8} {'P(|h|<delta)':>13} {'P(near -z*)':>12}")
    for d in (2, 3, 4, 8, 16, 32):
        r = convergence_study(d, samples, delta=delta)
        click.echo(f"{d:>5} {r.max_rel_error:>12.2e} {r.mean_time:>8.2f} {r.p95_time:>8.2f} "
                   f"{r.p_small_h:>13.4f} {r.p_near_antipode:>12.4f}")


if __name__ == "__main__":
    main()
