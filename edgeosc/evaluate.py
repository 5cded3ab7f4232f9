"""Accuracy of any model or export: a float or QAT checkpoint, or a .tflite in any installed interpreter."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .checkpoint import CheckpointError, load_checkpoint
from .config import FeatureConfig, is_keyword
from .data.augment import augment, spec_augment
from .data.clipset import ClipSet
from .features import FeatureExtractor


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda asked for, but torch sees no CUDA GPU")
    return torch.device(name)


def keyword_free(data: ClipSet, split: str = "train") -> np.ndarray:
    """Indices of the split's clips in which no keyword is said (_unknown_ and _silence_: other words, noise, and
    the keyword-free audio of --train-negatives)."""
    quiet = [i for i, c in enumerate(data.classes) if not is_keyword(c)]
    idx = data.indices(split)
    idx = idx[np.isin(data.labels[idx], quiet)]
    if not len(idx):
        raise ValueError(f"the {split} split has no keyword-free clips (_unknown_ or _silence_) to put before its "
                         "clips; add some with --train-negatives")
    return idx


class Batches:
    """Clips of one split -> feature batches on the device (augmented for training)."""

    def __init__(self, data: ClipSet, split: str, features: FeatureExtractor, device: torch.device,
                 context: np.ndarray | None = None):
        """context: indices of the clips that streams put before each clip instead of the split's own (__call__'s
        stream_clips), e.g. the training split's keyword-free ones (keyword_free)."""
        self.idx, self.context = data.indices(split), context
        self.audio, self.labels = data.audio, torch.as_tensor(data.labels)
        self.noise = None if data.noise is None else torch.as_tensor(data.noise, dtype=torch.float32) / 32768
        self.features, self.device = features, device
        self.keyword = torch.tensor([is_keyword(c) for c in data.classes], device=device)

    def __len__(self):
        return len(self.idx)

    def __call__(self, batch_size: int, generator: torch.Generator | None = None, aug=None, stream_clips: int = 0,
                 teacher: FeatureExtractor | None = None):
        """stream_clips > 0 (training, with a generator): each clip after that many random clips of the split (of
        the context clips, when given) as one recording (each clip augmented on its own), its features as a
        stream's (FeatureExtractor.stream): the last (stream_clips + 1) x n_frames frames, the batch's clip last.
        teacher: also the same augmented clips' features for a distillation teacher (third in each batch; no
        feature masks, not with stream_clips)."""
        order = self.idx if generator is None else self.idx[torch.randperm(len(self.idx), generator=generator).numpy()]
        pool = self.idx if self.context is None else self.context
        for start in range(0, len(order), batch_size):
            sel = order[start:start + batch_size]
            parts = [pool[torch.randint(0, len(pool), (len(sel),), generator=generator).numpy()]
                     for _ in range(stream_clips)] + [sel]
            waves = [torch.as_tensor(self.audio[p], dtype=torch.float32) / 32768 for p in parts]
            if aug is not None:
                waves = [augment(w, aug, generator, self.noise) for w in waves]
            with torch.no_grad():
                if stream_clips:
                    frames = (stream_clips + 1) * self.features.cfg.n_frames
                    feats = self.features.stream(torch.cat(waves, 1).to(self.device))[:, -frames:]
                else:
                    feats = self.features(waves[0].to(self.device))
            if aug is not None and aug.freq_masks + aug.time_masks:
                feats = spec_augment(feats, aug, generator)
            if teacher is None:
                yield feats, self.labels[sel].to(self.device)
                continue
            with torch.no_grad():  # computed before the yield: the student's step runs with gradients
                taught = teacher(waves[0].to(self.device))
            yield feats, self.labels[sel].to(self.device), taught


def clip_logits(model: torch.nn.Module, feats: torch.Tensor, labels: torch.Tensor, batches: Batches,
                stream_loss: str = "last") -> torch.Tensor:
    """Each clip's logits, as training's loss and evaluation read them: the model's (a stream's last frame), or with
    stream_loss "max" the max-pooling loss's frame (Sun et al., "Max-pooling loss training of LSTM networks for
    small-footprint keyword spotting", SLT 2016), one per stream among its clip's own (the last n_frames): a keyword
    clip's frame where its keyword is likeliest, a keyword-free clip's where its own class is least likely (the frame
    nearest a false alarm)."""
    if stream_loss != "max":
        return model(feats)
    frames = model(feats, per_frame=True)[:, -batches.features.cfg.n_frames:]
    own = frames.detach().log_softmax(-1).gather(-1, labels[:, None, None].expand(-1, frames.shape[1], 1))[..., 0]
    pick = torch.where(batches.keyword[labels], own.argmax(1), own.argmin(1))
    return frames[torch.arange(len(labels), device=frames.device), pick]


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: Batches, n_classes: int, batch_size: int = 256,
             stream_clips: int = 0, stream_loss: str = "last") -> dict:
    """Loss, accuracy and confusion matrix (rows: true class, columns: predicted); a Kuramoto network's
    diagnostics per block (models/kws.py KWSKuramoto.diagnostics) averaged over the clips. stream_clips > 0: each
    clip after that many others of the split as one stream (Batches), the same streams every call (a fixed seed),
    read at the frame clip_logits picks."""
    model.eval()
    confusion = torch.zeros(n_classes, n_classes, dtype=torch.long)
    loss_sum, diagnostics = 0.0, None
    fixed = torch.Generator().manual_seed(0) if stream_clips else None
    for feats, labels in batches(batch_size, fixed, None, stream_clips):
        logits = clip_logits(model, feats, labels, batches, stream_loss)
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
        confusion += torch.bincount(labels.cpu() * n_classes + logits.argmax(-1).cpu(),
                                    minlength=n_classes**2).view(n_classes, n_classes)
        if hasattr(model, "diagnostics"):  # sums weighted by the batch's clips
            rows = [{k: v * len(labels) for k, v in row.items() if k != "block"} for row in model.diagnostics()]
            diagnostics = rows if diagnostics is None else [{k: a[k] + b[k] for k in a}
                                                            for a, b in zip(diagnostics, rows)]
    n = int(confusion.sum())
    out = dict(loss=loss_sum / max(n, 1), accuracy=confusion.trace().item() / max(n, 1), n=n,
               confusion=confusion.tolist())
    if diagnostics is not None:
        out["diagnostics"] = [dict(block=i, **{k: v / n for k, v in row.items()}) for i, row in enumerate(diagnostics)]
    return out


