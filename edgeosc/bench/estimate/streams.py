"""Always-on cost: one frame a hop through a streaming network's own firmware against the whole window recomputed
(stream_hop, stream_cycles)."""
from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from .. import cycles as C
from .. import devices as D
from .build import ATTENTION, STREAM_ENTRY, host_logits, io_bytes, model_elf, work_folder
from .model import estimate_model
from .pricing import first_device
from .workloads import random_firmware

STREAM_KINDS = ("oscillator", "softmax")


def stream_hop(fw: str | Path, name: str, window: int, core: str = "cortex-m4", work_dir: str | Path | None = None,
               hops: int = 4) -> dict:
    """Cycles of one hop of a stream firmware (random_firmware with a window) once its window is full, an ESTIMATE by
    emulation: streams of window + 1 and window + 1 + hops frames, the difference over the extra hops, each
    stream's last logits checked against the host build's. {"cycles", "attention_cycles", "calls" (the attention
    cores' calls a hop), "stack_bytes" (the stream's deepest stack, measured)}."""
    fw, work = Path(fw), work_folder(work_dir)
    n_in, n_out = io_bytes(fw, name)
    frames = np.random.default_rng(1).integers(-128, 128, (window + 1 + hops, n_in)).astype(np.int8)
    want = host_logits(fw, name, frames, work)
    elf, run_fn, runs = model_elf(fw, name, core, work), f"{name}_run", []
    for n in (window + 1, window + 1 + hops):
        bufs = {"frames": frames, "output": np.zeros(n_out, np.int8)}
        run = C.emulate(elf, STREAM_ENTRY, ["frames", n, "output"], bufs, core=core, scopes=(run_fn, *ATTENTION))
        if run.return_value != n_out or not np.array_equal(run.outputs["output"], want[n - 1]):
            raise RuntimeError(f"{name} on {core}: a stream's logits differ from the host build's")
        att = [f for f in ATTENTION if run.scope_calls.get(f)]
        runs.append((C.cycles(run.scoped[run_fn], core), sum(C.cycles(run.scoped[f], core) for f in att),
                     sum(run.scope_calls[f] for f in att), run.stack_bytes))
    (c1, a1, n1, s1), (c2, a2, n2, s2) = runs
    return dict(cycles=(c2 - c1) / hops, attention_cycles=(a2 - a1) / hops, calls=(n2 - n1) // hops,
                stack_bytes=max(s1, s2))


def stream_cycles(core: str = "cortex-m4", windows: Sequence[int] = (49, 98, 196), hop_ms: float = 20.0,
                  work_dir: str | Path | None = None, model=None) -> list[dict]:
    """Always-on cost ESTIMATES, per (kind, window W), of the oscillator network `model` (a ModelConfig with the linear
    core; default the pipeline's) and the softmax baseline of its size, on `core` (cycles.CORES) and its first
    device in DEVICES.

    per_hop_cycles: one new frame through the streaming network's own firmware (stream_int8.tflite -> C, its state
    in the arena; stream_hop), once the window is full: the oscillator's linear core adds the new key, subtracts the
    expired one and queries its sums (O(1) whatever W); softmax's query reads its W cached keys (O(W)); both pool
    the last W frames' outputs by a running sum (O(1), the same for both). per_hop_attention_cycles: the attention
    cores' share.
    recompute_cycles: the whole-clip network over W frames, which a non-streaming spotter runs on every hop. Each
    row also has their ratio, latency_ms and energy_uj per hop, and energy per second of audio (uj_per_s) at one
    hop per hop_ms, for both. Emulated logits are checked against the host build.
    """
    from ...config import ModelConfig
    model = model or ModelConfig()
    if model.attention != "oscillator" or model.form != "linear":
        raise ValueError("stream_cycles prices the linear oscillator core (model.form 'linear') against softmax")
    configs = {"oscillator": model, "softmax": dataclasses.replace(
        model, attention="softmax", d_osc=8, positive="relu2", key_gate=False, form="direct")}
    dev_key, dev = first_device(core)
    hops = 1000.0 / hop_ms
    work = work_folder(work_dir)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in STREAM_KINDS:
            for W in windows:
                hop = stream_hop(*random_firmware(configs[kind], W, tmp, window=W), W, core, work)
                fw, name = random_firmware(configs[kind], W, tmp)
                x = np.random.default_rng(1).integers(-128, 128, io_bytes(fw, name)[0]).astype(np.int8)
                recompute = estimate_model(fw, name, x, (core,), work)["targets"][core]["model"]["cycles"]
                per_hop = hop["cycles"]
                rows.append(dict(
                    kind=kind, window=W, core=core, device=dev_key, blocks=hop["calls"], per_hop_cycles=per_hop,
                    per_hop_attention_cycles=hop["attention_cycles"], recompute_cycles=recompute,
                    recompute_ratio=recompute / per_hop,
                    per_hop_latency_ms=D.latency_ms(per_hop, dev), recompute_latency_ms=D.latency_ms(recompute, dev),
                    per_hop_energy_uj=D.energy_uj(per_hop, dev), recompute_energy_uj=D.energy_uj(recompute, dev),
                    stream_uj_per_s=hops * D.energy_uj(per_hop, dev),
                    recompute_uj_per_s=hops * D.energy_uj(recompute, dev),
                    recompute_keeps_up=D.latency_ms(recompute, dev) <= hop_ms))
    return rows
