"""Model exports: one package per target, one signature `export(checkpoint, cfg, out_dir) -> Path`, a registry.

Every target gets the whole checkpoint (model, features, classes, configs): a target handed a bare model
would have to guess the rest, and a guessed front end computes other features than the model was trained on.
"""
from __future__ import annotations

import importlib
import json
import platform
from importlib import metadata
from pathlib import Path

from ..checkpoint import Checkpoint, load_checkpoint
from ..config import ExportConfig, to_dict
from ..io import sha256_file, write_json
from ..models.attention import COSINE

TARGETS = {"onnx": "edgeosc.export.onnx", "tflite": "edgeosc.export.tflite", "c": "edgeosc.export.c"}
MANIFEST = "manifest.json"
TOOLS = ("edgeosc", "torch", "brevitas", "onnx", "onnxruntime", "onnxoptimizer", "numpy", "flatbuffers",
         "tflite-runtime", "ai-edge-litert", "tflite-micro")


def export(ckpt: Checkpoint, cfg: ExportConfig, out_dir: str | Path, target: str = "onnx") -> Path:
    if target not in TARGETS:
        raise ValueError(f"unknown export target {target!r}; choose from {sorted(TARGETS)}")
    if getattr(ckpt.model_cfg, "window", 0) and target == "onnx":
        raise ValueError(f"model window {ckpt.model_cfg.window}: a streaming network exports to TFLite (--format "
                         "tflite: stream_int8.tflite with its state as extra inputs and outputs, and window_int8.tflite) "
                         "and to C firmware (--format c: the stream file's), not to ONNX")
    if getattr(ckpt.model_cfg, "attention", "") == "oscillator" and ckpt.model_cfg.positive in COSINE:
        raise ValueError(f"positive map {ckpt.model_cfg.positive!r} (a map of unit q and k) has no export path yet: the "
                         "exported graphs and cores compute maps of q.k; it is a float research option for now")
    return importlib.import_module(TARGETS[target]).export(ckpt, cfg, out_dir)


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def export_checkpoint(source: str | Path, out_dir: str | Path | None = None, target: str = "onnx",
                      cfg: ExportConfig = ExportConfig()) -> Path:
    """Export a run folder's best.pt (or a checkpoint) into out_dir (default <run>/export-<target>) with a manifest."""
    source = Path(source)
    path = source / "best.pt" if source.is_dir() else source
    ckpt = load_checkpoint(path)
    out_dir = Path(out_dir or path.parent / f"export-{target}")
    if (out_dir / MANIFEST).is_file():  # an earlier export here: replace it, leave no stale model file
        for name in json.loads((out_dir / MANIFEST).read_text()).get("files", {}):
            (out_dir / Path(name).name).unlink(missing_ok=True)
        (out_dir / MANIFEST).unlink()
    ckpt.model.eval()
    export(ckpt, cfg, out_dir, target)
    files = sorted(p for p in out_dir.iterdir() if p.is_file() and p.name != MANIFEST and not p.name.startswith("."))
    write_json(out_dir / MANIFEST, dict(
        format="edgeosc-export", target=target, source=dict(path=str(path), sha256=sha256_file(path)),
        model_config=to_dict(ckpt.model_cfg), feature_config=to_dict(ckpt.feature_cfg),
        quant=ckpt.raw.get("quant"), export_config=to_dict(cfg), classes=list(ckpt.classes),
        files={p.name: dict(sha256=sha256_file(p), bytes=p.stat().st_size) for p in files},
        tools=dict(python=platform.python_version(), **{t: _version(t) for t in TOOLS})))
    return out_dir
