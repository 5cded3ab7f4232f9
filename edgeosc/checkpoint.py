"""Checkpoints: one format for float and quantized models, written atomically, loaded without unpickling code."""
from __future__ import annotations

import math
import pickle
from dataclasses import dataclass
from pathlib import Path

import torch

from .config import DataConfig, FeatureConfig, ModelConfig, QuantConfig, TrainConfig, from_dict
from .io import atomic_path
from .models.kws import build_model

CHECKPOINT_FORMAT, CHECKPOINT_VERSION = "edgeosc-checkpoint", 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file and the problem."""


@dataclass
class Checkpoint:
    """A model with everything an export or evaluation needs: its features, classes and configs."""
    model: torch.nn.Module
    model_cfg: ModelConfig
    feature_cfg: FeatureConfig
    data_cfg: DataConfig
    train_cfg: TrainConfig
    classes: tuple[str, ...]
    raw: dict
    quant_cfg: QuantConfig | None = None  # set for QAT / PTQ checkpoints

    @classmethod
    def of(cls, model: torch.nn.Module, feature_cfg: FeatureConfig, classes, data_cfg: DataConfig = DataConfig(),
           train_cfg: TrainConfig = TrainConfig()) -> "Checkpoint":
        """A checkpoint of a model in memory (a float net or a QAT model), as load_checkpoint would return it."""
        if len(classes) != model.cfg.n_classes:
            raise ValueError(f"{len(classes)} classes for a model of {model.cfg.n_classes} outputs")
        return cls(model, model.cfg, feature_cfg, data_cfg, train_cfg, tuple(classes), {},
                   getattr(model, "quant_cfg", None))


def save_checkpoint(path: Path, obj: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def _legacy_kuramoto(model_config: dict) -> dict:
    """A Kuramoto checkpoint written before its phase map, step and readout were settings: the values it ran with."""
    if model_config.get("attention") != "kuramoto" or "phase_map" in model_config:
        return model_config
    return dict(model_config, phase_map="linear", phase_readout="prototype",
                max_step=1.0 / math.sqrt(model_config["d_model"]))


def _legacy_train(train_config: dict) -> dict:
    """A checkpoint written while train.stream_context existed (replaced by stream_clips): a training-time setting
    only, so the model it trained loads as it is."""
    return {k: v for k, v in train_config.items() if k != "stream_context"}


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
        model_cfg = from_dict(ModelConfig, _legacy_kuramoto(raw["model_config"]))
        model, quant_cfg = build_model(model_cfg), None
        if raw.get("quant") is not None:  # a QAT / PTQ checkpoint: rebuild the quantized twin
            from .quant import quantize_model
            quant_cfg = from_dict(QuantConfig, raw["quant"]["config"])
            model = quantize_model(model, quant_cfg)
        train_cfg = from_dict(TrainConfig, _legacy_train(raw["train_config"]))
        ckpt = Checkpoint(model, model_cfg, from_dict(FeatureConfig, raw["feature_config"]),
                          from_dict(DataConfig, raw["data_config"]), train_cfg, tuple(raw["classes"]), raw, quant_cfg)
        missing, unexpected = ckpt.model.load_state_dict(raw["model"], strict=False)
        if quant_cfg is not None:  # a QAT checkpoint from before the linear core's builtin twin, or from its
            from .quant import twin_legacy_keys, twin_state_keys  # direct-core form: still loads
            missing = sorted(set(missing) - twin_state_keys(ckpt.model))
            unexpected = sorted(set(unexpected) - twin_legacy_keys(ckpt.model, unexpected))
        if missing or unexpected:
            raise RuntimeError(f"\nmissing {', '.join(missing[:3])}; unexpected {', '.join(unexpected[:3])}")
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        detail = " ".join(line.strip() for line in str(e).splitlines()[1:] or [str(e)])
        raise CheckpointError(f"{path}: checkpoint does not match its model config ({detail[:200]})")
    bad = [k for k, v in raw["model"].items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise CheckpointError(f"{path}: non-finite weights in {', '.join(bad[:3])}")
    return ckpt
