"""Research tools."""
from __future__ import annotations


import click

from .app import Ordered, main


@main.group(cls=Ordered)
def lab():
    """Research tools (oscillator dynamics)."""


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


if __name__ == "__main__":
    main()
