"""Reports: a pipeline run's, accuracy over seeds, paired differences, accuracy per joule."""
from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

import click

from .app import Ordered, friendly_errors, main


@main.group(cls=Ordered)
def report():
    """Run reports, the README table, accuracy over runs.

    write: (re)write a pipeline run's report, with board measurements; readme: the README's summary table
    from a run's report; seeds: mean +- std of test accuracy over seeds, per setting, of any run folders; paired: A
    minus B run by run, with its standard error (a lever's effect); joule: each kind and size's accuracy against its
    estimated Cortex-M4 energy, flash and RAM.
    """


@report.command("write")
@click.argument("run", type=click.Path(exists=True, file_okay=False))
@click.option("--board", "boards", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A bench JSON measured on a board (`edgeosc bench models --json` on a Raspberry Pi); repeatable.")
@friendly_errors
def report_write(run, boards):
    """(Re)write a pipeline run's report, with board measurements.

    RUN/report/: the oscillator-vs-softmax report (Markdown, JSON, plots), merging the bench JSONs measured
    on boards.
    """
    from ..report import write_report
    click.echo(f"report: {write_report(run, None, boards)}")


@report.command("readme")
@click.argument("run", type=click.Path(exists=True, file_okay=False))
@click.option("--write", "target", type=click.Path(exists=True, dir_okay=False),
              help="Replace the block between <!-- demo-table:begin --> and <!-- demo-table:end --> in this file "
                   "(atomically; an error if the markers are missing or repeated) and refresh its plot, "
                   "docs/images/demo-estimates.png beside it, from RUN/report/estimates.png.")
@friendly_errors
def report_readme(run, target):
    """The README's summary table, from a run's report.json.

    One column per model kind, one row per figure RUN/report/report.json holds (accuracy, file sizes, firmware
    memory, latency per runtime, Cortex-M4 / M7 cycles, latency and energy, always-on cost), each labelled
    measured or estimated, under a line naming the run, the report's date and the machine. Printed, or with
    --write written into a README. After `make demo`: `edgeosc report readme runs/demo --write README.md`.
    """
    from ..report import readme_heading, readme_table, write_readme
    if not (Path(run) / "report" / "report.json").is_file():
        raise click.ClickException(f"no {Path(run) / 'report' / 'report.json'}: run `edgeosc report write {run}` first")
    if target:
        for path in write_readme(run, target):
            click.echo(f"wrote {path}")
        return
    r = json.loads((Path(run) / "report" / "report.json").read_text())
    click.echo(readme_heading(r) + "\n\n" + readme_table(r), nl=False)


@report.command("seeds")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True)
@friendly_errors
def report_seeds(run_dirs, as_json):
    """Mean +- std of test accuracy over seeds, per setting.

    Grouped by dataset, attention, size, d_osc, p. RUN_DIRS are run folders or folders holding them (searched for results.json).
    """
    from ..checkpoint import load_checkpoint
    from ..train import finished_runs
    groups = defaultdict(list)
    for folder, res in finished_runs(run_dirs):
        dataset = res.get("dataset") or load_checkpoint(folder / "best.pt").data_cfg.dataset
        attention = res["attention"] + (f" {res['quant']}" if res.get("quant") else "")  # QAT/PTQ apart
        key = (dataset, attention, res["size"], res["d_osc"] if res["attention"] == "oscillator" else "-",
               res["p"] if res["attention"] == "oscillator" else "-")
        groups[key].append(100 * res["test_accuracy"])
    if not groups:
        raise click.ClickException(f"no results.json under {', '.join(run_dirs)}")
    rows = [dict(dataset=k[0], attention=k[1], size=k[2], d_osc=k[3], p=k[4], n=len(v), mean=statistics.mean(v),
                 std=statistics.stdev(v) if len(v) > 1 else 0.0, runs=v) for k, v in sorted(groups.items(), key=str)]
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    aw = max(12, 1 + max(len(r["attention"]) for r in rows))
    click.echo(f"{'dataset':<16}{'attention':<{aw}}{'size':<8}{'d_osc':>6}{'p':>3}{'n':>4}  test accuracy %")
    for r in rows:
        click.echo(f"{r['dataset']:<16}{r['attention']:<{aw}}{r['size']:<8}{r['d_osc']:>6}{r['p']:>3}{r['n']:>4}  "
                   f"{r['mean']:6.2f} +- {r['std']:.2f}")


