"""Benchmarks: model files on runtimes, oscillator against softmax, Ethos-U NPUs, the attention cores."""
from __future__ import annotations

import json
from pathlib import Path

import click

from ..bench.npu import ACCELERATORS as NPU_ACCELERATORS
from .app import CACHE_DIR, Ordered, friendly_errors, main


@main.group(cls=Ordered, renamed={"*": "name what to time: `models MODEL...`, `pair OSC SOFTMAX`, `npu MODEL...`, "
                                         "`soak MODEL` or `attention`"})
def bench():
    """Time models on runtimes and NPUs, oscillator vs softmax.

    models: latency, memory and energy of model files (torch-free, also on a Pi); pair: oscillator vs softmax
    exports on every runtime, as ratios; npu: int8 files on Ethos-U NPUs (Vela's estimates); soak: hours of audio
    through the listener, its memory and a stream's state; attention: the attention cores alone in torch.
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

    MODELS are .tflite files or pipeline run folders (each export-KIND/tflite/int8_npu.tflite, the int8 file with
    its unit vectors as operators the NPUs run, or int8.tflite where there is none, as DS-CNN's). Per file and
    accelerator: operators on the NPU, those left to the CPU (named), Vela's estimated cycles, inference time, SRAM
    and flash, with the system configurations of Vela's Arm/vela.ini (edgeosc/bench/npu.py).
    """
    from ..bench import npu
    from ..export.tflite import npu_file
    files = {}
    for m in map(Path, models):
        if m.is_dir():
            found = [f for f in map(npu_file, sorted(m.glob("export-*/tflite"))) if f.is_file()]
            if not found:
                raise click.ClickException(f"{m}: no export-KIND/tflite/int8_npu.tflite or int8.tflite in this folder")
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


@bench.command("soak")
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("--hours", type=click.FloatRange(min=0, min_open=True), default=3.0, show_default=True,
              help="Hours of audio to stream.")
@click.option("--audio-hours", type=click.FloatRange(min=0, min_open=True), default=0.25, show_default=True,
              help="Keyword-free audio made once (cached) and looped: sentences in the synthetic voices, noise, music.")
@click.option("--hop-ms", type=float, default=20.0, show_default=True, help="Decision step; a multiple of 20 ms.")
@click.option("--checks", type=click.IntRange(min=1), default=6, show_default=True,
              help="Memory and state checks, evenly spread over the run.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Also write results here.")
@CACHE_DIR
@friendly_errors
def bench_soak(model, hours, audio_hours, hop_ms, checks, json_path, cache_dir):
    """Hours of audio through the listener: memory, stream state.

    MODEL is a checkpoint (.pt) or an exported .tflite beside its manifest.json; a streaming model's stream_int8.tflite
    is the deployed one. At each check: the process's resident memory, and for a streaming model its state against
    a fresh stream over the same last frames (stream_int8.tflite: every state tensor bit for bit; a float checkpoint:
    its logits within float32 rounding). Memory should stay flat and the state hold after hours.
    """
    from tqdm.auto import tqdm
    from ..stream_soak import format_soak, soak
    from ..data import default_cache_dir
    from ..data.negatives import load_negatives_shown
    from ..io import write_json
    from ..stream import load_model
    if model.endswith(".pt"):
        import torch
        torch.set_num_threads(1)  # one frame a step: more threads only add jitter
    net = load_model(model)
    audio = load_negatives_shown(audio_hours, 0, cache_dir or default_cache_dir(), "keyword-free audio")
    with tqdm(total=round(3600 * hours), unit="s", desc="soak", leave=False) as bar:
        result = soak(net, audio, hours, hop_ms, checks, lambda done, total: bar.update(round(done) - bar.n))
    click.echo(format_soak(result))
    if json_path:
        write_json(json_path, result)
        click.echo(f"results: {json_path}")
