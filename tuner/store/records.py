"""Plain records the store keeps and returns: measured levels, studies, trials, predictions and
servers. They know nothing of engines, Optuna or the database's tables.

Times are seconds from `time.perf_counter()` unless a name says `_ms`.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class LevelMeasurement:
    """One concurrency level of one trial: the row the store keeps and the objective reads."""

    concurrency: int
    requests: int  # timed requests sent (warm-up excluded)
    errors: int
    duration_s: float  # first send to last completion of the timed requests
    input_tokens: int
    output_tokens: int
    request_throughput: float  # successful requests per second
    output_tok_s: float
    output_tok_s_per_gpu: float
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None
    ttft_p99_ms: float | None
    itl_p50_ms: float | None
    itl_p90_ms: float | None
    itl_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p90_ms: float | None
    e2e_p50_ms: float | None
    e2e_p90_ms: float | None
    tok_s_per_user_p50: float | None  # median of 1 / TPOT over requests
    tok_s_per_user_p90: float | None  # reached by 90% of requests: the 10th percentile
    goodput_rps: float  # requests per second that met every SLA target
    meets_sla: bool  # no errors and the level's p90 figures meet the SLA
    error_sample: str | None = None  # the first error text, when errors > 0
    # Speculative decoding, from the engine's own counters over the level (its warm-up included);
    # None where the engine exposes no such counters or speculation is off.
    spec_drafts: int | None = None
    spec_draft_tokens: int | None = None
    spec_accepted_tokens: int | None = None
    # Open-loop (Poisson) levels: the offered request rate per second; None at fixed concurrency.
    request_rate: float | None = None
    # Open loop: the rate the timed requests were really sent at (requests/s over the span from
    # the first scheduled arrival to the last send; below the offered rate when the in-flight
    # cap or the client held sends back; completions per second are `request_throughput`), and
    # how many timed requests waited for a free slot under the cap (0: it never engaged).
    achieved_request_rate: float | None = None
    capped_requests: int | None = None
    # Repeats: rounds of `requests` measured, the 95% confidence half-width of output tok/s over
    # rounds, and whether it reached the target half-width before the cap (None: one round).
    rounds: int | None = None
    output_tok_s_ci95: float | None = None
    converged: bool | None = None
    # Means over successful requests (TTFT) and over all inter-token gaps (ITL), with 95%
    # confidence half-widths.
    ttft_mean_ms: float | None = None
    ttft_mean_ci95_ms: float | None = None
    itl_mean_ms: float | None = None
    itl_mean_ci95_ms: float | None = None
    # The engine's gauges sampled during the level, and preemptions counted over it.
    kv_cache_usage_max: float | None = None  # fraction of the KV cache in use, 0..1
    requests_running_max: float | None = None
    requests_waiting_max: float | None = None
    preemptions: int | None = None

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted draft tokens / proposed draft tokens."""
        if not self.spec_draft_tokens:
            return None
        return (self.spec_accepted_tokens or 0) / self.spec_draft_tokens

    @property
    def acceptance_length(self) -> float | None:
        """Mean tokens per verification step: 1 + accepted / drafts (as vLLM reports it)."""
        if not self.spec_drafts:
            return None
        return 1 + (self.spec_accepted_tokens or 0) / self.spec_drafts

    @property
    def cap_engaged(self) -> bool:
        """Open loop: some timed requests waited for the in-flight cap, so the offered rate was
        not delivered as scheduled (their waits are in their TTFT and latency)."""
        return bool(self.capped_requests)

    def to_dict(self) -> dict:
        return asdict(self)


# The budget rule, written once: the store's atomic claim (in SQL) and every count of launched
# trials (the study loop, the dashboard) use these. A trial counts once it launched a server
# and reached a verdict of its own; an interrupted trial was cut short by the tuner, not by its
# configuration, and an `error` trial by a bug in tuner, so neither counts and the study runs
# another in its place. A running trial
# counts as a claim while it runs. A pruned trial launched and was measured until it was clearly
# below the incumbent: it spent the budget like any other.
BUDGET_STATES = ("complete", "failed", "pruned")
NOT_COUNTED_FAILURES = ("interrupted", "error")


# Failures that may be the node's rather than the configuration's (a slow start, a stall, a
# network blip): such a failure gets one retry on a fresh server before it is the
# configuration's own verdict. Crashes, OOMs and refused arguments are the configuration's.
TRANSIENT_FAILURES = ("timeout", "not_ready", "request_errors")


def settles_configuration(attempts: list[tuple[str, str | None]]) -> bool:
    """Whether these trials of one configuration (their state and failure kind; those running
    or counting toward the budget) settle it: anything but a single transient failure does."""
    if not attempts:
        return False
    (state, kind), *more = attempts
    return bool(more) or not (state == "failed" and kind in TRANSIENT_FAILURES)


def counts_toward_budget(state: str, failure_kind: str | None) -> bool:
    """Whether a finished trial spent the study's budget (see BUDGET_STATES)."""
    return state in BUDGET_STATES and not (state == "failed"
                                           and failure_kind in NOT_COUNTED_FAILURES)


# The verdicts of a trial's re-run in a fresh server (`tuner confirm`).
CONFIRM_STATES = ("confirmed", "inconclusive", "differs", "failed")


