"""One training loop: AdamW + warm-up/cosine, per-epoch metrics, atomic checkpoints, exact resume."""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .checkpoint import CHECKPOINT_FORMAT, CHECKPOINT_VERSION, CheckpointError, load_checkpoint, save_checkpoint
from .config import CAUSAL_NORMALIZE, DataConfig, FeatureConfig, ModelConfig, QuantConfig, TrainConfig, to_dict
from .data.clipset import ClipSet
from .evaluate import Batches, clip_logits, evaluate, keyword_free, pick_device
from .features import FeatureExtractor
from .io import sha256_file, write_json
from .models.kws import build_model, count_parameters, resolve
from .quant import QATModel, calibrate, quantize_model


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


def teacher_of(cfg: TrainConfig, classes, device) -> tuple[torch.nn.Module, FeatureExtractor] | None:
    """The distillation teacher (cfg.distill_from, a float checkpoint on these classes) in eval mode, with its own
    feature extractor; None without one."""
    if not cfg.distill_from:
        return None
    if cfg.stream_clips:
        raise ValueError("train.distill_from does not go with train.stream_clips (a teacher of whole clips)")
    source = load_checkpoint(cfg.distill_from, map_location=device)
    if source.quant_cfg is not None or tuple(source.classes) != tuple(classes):
        raise CheckpointError(f"{cfg.distill_from}: a distillation teacher must be a float checkpoint on the same "
                              f"classes ({list(classes)}); it holds {list(source.classes)}"
                              f"{' (quantized)' if source.quant_cfg is not None else ''}")
    teacher = source.model.to(device).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher, FeatureExtractor(source.feature_cfg).to(device)