@report.command("paired")
@click.argument("a", type=click.Path(exists=True, file_okay=False))
@click.argument("b", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True)
@friendly_errors
def report_paired(a, b, as_json):
    """A minus B in accuracy, run by run: a lever's effect.

    Runs of the same name under A and B (the path below each: a fold and a seed, as `edgeosc train --out A/NAME` in
    a loop or two sweeps of one grid write them) are paired; per quantization (float, QAT / PTQ) the mean of each
    side, the mean difference and its standard error over the pairs. One pair is a probe; the proxy's runs move by
    points, so a lever needs several.
    """
    import math

    from ..train import finished_runs
    runs = [{f.relative_to(root).as_posix(): res for f, res in finished_runs([root])} for root in (a, b)]
    groups = defaultdict(list)
    for name in sorted(set(runs[0]) & set(runs[1])):
        ra, rb = runs[0][name], runs[1][name]
        if (ra.get("quant") or "float") == (rb.get("quant") or "float"):
            groups[ra.get("quant") or "float"].append((name, 100 * ra["test_accuracy"], 100 * rb["test_accuracy"]))
    if not groups:
        raise click.ClickException(f"no finished runs of the same name under both {a} and {b}")
    rows = []
    for quant, pairs in sorted(groups.items()):
        diffs = [x - y for _, x, y in pairs]
        rows.append(dict(quant=quant, n=len(pairs), a=statistics.mean(x for _, x, _ in pairs),
                         b=statistics.mean(y for _, _, y in pairs), diff=statistics.mean(diffs),
                         se=statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else None,
                         runs={name: round(x - y, 4) for name, x, y in pairs}))
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    click.echo(f"A = {a}, B = {b}: test accuracy %, paired by run name")
    for r in rows:
        se = "" if r["se"] is None else f" (standard error {r['se']:.2f})"
        click.echo(f"{r['quant']:<10} n {r['n']:>3}   A {r['a']:6.2f}   B {r['b']:6.2f}   A - B {r['diff']:+.2f}{se}")


@report.command("joule")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Also plot accuracy against energy here (.png, .svg or .pdf): one line per kind, error bars.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Also write the rows here.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Where each config's estimated cost is kept (default $EDGEOSC_CACHE or ~/.cache/edgeosc).")
@friendly_errors
def report_joule(run_dirs, plot_path, json_path, cache_dir):
    """Accuracy per joule: each kind and size against its Cortex-M4 cost.

    RUN_DIRS are run folders or folders holding them (searched for results.json beside best.pt), grouped by dataset,
    float or int8, kind and size: test accuracy mean +- sd over the runs, beside the ESTIMATED cost of one inference
    of that config on a Cortex-M4 (STM32L4R5: an untrained calibrated int8 network as generated firmware, emulated;
    about 7 s a config the first time, cached): MACs, cycles, latency, energy, x DS-CNN small's energy, flash and
    RAM. A Markdown table; --plot draws accuracy against energy, one line per kind.
    """
    from tqdm.auto import tqdm
    from ..bench.joule import curve, format_table, plot
    from ..data import default_cache_dir
    from ..io import write_json
    with tqdm(total=0, desc="estimating", leave=False) as bar:
        def progress(i, n, what):
            bar.total, bar.n = n, i
            bar.set_postfix_str(what)
            bar.refresh()
        rows = curve(run_dirs, cache_dir or default_cache_dir(), progress)
    if not rows:
        raise click.ClickException(f"no run (results.json beside best.pt) under {', '.join(run_dirs)}")
    click.echo(format_table(rows))
    if plot_path:
        click.echo(f"plot: {plot(rows, plot_path)}")
    if json_path:
        write_json(json_path, rows)
        click.echo(f"rows: {json_path}")
