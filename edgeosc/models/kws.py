"""Keyword-spotting networks over feature frames [B, frames, coeffs] -> logits [B, classes].

The oscillator and softmax networks are one transformer that differs only in its attention layer,
so comparisons are fair. The Kuramoto network (docs/maths.md#kuramoto-attention) keeps a phase state instead.
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from .attention import Hooked, KuramotoBlock, OscillatorAttention, SoftmaxAttention

# name -> (d_model, heads, blocks); small <= 30k parameters, medium ~100-200k (tests check both)
SIZES = {"small": (32, 4, 2), "medium": (80, 4, 3)}


def resolve(cfg: ModelConfig) -> ModelConfig:
    """Fill the dims left at 0 from the size preset (DS-CNN: its own presets, dscnn.SIZES)."""
    if cfg.attention == "ds-cnn":
        from .dscnn import resolve as resolve_dscnn
        return resolve_dscnn(cfg)
    if cfg.size not in SIZES:
        raise ValueError(f"unknown model size {cfg.size!r}; choose from {sorted(SIZES)}")
    d, h, b = SIZES[cfg.size]
    return dataclasses.replace(cfg, d_model=cfg.d_model or d, heads=cfg.heads or h, blocks=cfg.blocks or b)


# Named points outside the attention layers, seen by a `quant(name, x)` hook like the cores' (attention.py):
# the tensors an int8 runtime holds between layers (residual stream, feed-forward, pooling).
MODEL_POINTS = ("pos", "embed", "pool")
BLOCK_POINTS = ("res1", "ff_hidden", "ff_out", "res2")


class Block(Hooked):
    """Pre-norm transformer block; only `attn` differs between attention kinds."""

    def __init__(self, attn: nn.Module, d_model: int, dropout: float):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(d_model), attn
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        x = self.point("res1", x + self.drop(self.attn(self.norm1(x))))
        hidden = self.point("ff_hidden", self.ff[1](self.ff[0](self.norm2(x))))
        return self.point("res2", x + self.drop(self.point("ff_out", self.ff[2](hidden))))


class KWSTransformer(Hooked):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg = resolve(cfg)
        self.cfg, d = cfg, cfg.d_model
        self.stem = nn.Conv1d(cfg.n_coeffs, d, kernel_size=3, padding=1)  # local spectro-temporal context
        self.pos = nn.Parameter(torch.randn(cfg.n_frames, d) * 0.02)
        self.blocks = nn.ModuleList(Block(self._attention(cfg), d, cfg.dropout) for _ in range(cfg.blocks))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, cfg.n_classes)

    @staticmethod
    def _attention(cfg: ModelConfig) -> nn.Module:
        if cfg.attention == "softmax":
            return SoftmaxAttention(cfg.d_model, cfg.heads, cfg.score_scale)
        return OscillatorAttention(cfg.d_model, cfg.heads, cfg.d_osc, cfg.p, cfg.positive, cfg.anchors, cfg.eps,
                                   form=cfg.form, score_scale=cfg.score_scale, key_gate=cfg.key_gate)

    def forward(self, feats: Tensor) -> Tensor:  # [B,T,C]
        x = self.stem(feats.transpose(1, 2)).transpose(1, 2)  # [B,T,d]
        x = self.point("embed", x + self.point("pos", self.pos))
        for block in self.blocks:
            x = block(x)
        return self.head(self.point("pool", self.norm(x).mean(1)))  # mean over time -> [B,classes]


class KWSKuramoto(nn.Module):
    """Features -> k phases -> Kuramoto blocks -> logits from alignment with class prototype phases."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg = resolve(cfg)
        self.cfg, k = cfg, cfg.d_model
        self.to_phase = nn.Conv1d(cfg.n_coeffs, k, kernel_size=3, padding=1)
        # d_ff = 2k/3 matches the transformer's parameter count (gates 6k^2 + SwiGLU 2k^2 ~ 8 d^2)
        self.blocks = nn.ModuleList(KuramotoBlock(k, max(8, 2 * k // 3)) for _ in range(cfg.blocks))
        self.prototypes = nn.Parameter(torch.rand(cfg.n_classes, k) * 2 * math.pi)
        self.scale = nn.Parameter(torch.tensor(4.0 / math.sqrt(k)))
        self.bias = nn.Parameter(torch.zeros(cfg.n_classes))

    def forward(self, feats: Tensor) -> Tensor:  # [B,T,C]
        theta = self.to_phase(feats.transpose(1, 2)).transpose(1, 2)  # [B,T,k] phases (radians)
        for block in self.blocks:
            theta = block(theta)
        m_re, m_im = theta.cos().mean(1), theta.sin().mean(1)  # circular mean per coordinate [B,k]
        # sum_j Re(m_j e^{-i phi_cj}) = sum_j |m_j| cos(arg m_j - phi_cj)
        align = m_re @ self.prototypes.cos().T + m_im @ self.prototypes.sin().T
        return self.scale * align + self.bias

    def order_parameters(self) -> list[tuple[float, float]]:
        """(local, global) order parameter per block from the latest forward, batch-averaged."""
        return [(b.last.local_order.mean().item(), b.last.global_order.mean().item()) for b in self.blocks]


MODELS = {"oscillator": KWSTransformer, "softmax": KWSTransformer, "kuramoto": KWSKuramoto}


def build_model(cfg: ModelConfig) -> nn.Module:
    if cfg.attention == "ds-cnn":  # the baseline without attention (models/dscnn.py)
        from .dscnn import DSCNN
        return DSCNN(cfg)
    return MODELS[cfg.attention](cfg)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