def distilled(loss: torch.Tensor, logits: torch.Tensor, teacher: torch.nn.Module, feats: torch.Tensor,
              cfg: TrainConfig) -> torch.Tensor:
    """(1 - w) loss + w T^2 KL(teacher's posteriors at temperature T || the student's): Hinton et al.'s soft targets
    (the T^2 keeps their gradients' size as T changes)."""
    t = cfg.distill_temperature
    with torch.no_grad():
        target = F.softmax(teacher(feats) / t, -1)
    soft = F.kl_div(F.log_softmax(logits / t, -1), target, reduction="batchmean") * t * t
    return (1 - cfg.distill_weight) * loss + cfg.distill_weight * soft


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
    if train_cfg.stream_clips and (not model_cfg.window or feature_cfg.normalize not in CAUSAL_NORMALIZE):
        raise ValueError("train.stream_clips trains on streams: it needs a streaming model (model.window > 0) and "
                         f"features a stream can compute (features.normalize one of {CAUSAL_NORMALIZE})")
    device = pick_device(train_cfg.device)
    model_cfg = resolve(dataclasses.replace(model_cfg, n_classes=len(data.classes), n_frames=feature_cfg.n_frames,
                                            n_coeffs=feature_cfg.n_coeffs))
    features = FeatureExtractor(feature_cfg).to(device)
    context = keyword_free(data) if train_cfg.stream_clips and train_cfg.stream_after == "keyword-free" else None
    train_b, val_b, test_b = (Batches(data, s, features, device, context) for s in ("train", "val", "test"))
    streams = dict(stream_clips=train_cfg.stream_clips, stream_loss=train_cfg.stream_loss)  # how evaluate reads clips
    if len(train_b) == 0 or len(val_b) == 0:
        raise ValueError("the dataset has no training or no validation clips")
    torch.manual_seed(train_cfg.seed)
    model = (build_model(model_cfg) if build is None else build(model_cfg, train_b(train_cfg.batch_size), device))
    if train_cfg.init_from and build is None:
        init_weights(model, train_cfg.init_from)
    model = model.to(device)
    teacher = teacher_of(train_cfg, data.classes, device)
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
        last = load_checkpoint(out_dir / "last.pt")
        state = last.raw
        # the configs as loaded (a setting added since takes its default), not the raw dicts
        if last.model_cfg != model_cfg or last.train_cfg != train_cfg or state.get("quant") != quant:
            raise CheckpointError(f"{out_dir / 'last.pt'}: was made with another model or training config")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        history, best, start, bad_epochs = state["history"], state["best"], state["epoch"], state["bad_epochs"]
    if train_cfg.epochs == 0 and not history:  # post-training quantization: the model as built
        best = evaluate(model, val_b, model_cfg.n_classes, **streams)["accuracy"]
        save_checkpoint(out_dir / "best.pt", dict(header, model=model.state_dict(), epoch=0))
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
        bar = tqdm(train_b(train_cfg.batch_size, gen, train_cfg.augment, train_cfg.stream_clips,
                           teacher and teacher[1]), total=steps,
                   leave=False, disable=not progress, desc=f"epoch {epoch + 1}/{train_cfg.epochs}")
        for feats, labels, *taught in bar:
            partner = None
            if mix_weight is not None:  # each clip blended with another of the batch, its loss with both labels
                lam = float(mix_weight.sample())
                perm = torch.randperm(len(labels), generator=gen).to(labels.device)
                feats, partner = lam * feats + (1 - lam) * feats[perm], labels[perm]
                taught = [lam * t + (1 - lam) * t[perm] for t in taught]
            logits = clip_logits(model, feats, labels, train_b, train_cfg.stream_loss)
            loss = criterion(logits, labels)
            if partner is not None:
                loss = lam * loss + (1 - lam) * criterion(logits, partner)
                labels = labels if lam >= 0.5 else partner  # the dominant clip's label, for train accuracy
            if teacher is not None:
                loss = distilled(loss, logits, teacher[0], taught[0], train_cfg)
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
        val = evaluate(model, val_b, model_cfg.n_classes, **streams)  # as it trains
        history.append(dict(epoch=epoch + 1, train_loss=loss_sum / seen, train_accuracy=correct / seen,
                            val_loss=val["loss"], val_accuracy=val["accuracy"], val_confusion=val["confusion"],
                            max_grad_norm=max_grad, lr=sched.get_last_lr()[0], seconds=time.time() - t0))
        improved = val["accuracy"] > best
        best, bad_epochs = (val["accuracy"], 0) if improved else (best, bad_epochs + 1)
        if improved:
            save_checkpoint(out_dir / "best.pt", dict(header, model=model.state_dict(), epoch=epoch + 1))
        save_checkpoint(out_dir / "last.pt", dict(header, model=model.state_dict(), optimizer=opt.state_dict(),
                                        scheduler=sched.state_dict(), history=history, best=best,
                                        epoch=epoch + 1, bad_epochs=bad_epochs))
        write_json(out_dir / "metrics.json", history)
        if progress:
            tqdm.write(f"epoch {epoch + 1:3d}  loss {history[-1]['train_loss']:.4f}  "
                       f"train {correct / seen:.3f}  val {val['accuracy']:.3f}{'  *' if improved else ''}")
    best_model = load_checkpoint(out_dir / "best.pt", map_location=device).model.to(device)
    test = evaluate(best_model, test_b, model_cfg.n_classes)
    in_streams = train_cfg.stream_clips and evaluate(best_model, test_b, model_cfg.n_classes, **streams)
    results = dict(dataset=data_cfg.dataset, attention=model_cfg.attention, size=model_cfg.size, d_osc=model_cfg.d_osc, p=model_cfg.p,
                   parameters=n_params, epochs=len(history), best_val_accuracy=best,
                   test_accuracy=test["accuracy"], test_n=test["n"], test_confusion=test["confusion"],
                   **({"test_stream_accuracy": in_streams["accuracy"]} if in_streams else {}),
                   classes=list(data.classes), device=str(device),
                   quant=quant and f"{quant['config']['preset']}-{'qat' if train_cfg.epochs else 'ptq'}",
                   **({"diagnostics": test["diagnostics"]} if "diagnostics" in test else {}))
    write_json(out_dir / "results.json", results)
    return results


def qat_builder(source: str | Path, quant_cfg: QuantConfig):
    """train()'s `build` hook: the float checkpoint's network, quantized, calibrated on training batches."""
    def build(model_cfg: ModelConfig, train_batches, device) -> QATModel:
        ckpt = load_checkpoint(source)
        if ckpt.quant_cfg is not None:
            raise CheckpointError(f"{source}: already quantized ({ckpt.quant_cfg.preset}); start QAT from a float one")
        if ckpt.model_cfg != model_cfg:
            raise CheckpointError(f"{source}: its model does not fit this data ({ckpt.model_cfg} vs {model_cfg})")
        model = quantize_model(ckpt.model, quant_cfg).to(device)
        clips = calibrate(model, train_batches, quant_cfg.calibration_batches)
        # the first `clips` clips of the train split in index order (no augmentation)
        model.provenance = dict(source=dict(path=str(source), sha256=sha256_file(source)),
                                calibration=dict(split="train", order="index", clips=clips))
        return model
    return build


def read_results(folder: str | Path) -> dict:
    return json.loads((Path(folder) / "results.json").read_text())


def finished_runs(roots):
    """(folder, results) of each finished run under `roots` (run folders or folders holding them): a folder with
    results.json beside best.pt (a sweep's own results.json is not a run)."""
    for root in roots:
        for res_file in sorted(Path(root).rglob("results.json")):
            if (res_file.parent / "best.pt").is_file():
                yield res_file.parent, read_results(res_file.parent)
