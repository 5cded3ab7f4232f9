"""The whole job: the staged pipeline, and grids of runs."""
from __future__ import annotations

from pathlib import Path

import click

from .app import CACHE_DIR, DATA_FLAGS, QUIET, friendly_errors, main
from .options import config_options, sections


@main.command()
@config_options(tuple(sections()), [DATA_FLAGS[0], DATA_FLAGS[1], ("--epochs", "train.epochs", "Float training epochs"),
                                    ("--qat-epochs", "qat.epochs", "QAT epochs")])
@click.option("--out", type=click.Path(file_okay=False), default="runs/pipeline", show_default=True)
@CACHE_DIR
@QUIET
@friendly_errors
def pipeline(settings, out, cache_dir, quiet):
    """The whole job, staged and resumable: data to report.

    data -> float training (oscillator and softmax) -> QAT -> exports -> parity -> latency -> report. Re-running skips what is done and resumes what was cut; the config file is TOML with one table per
    section (edgeosc/pipeline.py).
    """
    from ..pipeline import PipelineError, run_pipeline
    cfg = settings.load()
    try:
        path = run_pipeline(cfg, out, cache_dir, progress=not quiet, echo=click.echo)
    except PipelineError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"report: {path}")


@main.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Sweep folder (default runs/sweep-<name>).")
@CACHE_DIR
@click.option("--ray-address", default=None,
              help="Run the grid as Ray Tune trials: 'local' starts Ray here, else a cluster address (ray://... or host:port).")
@click.option("--gpus-per-run", type=float, default=0.0, show_default=True, help="GPUs per Ray trial.")
@QUIET
@friendly_errors
def sweep(config, out, cache_dir, ray_address, gpus_per_run, quiet):
    """Train a grid of runs over config fields (TOML; Ray optional).

    CONFIG is a sweep file (see sweeps/); the runs train in-process, or as Ray Tune trials. Writes results.csv/json, accuracy.png and training.png (loss and largest gradient norm per epoch).
    Finished runs are skipped and unfinished ones resumed, so an interrupted sweep continues where it stopped.
    """
    from ..sweep import run_sweep
    out = Path(out or f"runs/sweep-{Path(config).stem}")
    rows = run_sweep(config, out, cache_dir, progress=not quiet, echo=click.echo, ray_address=ray_address,
                     gpus_per_run=gpus_per_run)
    click.echo(f"{len(rows)} runs; table {out / 'results.csv'}, plots {out / 'accuracy.png'}, {out / 'training.png'}")
