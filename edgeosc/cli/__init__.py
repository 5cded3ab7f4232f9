"""The `edgeosc` command line, in the pipeline's order: data, train (float, QAT, PTQ) and eval, export, bench, report,
deploy, listen and stream-eval; pipeline and sweep run the whole job; lab holds research tools. One module per
topic registers its commands on the group (app.main), in that order.
"""
from . import data, train, export, bench, report, edge, run, lab  # noqa: F401  (registration, in help order)
from .app import main

__all__ = ["main"]
