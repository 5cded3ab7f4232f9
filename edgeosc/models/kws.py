"""Keyword-spotting networks over feature frames [B, frames, coeffs] -> logits [B, classes].

The oscillator and softmax networks are one transformer that differs only in its attention layer,
so comparisons are fair. The Kuramoto network (docs/maths.md#kuramoto-attention) keeps a phase state instead.
"""
from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig
from .attention import Hooked, KuramotoBlock, OscillatorAttention, SoftmaxAttention

# name -> (d_model, heads, blocks); small <= 30k parameters, medium ~100-200k (tests check both). tiny, small and base
# span about 0.5x to 3x the small model's MACs at d_head 8 (the kernels' wide unrolled head): the accuracy-per-joule
# curve's axis (docs/results.md#accuracy-per-joule). ModelConfig.d_head = 4 gives the whole-clip oscillator twice the
# heads (the kernels' narrow unrolled head).
SIZES = {"tiny": (24, 3, 2), "small": (32, 4, 2), "base": (48, 6, 3), "medium": (80, 4, 3)}
# small / medium: 23,788 / 173,900 parameters (the oscillator) against softmax's 22,996 / 170,984
KURAMOTO_WIDTH = {"tiny": 22, "small": 30, "base": 46, "medium": 78}


def resolve(cfg: ModelConfig) -> ModelConfig:
    """Fill the dims left at 0 from the size preset (DS-CNN: its own presets, dscnn.SIZES); a whole-clip
    oscillator's heads from its d_head where it has one (docs/notebook.md#eight-heads-of-d_h-4-on-the-dsp-path-and-
    fsdds-active-frame-mean; the streaming oscillator keeps the preset's, where its detector was measured)."""
    if cfg.attention == "ds-cnn":
        from .dscnn import resolve as resolve_dscnn
        return resolve_dscnn(cfg)
    if cfg.size not in SIZES:
        raise ValueError(f"unknown model size {cfg.size!r}; choose from {sorted(SIZES)}")
    d, h, b = SIZES[cfg.size]
    if cfg.attention == "kuramoto":  # k phases for the transformer's parameter count (angle map, linear readout)
        d = KURAMOTO_WIDTH[cfg.size]
    d = cfg.d_model or d
    if cfg.attention == "oscillator" and cfg.d_head and not cfg.window:
        if d % cfg.d_head:
            raise ValueError(f"d_model {d} is not a multiple of the oscillator's d_head {cfg.d_head}")
        h = d // cfg.d_head
    return dataclasses.replace(cfg, d_model=d, heads=cfg.heads or h, blocks=cfg.blocks or b)


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

    def forward(self, x: Tensor, attend=None) -> Tensor:
        """attend: the attention to run instead of self.attn (a stream's step, which carries its state)."""
        x = self.point("res1", x + self.drop((attend or self.attn)(self.norm1(x))))
        hidden = self.point("ff_hidden", self.ff[1](self.ff[0](self.norm2(x))))
        return self.point("res2", x + self.drop(self.point("ff_out", self.ff[2](hidden))))


