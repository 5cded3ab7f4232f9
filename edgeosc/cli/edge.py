"""On the device: the Raspberry Pi bundle, streaming detection, always-on evaluation."""
from __future__ import annotations

import json
from pathlib import Path

import click

from .app import CACHE_DIR, DATA_FLAGS, friendly_errors, main
from .options import config_options


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
@click.option("--smooth", type=click.IntRange(min=1), default=None,
              help="Posteriors averaged over this many hops (default: 300 ms of them, 3 at 100 ms, 15 at 20 ms).")
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


def _whole_numbers(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"give whole numbers separated by commas, e.g. 1,3,10; got {text!r}") from None
    if any(v < 1 for v in values):
        raise click.BadParameter(f"smoothing lengths are >= 1 hop; got {text!r}")
    return values


@main.command("stream-eval")
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@config_options(("data",), DATA_FLAGS, printable=False)
@click.option("--split", type=click.Choice(["train", "val", "test"]), default="test", show_default=True)
@click.option("--hop-ms", type=float, default=20.0, show_default=True, help="Decision step; a multiple of 20 ms.")
@click.option("--threshold", type=float, default=0.7, show_default=True, help="Smoothed posterior to detect.")
@click.option("--smooth", type=click.IntRange(min=1), default=None,
              help="Posteriors averaged over this many hops (default: 300 ms of them, 3 at 100 ms, 15 at 20 ms).")
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
@click.option("--smooths", callback=lambda ctx, param, value: _whole_numbers(value), default="",
              help="Also the operating curve (with --negatives-hours: the DET curve and recall at 1, 5, 10 false "
              "alarms per hour) at each of these smoothing lengths, e.g. 1,3,10,25, from the same pass.")
@click.option("--negatives-hours", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Also stream this many hours of keyword-free audio (sentences of other words in the synthetic "
              "voices, noise, music-like tones; made once and cached) and report recall at 1, 5 and 10 false alarms "
              "per hour of it and the DET curve, as wake-word evaluations do.")
@click.option("--in-context", is_flag=True,
              help="Put the clips in context: 1-4 s of keyword-free audio (other sentences, noise, music; other "
              "draws than --negatives-hours') between two clips instead of short quiet gaps.")
@click.option("--det-plot", type=click.Path(dir_okay=False), default=None,
              help="With --negatives-hours: write the DET curve here (.png, .svg or .pdf).")
@click.option("--trace-out", type=click.Path(dir_okay=False), default=None,
              help="Also save every hop's posteriors, the keyword events and the listener's settings here (.npz), "
              "to study decision rules without running the model again.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@CACHE_DIR
@friendly_errors
def stream_eval(model, settings, split, hop_ms, threshold, smooth, refractory_s, max_clips, seed, window, wav_out,
                sweep, smooths, negatives_hours, in_context, det_plot, trace_out, as_json, cache_dir):
    """Always-on accuracy: a split's clips as one long recording.

    MODEL is a .pt checkpoint, or an exported .tflite beside its manifest.json (its data set is the one of the
    checkpoint the manifest names). The split's clips, keywords and others alike, follow each other in a random
    order with short gaps of quiet noise (--in-context: longer stretches of speech, noise and music); `edgeosc
    listen`'s listener runs over them. A detection naming the keyword of a clip between the clip's start and 1 s
    after its speech ends is a hit; every other detection is a false alarm. Prints recall, false alarms per hour and
    the latency after each keyword's end. With --negatives-hours, false alarms are also counted on keyword-free
    audio, and recall is read at 1, 5 and 10 of them per hour.
    """
    from ..checkpoint import load_checkpoint
    from ..stream import load_model
    from ..stream_eval import SWEEP, format_result, protocol_data, run_protocol
    net = load_model(model, window=window)  # a .tflite without its manifest is refused here
    source = Path(model)
    if source.suffix == ".tflite":
        source = Path(json.loads((source.parent / "manifest.json").read_text())["source"]["path"])
    else:
        import torch
        torch.set_num_threads(1)  # batch-1 windows: more threads only add jitter
    if det_plot and not negatives_hours:
        raise click.UsageError("--det-plot needs --negatives-hours (the DET curve's false alarms are counted there)")
    trained = load_checkpoint(source).data_cfg
    data = protocol_data(settings.load(base={"data": trained}).data, cache_dir)
    res = run_protocol(net, data, split, negatives_hours, in_context, max_clips, seed, cache_dir, not as_json,
                       hop_ms=hop_ms, threshold=threshold, smooth=smooth, refractory_s=refractory_s, wav_out=wav_out,
                       thresholds=SWEEP if sweep else (), smooths=smooths, trace_out=trace_out)
    click.echo(json.dumps(res) if as_json else format_result(res))
    if det_plot:
        from ..stream_eval import plot_det
        click.echo(f"DET curve: {plot_det(res, det_plot)}", err=as_json)
