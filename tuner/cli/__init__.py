"""The command line: a thin layer over validated specs and the store. It owns parsing the
command line, calling one function of the packages below for each command, and mapping the
outcome to an exit status (see `main`). It may import everything below it (tuner.report,
tuner.plan, tuner.search, tuner.serve, tuner.measure, tuner.store, tuner.spec); nothing
imports it.
"""

# Importing the command modules registers their commands on `app`; `tuner --help` lists them
# in this order.
# isort: off
from tuner.cli import study, hardware, results, choosing, dashboard, planning, model  # noqa: F401
# isort: on
from tuner.cli.app import app, main

__all__ = ["app", "main"]