class KWSTransformer(Hooked):
    """cfg.window > 0 builds the streaming variant: a causal stem (left padding), attention over the last `window`
    frames, no absolute positions (the oscillator's anchors turn per frame instead), the pooling a running mean over
    the window; the clip's logits are its last frame's, and stream_step runs it one frame at a time."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg = resolve(cfg)
        self.cfg, d, self.window = cfg, cfg.d_model, cfg.window
        # local spectro-temporal context; causal when streaming (the frame and the two before it)
        self.stem = nn.Conv1d(cfg.n_coeffs, d, kernel_size=3, padding=0 if self.window else 1)
        self.pos = None if self.window else nn.Parameter(torch.randn(cfg.n_frames, d) * 0.02)
        self.blocks = nn.ModuleList(Block(self._attention(cfg), d, cfg.dropout) for _ in range(cfg.blocks))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, cfg.n_classes)

    @staticmethod
    def _attention(cfg: ModelConfig) -> nn.Module:
        if cfg.attention == "softmax":
            return SoftmaxAttention(cfg.d_model, cfg.heads, cfg.score_scale, window=cfg.window,
                                    distance_bias=bool(cfg.window) and cfg.distance_bias)
        return OscillatorAttention(cfg.d_model, cfg.heads, cfg.d_osc, cfg.p, cfg.positive, cfg.anchors, cfg.eps,
                                   form=cfg.form, score_scale=cfg.score_scale, key_gate=cfg.key_gate, gate_map=cfg.gate_map,
                                   window=cfg.window, rotate_anchors=bool(cfg.window) and cfg.rotate_anchors)

    def forward(self, feats: Tensor, per_frame: bool = False) -> Tensor:  # [B,T,C]
        """Logits [B, classes]; per_frame (streaming variant): every frame's [B, T, classes], as stream_step gives."""
        if self.window:
            x = self.stem(F.pad(feats.transpose(1, 2), (2, 0))).transpose(1, 2)  # [B,T,d]
            x = self.point("embed", x)
        else:
            x = self.stem(feats.transpose(1, 2)).transpose(1, 2)
            x = self.point("embed", x + self.point("pos", self.pos))
        for block in self.blocks:
            x = block(x)
        y = self.norm(x)
        if not self.window:
            return self.head(self.point("pool", y.mean(1)))  # mean over time -> [B,classes]
        sums = y.cumsum(1)  # running mean over the last `window` frames
        sums = torch.cat([sums[:, :self.window], sums[:, self.window:] - sums[:, :-self.window]], 1)
        counts = torch.arange(1, y.shape[1] + 1, device=y.device).clamp_max(self.window).to(y.dtype)[:, None]
        pooled = self.point("pool", sums / counts)
        return self.head(pooled if per_frame else pooled[:, -1])

    def set_window(self, window: int) -> None:
        """Attend (and pool) over `window` frames instead of the trained cfg.window: shorter only, as the network
        has never seen longer contexts."""
        if not 1 <= window <= self.cfg.window:
            raise ValueError(f"window {window}: this streaming model was trained with {self.cfg.window} frames; "
                             f"give 1..{self.cfg.window}" if self.cfg.window else
                             "a window needs the streaming variant (trained with ModelConfig.window > 0)")
        self.window = window
        for block in self.blocks:
            block.attn.window = window

    def _stream_state(self, state: dict | None, batch: int) -> dict:
        """A new stream's state (None), or `state` checked to be this model's, at this window and batch: a state is
        only meaningful to the model that made it (its sums are of this model's keys and values)."""
        owner = (id(self), self.window, batch)
        if state is None:
            return {"owner": owner}
        if not isinstance(state, dict) or "owner" not in state:
            raise ValueError("stream_step: state is not a stream state (pass None to start a stream, then the state "
                             "each call returns)")
        made_by, window, made_batch = state["owner"]
        if made_by != id(self):
            raise ValueError("stream_step: this state was made by another model; start the stream with state=None")
        if window != self.window:
            raise ValueError(f"stream_step: this state holds a {window}-frame window and the model now attends over "
                             f"{self.window} (set_window): start the stream again with state=None")
        if made_batch != batch:
            raise ValueError(f"stream_step: this state is for a batch of {made_batch} streams, the frame has {batch}")
        return state

    def stream_step(self, frame: Tensor, state: dict | None = None, input_quant=None) -> tuple[Tensor, dict]:
        """One feature frame [B, C] of a stream -> (its logits [B, classes], the state to pass with the next frame).
        state None starts a stream (as forward starts a clip). What it holds: the stem's two previous frames, per
        block the attention's state (attention.py's step), the pooling's last `window` frames, their sum and the
        frame count, and whose state it is (another model's, another window's or another batch's is refused by
        name). Every quantization point of forward is passed the same way; input_quant (QAT) quantizes the stem's
        input."""
        if not self.window:
            raise ValueError("stream_step needs the streaming variant (ModelConfig.window > 0)")
        if frame.dim() != 2 or frame.shape[1] != self.cfg.n_coeffs:
            raise ValueError(f"stream_step takes one frame [batch, {self.cfg.n_coeffs}] of this model's features, "
                             f"got {tuple(frame.shape)}")
        state = self._stream_state(state, frame.shape[0])
        past = state.get("stem", frame.new_zeros(frame.shape[0], 2, frame.shape[1]))
        frames = torch.cat([past, frame[:, None]], 1)  # [B,3,C]
        stem_in = frames if input_quant is None else input_quant(frames)  # past frames: already on the grid
        x = self.point("embed", self.stem(stem_in.transpose(1, 2)).transpose(1, 2))  # [B,1,d]
        state["stem"] = frames[:, 1:]
        for i, block in enumerate(self.blocks):
            blk = state.setdefault(f"block{i}", {})
            x = block(x, attend=lambda n, attn=block.attn, blk=blk: attn.step(n, blk))
        y = self.norm(x)[:, 0]  # [B,d]
        kept = torch.cat([state["pool"], y[:, None]], 1) if "pool" in state else y[:, None]
        total = y + state["pool_sum"] if "pool_sum" in state else y
        if kept.shape[1] > self.window:
            total, kept = total - kept[:, 0], kept[:, 1:]
        state["frames"] = state.get("frames", 0) + 1
        if state["frames"] % self.window == 0:  # afresh every window, as the oscillator's sums: no float drift
            total = kept.sum(1)
        state["pool"], state["pool_sum"] = kept, total
        return self.head(self.point("pool", total / kept.shape[1])), state


