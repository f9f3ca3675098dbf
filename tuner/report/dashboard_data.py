"""What the dashboard shows, as plain data: studies, trials, measured points, the Pareto front,
failures and parameter importance.

Pure functions over the store's records (and Optuna's study, for importance). The Streamlit pages
in `dashboard/` only draw what these return, and tests call them directly. Nothing here writes to
the database, starts a server or imports the launcher: the dashboard is a reader that keeps working
while a study writes.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar
from urllib.parse import urlencode

import pandas as pd
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError

from tuner.measure.metrics import confidence_text
from tuner.report.export import best_trial, write_export
from tuner.report.tables import measurements_frame, state_counts
from tuner.spec.errors import BadInput, NoResult
from tuner.spec.space import SHORT_NAMES, describe
from tuner.spec.study_spec import DEFAULT_STORAGE
from tuner.store import Store, StoreError, StudyRecord, TrialRecord

# `tuner dashboard` passes the storage URL to the Streamlit app in this variable: no shell
# quoting, and a PostgreSQL password stays out of the process list.
STORAGE_ENV = "TUNER_DASHBOARD_STORAGE"

# Column names shared by the frames below and the pages that draw them.
TOK_GPU = "tok/s/GPU"
USER_P90 = "tok/s/user p90"
CONFIRMED_TOK_GPU = "confirmed tok/s/GPU"
USER_P50 = "tok/s/user p50"
STATES = ("complete", "failed", "infeasible", "running")

T = TypeVar("T")


def storage_url() -> str:
    """The database the dashboard reads: set by `tuner dashboard --storage`, else the default."""
    return os.environ.get(STORAGE_ENV) or DEFAULT_STORAGE


def page_url(page: str, **params: Any) -> str:
    """A relative link to one of the dashboard's pages: `study?study=NAME`."""
    return page + ("?" + urlencode({k: str(v) for k, v in params.items()}) if params else "")


# ---------------------------------------------------------------- reading, safely


def _is_locked(e: BaseException) -> bool:
    text = str(e).lower()
    return "database is locked" in text or "database table is locked" in text or "busy" in text


def with_retry(read: Callable[[], T], *, attempts: int = 6, first_delay_s: float = 0.05) -> T:
    """`read()`, retried briefly while another process holds an SQLite lock (a study writing or
    checkpointing). Any other error, or a lock that outlasts the retries, is raised as is."""
    delay = first_delay_s
    for attempt in range(attempts):
        try:
            return read()
        except (StoreError, OperationalError) as e:
            if attempt == attempts - 1 or not _is_locked(e):
                raise
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def open_store(url: str) -> Store:
    """The store, opened for reading: a missing or foreign database raises StoreError (one line,
    the store's own message), never creates one."""
    return with_retry(lambda: Store.open(url, create=False))


def sqlite_file(url: str) -> Path | None:
    """The database file of a sqlite:/// URL, else None."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    if parsed.database == ":memory:" or parsed.database.startswith("file:"):
        return None
    return Path(parsed.database)


def data_version(url: str, *, now: float | None = None, period_s: float = 5.0) -> tuple:
    """A value that changes whenever the database's contents may have changed: cache keys.

    For an SQLite file, the size and modification time of the file and of its write-ahead log
    (every commit appends to the log; a checkpoint rewrites the file). For a server database,
    the current `period_s` time bucket, so pages re-read at most that often.
    """
    path = sqlite_file(url)
    if path is None:
        return ("time", int((time.time() if now is None else now) // period_s))
    version: list[Any] = ["sqlite"]
    for p in (path, path.with_name(path.name + "-wal")):
        try:
            st = p.stat()
            version += [st.st_mtime_ns, st.st_size]
        except OSError:
            version += [None, None]
    return tuple(version)


@dataclass
class StudyData:
    """One study as stored: its record and every trial, by number."""

    study: StudyRecord
    trials: list[TrialRecord]


def read_study(store: Store, name: str) -> StudyData | None:
    study = with_retry(lambda: store.get_study(name))
    if study is None:
        return None
    return StudyData(study, with_retry(lambda: store.trials(name)))


def read_studies(store: Store) -> list[StudyData]:
    studies = with_retry(store.list_studies)
    return [StudyData(s, with_retry(lambda s=s: store.trials(s.name))) for s in studies]


# ---------------------------------------------------------------- studies


@dataclass
class StudySummary:
    name: str
    model: str
    engine: str
    gpu_type: str
    state: str  # empty | running | finished | stopped
    counts: dict[str, int]
    launched: int  # trials that launched a server and reached a verdict (what the budget counts)
    budget: int | None
    best: TrialRecord | None
    started: dt.datetime | None
    finished: dt.datetime | None
    sla: dict[str, Any]
    workload: dict[str, Any]

    @property
    def best_value(self) -> float | None:
        return None if self.best is None else self.best.objective


def model_name(model: str) -> str:
    """A model's short name: the last part of a path (the full path is in the study record)."""
    return Path(model).name or model


