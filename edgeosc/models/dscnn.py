"""DS-CNN, the keyword spotter users compare against: MLPerf Tiny's KWS reference model (its training code's
keras_model.py, "ds_cnn"; Hello Edge's DS-CNN-S, arXiv:1711.07128).

Features [B, frames, coefficients] are a one-channel image (49 x 10 MFCC in MLPerf Tiny). A 10 x 4 stride-2
convolution with `d_model` filters (64), then `blocks` (4) depthwise-separable blocks (3 x 3 depthwise, 1 x 1
pointwise), each convolution followed by batch norm and ReLU, then the mean over the image and a classifier.
Padding is TensorFlow's SAME (the extra row or column at the bottom and right), written out so that the int8
graph (export/tflite: CONV_2D, DEPTHWISE_CONV_2D, AVERAGE_POOL_2D) computes the same function. Dropout as
keras_model.py (0.2 and 0.4 there): `dropout` after the stem, twice that before the pooling.
"""
from __future__ import annotations

import dataclasses

import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig
from .attention import Hooked

# name -> (filters, blocks): Hello Edge's DS-CNN-S (MLPerf Tiny's reference) and DS-CNN-M; tiny and base narrow and
# widen DS-CNN-S to about 0.5x and 3x its MACs, the accuracy-per-joule curve's axis
SIZES = {"tiny": (40, 4), "small": (64, 4), "base": (112, 4), "medium": (172, 5)}
STEM_KERNEL, STEM_STRIDE = (10, 4), 2


def resolve(cfg: ModelConfig) -> ModelConfig:
    if cfg.size not in SIZES:
        raise ValueError(f"unknown model size {cfg.size!r}; choose from {sorted(SIZES)}")
    f, b = SIZES[cfg.size]
    return dataclasses.replace(cfg, d_model=cfg.d_model or f, blocks=cfg.blocks or b)


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow's SAME padding of one dim: (before, after), the odd one after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def block_points(i: int) -> tuple[str, str]:
    return f"dw{i}", f"pw{i}"


class DSCNN(Hooked):
    """Named points (quant.py quantizes each, unsigned after its ReLU): "stem", then "dw<i>", "pw<i>" per block;
    the mean over the image goes through the last block's point again (AVERAGE_POOL_2D keeps its quantization)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg = resolve(cfg)
        self.cfg, f = cfg, cfg.d_model
        (top, bottom), (left, right) = (same_padding(n, k, STEM_STRIDE)
                                        for n, k in zip((cfg.n_frames, cfg.n_coeffs), STEM_KERNEL))
        if cfg.n_frames < STEM_KERNEL[0] // 2 or cfg.n_coeffs < STEM_KERNEL[1] // 2:
            raise ValueError(f"DS-CNN needs at least {STEM_KERNEL[0] // 2} frames and {STEM_KERNEL[1] // 2} "
                             f"coefficients, got {cfg.n_frames} x {cfg.n_coeffs}")
        self.stem_pad = (left, right, top, bottom)
        self.stem = nn.Conv2d(1, f, STEM_KERNEL, stride=STEM_STRIDE, bias=False)
        self.stem_bn = nn.BatchNorm2d(f)
        self.dw = nn.ModuleList(nn.Conv2d(f, f, 3, padding=1, groups=f, bias=False) for _ in range(cfg.blocks))
        self.dw_bn = nn.ModuleList(nn.BatchNorm2d(f) for _ in range(cfg.blocks))
        self.pw = nn.ModuleList(nn.Conv2d(f, f, 1, bias=False) for _ in range(cfg.blocks))
        self.pw_bn = nn.ModuleList(nn.BatchNorm2d(f) for _ in range(cfg.blocks))
        self.drop_stem, self.drop_head = nn.Dropout(cfg.dropout), nn.Dropout(2 * cfg.dropout)
        self.head = nn.Linear(f, cfg.n_classes)

    def points(self) -> tuple[str, ...]:
        return ("stem", *(n for i in range(self.cfg.blocks) for n in block_points(i)))

    def forward(self, feats: Tensor) -> Tensor:  # [B,T,C] -> [B,classes]
        x = F.pad(feats.reshape(feats.shape[0], 1, *feats.shape[1:]), self.stem_pad)
        x = self.drop_stem(self.point("stem", F.relu(self.stem_bn(self.stem(x)))))
        last = "stem"
        for i in range(self.cfg.blocks):
            dw, pw = block_points(i)
            x = self.point(dw, F.relu(self.dw_bn[i](self.dw[i](x))))
            x = self.point(pw, F.relu(self.pw_bn[i](self.pw[i](x))))
            last = pw
        return self.head(self.point(last, self.drop_head(x).mean((2, 3))))

    def fold_batch_norms(self) -> "DSCNN":
        """Each batch norm (its running statistics) folded into the convolution before it, in place: what QAT
        trains and the int8 graph holds."""
        from torch.nn.utils.fusion import fuse_conv_bn_eval
        was = self.training
        self.eval()
        self.stem, self.stem_bn = fuse_conv_bn_eval(self.stem, self.stem_bn), nn.Identity()
        for convs, norms in ((self.dw, self.dw_bn), (self.pw, self.pw_bn)):
            for i in range(len(convs)):
                convs[i], norms[i] = fuse_conv_bn_eval(convs[i], norms[i]), nn.Identity()
        return self.train(was)
