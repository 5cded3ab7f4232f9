"""The main job end to end: data -> float training -> QAT -> exports -> parity and cycle estimates -> bench ->
NPU compilation (Vela) -> compare report.

Each stage writes its outputs into <run>/<stage>/ with a stage.json manifest: the hash of its inputs
(configuration and the manifests of the stages it reads), its status and its results. A re-run skips
a stage whose inputs are unchanged and done; an interrupted stage resumes (training continues from
last.pt); a stage whose inputs changed starts afresh; a failing stage stops the pipeline with its name,
keeping what earlier stages wrote.

A TOML config holds every option, one table per config dataclass (config.py):
    kinds = ["oscillator", "softmax", "ds-cnn"]   (or any of them, and "kuramoto": float only)
    [data]      dataset, data_dir, ...          [features]  n_mels, ... (DS-CNN's: [dscnn_features])
    [model]     size, d_osc, p, ...             [train]     epochs, lr, ...
    [qat]       the QAT run's TrainConfig fields (default epochs 10, lr 3e-4)
    [quant]     preset, calibration_batches     [export]    opset
    [bench]     runs, warmup, threads           [always_on] enabled, epochs, mining_rounds, eval_hours, ...
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
import tomllib
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .config import (FLOAT_ONLY, MLPERF_FEATURES, QAT_EPOCHS, QAT_LR, AlwaysOnConfig, BenchConfig,
                     DataConfig, ExportConfig, FeatureConfig, ModelConfig, QuantConfig, TrainConfig, from_dict,
                     model_of_kind, to_dict, with_dataset_defaults)
from .io import write_json

KINDS = ("oscillator", "softmax", "ds-cnn")  # the attention models and the baseline users run today (MLPerf Tiny)
MANIFEST = "stage.json"


@dataclass(frozen=True)
class PipelineConfig:
    kinds: tuple[str, ...] = KINDS
    data: DataConfig = field(default_factory=DataConfig)
    features: FeatureConfig = field(default_factory=FeatureConfig)
    # the oscillator shipped (ModelConfig's defaults): the linear core at d_osc 2 with the key gate, its cost per token
    # fixed, 0.49x softmax's core at 49 tokens on a Cortex-M4; the other kinds take the oscillator's settings as none
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    qat: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=QAT_EPOCHS, lr=QAT_LR))
    quant: QuantConfig = field(default_factory=QuantConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    always_on: AlwaysOnConfig = field(default_factory=AlwaysOnConfig)
    dscnn_features: FeatureConfig = field(default_factory=lambda: MLPERF_FEATURES)  # DS-CNN's input: MLPerf's

    def __post_init__(self):
        if not self.kinds or set(self.kinds) - set(KINDS + FLOAT_ONLY):
            raise ValueError(f"kinds must be a non-empty subset of {list(KINDS + FLOAT_ONLY)}, not {list(self.kinds)}")

    def features_of(self, kind: str) -> FeatureConfig:
        return self.dscnn_features if kind == "ds-cnn" else self.features


class PipelineError(RuntimeError):
    """A stage failed; the message names it. Earlier stages' outputs are kept."""


def load_config(path: str | Path | None = None, overrides: dict | None = None) -> PipelineConfig:
    """The TOML file (if any) with `overrides` ({"train.epochs": 5, ...}) applied; every key and value checked."""
    spec = {}
    if path is not None:
        try:
            spec = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ValueError(f"{path}: cannot read the pipeline config ({e})") from None
    for key, value in (overrides or {}).items():  # "train.augment.noise_prob" -> spec[train][augment][noise_prob]
        *tables, name = key.split(".")
        node = spec
        for t in tables:
            node = node.setdefault(t, {})
        node[name] = value
    base = to_dict(PipelineConfig())
    qat = spec.get("qat", {})
    spec["qat"] = {**{k: base["qat"][k] for k in ("epochs", "lr")}, **qat}  # QAT's own defaults
    for table in ("features", "dscnn_features"):
        spec[table] = with_dataset_defaults(spec.get("data", {}), spec.get("model", {}), spec.get(table, {}))
    if spec.get("model", {}).get("attention") == "ds-cnn":  # its own input unless the features are given
        spec["features"] = {**to_dict(MLPERF_FEATURES), **spec.get("features", {})}
    if spec.get("data", {}).get("data_dir"):
        spec["data"]["data_dir"] = str(Path(spec["data"]["data_dir"]).expanduser().resolve())
    try:
        return from_dict(PipelineConfig, spec)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{path or 'pipeline config'}: {e}") from None


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class Stage:
    name: str
    inputs: dict  # everything the outputs depend on (configs, upstream stage keys)
    run: Callable[[Path], dict]  # folder -> results (json-able)


def run_stage(run_dir: Path, stage: Stage, echo=print) -> dict:
    """Run, resume or skip one stage; returns its manifest."""
    folder = run_dir / stage.name
    key = _digest(stage.inputs)
    path = folder / MANIFEST
    old = json.loads(path.read_text()) if path.is_file() else None
    if old and old["key"] == key and old["status"] == "done":
        echo(f"[{stage.name}] up to date, skipped")
        return old
    if old and old["key"] != key:  # other inputs: nothing of the old outputs may leak into the new ones
        shutil.rmtree(folder)
    resuming = bool(old and old["key"] == key)
    folder.mkdir(parents=True, exist_ok=True)
    echo(f"[{stage.name}] {'resuming' if resuming else 'running'} ...")
    manifest = dict(stage=stage.name, key=key, inputs=stage.inputs, status="running", started=time.time())
    write_json(path, manifest)
    t0 = time.perf_counter()
    try:
        results = stage.run(folder)
    except KeyboardInterrupt:
        raise PipelineError(f"stage {stage.name} interrupted; re-run the same command to resume") from None
    except Exception as e:
        write_json(path, dict(manifest, status="failed", error=f"{type(e).__name__}: {e}",
                              traceback=traceback.format_exc()))
        raise PipelineError(f"stage {stage.name} failed: {e} (outputs of earlier stages kept in {run_dir})") from e
    manifest.update(status="done", seconds=round(time.perf_counter() - t0, 1), results=results)
    write_json(path, manifest)
    echo(f"[{stage.name}] done in {manifest['seconds']:.0f} s")
    return manifest


