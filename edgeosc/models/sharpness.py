"""How many keys each head's queries read: exp(entropy) of a query's attention row, its effective number of keys
(1: one key, T: all alike). The oscillator's rows are read from its direct form, the same function over T x T."""
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


def sharpness(model: nn.Module, features: Tensor) -> list[dict]:
    """Per block: each head's median effective keys per query and median largest weight, over `features`
    [B, T, C]. A whole-clip float transformer (oscillator or softmax)."""
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
        out.append(dict(block=i, effective_keys=keys.transpose(0, 1).flatten(1).median(-1).values.tolist(),
                        largest_weight=a.amax(-1).transpose(0, 1).flatten(1).median(-1).values.tolist()))
    return out