def best_of(data: StudyData) -> TrialRecord | None:
    """The best trial as `tuner best` and the exports define it, or None when none met the SLA."""
    try:
        return best_trial(data.study, data.trials)
    except NoResult:
        return None


def _launched(trials: Iterable[TrialRecord]) -> int:
    """Trials that count against the budget: a server launched and reached a verdict."""
    return sum(1 for t in trials if t.state == "complete"
               or (t.state == "failed" and t.failure_kind != "interrupted"))


def summarize(data: StudyData) -> StudySummary:
    trials = data.trials
    counts = state_counts(trials)
    budget = (data.study.spec.get("budget") or {}).get("n_trials")
    if not trials:
        state = "empty"
    elif counts["running"]:
        state = "running"
    elif budget is not None and _launched(trials) >= budget:
        state = "finished"
    else:
        state = "stopped"
    ends = [t.finished_at for t in trials if t.finished_at is not None]
    return StudySummary(
        name=data.study.name, model=model_name(data.study.model), engine=data.study.engine,
        gpu_type=data.study.gpu_type, state=state, counts=counts,
        launched=_launched(trials), budget=budget,
        best=best_of(data),
        started=min((t.started_at for t in trials), default=None),
        finished=max(ends) if ends and state != "running" else None,
        sla=dict(data.study.spec.get("sla") or {}),
        workload=dict(data.study.spec.get("workload") or {}),
    )


def overview_frame(summaries: list[StudySummary]) -> pd.DataFrame:
    """One row per study: what it tuned, how far it got, and its best figure."""
    columns = ["study", "model", "engine", "GPU type", "state", "complete", "failed",
               "infeasible", "running", "budget", f"best {TOK_GPU}", "best trial", "started",
               "finished"]
    rows = [{
        "study": s.name, "model": s.model, "engine": s.engine, "GPU type": s.gpu_type,
        "state": s.state, **{k: s.counts.get(k, 0) for k in STATES}, "budget": s.budget,
        f"best {TOK_GPU}": s.best_value, "best trial": None if s.best is None else s.best.number,
        "started": _local(s.started), "finished": _local(s.finished),
    } for s in summaries]
    return pd.DataFrame(rows, columns=columns)


def _local(t: dt.datetime | None) -> pd.Timestamp | None:
    # Shown as UTC without a zone suffix; the pages say the times are UTC.
    return None if t is None else pd.Timestamp(t.astimezone(dt.timezone.utc).replace(tzinfo=None))


# ---------------------------------------------------------------- trials


def param_columns(data: StudyData) -> list[str]:
    """The study's parameters in the search space's order, then any others a trial has."""
    names = list((data.study.space or {}).get("parameters", {}) or {})
    for t in data.trials:
        names += [k for k in t.params if k not in names]
    return names


def param_label(name: str) -> str:
    return SHORT_NAMES.get(name, name)


def _best_level(trial: TrialRecord):
    """The level the objective comes from: the fastest per GPU among those meeting the SLA."""
    return max((m for m in trial.measurements if m.meets_sla),
               key=lambda m: m.output_tok_s_per_gpu, default=None)


def param_value(v: Any) -> Any:
    """A parameter value as the tables show it: booleans as on/off."""
    if isinstance(v, bool):
        return "on" if v else "off"
    return v