@dataclass
class HeadToHead:
    """A study's finalists measured side by side (`tuner.search.head_to_head`): each
    challenger's ratio to the leader (the best first run) from rounds paired in time, and the
    trial the study chose with why."""

    leader: int  # trial number
    pick: int  # trial number of the configuration the study chose
    reason: str  # why that one
    together: bool  # servers up together, rounds alternating (else one server after another)
    ratios: list[dict[str, Any]]  # {trial, ratio, low, high, pairs, verdict}
    rounds: list[dict[str, Any]]  # {trial, pair, at (ISO time), tok_s_per_gpu, ttft_p90_ms}
    created_at: dt.datetime | None = None


@dataclass
class StudyRecord:
    id: int
    name: str
    engine: str
    model: str
    gpu_type: str
    spec: dict
    space: dict
    tuner_version: str
    created_at: dt.datetime
    head_to_head: HeadToHead | None = None  # the latest, where the finalists met


@dataclass
class TrialRecord:
    id: int
    study_name: str
    number: int
    state: str
    params: dict
    launch_plan: dict | None
    objective: float | None
    meets_sla: bool | None
    failure_kind: str | None
    failure_reason: str | None
    log_tail: str | None
    log_path: str | None
    engine_version: str | None
    gpus: int | None
    hardware: dict | None
    worker_host: str | None
    worker_pid: int | None
    started_at: dt.datetime
    finished_at: dt.datetime | None
    measurements: list[LevelMeasurement]  # the trial's own sweep, in sweep order
    # Its re-run in a fresh server (`tuner confirm`); None and [] until confirmed.
    confirm_state: str | None = None  # confirmed | inconclusive | differs | failed
    confirm_objective: float | None = None
    confirm_meets_sla: bool | None = None
    confirm_reason: str | None = None
    confirmed_at: dt.datetime | None = None
    confirmation: list[LevelMeasurement] = field(default_factory=list)
    # Levels its sweep did not measure, each with why: {level, concurrency, request_rate, reason}.
    skipped_levels: list[dict[str, Any]] = field(default_factory=list)
    # A load search (`concurrency: auto`, `request_rates: auto`): the highest load (concurrency
    # or requests/s) that met the SLA, None when none did, and why the search ended there.
    # Both None for a fixed sweep. Its curve is `measurements`, in the order measured.
    load_at_sla: float | None = None
    load_search: str | None = None
    # Its answers to the quality gate's prompts against the study's reference; None: not checked.
    quality: QualityCheck | None = None


@dataclass
class QualityCheck:
    """A trial's answers to the quality gate's prompts against its study's reference, and the
    figures they give (`tuner.measure.quality`). `answers` are `Answer.to_dict()`s."""

    passed: bool
    prompts: int
    exact_match_rate: float  # answers equal to the reference's, 0..1
    mean_common_prefix: float  # tokens repeated before the first difference, per answer
    common_prefix_share: float  # that prefix as a share of the reference answer, mean, 0..1
    mean_logprob_divergence: float | None  # nats; None where the engine gave no logprobs
    gate_s: float  # the gate's own time on the trial's server
    answers: list[dict[str, Any]]
    lossless: str | None = None  # the lossless feature held to exact match, e.g. "x=y"
    task_accuracy: float | None = None  # of the task checks (quality.tasks); None: none
    reason: str | None = None  # why it failed
    sample: str | None = None  # the first diverging answer beside the reference's
    # The tie-aware gate's counts (None on checks stored before it).
    identical: int | None = None
    near_ties: int | None = None
    diverging: int | None = None
    failed: int | None = None  # requests that failed
    rule: str | None = None  # the rule that judged, a colon, why it applied
    flips: dict[str, Any] | None = None  # first_near_tie, first_divergence (Flip), worst (Drift)


# The quality gate's reference answers of a study: claimed (computing) by one worker, then ready.
REFERENCE_STATES = ("computing", "ready")


@dataclass
class QualityReference:
    study_name: str
    state: str  # computing | ready
    params: dict  # the reference configuration
    settings: dict  # the quality spec it answered under
    claimed_by: str  # "host pid:start time" of the worker computing it
    claimed_at: dt.datetime
    answers: list[dict[str, Any]] = field(default_factory=list)
    computed_at: dt.datetime | None = None
    answer_s: float | None = None
    engine_version: str | None = None


@dataclass
class PredictionRecord:
    """A stored prediction (never a measurement): one configuration at one concurrency level."""

    study_name: str
    source: str
    engine: str
    gpu_type: str
    calibration: str
    config_key: str
    params: dict
    concurrency: int
    fits: bool
    output_tok_s_per_gpu: float
    tok_s_per_user: float
    ttft_ms: float
    meets_sla: bool
    reason: str | None
    created_at: dt.datetime


@dataclass
class ServerRecord:
    trial_id: int
    host: str
    pid: int
    pgid: int
    create_time: float
    log_path: str
    started_at: dt.datetime
    # The tuner process that launched it, by pid and start time (a pid alone may be reused).
    # For rows from before revision 0007: the pid of its trial's worker, start time unknown.
    owner_pid: int | None = None
    owner_create_time: float | None = None
    start_phases: list[list[Any]] | None = None  # [[phase, seconds], ...] (start_phases.py)


def config_key(params: dict[str, Any]) -> str:
    """The identity of a configuration: two parameter sets are the same configuration exactly
    when their keys are equal (canonical JSON, so the key is also stable across processes). The
    store's claim refuses a configuration already running or done under this key; the search
    (`tuner.verdict.rules`) and everything above use the same function."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
