"""Grid sweeps over any config field, in-process or on Ray: a results table, an accuracy-vs-d_osc plot and
the training curves (loss and largest gradient norm per epoch) of every run.

A sweep file is TOML: `[base.<section>]` tables set fixed fields, `[grid]` maps dotted
"<section>.<field>" keys to lists; sections are data, features, model, train. Example:

    [base.train]
    epochs = 25
    [grid]
    "model.attention" = ["oscillator", "softmax"]
    "model.d_osc" = [2, 8]
    "train.seed" = [0, 1, 2]
"""
from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import statistics
import tomllib
from collections import defaultdict
from pathlib import Path

from .config import (NOT_OSCILLATOR, DataConfig, FeatureConfig, ModelConfig, TrainConfig, from_dict, to_dict,
                     with_dataset_defaults)
from .io import atomic_path, save_figure, write_json

SECTIONS = {"data": DataConfig, "features": FeatureConfig, "model": ModelConfig, "train": TrainConfig}


def load_sweep(path: str | Path) -> tuple[dict, dict]:
    try:
        return load_sweep_text(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"{path}: cannot read sweep file ({e})")
    except ValueError as e:
        raise ValueError(f"{path}: {e}")


def load_sweep_text(text: str) -> tuple[dict, dict]:
    """(base sections, grid) from TOML text, every key checked against the config dataclasses."""
    try:
        spec = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"cannot read sweep file ({e})")
    base, grid = spec.get("base", {}), spec.get("grid", {})
    unknown = set(spec) - {"base", "grid"} | set(base) - set(SECTIONS)
    for key, values in grid.items():
        section, _, name = key.partition(".")
        if section not in SECTIONS or name not in {f.name for f in dataclasses.fields(SECTIONS[section])}:
            unknown.add(key)
        elif not isinstance(values, list) or not values:
            raise ValueError(f"grid entry {key!r} must be a non-empty list")
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}; sections are {sorted(SECTIONS)}")
    return base, grid


def expand(base: dict, grid: dict) -> list[tuple[str, dict]]:
    """(run name, {section: config}) for every grid point, deduplicated."""
    runs, seen = [], set()
    keys = list(grid)
    for values in itertools.product(*(grid[k] for k in keys)):
        sections = {s: dict(base.get(s, {})) for s in SECTIONS}
        for key, value in zip(keys, values):
            section, _, name = key.partition(".")
            sections[section][name] = value
        sections["features"] = with_dataset_defaults(sections["data"], sections["model"], sections["features"])
        for section, name in (("data", "data_dir"), ("train", "init_from")):  # recorded paths: absolute
            if sections[section].get(name):
                sections[section][name] = str(Path(sections[section][name]).resolve())
        cfgs = {s: from_dict(cls, sections[s]) for s, cls in SECTIONS.items()}
        ident = tuple(cfgs.values())  # frozen dataclasses: equal settings, equal identity
        if ident in seen:
            continue
        seen.add(ident)
        name = "-".join(f"{k.split('.')[1]}={_short(v)}" for k, v in zip(keys, values)
                        if not (k.split(".")[1] in NOT_OSCILLATOR and cfgs["model"].attention != "oscillator"))
        runs.append((name or "base", cfgs))
    return runs


def _short(v) -> str:
    return "+".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)


def train_run(cfgs: dict, run_dir: Path, cache_dir=None, progress: bool = False, _data: dict | None = None) -> dict:
    """Train one grid point (resuming an unfinished run); `_data` memoises the last dataset loaded."""
    from .mining import training_data
    from .train import train
    key, memo = repr(cfgs["data"]), _data if _data is not None else {}
    if key not in memo:
        memo.clear()  # keep one dataset in memory
        memo[key] = training_data(cfgs["data"], cache_dir, progress=progress)
    return train(memo[key], run_dir, model_cfg=cfgs["model"], feature_cfg=cfgs["features"],
                 train_cfg=cfgs["train"], data_cfg=cfgs["data"], resume=True, progress=progress)


def run_with_ray(runs: list[tuple[str, dict]], out_dir: Path, address: str, cache_dir=None,
                 gpus_per_run: float = 0.0) -> None:
    """Train the runs as Ray Tune trials, one CPU (and gpus_per_run GPUs) each.

    address "local" starts a Ray instance on this machine; otherwise it is a cluster address. Trials
    write into out_dir, which on a multi-node cluster must be storage every node sees.
    """
    import ray
    from ray import tune
    ray.init(address=None if address == "local" else address, ignore_reinit_error=True, include_dashboard=False,
             log_to_driver=False)
    todo = {name: {s: to_dict(c) for s, c in cfgs.items()} for name, cfgs in runs}
    out_dir, cache_dir = out_dir.resolve(), cache_dir and str(Path(cache_dir).resolve())

    def trainable(config):
        cfgs = {s: from_dict(SECTIONS[s], d) for s, d in todo[config["run"]].items()}
        res = train_run(cfgs, out_dir / config["run"], cache_dir)
        tune.report(dict(test_accuracy=res["test_accuracy"], best_val_accuracy=res["best_val_accuracy"]))

    tuner = tune.Tuner(tune.with_resources(trainable, {"cpu": 1, "gpu": gpus_per_run}),
                       param_space={"run": tune.grid_search(sorted(todo))},
                       run_config=tune.RunConfig(storage_path=str(out_dir / "ray"), name="trials", verbose=1))
    errors = [r.error for r in tuner.fit() if r.error]
    if errors:
        raise RuntimeError(f"{len(errors)} Ray trials failed, e.g. {errors[0]}")


