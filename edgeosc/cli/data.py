"""Make or inspect datasets."""
from __future__ import annotations


import click

from .app import CACHE_DIR, DATA_FLAGS, Ordered, describe, friendly_errors, main
from .options import config_options


@main.group(cls=Ordered)
def data():
    """Make or inspect datasets (synthetic, Speech Commands, FSDD)."""


@data.command("synth")
@config_options(("data",), [("--seed", "data.seed", "Seed of the synthetic set"), DATA_FLAGS[4], DATA_FLAGS[5]])
@CACHE_DIR
@friendly_errors
def data_synth(settings, cache_dir):
    """Generate (once, then cached) the synthetic keyword set.

    12 classes spoken by eSpeak NG voice variants (and recorded-speaker voices), split by voice.
    """
    from ..data import load_dataset
    cfg = settings.load().data
    if cfg.dataset != "synth":
        raise click.ClickException(f"`edgeosc data synth` makes the synthetic set, not {cfg.dataset} "
                                   "(see `edgeosc data info`)")
    click.echo(describe(load_dataset(cfg, cache_dir)))


@data.command("info")
@config_options(("data",), DATA_FLAGS)
@CACHE_DIR
@friendly_errors
def data_info(settings, cache_dir):
    """Load a dataset and print its splits and skipped files.

    Decodes and caches it on first use.
    """
    from ..data import load_dataset
    ds = load_dataset(settings.load().data, cache_dir)
    click.echo(describe(ds))
    for f, why in ds.skipped[:20]:
        click.echo(f"  skipped {f}: {why}")