def trials_frame(data: StudyData) -> pd.DataFrame:
    """One row per trial: state, each parameter in its own column, the figures at the level the
    objective comes from, and the failure reason."""
    params = param_columns(data)
    rows = []
    for t in data.trials:
        level = _best_level(t)
        duration = (t.finished_at - t.started_at).total_seconds() if t.finished_at else None
        rows.append({
            "trial": t.number, "state": t.state, "config": describe(t.params),
            **{param_label(p): param_value(t.params.get(p)) for p in params},
            TOK_GPU: t.objective,
            "SLA": None if t.meets_sla is None else ("met" if t.meets_sla else "missed"),
            "at c": None if level is None else level.concurrency,
            "TTFT p90 ms": None if level is None else level.ttft_p90_ms,
            USER_P90: None if level is None else level.tok_s_per_user_p90,
            "GPUs": t.gpus, "failure": t.failure_kind, "reason": t.failure_reason,
            "confirmation": t.confirm_state, CONFIRMED_TOK_GPU: t.confirm_objective,
            "started": _local(t.started_at), "duration s": duration,
        })
    columns = ["trial", "state", "config", *map(param_label, params), TOK_GPU, "SLA", "at c",
               "TTFT p90 ms", USER_P90, "GPUs", "failure", "reason", "confirmation",
               CONFIRMED_TOK_GPU, "started", "duration s"]
    frame = pd.DataFrame(rows, columns=columns)
    for c in (TOK_GPU, "TTFT p90 ms", USER_P90, CONFIRMED_TOK_GPU, "duration s"):
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("float64")
    for c in ("at c", "GPUs"):
        frame[c] = frame[c].astype("Int64")
    return frame


def filter_trials(frame: pd.DataFrame, *, states: Iterable[str] | None = None,
                  params: dict[str, Iterable[Any]] | None = None) -> pd.DataFrame:
    """The rows whose state is one of `states` and whose parameter columns take one of the
    given values (a missing or empty selection keeps every row)."""
    keep = pd.Series(True, index=frame.index)
    states = list(states or [])
    if states:
        keep &= frame["state"].isin(states)
    for column, values in (params or {}).items():
        values = list(values)
        if values:
            keep &= frame[column].isin(values)
    return frame[keep]


