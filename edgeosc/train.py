"""One training loop: AdamW + warm-up/cosine, per-epoch metrics, atomic checkpoints, exact resume."""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import pickle
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .config import DataConfig, FeatureConfig, ModelConfig, QuantConfig, TrainConfig, from_dict, to_dict
from .data.augment import augment, spec_augment
from .data.clipset import ClipSet
from .features import FeatureExtractor
from .io import atomic_path, write_json
from .models.kws import build_model, count_parameters, resolve

CHECKPOINT_FORMAT, CHECKPOINT_VERSION = "edgeosc-checkpoint", 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file and the problem."""


@dataclass
class Checkpoint:
    model: torch.nn.Module
    model_cfg: ModelConfig
    feature_cfg: FeatureConfig
    data_cfg: DataConfig
    train_cfg: TrainConfig
    classes: tuple[str, ...]
    raw: dict
    quant_cfg: QuantConfig | None = None  # set for QAT / PTQ checkpoints


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda asked for, but torch sees no CUDA GPU")
    return torch.device(name)


def _save(path: Path, obj: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def load_checkpoint(path: str | Path, map_location="cpu") -> Checkpoint:
    """Load and validate a checkpoint (never unpickles code: weights_only=True)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        raw = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:  # not a torch.save file, or one holding code objects (refused, never run)
        raise CheckpointError(f"{path}: not an edgeosc checkpoint (not a torch.save file of tensors and plain data)")
    except Exception as e:  # torch raises many kinds for truncated / foreign files
        raise CheckpointError(f"{path}: not a readable edgeosc checkpoint ({type(e).__name__}: {str(e)[:120]})")
    if not isinstance(raw, dict) or raw.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: not an edgeosc checkpoint (no '{CHECKPOINT_FORMAT}' header)")
    if raw.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(f"{path}: checkpoint version {raw.get('version')}, expected {CHECKPOINT_VERSION}")
    try:
        model_cfg = from_dict(ModelConfig, raw["model_config"])
        model, quant_cfg = build_model(model_cfg), None
        if raw.get("quant") is not None:  # a QAT / PTQ checkpoint: rebuild the quantized twin
            from .quant import quantize_model
            quant_cfg = from_dict(QuantConfig, raw["quant"]["config"])
            model = quantize_model(model, quant_cfg)
        ckpt = Checkpoint(model, model_cfg, from_dict(FeatureConfig, raw["feature_config"]),
                          from_dict(DataConfig, raw["data_config"]), from_dict(TrainConfig, raw["train_config"]),
                          tuple(raw["classes"]), raw, quant_cfg)
        ckpt.model.load_state_dict(raw["model"])
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        detail = " ".join(line.strip() for line in str(e).splitlines()[1:] or [str(e)])
        raise CheckpointError(f"{path}: checkpoint does not match its model config ({detail[:200]})")
    bad = [k for k, v in raw["model"].items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise CheckpointError(f"{path}: non-finite weights in {', '.join(bad[:3])}")
    return ckpt


def init_weights(model: torch.nn.Module, path: str | Path) -> None:
    """Start from another run's weights (e.g. synthetic speech before real): every tensor whose name and
    shape match is copied; the rest (the classifier of another class set) keeps its initialisation."""
    source = load_checkpoint(path)
    same = dict(n_classes=0, dropout=0.0)  # neither the classes nor the dropout rate change the other tensors
    if source.quant_cfg is not None or (dataclasses.replace(source.model_cfg, **same)
                                        != dataclasses.replace(model.cfg, **same)):
        raise CheckpointError(f"{path}: --init-from needs a float checkpoint of the same network "
                              f"(it holds {source.model_cfg})")
    own = model.state_dict()
    model.load_state_dict({k: v for k, v in source.model.state_dict().items() if own[k].shape == v.shape},
                          strict=False)


class Batches:
    """Clips of one split -> feature batches on the device (augmented for training)."""

    def __init__(self, data: ClipSet, split: str, features: FeatureExtractor, device: torch.device):
        self.idx = data.indices(split)
        self.audio, self.labels = data.audio, torch.as_tensor(data.labels)
        self.noise = None if data.noise is None else torch.as_tensor(data.noise, dtype=torch.float32) / 32768
        self.features, self.device = features, device

    def __len__(self):
        return len(self.idx)

    def __call__(self, batch_size: int, generator: torch.Generator | None = None, aug=None):
        order = self.idx if generator is None else self.idx[torch.randperm(len(self.idx), generator=generator).numpy()]
        for start in range(0, len(order), batch_size):
            sel = order[start:start + batch_size]
            wave = torch.as_tensor(self.audio[sel], dtype=torch.float32) / 32768
            if aug is not None:
                wave = augment(wave, aug, generator, self.noise)
            with torch.no_grad():
                feats = self.features(wave.to(self.device))
            if aug is not None and aug.freq_masks + aug.time_masks:
                feats = spec_augment(feats, aug, generator)
            yield feats, self.labels[sel].to(self.device)


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: Batches, n_classes: int, batch_size: int = 256) -> dict:
    """Loss, accuracy and confusion matrix (rows: true class, columns: predicted)."""
    model.eval()
    confusion = torch.zeros(n_classes, n_classes, dtype=torch.long)
    loss_sum = 0.0
    for feats, labels in batches(batch_size):
        logits = model(feats)
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
        confusion += torch.bincount(labels.cpu() * n_classes + logits.argmax(-1).cpu(),
                                    minlength=n_classes**2).view(n_classes, n_classes)
    n = int(confusion.sum())
    return dict(loss=loss_sum / max(n, 1), accuracy=confusion.trace().item() / max(n, 1), n=n,
                confusion=confusion.tolist())


