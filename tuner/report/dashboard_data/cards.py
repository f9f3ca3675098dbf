"""What the best card and a trial's page show: figures, exports, failures, levels, launch."""

from __future__ import annotations

import json
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from tuner.measure.metrics import confidence_text
from tuner.report.dashboard_data.labels import TOK_GPU, USD_MTOK, USER_P50, USER_P90
from tuner.report.dashboard_data.source import StudyData
from tuner.report.dashboard_data.studies import best_of
from tuner.report.export import write_export
from tuner.report.tables import measurements_frame, quality_text
from tuner.spec.errors import BadInput
from tuner.spec.space import describe
from tuner.store import StudyRecord, TrialRecord
from tuner.verdict import rules
from tuner.verdict.cost import (
    device_unit,
    level_usd_per_mtok,
    no_price_text,
    study_price,
    trial_server_hour_usd,
)

__all__ = ["LEVEL_COLUMNS", "BestCard", "FailureGroup", "LaunchView", "best_card",
           "confirmation_text", "export_files", "failure_groups", "launch_view", "levels_frame",
           "price_text"]


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
    """Every export of this trial, written by tuner.report.export itself into a scratch folder and
    read back, so the dashboard's downloads are byte for byte what `tuner export` writes.

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
    router = record["launch"].get("router") if record else None
    if router:  # what launch.sh runs: each replica, then the router in front
        command = (f"# {router['replicas']} replicas, each on the router's port + i:\n{command}\n"
                   f"# behind {router['name']}, policy {router['policy']} (launch.sh starts "
                   f"them all):\n{shlex.join(router['command'])}")
    shown = rules.figure(trial, data.study)  # the run that decided its verdict
    level = rules.best_level(shown.levels, rules.study_sla(data.study))[0]
    figures: dict[str, Any] = {
        TOK_GPU: shown.value,
        "from": shown.source,
        "other run": shown.other_text(),
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
        USD_MTOK: None if level is None else level_usd_per_mtok(data.study, trial, level),
        "price": price_text(data.study),
        "quality": quality_text(trial.quality),
    }
    return BestCard(trial=trial, params=dict(trial.params), figures=figures, command=command,
                    files=files, notes=notes)


def price_text(study: StudyRecord) -> str:
    """What the study's costs rest on, in one line: the device-hour price and where it is from."""
    price = study_price(study)
    if price is None:
        return no_price_text(study.gpu_type)
    unit = device_unit(study.gpu_type)
    where = ("an EXAMPLE figure from tuner/data/gpu_prices.csv (set hardware.gpu_hour_usd for "
             f"yours): {price.source}" if price.example else "the spec's hardware.gpu_hour_usd")
    return f"priced at {price.usd_per_hour:g} USD per {unit}-hour, {where}"


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


LEVEL_COLUMNS = {
    "concurrency": "concurrency", "request_rate": "rate req/s",
    "achieved_request_rate": "sent req/s", "capped_requests": "waited for cap",
    "meets_sla": "meets SLA",
    "output_tok_s_per_gpu": TOK_GPU, "usd_per_mtok": USD_MTOK, "tok/s 95%": "tok/s 95% CI",
    "rounds": "rounds",
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


def levels_frame(trial: TrialRecord, *, confirmation: bool = False,
                 study: StudyRecord | None = None) -> pd.DataFrame:
    """One row per level of the trial's first run (or of its confirmation): tuner.report's
    figures plus tails, end-to-end, means with their 95% half-widths and the engine's gauges,
    named for reading (`TTFT p90 ms`, `tok/s/GPU`; with the study, `USD/Mtok` at its price); a
    level whose rounds ran out before its interval was tight says NOT CONVERGED."""
    levels = trial.confirmation if confirmation else trial.measurements
    frame = measurements_frame(
        levels, None if study is None else trial_server_hour_usd(study, trial))
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
    plan = trial.launch_plan
    if not plan:
        return None
    return LaunchView(command=shlex.join(plan.get("argv", [])), env=dict(plan.get("env") or {}),
                      files=dict(plan.get("files") or {}),
                      where=f"{plan.get('host')}:{plan.get('port')}")
