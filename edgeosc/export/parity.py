"""Parity of exported .tflite files with the torch models they came from, in every installed interpreter.

int8 deviations are counted in LSBs of the output scale (logits are int8); float ones in absolute logits.
"""
from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np
import torch

from .. import runtime


def _run(path: Path, feats: np.ndarray, interpreter: str, xnnpack: bool = True) -> np.ndarray:
    return runtime.load(path, interpreter, xnnpack=xnnpack).run(feats)


def interpreters(xnnpack_variants: bool = True, path: str | Path | None = None) -> list[tuple[str, bool]]:
    """(interpreter, xnnpack) pairs to compare: ai-edge-litert with and without its default XNNPACK delegate
    (which takes int8 ops and rounds as float32 like fake quantization), the others as they come. A file with the
    EdgeOscAttention op runs in ai-edge-litert (a delegate) and tflite-runtime (registered), not TFLite Micro; a
    file with a builtin TFLite Micro lacks, not there (runtime.interpreters_for)."""
    out = []
    for name in runtime.available_interpreters() if path is None else runtime.interpreters_for(path):
        out.append((name, True))
        if name == "ai-edge-litert" and xnnpack_variants:
            out.append((name, False))
    return out


def label(name: str, xnnpack: bool) -> str:
    return name if xnnpack or name != "ai-edge-litert" else f"{name} (no XNNPACK)"


@torch.no_grad()
def float_parity(net: torch.nn.Module, path: str | Path, feats: np.ndarray) -> dict:
    """Max |logit difference| of float.tflite against the float torch network, per interpreter."""
    ref = net.eval()(torch.as_tensor(feats)).numpy()
    return {label(n, x): float(np.abs(_run(Path(path), feats, n, x) - ref).max())
            for n, x in interpreters(False, path)}


@torch.no_grad()
def int8_parity(qat: torch.nn.Module, path: str | Path, feats: np.ndarray) -> dict:
    """int8.tflite against the QAT model (top-1 agreement, mean/max deviation in output LSBs) per
    interpreter, and the largest deviation between any two interpreters."""
    ref = qat.eval()(torch.as_tensor(feats)).numpy()
    lsb = float(qat.output_quant.act_quant.scale())
    outs = {label(n, x): _run(Path(path), feats, n, x) for n, x in interpreters(path=path)}
    report = {name: dict(top1=float((y.argmax(-1) == ref.argmax(-1)).mean()),
                         mean_lsb=float(np.abs(y - ref).mean() / lsb), max_lsb=float(np.abs(y - ref).max() / lsb))
              for name, y in outs.items()}
    pairs = {f"{a} vs {b}": float(np.abs(outs[a] - outs[b]).max() / lsb) for a, b in combinations(outs, 2)}
    return dict(clips=len(feats), lsb=lsb, interpreters=report, between=pairs)


def custom_parity(builtin: str | Path, custom: str | Path, feats: np.ndarray) -> dict:
    """int8_custom.tflite (registered kernel) against int8.tflite in tflite-runtime: max and mean deviation in output
    LSBs, and top1, the share of clips where both pick the same class."""
    from ..runtime import custom_op
    a = runtime.load(builtin, "tflite-runtime")
    b = runtime.load(custom, "tflite-runtime", custom_ops=[custom_op.register])
    x = a.inputs[0].quantize(feats)
    ya, yb = a.run_raw(x).astype(np.int32), b.run_raw(x).astype(np.int32)
    d = np.abs(ya - yb)
    return dict(max_lsb=float(d.max()), mean_lsb=float(d.mean()), top1=float((ya.argmax(-1) == yb.argmax(-1)).mean()))