def _lr_lambda(cfg: TrainConfig, steps_per_epoch: int):
    warm, total = cfg.warmup_epochs * steps_per_epoch, cfg.epochs * steps_per_epoch

    def f(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warm) / max(1, total - warm))))
    return f


def train(data: ClipSet, out_dir: str | Path, *, model_cfg: ModelConfig, feature_cfg: FeatureConfig,
          train_cfg: TrainConfig, data_cfg: DataConfig, resume: bool = False, progress: bool = True,
          stop_after_epochs: int | None = None, build=None) -> dict:
    """Train, keep best.pt (by validation accuracy) and last.pt, then evaluate best.pt on the test split.

    Each epoch seeds its own shuffling, augmentation and dropout from (seed, epoch), so resuming from
    last.pt reproduces an uninterrupted run exactly. `stop_after_epochs` simulates an interruption.
    `build(model_cfg, train_batches, device)` makes the model instead of build_model (QAT: quant.qat_builder);
    a model with `checkpoint_record()` has it saved in its checkpoints. epochs = 0 keeps the built model
    as best.pt (post-training quantization).
    """
    out_dir = Path(out_dir)
    device = pick_device(train_cfg.device)
    model_cfg = resolve(dataclasses.replace(model_cfg, n_classes=len(data.classes), n_frames=feature_cfg.n_frames,
                                            n_coeffs=feature_cfg.n_coeffs))
    features = FeatureExtractor(feature_cfg).to(device)
    train_b, val_b, test_b = (Batches(data, s, features, device) for s in ("train", "val", "test"))
    if len(train_b) == 0 or len(val_b) == 0:
        raise ValueError("the dataset has no training or no validation clips")
    torch.manual_seed(train_cfg.seed)
    model = (build_model(model_cfg) if build is None else build(model_cfg, train_b(train_cfg.batch_size), device))
    if train_cfg.init_from and build is None:
        init_weights(model, train_cfg.init_from)
    model = model.to(device)
    quant = model.checkpoint_record() if hasattr(model, "checkpoint_record") else None
    steps = math.ceil(len(train_b) / train_cfg.batch_size)
    # decay projection weights only: biases, norms, score scales, positions and phases keep their values
    decay = {id(m.weight) for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv1d))}
    groups = [dict(params=[p for p in model.parameters() if id(p) in decay]),
              dict(params=[p for p in model.parameters() if id(p) not in decay], weight_decay=0.0)]
    opt = torch.optim.AdamW(groups, lr=train_cfg.lr, weight_decay=train_cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(train_cfg, steps))
    header = dict(format=CHECKPOINT_FORMAT, version=CHECKPOINT_VERSION, model_config=to_dict(model_cfg),
                  feature_config=to_dict(feature_cfg), data_config=to_dict(data_cfg),
                  train_config=to_dict(train_cfg), classes=list(data.classes), quant=quant)
    history, best, start, bad_epochs = [], -1.0, 0, 0
    if resume and (out_dir / "last.pt").is_file():
        state = load_checkpoint(out_dir / "last.pt").raw
        if (state["model_config"] != header["model_config"] or state["train_config"] != header["train_config"]
                or state.get("quant") != quant):
            raise CheckpointError(f"{out_dir / 'last.pt'}: was made with another model or training config")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        history, best, start, bad_epochs = state["history"], state["best"], state["epoch"], state["bad_epochs"]
    if train_cfg.epochs == 0 and not history:  # post-training quantization: the model as built
        best = evaluate(model, val_b, model_cfg.n_classes)["accuracy"]
        _save(out_dir / "best.pt", dict(header, model=model.state_dict(), epoch=0))
    n_params = count_parameters(model)
    criterion = functools.partial(F.cross_entropy, label_smoothing=train_cfg.label_smoothing)
    mix_weight = torch.distributions.Beta(train_cfg.mixup, train_cfg.mixup) if train_cfg.mixup else None
    for epoch in range(start, train_cfg.epochs):
        if bad_epochs >= train_cfg.patience:
            break  # early stopping
        if epoch == stop_after_epochs:
            return dict(interrupted=True, epochs=len(history))
        model.train()
        torch.manual_seed(train_cfg.seed * 100_003 + epoch)  # dropout
        gen = torch.Generator().manual_seed(train_cfg.seed * 100_003 + epoch)  # order and augmentation
        t0, loss_sum, correct, seen, max_grad = time.time(), 0.0, 0, 0, 0.0
        bar = tqdm(train_b(train_cfg.batch_size, gen, train_cfg.augment), total=steps, leave=False,
                   disable=not progress, desc=f"epoch {epoch + 1}/{train_cfg.epochs}")
        for feats, labels in bar:
            partner = None
            if mix_weight is not None:  # each clip blended with another of the batch, its loss with both labels
                lam = float(mix_weight.sample())
                perm = torch.randperm(len(labels), generator=gen).to(labels.device)
                feats, partner = lam * feats + (1 - lam) * feats[perm], labels[perm]
            logits = model(feats)
            loss = criterion(logits, labels)
            if partner is not None:
                loss = lam * loss + (1 - lam) * criterion(logits, partner)
                labels = labels if lam >= 0.5 else partner  # the dominant clip's label, for train accuracy
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip or float("inf"))
            max_grad = max(max_grad, float(grad_norm))  # before clipping: spikes show here
            opt.step()
            sched.step()
            loss_sum += loss.item() * len(labels)
            correct += (logits.argmax(-1) == labels).sum().item()
            seen += len(labels)
            bar.set_postfix(loss=f"{loss_sum / seen:.3f}", acc=f"{correct / seen:.3f}")
        val = evaluate(model, val_b, model_cfg.n_classes)
        history.append(dict(epoch=epoch + 1, train_loss=loss_sum / seen, train_accuracy=correct / seen,
                            val_loss=val["loss"], val_accuracy=val["accuracy"], val_confusion=val["confusion"],
                            max_grad_norm=max_grad, lr=sched.get_last_lr()[0], seconds=time.time() - t0))
        improved = val["accuracy"] > best
        best, bad_epochs = (val["accuracy"], 0) if improved else (best, bad_epochs + 1)
        if improved:
            _save(out_dir / "best.pt", dict(header, model=model.state_dict(), epoch=epoch + 1))
        _save(out_dir / "last.pt", dict(header, model=model.state_dict(), optimizer=opt.state_dict(),
                                        scheduler=sched.state_dict(), history=history, best=best,
                                        epoch=epoch + 1, bad_epochs=bad_epochs))
        write_json(out_dir / "metrics.json", history)
        if progress:
            tqdm.write(f"epoch {epoch + 1:3d}  loss {history[-1]['train_loss']:.4f}  "
                       f"train {correct / seen:.3f}  val {val['accuracy']:.3f}{'  *' if improved else ''}")
    best_model = load_checkpoint(out_dir / "best.pt", map_location=device).model.to(device)
    test = evaluate(best_model, test_b, model_cfg.n_classes)
    results = dict(dataset=data_cfg.dataset, attention=model_cfg.attention, size=model_cfg.size, d_osc=model_cfg.d_osc, p=model_cfg.p,
                   parameters=n_params, epochs=len(history), best_val_accuracy=best,
                   test_accuracy=test["accuracy"], test_n=test["n"], test_confusion=test["confusion"],
                   classes=list(data.classes), device=str(device),
                   quant=quant and f"{quant['config']['preset']}-{'qat' if train_cfg.epochs else 'ptq'}")
    write_json(out_dir / "results.json", results)
    return results


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
    custom = None
    if runtime.check_tflite(path)["custom_ops"]:
        from .export import tflite_op
        custom = [tflite_op.register]
    runner = runtime.load(path, interpreter, custom_ops=custom)
    n_classes = len(classes)
    confusion = torch.zeros(n_classes, n_classes, dtype=torch.long)
    for feats, labels in Batches(data, split, FeatureExtractor(feature_cfg), torch.device("cpu"))(256):
        pred = torch.as_tensor(runner.run(feats.numpy()).argmax(-1))
        confusion += torch.bincount(labels * n_classes + pred, minlength=n_classes**2).view(n_classes, n_classes)
    n = int(confusion.sum())
    return dict(accuracy=confusion.trace().item() / max(n, 1), n=n, confusion=confusion.tolist(),
                classes=list(classes), split=split, interpreter=runner.interpreter)


def format_confusion(confusion: list[list[int]], classes: list[str]) -> str:
    width = max(6, max(len(c) for c in classes) + 1)
    lines = [" " * width + "".join(f"{c[:5]:>6}" for c in classes)]
    lines += [f"{name:<{width}}" + "".join(f"{v:6d}" for v in row) for name, row in zip(classes, confusion)]
    return "\n".join(lines)


def read_results(folder: str | Path) -> dict:
    return json.loads((Path(folder) / "results.json").read_text())
