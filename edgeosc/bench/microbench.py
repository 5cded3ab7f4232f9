"""Micro-benchmark of the attention cores: direct vs linear oscillator vs softmax, in one run."""
from __future__ import annotations

import statistics
import time

import torch

from ..models.attention import oscillator_attention, oscillator_attention_linear, softmax_attention


def _interleaved_medians(fns: dict, repeats: int) -> dict:
    """Median seconds per call; every repeat times all variants back to back, so load drift hits all alike."""
    for fn in fns.values():
        fn()  # warm-up
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


@torch.no_grad()
def attention_microbench(repeats: int = 20, threads: int = 1, batch: int = 32, heads: int = 4, d_h: int = 8,
                         echo=print) -> list[dict]:
    """Forward time of each core at T in {49, 98, 196}, d_osc in {2, 8}, p in {1, 4}; ratios to softmax."""
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    echo(f"B={batch} H={heads} d_h=d_v={d_h} threads={threads}, median of {repeats} interleaved runs "
         f"(ms; ratio to softmax at the same T)")
    echo(f"{'T':>5}{'d_osc':>6}{'p':>3}{'softmax':>10}{'direct':>18}{'linear':>18}  (oscillator: taylor2)")
    rows = []
    for t in (49, 98, 196):
        q, k, v = (torch.randn(batch, heads, t, d_h, generator=g) for _ in range(3))
        fns = {"softmax": lambda: softmax_attention(q, k, v)}
        for d_osc in (2, 8):
            r = torch.nn.functional.normalize(torch.randn(batch, heads, t, d_osc, generator=g), dim=-1)
            for p in (1, 4):
                fns[d_osc, p, "direct"] = lambda r=r, p=p: oscillator_attention(q, k, v, r, p=p, positive="taylor2")
                fns[d_osc, p, "linear"] = lambda r=r, p=p: oscillator_attention_linear(q, k, v, r, p=p)
        med = _interleaved_medians(fns, repeats)
        soft = med["softmax"]
        for d_osc in (2, 8):
            for p in (1, 4):
                direct, linear = med[d_osc, p, "direct"], med[d_osc, p, "linear"]
                rows.append(dict(T=t, d_osc=d_osc, p=p, softmax_ms=soft * 1e3, direct_ms=direct * 1e3,
                                 linear_ms=linear * 1e3))
                echo(f"{t:>5}{d_osc:>6}{p:>3}{soft * 1e3:>10.3f}{direct * 1e3:>10.3f} ({direct / soft:4.2f}x)"
                     f"{linear * 1e3:>10.3f} ({linear / soft:4.2f}x)")
    return rows