class KWSKuramoto(nn.Module):
    """Features -> k phases -> Kuramoto blocks -> logits from the circular means' alignment with each class."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg = resolve(cfg)
        self.cfg, k = cfg, cfg.d_model
        # "angle": theta = atan2(W_y x, W_x x), so a weight step moves a phase by a bounded amount (a raw projection
        # turns a step of the learning rate into several radians: docs/results.md#kuramoto-attention)
        self.to_phase = nn.Conv1d(cfg.n_coeffs, (2 if cfg.phase_map == "angle" else 1) * k, kernel_size=3, padding=1)
        # d_ff = 2k/3 matches the transformer's parameter count (gates 6k^2 + SwiGLU 2k^2 ~ 8 d^2)
        self.blocks = nn.ModuleList(KuramotoBlock(k, max(8, 2 * k // 3), max_step=cfg.max_step * math.sqrt(k),
                                                  ff=cfg.feed_forward) for _ in range(cfg.blocks))
        if cfg.phase_readout == "prototype":  # one phase per class and coordinate, one shared scale
            self.prototypes = nn.Parameter(torch.rand(cfg.n_classes, k) * 2 * math.pi)
            self.scale = nn.Parameter(torch.tensor(4.0 / math.sqrt(k)))
            self.bias = nn.Parameter(torch.zeros(cfg.n_classes))
        else:  # a prototype phase and a weight per class and coordinate: a Linear on (cos, sin) of the means
            self.head = nn.Linear(2 * k, cfg.n_classes)

    def phases(self, feats: Tensor) -> Tensor:  # [B,T,C] -> [B,T,k] radians
        h = self.to_phase(feats.transpose(1, 2)).transpose(1, 2)
        if self.cfg.phase_map == "angle":
            x, y = h.chunk(2, -1)
            return torch.atan2(y, x)
        return math.pi * torch.tanh(h) if self.cfg.phase_map == "tanh" else h

    def forward(self, feats: Tensor) -> Tensor:  # [B,T,C]
        theta = self.phases(feats)
        for block in self.blocks:
            theta = block(theta)
        self.last_theta = theta.detach()
        m_re, m_im = theta.cos().mean(1), theta.sin().mean(1)  # circular mean per coordinate [B,k]
        if self.cfg.phase_readout == "linear":
            return self.head(torch.cat([m_re, m_im], -1))
        # sum_j Re(m_j e^{-i phi_cj}) = sum_j |m_j| cos(arg m_j - phi_cj)
        align = m_re @ self.prototypes.cos().T + m_im @ self.prototypes.sin().T
        return self.scale * align + self.bias

    def diagnostics(self) -> list[dict]:
        """The seed paper's diagnostics of the latest forward, per block (batch means): local order parameter (mean
        |G_tj|, coherence with the attended tokens), global order parameter of the block's input phases (mean_j
        |mean_t e^{i theta_tj}|) and of its output, and the mean |omega_j| (natural frequencies, rad per frame)."""
        outs = [b.last.global_order.mean().item() for b in self.blocks[1:]]
        last = self.last_theta
        outs.append(torch.sqrt(last.cos().mean(1).square() + last.sin().mean(1).square()).mean().item())
        return [dict(block=i, local_order=b.last.local_order.mean().item(),
                     global_order_in=b.last.global_order.mean().item(), global_order_out=out,
                     omega_abs=b.omega.abs().mean().item()) for i, (b, out) in enumerate(zip(self.blocks, outs))]


MODELS = {"oscillator": KWSTransformer, "softmax": KWSTransformer, "kuramoto": KWSKuramoto}


def build_model(cfg: ModelConfig) -> nn.Module:
    if cfg.attention == "ds-cnn":  # the baseline without attention (models/dscnn.py)
        from .dscnn import DSCNN
        return DSCNN(cfg)
    return MODELS[cfg.attention](cfg)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
