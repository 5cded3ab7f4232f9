"""Research tools."""
from __future__ import annotations


import click

from .app import CACHE_DIR, Ordered, friendly_errors, main


@main.group(cls=Ordered)
def lab():
    """Research tools: oscillator dynamics, attention, robustness."""


@lab.command()
@click.option("--samples", type=int, default=2000, show_default=True)
@click.option("--delta", type=float, default=0.1, show_default=True, help="Failure-mode threshold.")
def dynamics(samples, delta):
    """Lohe flow: closed-form check, convergence vs d_osc.

    Integrates the flow: closed-form error, convergence time and failure modes for each d_osc.
    """
    from ..dynamics import convergence_study
    click.echo(f"{'d_osc':>5} {'max rel err':>12} {'mean t':>8} {'p95 t':>8} {'P(|h|<delta)':>13} {'P(near -z*)':>12}")
    for d in (2, 3, 4, 8, 16, 32):
        r = convergence_study(d, samples, delta=delta)
        click.echo(f"{d:>5} {r.max_rel_error:>12.2e} {r.mean_time:>8.2f} {r.p95_time:>8.2f} "
                   f"{r.p_small_h:>13.4f} {r.p_near_antipode:>12.4f}")


@lab.command()
@click.argument("checkpoint", type=click.Path(exists=True, dir_okay=False))
@click.option("--clips", type=click.IntRange(min=1), default=200, show_default=True, help="Test clips to read.")
@CACHE_DIR
@friendly_errors
def sharpness(checkpoint, clips, cache_dir):
    """Keys each head reads per query; how much queries differ.

    Per block and head, over the first CLIPS test clips of the checkpoint's data set: the median effective number
    of keys per query (exp of its attention row's entropy; 1 is one key, the frame count all alike), the median
    largest weight, and the query specificity (the mean total-variation distance of a query's row from its clip's
    mean row: 0 when every query reads the same weights, a pooling). The oscillator's rows are read from its direct
    form, the same function over T x T.
    """
    import torch
    from ..checkpoint import load_checkpoint
    from ..data import load_dataset
    from ..features import FeatureExtractor
    from ..models.sharpness import sharpness as measure
    torch.set_num_threads(1)
    ckpt = load_checkpoint(checkpoint)
    data = load_dataset(ckpt.data_cfg, cache_dir, progress=False)
    idx = data.indices("test")[:clips]
    with torch.no_grad():
        feats = FeatureExtractor(ckpt.feature_cfg)(torch.as_tensor(data.audio[idx] / 32768.0, dtype=torch.float32))
    click.echo(f"{ckpt.model_cfg.attention}, {len(idx)} test clips: effective keys per query (largest weight) "
               f"[query specificity], median per head")
    for row in measure(ckpt.model, feats):
        click.echo(f"  block {row['block']}: " + "  ".join(
            f"{k:5.1f} ({w:.2f}) [{s:.2f}]" for k, w, s in zip(row["effective_keys"], row["largest_weight"],
                                                               row["query_specificity"])))


@lab.command()
@click.argument("checkpoints", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--clips", type=click.IntRange(min=1), default=None, help="Test clips to read (default: all).")
@click.option("--seed", type=int, default=0, show_default=True, help="The added noise's seed.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Also write the accuracies here.")
@CACHE_DIR
@friendly_errors
def robustness(checkpoints, clips, seed, json_out, cache_dir):
    """Accuracy under other channels, side by side.

    The checkpoint's test clips as recorded, played 10% slower and faster (pitch and duration together), 20 dB
    quieter, in white noise at 10 dB SNR, over a white noise floor at -50 dBFS (which also fills the digital zeros
    that pad short recordings), and through x[n] - 0.9 x[n-1] (a first-order tilt: the lows down by up to
    20 dB, as another microphone or vocal tract colours them), with the points each change costs. No training: what
    an unseen speaker or device may take away.
    """
    import json

    import torch
    from ..checkpoint import load_checkpoint
    from ..data import load_dataset
    from ..io import atomic_path
    from ..robustness import CONDITIONS, robustness as measure
    torch.set_num_threads(1)
    rows, ckpts = {}, {path: load_checkpoint(path) for path in checkpoints}  # every file checked before the work
    datasets = {cfg: load_dataset(cfg, cache_dir, progress=False) for cfg in {c.data_cfg for c in ckpts.values()}}
    for path, ckpt in ckpts.items():
        data = datasets[ckpt.data_cfg]  # seeds and kinds of one task read it once
        idx = data.indices("test")[:clips]
        rows[path] = measure(ckpt.model, ckpt.feature_cfg, data.audio[idx], data.labels[idx], seed=seed)
    names, width = list(CONDITIONS), max(len(p) for p in rows)
    click.echo("test accuracy (%) as recorded, and each change's points against it")
    columns = [max(12, len(n) + 2) for n in names]
    click.echo(f"{'checkpoint':<{width}}" + "".join(f"{n:>{w}}" for n, w in zip(names, columns)))
    for path, acc in rows.items():
        cells = [f"{100 * acc[names[0]]:.2f}"] + [f"{100 * (acc[n] - acc[names[0]]):+.2f}" for n in names[1:]]
        click.echo(f"{path:<{width}}" + "".join(f"{c:>{w}}" for c, w in zip(cells, columns)))
    if json_out:
        with atomic_path(json_out) as tmp:
            tmp.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
