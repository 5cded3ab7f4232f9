"""Micro-benchmark of the attention cores: direct vs factorized oscillator vs softmax, in one run."""
from __future__ import annotations

import time

import torch

from .models.attention import oscillator_attention, oscillator_attention_factorized, softmax_attention


def _median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


@torch.no_grad()
def attention_microbench(repeats: int = 20, threads: int = 1, batch: int = 32, heads: int = 4, d_h: int = 8,
                         echo=print) -> list[dict]:
    """Median forward time per call for each core; ratios against softmax at the same T."""
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    rows = []
    echo(f"B={batch} H={heads} d_h=d_v={d_h} threads={threads}, median of {repeats} (ms; ratio to softmax)")
    echo(f"{'T':>5}{'d_osc':>6}{'p':>3}{'softmax':>10}{'direct':>18}{'factorized':>18}")
    for t in (49, 98, 196):
        q, k, v = (torch.randn(batch, heads, t, d_h, generator=g) for _ in range(3))
        soft = _median_time(lambda: softmax_attention(q, k, v), repeats)
        for d_osc in (2, 8):
            r = torch.nn.functional.normalize(torch.randn(batch, heads, t, d_osc, generator=g), dim=-1)
            for p in (1, 2):
                direct = _median_time(lambda: oscillator_attention(q, k, v, r, p=p), repeats)
                fact = _median_time(lambda: oscillator_attention_factorized(q, k, v, r, p=p), repeats)
                rows.append(dict(T=t, d_osc=d_osc, p=p, softmax_ms=soft * 1e3, direct_ms=direct * 1e3,
                                 factorized_ms=fact * 1e3))
                echo(f"{t:>5}{d_osc:>6}{p:>3}{soft * 1e3:>10.3f}{direct * 1e3:>10.3f} ({direct / soft:4.2f}x)"
                     f"{fact * 1e3:>10.3f} ({fact / soft:4.2f}x)")
    return rows