def streaming_kinds(cfg: PipelineConfig) -> list[str]:
    """The kinds the always-on stage trains a streaming variant of: those of cfg.kinds that have one (softmax, the
    linear oscillator core at d_osc 2); none when cfg.always_on.enabled is false."""
    if not cfg.always_on.enabled:
        return []
    kinds = []
    for kind in cfg.kinds:
        try:
            dataclasses.replace(model_of_kind(cfg.model, kind), window=cfg.always_on.window)
        except ValueError:  # DS-CNN, Kuramoto, a direct-form oscillator: no streaming variant
            continue
        kinds.append(kind)
    return kinds


def stages(cfg: PipelineConfig, run_dir: Path, cache_dir=None, progress: bool = True, echo=print):
    """The stages in order (a generator: each stage's inputs include the keys of the ones it reads)."""
    from . import stages as impl
    data = yield Stage("data", dict(data=to_dict(cfg.data)), lambda f: impl.data(cfg, f, cache_dir, progress))
    keys = {}
    for kind in cfg.kinds:
        model = model_of_kind(cfg.model, kind)
        common = dict(data=data["key"], model=to_dict(model), features=to_dict(cfg.features_of(kind)))
        trained = yield Stage(f"train-{kind}", dict(common, train=to_dict(cfg.train)),
                              lambda f, m=model: impl.train_float(cfg, m, run_dir, f, cache_dir, progress))
        if kind in FLOAT_ONLY:
            exported = yield Stage(f"export-{kind}", dict(float=trained["key"], export=to_dict(cfg.export)),
                                   lambda f, k=kind: impl.export_all(cfg, k, run_dir / f"train-{k}", f))
            parity = yield Stage(f"parity-{kind}", dict(export=exported["key"]),
                                 lambda f, k=kind: impl.float_parity(cfg, run_dir, k, f, cache_dir))
            keys[kind] = [parity["key"]]
            continue
        qat = yield Stage(f"qat-{kind}", dict(float=trained["key"], qat=to_dict(cfg.qat), quant=to_dict(cfg.quant)),
                          lambda f, k=kind: impl.train_qat(cfg, run_dir / f"train-{k}", f, cache_dir, progress))
        exported = yield Stage(f"export-{kind}", dict(qat=qat["key"], export=to_dict(cfg.export)),
                               lambda f, k=kind: impl.export_all(cfg, k, run_dir / f"qat-{k}", f))
        parity = yield Stage(f"parity-{kind}", dict(export=exported["key"]),
                             lambda f, k=kind: impl.parity(cfg, run_dir, k, f, cache_dir))
        estimate = yield Stage(f"estimate-{kind}", dict(export=exported["key"], targets=cfg.bench.targets),
                               lambda f, k=kind: impl.estimate(cfg, run_dir, k, f, cache_dir))
        keys[kind] = [parity["key"], estimate["key"]]
    always_on = {}
    for kind in streaming_kinds(cfg):
        model = model_of_kind(cfg.model, kind)
        done = yield Stage(f"always-on-{kind}", dict(data=data["key"], model=to_dict(model),
                                                     features=to_dict(cfg.features_of(kind)),
                                                     train=to_dict(cfg.train), always_on=to_dict(cfg.always_on)),
                           lambda f, m=model: impl.always_on(cfg, m, f, cache_dir, progress))
        always_on[kind] = done["key"]
    scaling = yield Stage("scaling", dict(tokens=cfg.bench.scaling_tokens, d_osc=cfg.bench.scaling_d_osc,
                                          stream=[cfg.bench.stream_windows, cfg.bench.hop_ms, to_dict(cfg.model)]),
                          lambda f: impl.scaling(cfg, f))
    bench = yield Stage("bench", dict(parity=keys, bench=to_dict(cfg.bench)),
                        lambda f: impl.bench(cfg, run_dir, f))
    npu = yield Stage("npu", dict(parity=keys), lambda f: impl.npu(cfg, run_dir, f))
    yield Stage("report", dict(bench=bench["key"], npu=npu["key"], models=keys, scaling=scaling["key"],
                               always_on=always_on),
                lambda f: impl.report(cfg, run_dir, f))


def run_pipeline(cfg: PipelineConfig, run_dir: str | Path, cache_dir=None, progress: bool = True,
                 echo=print) -> Path:
    """Run every stage (skipping the done ones); returns the report's path."""
    if cfg.model.window:
        raise ValueError("model.window > 0: the pipeline's exports do not carry a stream's state yet; train the "
                         "streaming variant with `edgeosc train --window N`")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(run_dir / "config.json", to_dict(cfg))
    gen = stages(cfg, run_dir, cache_dir, progress, echo)
    manifest = None
    try:
        while True:
            stage = gen.send(manifest)
            manifest = run_stage(run_dir, stage, echo)
    except StopIteration:
        pass
    return run_dir / "report" / "report.md"