def evaluate_checkpoint(path: str | Path, data: ClipSet, split: str = "test", device: str = "auto") -> dict:
    ckpt = load_checkpoint(path)
    if tuple(data.classes) != ckpt.classes:
        raise CheckpointError(f"{path}: trained on classes {ckpt.classes}, the data has {tuple(data.classes)}")
    dev = pick_device(device)
    batches = Batches(data, split, FeatureExtractor(ckpt.feature_cfg).to(dev), dev)
    return dict(evaluate(ckpt.model.to(dev), batches, len(ckpt.classes)), classes=list(ckpt.classes), split=split)


def evaluate_tflite(path: str | Path, data: ClipSet, feature_cfg: FeatureConfig, classes: tuple[str, ...],
                    split: str = "test", interpreter: str | None = None) -> dict:
    """Accuracy and confusion matrix of an exported .tflite (features computed here, logits in the interpreter)."""
    from . import runtime
    if tuple(data.classes) != tuple(classes):
        raise CheckpointError(f"{path}: exported for classes {tuple(classes)}, the data has {tuple(data.classes)}")
    runner = runtime.load(path, interpreter)
    if runner.inputs[0].name == runtime.FRAME:
        raise CheckpointError(f"{path}: a stream export takes one frame a call; evaluate window_int8.tflite beside "
                              "it, which gives the same logits bit for bit over a clip")
    n_classes = len(classes)
    confusion = torch.zeros(n_classes, n_classes, dtype=torch.long)
    for feats, labels in Batches(data, split, FeatureExtractor(feature_cfg), torch.device("cpu"))(256):
        logits = runner.run(feats.numpy())
        pred = torch.as_tensor((logits[:, -1] if logits.ndim == 3 else logits).argmax(-1))  # a window file: last frame
        confusion += torch.bincount(labels * n_classes + pred, minlength=n_classes**2).view(n_classes, n_classes)
    n = int(confusion.sum())
    return dict(accuracy=confusion.trace().item() / max(n, 1), n=n, confusion=confusion.tolist(),
                classes=list(classes), split=split, interpreter=runner.interpreter)


def evaluate_onnx(path: str | Path, data: ClipSet, feature_cfg: FeatureConfig, classes: tuple[str, ...],
                  split: str = "test") -> dict:
    """Accuracy and confusion matrix of an exported .onnx in onnxruntime (OnnxRunner: a *_op.onnx runs its
    OscillatorAttention nodes in edgeosc's custom-op library where it can)."""
    from .runtime.onnx import OnnxRunner
    if tuple(data.classes) != tuple(classes):
        raise CheckpointError(f"{path}: exported for classes {tuple(classes)}, the data has {tuple(data.classes)}")
    runner = OnnxRunner(path)
    n_classes = len(classes)
    confusion = torch.zeros(n_classes, n_classes, dtype=torch.long)
    for feats, labels in Batches(data, split, FeatureExtractor(feature_cfg), torch.device("cpu"))(256):
        pred = torch.as_tensor(runner(feats.numpy()).argmax(-1))
        confusion += torch.bincount(labels * n_classes + pred, minlength=n_classes**2).view(n_classes, n_classes)
    n = int(confusion.sum())
    return dict(accuracy=confusion.trace().item() / max(n, 1), n=n, confusion=confusion.tolist(),
                classes=list(classes), split=split,
                interpreter="onnxruntime" + (" + edgeosc_ort_op" if runner.custom_op else ""))


def format_confusion(confusion: list[list[int]], classes: list[str]) -> str:
    width = max(6, max(len(c) for c in classes) + 1)
    lines = [" " * width + "".join(f"{c[:5]:>6}" for c in classes)]
    lines += [f"{name:<{width}}" + "".join(f"{v:6d}" for v in row) for name, row in zip(classes, confusion)]
    return "\n".join(lines)
