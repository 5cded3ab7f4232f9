"""Exports: ONNX, TFLite, C firmware."""
from __future__ import annotations

import json
from pathlib import Path

import click

from ..config import FeatureConfig, from_dict
from .app import friendly_errors, main
from .options import config_options


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

    TFLite: float.tflite, int8.tflite (QAT/PTQ checkpoints; full-integer, builtin ops, the QAT scales),
    for transformers int8_npu.tflite (int8.tflite with its unit vectors as operators the Ethos-U NPUs run; for
    `edgeosc bench npu`) and, for oscillator networks, int8_custom.tflite with the core as one EdgeOscAttention
    custom op (export/edgeosc_attention_tflite.md). Run them with edgeosc.runtime in any installed interpreter. A
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
