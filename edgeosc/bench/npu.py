"""Ethos-U NPUs through Arm's Vela compiler: which operators of an int8 .tflite file run on the NPU and which fall
back to the CPU (named, with Vela's reason), and Vela's estimates of cycles, inference time, SRAM and flash.

Vela is the compiler these NPUs ship with; its figures are its own performance model's (no board), labelled so in
every table. Each accelerator is compiled with one of the system configurations of Vela's own Arm/vela.ini: the
microcontroller class, weights in flash and the tensor arena in SRAM shared with the Cortex-M.
"""
from __future__ import annotations

import csv
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# accelerator -> (system configuration, memory mode) of Vela's Arm/vela.ini
ACCELERATORS = {
    "ethos-u55-128": ("Ethos_U55_High_End_Embedded", "Shared_Sram"),
    "ethos-u85-256": ("Ethos_U85_SYS_Flash_High", "Shared_Sram"),
}
_PLACED = re.compile(r"^\s+(NPU|CPU): (\S+) = (.+?) \(outputs")
_REFUSED = re.compile(r"^Warning \(supported operators\) operator: (\w+), ofm: '(.*)'\s*\nReason: (.*)$", re.M)


class VelaError(ValueError):  # a one-line error in the CLI, as bad model files are
    pass


def vela_version() -> str | None:
    try:
        from ethosu.vela import __version__
    except ImportError:
        return None
    return __version__


def compile_model(model: str | Path, accelerator: str, work_dir: str | Path | None = None) -> dict:
    """Compile one int8 .tflite for `accelerator` (a key of ACCELERATORS); Vela's placement and estimates."""
    if accelerator not in ACCELERATORS:
        raise ValueError(f"unknown accelerator {accelerator!r}; choose from {sorted(ACCELERATORS)}")
    if vela_version() is None:
        raise VelaError("Vela is not installed (pip install ethos-u-vela; `make setup` installs it)")
    model, (system, memory) = Path(model), ACCELERATORS[accelerator]
    with tempfile.TemporaryDirectory(dir=work_dir) as out:
        cmd = [sys.executable, "-m", "ethosu.vela", str(model), "--accelerator-config", accelerator,
               "--config", "Arm/vela.ini", "--system-config", system, "--memory-mode", memory,
               "--output-dir", out, "--show-cpu-operations"]
        run = subprocess.run(cmd, capture_output=True, text=True)
        log = run.stdout + run.stderr
        summaries = list(Path(out).glob("*_summary_*.csv"))
        if run.returncode or not summaries:
            tail = (log.strip().splitlines() or ["no output"])[-1][:300]
            raise VelaError(f"{model}: Vela could not compile it for {accelerator} ({tail})")
        with open(summaries[0], newline="") as f:
            summary = next(csv.DictReader(f))
    placed = [m.groups() for m in map(_PLACED.match, log.splitlines()) if m]
    npu = sum(where == "NPU" for where, _, _ in placed)
    refused = [dict(op=op, tensor=name, reason=reason.strip()) for op, name, reason in _REFUSED.findall(log)]
    kib = lambda key: round(float(summary[key]), 2)  # noqa: E731  (Vela reports KiB)
    return dict(model=str(model), accelerator=accelerator, system_config=system, memory_mode=memory,
                operators=len(placed), npu_operators=npu, cpu_operators=len(placed) - npu, on_cpu=refused,
                npu_share=npu / len(placed) if placed else 0.0,
                cycles_npu=int(float(summary["cycles_npu"])), cycles_total=int(float(summary["cycles_total"])),
                inference_ms=1e3 * float(summary["inference_time"]), core_clock_mhz=float(summary["core_clock"]) / 1e6,
                sram_kib=kib("sram_memory_used"), flash_kib=kib("off_chip_flash_memory_used"),
                macs=int(float(summary["nn_macs"])), vela=vela_version())


def compile_models(models: dict[str, str | Path], accelerators=tuple(ACCELERATORS), echo=None) -> list[dict]:
    """compile_model for every (name -> file) and accelerator; rows named by `name`."""
    rows = []
    for name, path in models.items():
        for acc in accelerators:
            rows.append(dict(name=name, **compile_model(path, acc)))
            if echo:
                echo(f"  {name} on {acc}: {rows[-1]['npu_operators']}/{rows[-1]['operators']} operators on the NPU")
    return rows


def format_table(rows: list[dict]) -> str:
    """One line per model and accelerator (with the file compiled), then what falls back to the CPU."""
    head = ("| model | file | accelerator | NPU / all operators | NPU cycles | all cycles | inference (ms) | SRAM (KiB) "
            "| flash (KiB) |")
    lines = [f"Ethos-U estimates by Vela {rows[0]['vela'] if rows else ''} (its performance model, no board)", "",
             head, "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {Path(r['model']).name} | {r['accelerator']} | {r['npu_operators']} / "
                     f"{r['operators']} | {r['cycles_npu']:,} | {r['cycles_total']:,} | {r['inference_ms']:.3f} | "
                     f"{r['sram_kib']:.1f} | {r['flash_kib']:.1f} |")
    for r in rows:
        if r["on_cpu"]:
            ops = {}
            for o in r["on_cpu"]:
                ops[o["op"]] = ops.get(o["op"], 0) + 1
            lines.append(f"\n{r['name']} on {r['accelerator']}, on the CPU: "
                         + ", ".join(f"{op} x{n}" for op, n in sorted(ops.items())))
    return "\n".join(lines)
