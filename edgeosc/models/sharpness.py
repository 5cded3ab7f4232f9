"""How each head attends. Effective keys: exp(entropy) of a query's attention row (1: one key, T: all alike).
Query specificity: the total-variation distance between a query's row and the mean row of its clip, averaged over
the queries (0: every query reads the same weights, the head is a pooling; 1: disjoint rows). The oscillator's rows
are read from its direct form, the same function over T x T."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention import direct_form
from .kws import KWSTransformer


class _Rows(nn.Module):
    """A quant hook that keeps the attention rows ("a") and passes every point through."""

    def __init__(self):
        super().__init__()
        self.rows: Tensor | None = None

    def forward(self, name: str, x: Tensor) -> Tensor:
        if name == "a":
            self.rows = x.detach()
        return x


def query_specificity(a: Tensor) -> Tensor:
    """[..., Tq, Tk] attention rows -> [...]: the mean over queries of half the L1 distance (total variation) between
    a query's row and the mean row."""
    return 0.5 * (a - a.mean(-2, keepdim=True)).abs().sum(-1).mean(-1)


def sharpness(model: nn.Module, features: Tensor) -> list[dict]:
    """Per block: each head's median effective keys per query, median largest weight and median query specificity,
    over `features` [B, T, C]. A whole-clip float transformer (oscillator or softmax)."""
    if not isinstance(model, KWSTransformer) or model.window:
        raise ValueError("sharpness reads a whole-clip oscillator or softmax network")
    model = model.eval()
    hooks = []
    for block in model.blocks:
        block.attn.quant = _Rows()
        hooks.append(block.attn.quant)
    try:
        with torch.no_grad(), direct_form(model):  # a linear core's rows made explicit, the same function
            model(features)
    finally:
        for block in model.blocks:
            block.attn.quant = None
    out = []
    for i, hook in enumerate(hooks):
        a = hook.rows.clamp_min(1e-12)  # [B, H, T, T]
        keys = torch.exp(-(a * a.log()).sum(-1))  # [B, H, T]
        specific = query_specificity(a)  # [B, H]
        out.append(dict(block=i, effective_keys=keys.transpose(0, 1).flatten(1).median(-1).values.tolist(),
                        largest_weight=a.amax(-1).transpose(0, 1).flatten(1).median(-1).values.tolist(),
                        query_specificity=specific.median(0).values.tolist()))
    return out
