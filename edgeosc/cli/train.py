"""Training (float, QAT, PTQ) and evaluation of checkpoints and exported files."""
from __future__ import annotations

import json
from pathlib import Path

import click

from ..config import QAT_EPOCHS, QAT_LR
from .app import CACHE_DIR, DATA_FLAGS, NO_AUGMENT, QUIET, TRAIN_FLAGS, describe, friendly_errors, main
from .options import config_options


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
    from ..evaluate import format_confusion
    from ..mining import training_data
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
    ds = training_data(data_cfg, cache_dir, progress=not quiet)
    click.echo(f"data: {describe(ds)}")
    res = run_train(ds, out, model_cfg=model_cfg, feature_cfg=feature_cfg, train_cfg=train_cfg, data_cfg=data_cfg,
                    resume=resume, progress=not quiet, build=build)
    click.echo(format_confusion(res["test_confusion"], res["classes"]))
    click.echo(f"{res['attention']} ({res['size']}{', ' + res['quant'] if res.get('quant') else ''}, "
               f"{res['parameters']} parameters): test accuracy {res['test_accuracy']:.4f} "
               f"on {res['test_n']} clips; best val {res['best_val_accuracy']:.4f}; run folder {out}")


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
    """Accuracy of a checkpoint or exported model on a data split.

    CHECKPOINT is a .pt, or an exported .tflite or .onnx beside its manifest.json (onnxruntime runs a *_op.onnx's
    OscillatorAttention nodes in edgeosc's custom-op library where it can). It is evaluated on a split of its own
    dataset; data settings given here change it, another --dataset replaces it.
    """
    from ..data import load_dataset
    from ..checkpoint import load_checkpoint
    from ..evaluate import evaluate_checkpoint, evaluate_onnx, evaluate_tflite, format_confusion
    model_file = Path(checkpoint)
    if model_file.suffix in (".tflite", ".onnx"):
        manifest = model_file.parent / "manifest.json"
        if not manifest.is_file():
            raise click.ClickException(f"{model_file}: no manifest.json beside it (export with `edgeosc export`)")
        checkpoint = json.loads(manifest.read_text())["source"]["path"]
    ckpt = load_checkpoint(checkpoint)
    data = load_dataset(settings.load(base={"data": ckpt.data_cfg}).data, cache_dir)
    if model_file.suffix == ".tflite":
        res = evaluate_tflite(model_file, data, ckpt.feature_cfg, ckpt.classes, split, interpreter)
    elif model_file.suffix == ".onnx":
        res = evaluate_onnx(model_file, data, ckpt.feature_cfg, ckpt.classes, split)
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