def option_order(value: Any) -> tuple:
    """Sort key for a parameter's values: numbers by size, then text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def sort_trials(frame: pd.DataFrame, by: str, *, descending: bool = True) -> pd.DataFrame:
    """Sorted by one column, missing values last whatever the direction."""
    return frame.sort_values(by, ascending=not descending, na_position="last", kind="stable")


# ---------------------------------------------------------------- progress


def progress_frame(data: StudyData, *, by: str = "trial") -> pd.DataFrame:
    """Finished trials in order (by trial number, or by finish time), each with its objective
    (None unless it met the SLA) and the best objective so far."""
    if by not in ("trial", "time"):
        raise ValueError(f"by={by!r}: expected 'trial' or 'time'")
    done = [t for t in data.trials if t.finished_at is not None]
    done.sort(key=(lambda t: t.number) if by == "trial" else (lambda t: t.finished_at))
    rows, best = [], None
    for t in done:
        ok = t.state == "complete" and t.meets_sla and t.objective is not None
        if ok:
            best = t.objective if best is None else max(best, t.objective)
        rows.append({"trial": t.number, "finished": _local(t.finished_at), "state": t.state,
                     "outcome": _outcome(t), "config": describe(t.params),
                     TOK_GPU: t.objective, "best so far": best})
    frame = pd.DataFrame(rows, columns=["trial", "finished", "state", "outcome", "config",
                                        TOK_GPU, "best so far"])
    for c in (TOK_GPU, "best so far"):
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("float64")
    return frame


def _outcome(t: TrialRecord) -> str:
    if t.state == "complete":
        return "met SLA" if t.meets_sla else "missed SLA"
    return t.state


# ---------------------------------------------------------------- measured points and Pareto


def parallelism(params: dict[str, Any]) -> str:
    """`TP2`, `TP2×DP2`, `TP1×DP2 EP`, `TP8 ADP EP8`: how the model is split over the GPUs."""
    tp = params.get("tensor_parallel_size") or 1
    dp = params.get("data_parallel_size") or 1
    label = f"TP{tp}" + (f"×DP{dp}" if dp != 1 else "")
    if params.get("enable_attention_dp"):
        label += " ADP"
    ep = params.get("expert_parallel_size")
    if isinstance(ep, int) and ep > 1:
        label += f" EP{ep}"
    elif params.get("enable_expert_parallel"):
        label += " EP"
    return label


POINT_COLUMNS = ["study", "gpu type", "engine", "trial", "state", "concurrency", "parallelism",
                 "series", "config", TOK_GPU, USER_P90, USER_P50, "TTFT p90 ms", "errors",
                 "meets SLA"]


def measured_points(data: StudyData) -> pd.DataFrame:
    """One row per trial and concurrency level that was measured, from every trial that has
    measurements (a failed trial's levels included: they show where it broke)."""
    engine = data.study.engine
    rows = []
    for t in data.trials:
        par = parallelism(t.params)
        config = describe(t.params)
        for m in t.measurements:
            rows.append({
                "study": data.study.name, "gpu type": data.study.gpu_type, "engine": engine,
                "trial": t.number, "state": t.state, "concurrency": m.concurrency,
                "parallelism": par, "series": f"{engine} {par}", "config": config,
                TOK_GPU: m.output_tok_s_per_gpu, USER_P90: m.tok_s_per_user_p90,
                USER_P50: m.tok_s_per_user_p50, "TTFT p90 ms": m.ttft_p90_ms,
                "errors": m.errors, "meets SLA": bool(m.meets_sla),
            })
    frame = pd.DataFrame(rows, columns=POINT_COLUMNS)
    for c in (TOK_GPU, USER_P90, USER_P50, "TTFT p90 ms"):
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("float64")
    return frame


class ParetoFront(NamedTuple):
    """The measured points with an `on front` column, and the front alone sorted along x."""

    points: pd.DataFrame
    front: pd.DataFrame


def pareto_front(points: pd.DataFrame, *, x: str = USER_P90, y: str = TOK_GPU) -> ParetoFront:
    """The points no other point beats on both x and y (both maximized).

    Points missing either figure, or with no throughput at all (every request failed), are never
    on the front. Of identical points, the first is kept.
    """
    points = points.copy()
    on = pd.Series(False, index=points.index)
    usable = points[points[x].notna() & points[y].notna() & (points[y] > 0)]
    # Best x first, ties by best y; a point is on the front when it beats every y seen so far.
    order = usable.sort_values([x, y], ascending=[False, False], kind="stable")
    best_y = -math.inf
    for index, y_value in zip(order.index, order[y], strict=True):
        if y_value > best_y:
            on[index] = True
            best_y = y_value
    points["on front"] = on
    front = points[on].sort_values(x, kind="stable")
    return ParetoFront(points, front)


def compare_points(datas: list[StudyData], *, x: str = USER_P90) -> ParetoFront:
    """Every study's measured points and each study's own Pareto front, side by side."""
    fronts = [pareto_front(measured_points(d), x=x) for d in datas]
    if not fronts:
        empty = pd.DataFrame(columns=[*POINT_COLUMNS, "on front"])
        return ParetoFront(empty, empty)
    return ParetoFront(pd.concat([f.points for f in fronts], ignore_index=True),
                       pd.concat([f.front for f in fronts], ignore_index=True))


def sla_user_floor(sla: dict[str, Any]) -> float | None:
    """The SLA's per-user speed (p90) as a line on the Pareto chart, if the SLA sets one."""
    v = sla.get("min_tok_s_per_user_p90")
    return None if v is None else float(v)


def sla_text(sla: dict[str, Any]) -> str:
    parts = []
    if sla.get("ttft_p90_ms") is not None:
        parts.append(f"TTFT p90 ≤ {sla['ttft_p90_ms']:,.0f} ms")
    if sla.get("min_tok_s_per_user_p90") is not None:
        parts.append(f"≥ {sla['min_tok_s_per_user_p90']:,.0f} tok/s per user (p90)")
    parts.append("no failed requests")
    return ", ".join(parts)


# ---------------------------------------------------------------- the best configuration


@dataclass
class BestCard:
    """What a user takes away: the configuration, its figures, the command and the files."""

    trial: TrialRecord
    params: dict[str, Any]
    figures: dict[str, Any]  # label -> value, in display order
    command: str | None  # the launch command with its environment, as a shell line
    files: dict[str, bytes]  # export file name -> content, exactly as `tuner export` writes
    notes: list[str] = field(default_factory=list)  # exports that could not be made, and why


def export_files(study: StudyRecord, trial: TrialRecord) -> tuple[dict[str, bytes], list[str]]:
    """Every export of this trial, written by tuner.export itself into a scratch folder and read
    back, so the dashboard's downloads are byte for byte what `tuner export` writes.

    Returns the files (name -> content) and, for a format that cannot be made for this trial
    (a Kubernetes manifest without a known image, say), the one-line reason instead.
    """
    files: dict[str, bytes] = {}
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tuner-dashboard-") as tmp:
        for i, formats in enumerate((None, ("k8s",))):
            out = Path(tmp) / str(i)
            try:
                paths = write_export(study, trial, out) if formats is None else \
                    write_export(study, trial, out, formats)
            except BadInput as e:
                notes.append(str(e))
                continue
            files.update((p.name, p.read_bytes()) for p in paths)
    return files, notes


def confirmation_text(trial: TrialRecord) -> str:
    """One line on the trial's re-run in a fresh server, as `tuner best` says it."""
    if trial.confirm_state is None:
        return "not confirmed: `tuner confirm` re-runs the best trials in fresh servers"
    value = "" if trial.confirm_objective is None else f" at {trial.confirm_objective:,.0f} "\
        f"{TOK_GPU}"
    reason = f" ({trial.confirm_reason})" if trial.confirm_reason else ""
    return f"confirmation in a fresh server: {trial.confirm_state}{value}{reason}"


def best_card(data: StudyData, trial: TrialRecord | None = None) -> BestCard | None:
    """The card of the best trial (or of `trial`), or None when no trial met the SLA."""
    trial = trial or best_of(data)
    if trial is None:
        return None
    files, notes = export_files(data.study, trial)
    record = json.loads(files["best.json"]) if "best.json" in files else None
    command = record["launch"]["shell"] if record else None
    level = _best_level(trial)
    figures: dict[str, Any] = {
        TOK_GPU: trial.objective,
        "at concurrency": None if level is None else level.concurrency,
        "at rate req/s": None if level is None else level.request_rate,
        "tok/s 95% CI": None if level is None else confidence_text(level),
        "tok/s total": None if level is None else level.output_tok_s,
        "TTFT p90 ms": None if level is None else level.ttft_p90_ms,
        "ITL p50 ms": None if level is None else level.itl_p50_ms,
        USER_P90: None if level is None else level.tok_s_per_user_p90,
        "e2e p90 ms": None if level is None else level.e2e_p90_ms,
        "GPUs": trial.gpus,
        "engine": f"{data.study.engine} {trial.engine_version or ''}".strip(),
        "confirmation": confirmation_text(trial),
    }
    return BestCard(trial=trial, params=dict(trial.params), figures=figures, command=command,
                    files=files, notes=notes)


# ---------------------------------------------------------------- failures


@dataclass
class FailureGroup:
    kind: str
    reason: str
    trials: list[int] = field(default_factory=list)
    configs: list[str] = field(default_factory=list)
    log_tail: str | None = None  # of the latest trial in the group that kept one


def failure_groups(data: StudyData) -> list[FailureGroup]:
    """Failed and infeasible trials grouped by kind and reason, the largest group first."""
    groups: dict[tuple[str, str], FailureGroup] = {}
    for t in data.trials:
        if t.state not in ("failed", "infeasible"):
            continue
        kind = t.failure_kind or t.state
        reason = t.failure_reason or "no reason recorded"
        g = groups.setdefault((kind, reason), FailureGroup(kind, reason))
        g.trials.append(t.number)
        g.configs.append(describe(t.params))
        if t.log_tail:
            g.log_tail = t.log_tail
    return sorted(groups.values(), key=lambda g: (-len(g.trials), g.kind, g.trials[0]))


# ---------------------------------------------------------------- one trial


LEVEL_COLUMNS = {
    "concurrency": "concurrency", "request_rate": "rate req/s", "meets_sla": "meets SLA",
    "output_tok_s_per_gpu": TOK_GPU, "tok/s 95%": "tok/s 95% CI", "rounds": "rounds",
    "converged": "converged", "output_tok_s": "tok/s total", "tok_s_per_user_p50": USER_P50,
    "tok_s_per_user_p90": USER_P90, "ttft_p50_ms": "TTFT p50 ms", "ttft_p90_ms": "TTFT p90 ms",
    "ttft_p99_ms": "TTFT p99 ms", "itl_p50_ms": "ITL p50 ms", "itl_p90_ms": "ITL p90 ms",
    "tpot_p50_ms": "TPOT p50 ms", "e2e_p50_ms": "e2e p50 ms", "e2e_p90_ms": "e2e p90 ms",
    "ttft_mean_ms": "TTFT mean ms", "ttft_mean_ci95_ms": "TTFT mean ± ms",
    "itl_mean_ms": "ITL mean ms", "itl_mean_ci95_ms": "ITL mean ± ms",
    "goodput_rps": "goodput req/s", "kv_cache_usage_max": "KV cache max",
    "requests_running_max": "running max", "requests_waiting_max": "waiting max",
    "preemptions": "preemptions", "requests": "requests", "errors": "errors",
    "duration_s": "duration s", "error_sample": "first error",
}


def levels_frame(trial: TrialRecord, *, confirmation: bool = False) -> pd.DataFrame:
    """One row per level of the trial's first run (or of its confirmation): tuner.report's
    figures plus tails, end-to-end, means with their 95% half-widths and the engine's gauges,
    named for reading (`TTFT p90 ms`, `tok/s/GPU`); a level whose rounds ran out before its
    interval was tight says NOT CONVERGED."""
    levels = trial.confirmation if confirmation else trial.measurements
    frame = measurements_frame(levels)
    for c in LEVEL_COLUMNS:
        if c not in frame.columns:
            frame[c] = [getattr(m, c) for m in levels]
    return frame[list(LEVEL_COLUMNS)].rename(columns=LEVEL_COLUMNS)


@dataclass
class LaunchView:
    command: str  # argv as one shell line
    env: dict[str, str]
    files: dict[str, str]
    where: str  # host:port it served on


def launch_view(trial: TrialRecord) -> LaunchView | None:
    """The launch plan the trial ran with, as stored (None for a trial that never launched)."""
    import shlex

    plan = trial.launch_plan
    if not plan:
        return None
    return LaunchView(command=shlex.join(plan.get("argv", [])), env=dict(plan.get("env") or {}),
                      files=dict(plan.get("files") or {}),
                      where=f"{plan.get('host')}:{plan.get('port')}")


def log_tail(trial: TrialRecord, url: str, *, lines: int = 80) -> tuple[str | None, str]:
    """The end of the trial's server log and where it came from.

    The log file when it is readable here (a relative path is tried from the current folder and
    from the database's folder, where `tuner run` usually ran), else the tail the store kept.
    """
    tried = []
    if trial.log_path:
        path = Path(trial.log_path)
        candidates = [path] if path.is_absolute() else [Path.cwd() / path]
        db = sqlite_file(url)
        if not path.is_absolute() and db is not None:
            candidates.append(db.resolve().parent / path)
        for c in candidates:
            tried.append(str(c))
            try:
                text = c.read_text(errors="replace")
            except OSError:
                continue
            return "\n".join(text.splitlines()[-lines:]), f"last {lines} lines of {c}"
    if trial.log_tail:
        where = f" (the log file is not readable here: {', '.join(tried)})" if tried else ""
        return trial.log_tail, "tail kept in the database" + where
    if tried:
        return None, f"no log: {', '.join(tried)} is not readable here and none was stored"
    if trial.launch_plan is None:
        return None, "no server log: this trial never launched a server"
    return None, "no server log was recorded for this trial"


# ---------------------------------------------------------------- parameter importance


@dataclass
class Importance:
    values: dict[str, float]  # parameter -> share of the objective's variance, largest first
    complete: int  # complete Optuna trials the estimate rests on
    note: str | None  # why there are no values, or how far to trust them


_MIN_TRUSTED = 10


def param_importances(url: str, study_name: str) -> Importance:
    """Optuna's parameter importances (its default evaluator, PED-ANOVA) over the study's
    complete trials, read from the same storage. Explained instead of computed when there are
    too few trials or nothing varied."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 30}
    try:
        # skip_table_creation: a reader never creates Optuna's tables.
        storage = with_retry(lambda: optuna.storages.RDBStorage(
            url, engine_kwargs=kwargs, skip_table_creation=True))
    except Exception as e:  # noqa: BLE001 (a reader explains, it does not crash the page)
        return Importance({}, 0, "Optuna's records in this database could not be read "
                                 f"({_one_line(e)[:200]}): importance needs the Optuna study "
                                 "that `tuner run` keeps beside tuner's tables.")
    try:
        return _importances(storage, study_name)
    finally:
        storage.engine.dispose()


def _importances(storage: Any, study_name: str) -> Importance:
    import optuna
    from optuna.trial import TrialState

    try:
        study = with_retry(lambda: optuna.load_study(study_name=study_name, storage=storage))
        trials = with_retry(lambda: study.get_trials(deepcopy=False,
                                                     states=(TrialState.COMPLETE,)))
    except KeyError:
        return Importance({}, 0, f"Optuna has no study named {study_name!r} in this database, "
                                 "so there is nothing to rate.")
    except Exception as e:  # noqa: BLE001
        return Importance({}, 0, f"Optuna's study could not be read: {_one_line(e)}")
    n = len(trials)
    if n < 2:
        return Importance({}, n, "Importance needs at least 2 complete trials with an "
                                 f"objective; this study has {n}.")
    seen: dict[str, set[str]] = {}
    for t in trials:
        for k, v in t.params.items():
            seen.setdefault(k, set()).add(repr(v))
    if not any(len(values) > 1 for values in seen.values()):
        return Importance({}, n, f"The {n} complete trials all have the same parameter values: "
                                 "nothing varied, so nothing can be rated.")
    try:
        values = with_retry(lambda: optuna.importance.get_param_importances(study))
    except Exception as e:  # noqa: BLE001
        return Importance({}, n, f"Optuna could not rate the parameters: {_one_line(e)}")
    note = None
    if n < _MIN_TRUSTED:
        note = (f"Only {n} complete trials: with so few, importances are a rough hint, "
                "not a measurement.")
    return Importance(dict(values), n, note)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


# ---------------------------------------------------------------- compare


def compare_frame(datas: list[StudyData]) -> pd.DataFrame:
    """One row per study: hardware and engine, the best configuration and its figures."""
    rows = []
    for data in datas:
        s = summarize(data)
        level = None if s.best is None else _best_level(s.best)
        rows.append({
            "study": s.name, "model": s.model, "engine": s.engine, "GPU type": s.gpu_type,
            "complete": s.counts["complete"], "failed": s.counts["failed"],
            f"best {TOK_GPU}": s.best_value,
            "best config": None if s.best is None else describe(s.best.params),
            "GPUs": None if s.best is None else s.best.gpus,
            "at c": None if level is None else level.concurrency,
            "TTFT p90 ms": None if level is None else level.ttft_p90_ms,
            USER_P90: None if level is None else level.tok_s_per_user_p90,
            "SLA": sla_text(s.sla),
        })
    return pd.DataFrame(rows, columns=["study", "model", "engine", "GPU type", "complete",
                                       "failed", f"best {TOK_GPU}", "best config", "GPUs",
                                       "at c", "TTFT p90 ms", USER_P90, "SLA"])


# ---------------------------------------------------------------- predicted against measured


class PredictedVsMeasured(NamedTuple):
    rows: pd.DataFrame  # one row per measured level whose configuration was predicted
    predicted: int  # prediction rows stored for the study (all configurations and levels)
    median_abs_error: float | None  # |predicted / measured - 1| over rows, as a fraction


PVM_COLUMNS = ["trial", "config", "concurrency", "predicted tok/s/GPU", "measured tok/s/GPU",
               "error %", "source"]


def _config_json(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def predicted_vs_measured(data: StudyData, predictions: list) -> PredictedVsMeasured:
    """Join stored predictions to the measured levels of the same configuration and concurrency.
    Predictions stay predictions: nothing here mixes them into the trials' figures."""
    by_key = {(_config_json(p.params), p.concurrency): p for p in predictions}
    rows = []
    for t in data.trials:
        for m in t.measurements:
            p = by_key.get((_config_json(t.params), m.concurrency))
            if p is None or not m.output_tok_s_per_gpu:
                continue
            error = p.output_tok_s_per_gpu / m.output_tok_s_per_gpu - 1
            rows.append({"trial": t.number, "config": describe(t.params),
                         "concurrency": m.concurrency,
                         "predicted tok/s/GPU": p.output_tok_s_per_gpu,
                         "measured tok/s/GPU": m.output_tok_s_per_gpu,
                         "error %": 100 * error, "source": p.source})
    frame = pd.DataFrame(rows, columns=PVM_COLUMNS)
    median = (float(frame["error %"].abs().median()) / 100) if len(frame) else None
    return PredictedVsMeasured(frame, len(predictions), median)


def load_predicted_vs_measured(url: str, name: str) -> PredictedVsMeasured | None:
    def read() -> PredictedVsMeasured | None:
        store = open_store(url)
        try:
            study = store.get_study(name)
            if study is None:
                return None
            return predicted_vs_measured(StudyData(study, store.trials(name)),
                                         store.predictions(name))
        finally:
            store.close()

    return with_retry(read)