def run_sweep(path: str | Path, out_dir: str | Path, cache_dir=None, progress: bool = True, echo=print,
              ray_address: str | None = None, gpus_per_run: float = 0.0) -> list[dict]:
    """Train every grid point (skipping finished ones), then write results.csv/json, accuracy.png and training.png."""
    from .train import read_results
    base, grid = load_sweep(path)
    out_dir = Path(out_dir)
    runs = expand(base, grid)
    pending = [(name, cfgs) for name, cfgs in runs if not (out_dir / name / "results.json").is_file()]
    if ray_address and pending:
        run_with_ray(pending, out_dir, ray_address, cache_dir, gpus_per_run)
    else:
        memo = {}
        for i, (name, cfgs) in enumerate(pending, 1):
            echo(f"[{i}/{len(pending)}] {name}")
            train_run(cfgs, out_dir / name, cache_dir, progress, memo)
    rows, histories = [], {}
    for name, cfgs in runs:
        res = read_results(out_dir / name)
        histories[name] = json.loads((out_dir / name / "metrics.json").read_text())
        row = {k: _short(v) for k, v in zip(grid, _grid_values(cfgs, grid))}
        row.update(run=name, attention=cfgs["model"].attention, d_osc=cfgs["model"].d_osc, p=cfgs["model"].p,
                   test_accuracy=res["test_accuracy"], best_val_accuracy=res["best_val_accuracy"],
                   parameters=res["parameters"], epochs=res["epochs"],
                   final_train_loss=histories[name][-1]["train_loss"],
                   max_grad_norm=max(e["max_grad_norm"] for e in histories[name]))
        rows.append(row)
        echo(f"{name}: test accuracy {res['test_accuracy']:.4f}")
    write_results(rows, out_dir)
    plot_training(rows, histories, out_dir / "training.png")
    return rows


def _grid_values(cfgs: dict, grid: dict) -> list:
    return [getattr(cfgs[k.split(".")[0]], k.split(".")[1]) for k in grid]


def write_results(rows: list[dict], out_dir: Path) -> None:
    write_json(out_dir / "results.json", rows)
    fields = list(dict.fromkeys(k for row in rows for k in row))
    with atomic_path(out_dir / "results.csv") as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fields)
        writer.writeheader()
        writer.writerows(rows)
    plot_accuracy(rows, out_dir / "accuracy.png")


def _kind(row: dict) -> str:
    return f"oscillator d_osc={row['d_osc']}" if row["attention"] == "oscillator" else row["attention"]


def plot_training(rows: list[dict], histories: dict[str, list[dict]], path: Path) -> None:
    """Training loss and the largest gradient norm (before clipping) per epoch, one line per run, one
    colour per attention kind and d_osc: loss spikes and exploding gradients show here."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colours = {k: f"C{i}" for i, k in enumerate(dict.fromkeys(_kind(r) for r in rows))}
    fig, (loss_ax, grad_ax) = plt.subplots(1, 2, figsize=(9, 3.5))
    for row in rows:
        hist, colour = histories[row["run"]], colours[_kind(row)]
        epochs = [e["epoch"] for e in hist]
        loss_ax.plot(epochs, [e["train_loss"] for e in hist], color=colour, lw=0.8)
        grad_ax.plot(epochs, [e["max_grad_norm"] for e in hist], color=colour, lw=0.8)
    for kind, colour in colours.items():
        loss_ax.plot([], [], color=colour, label=kind)
    loss_ax.set(xlabel="epoch", ylabel="training loss")
    grad_ax.set(xlabel="epoch", ylabel="largest gradient norm in the epoch", yscale="log")
    loss_ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def plot_accuracy(rows: list[dict], path: Path) -> None:
    """Test accuracy vs d_osc, one oscillator line per p (mean and spread over the other grid axes,
    e.g. seeds); other attention kinds as horizontal bands."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    by_kind = defaultdict(lambda: defaultdict(list))
    for r in rows:
        osc = r["attention"] == "oscillator"
        by_kind[f"oscillator p={r['p']}" if osc else r["attention"]][r["d_osc"] if osc else None].append(
            100 * r["test_accuracy"])
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for label in sorted(k for k in by_kind if k.startswith("oscillator")):
        osc = by_kind.pop(label)
        xs = sorted(osc)
        ax.errorbar(xs, [statistics.mean(osc[x]) for x in xs], fmt="o-", capsize=3, label=label,
                    yerr=[statistics.stdev(osc[x]) if len(osc[x]) > 1 else 0 for x in xs])
        ax.set_xscale("log", base=2)
    for kind, accs in by_kind.items():
        vals = accs[None]
        m, s = statistics.mean(vals), statistics.stdev(vals) if len(vals) > 1 else 0
        ax.axhline(m, ls="--", label=f"{kind} ({m:.1f}%)", color="k" if kind == "softmax" else "C7")
        ax.axhspan(m - s, m + s, alpha=0.15, color="k" if kind == "softmax" else "C7")
    ax.set_xlabel("d_osc")
    ax.set_ylabel("test accuracy (%)")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)
