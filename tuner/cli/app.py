"""The Typer app, the options, printer and helpers its command groups share, and main(), which
maps a command's outcome to tuner's exit status."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from rich.console import Console

from tuner.spec.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, BadInput, NoResult, TunerError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode="markdown",  # a docstring's line breaks join, as in prose
                  help="Find the fastest way to serve an LLM by launching real serving trials.")


class _StudyConsole(Console):
    """The terminal, saying figures in the study's unit (per core on a CPU node) once a command
    knows its study (`for_study`): `tuner.report.units` is the rule."""

    gpu_type: str | None = None

    def for_study(self, gpu_type: str | None) -> None:
        self.gpu_type = gpu_type

    def print(self, *objects: Any, **kwargs: Any) -> None:
        if self.gpu_type is not None:
            from tuner.report.units import in_units

            objects = tuple(in_units(o, self.gpu_type) if isinstance(o, str) else o
                            for o in objects)
        super().print(*objects, **kwargs)


out = _StudyConsole(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

StorageOpt = Annotated[str | None, typer.Option("--storage", envvar="TUNER_STORAGE",
                                                show_envvar=False, help="Database URL "
                                                "(default: $TUNER_STORAGE, else "
                                                "sqlite:///tuner.db).")]
StudyOpt = Annotated[str | None, typer.Option("--study", help="Study name (default: the only "
                                              "study in the database).")]


def _say(line: str) -> None:
    out.print(line)


def _open(storage: str | None):
    from tuner.spec.study_spec import DEFAULT_STORAGE
    from tuner.store import Store, StoreError

    try:
        return Store.open(storage or DEFAULT_STORAGE, create=False)
    except StoreError as e:
        raise BadInput(str(e)) from e


def _pick_study(store, name: str | None):
    studies = store.list_studies()
    if name is not None:
        found = store.get_study(name)
        if found is None:
            names = ", ".join(s.name for s in studies) or "none"
            raise BadInput(f"--study {name}: no such study in this database (studies: {names})")
        return found
    if not studies:
        raise NoResult("the database holds no study yet: run `tuner run STUDY.yaml` first")
    if len(studies) > 1:
        names = ", ".join(s.name for s in studies)
        raise BadInput(f"the database holds several studies ({names}): choose one with --study")
    return studies[0]


def _table(frame, width: int = 70) -> str:
    """A frame as text: numbers with thousands separators, '-' for missing, long text cut."""
    def cell(v):
        if v is None or (isinstance(v, float) and v != v):
            return "-"
        if isinstance(v, float):
            return f"{v:,.1f}" if abs(v) < 100 else f"{v:,.0f}"
        text = str(v)
        return text if len(text) <= width else text[: width - 1] + "…"

    def money(v):  # USD figures are often cents or less: significant digits, not places
        if isinstance(v, float) and v == v and abs(v) < 100:
            return f"{v:,.4g}"
        return cell(v)

    frame = frame.astype(object)
    for c in frame.columns:
        frame[c] = frame[c].map(money if "usd" in str(c).lower() else cell)
    return frame.to_string(index=False)


def _print_trials(trials, study=None) -> None:
    from tuner.report.tables import trials_frame
    from tuner.report.units import frame_in_units

    frame = trials_frame(trials, study)
    if study is not None:
        frame = frame_in_units(frame, study.gpu_type)
    out.print(_table(frame) if not frame.empty else "no trials yet")


def _print_best(study, best, trials) -> None:
    from tuner.report.tables import objective_usd_per_mtok, quality_text, trial_measurements_frame
    from tuner.spec.space import describe
    from tuner.verdict.rules import figure, is_confirmed, met_sla, server_spread_line

    out.for_study(study.gpu_type)
    out.print(f"\nbest of study {study.name}: trial {best.number}  {describe(best.params)}")
    shown = figure(best, study)
    other = f"; {shown.other_text()}" if shown.other is not None else ""
    out.print(f"  {shown.value:,.0f} output tok/s per GPU (SLA met), from its {shown.source}"
              f"{other}; engine {study.engine} {best.engine_version or ''}".rstrip())
    _print_cost(study, best, objective_usd_per_mtok(study, best))
    if best.quality is not None:
        out.print(f"  quality against the reference: {quality_text(best.quality)}")
    if best.load_search is not None:
        out.print(f"  load search: {best.load_search}")
    out.print(_table(trial_measurements_frame(study, best)))
    _print_convergence(study, best.measurements)
    if best.confirm_state is None:
        out.print("  not confirmed: `tuner confirm STUDY.yaml` re-runs the best trials in fresh "
                  "servers")
        return
    again = ("" if best.confirm_objective is None
             else f", {best.confirm_objective:,.0f} tok/s/GPU")
    out.print(f"  confirmation in a fresh server: {best.confirm_state}{again}"
              + (f" ({best.confirm_reason})" if best.confirm_reason else ""))
    out.print(_table(trial_measurements_frame(study, best, confirmation=True)))
    _print_convergence(study, best.confirmation)
    if study.head_to_head is not None:
        from tuner.verdict.finalists import summary_lines

        for line in summary_lines(study.head_to_head):
            out.print(f"  {line}")
    spread = server_spread_line(trials, best)
    if spread:
        out.print(f"  {spread}")
    higher = [t.number for t in trials if met_sla(t)
              and t.confirm_state is None and (t.objective or 0) > (best.confirm_objective or 0)]
    if is_confirmed(best) and higher:
        out.print(f"  unconfirmed trial(s) {', '.join(map(str, higher))} measured higher once: "
                  "`tuner confirm` re-runs them")


def _print_convergence(study, levels) -> None:
    """A line for each level whose throughput did not converge, saying why."""
    from tuner.measure.metrics import convergence_note
    from tuner.spec.study_spec import WorkloadSpec

    workload, default = study.spec.get("workload", {}), WorkloadSpec.model_fields
    target = workload.get("ci_target", default["ci_target"].default)
    rounds = workload.get("max_rounds", default["max_rounds"].default)
    for m in levels:
        note = convergence_note(m, target, rounds)
        if note:
            where = f"c={m.concurrency}" if m.request_rate is None else f"{m.request_rate:g} req/s"
            out.print(f"  {where}: {note}")


def _print_cost(study, trial, usd_per_mtok: float | None) -> None:
    """One line: USD per million output tokens, and the price it rests on (an example figure
    unless the spec set hardware.gpu_hour_usd)."""
    from tuner.verdict.cost import device_unit, no_price_text, study_price

    price = study_price(study)
    if price is None:
        out.print(f"  {no_price_text(study.gpu_type)}")
        return
    unit = device_unit(study.gpu_type)
    where = ("EXAMPLE price from tuner/data/gpu_prices.csv; set hardware.gpu_hour_usd for "
             "yours" if price.example else "hardware.gpu_hour_usd")
    cost = "-" if usd_per_mtok is None else f"{usd_per_mtok:,.4g}"
    out.print(f"  {cost} USD per million output tokens at {price.usd_per_hour:g} USD per "
              f"{unit}-hour x {trial.gpus} ({where})")


def _store(url: str):
    from tuner.store import Store, StoreError

    try:
        return Store.open(url)
    except StoreError as e:
        raise BadInput(str(e)) from e


def main(argv: list[str] | None = None) -> None:
    """Run the app on `argv` (default: the command line) and exit with tuner's status: 0 ok;
    1 an unexpected error inside a trial (recorded on it); 2 bad input (a spec, flag, file or
    database that cannot be used as given); 3 no result (no trial met the SLA); 130 interrupted.

    This is the one boundary where an expected failure becomes one line on stderr and its
    status; anything else is a bug and keeps its traceback."""
    out.for_study(None)  # each command says its own study's unit
    try:
        # Typer turns a KeyboardInterrupt (Ctrl-C, or SIGTERM during a study) into exit code 130
        # and, outside standalone mode, returns it rather than exiting.
        code = app(args=argv, standalone_mode=False)
    except TunerError as e:
        _fail(str(e), e.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted: the running trial was stopped and recorded as failed",
              EXIT_INTERRUPTED, prefix="")
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:  # click usage errors come through here in standalone_mode=False
        usage, abort = _click_errors()
        if isinstance(e, usage):
            message = e.format_message()
            if message:  # bare `tuner` printed its help already
                err.print(f"error: {' '.join(message.split())}")
            sys.exit(EXIT_BAD_INPUT)
        if isinstance(e, abort):
            sys.exit(EXIT_INTERRUPTED)
        line = expected_failure(e)
        if line is None:
            raise
        _fail(line, EXIT_BAD_INPUT)
    if code == EXIT_INTERRUPTED:
        err.print("interrupted: the running trial was stopped and recorded as failed")
    if isinstance(code, int) and code:
        sys.exit(code)


def _fail(message: str, status: int, prefix: str = "error: ") -> None:
    err.print(prefix + " ".join(map(_shortened, message.split())), markup=False)
    sys.exit(status)


def _shortened(word: str, limit: int = 120) -> str:
    """A word of an error line as a reader can take it in: a path or URL of thousands of
    characters (a hostile input, quoted back) is cut to its ends and its length."""
    if len(word) <= limit:
        return word
    return f"{word[:60]}…{word[-20:]} ({len(word):,} characters)"


def expected_failure(e: BaseException) -> str | None:
    """The one line for a failure that is the input's or the machine's rather than a bug in
    tuner (a database that cannot be written, a file that cannot be read), or None."""
    from sqlalchemy.exc import SQLAlchemyError

    from tuner.search.bridge import StorageUnavailable
    from tuner.store import StoreError

    if isinstance(e, StoreError):
        return str(e)
    if isinstance(e, StorageUnavailable | SQLAlchemyError):
        cause = e.__cause__ or e.__context__ or e
        first = (str(getattr(cause, "orig", None) or cause).splitlines() or [""])[0]
        return (f"the study database cannot be used as given ({first}): check that it is "
                "writable, not locked by another program, and reachable, then re-run")
    if isinstance(e, UnicodeError):
        return f"a file is not UTF-8 text ({e}): save it as UTF-8"
    if isinstance(e, OSError):
        where = f" {e.filename}" if e.filename else ""
        return f"cannot use{where}: {e.strerror or e}: check the path and its permissions"
    return None


def _click_errors() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """Click's usage-error and abort types: Typer 0.29 raises its own (`typer.Abort`, and the
    usage errors of the copy of Click it bundles), older Typers those of Click itself."""
    import click

    usage: list[type] = [click.exceptions.ClickException]
    try:
        from typer._click.exceptions import ClickException
    except ImportError:
        pass
    else:
        usage.append(ClickException)
    return tuple(usage), (click.exceptions.Abort, typer.Abort)
