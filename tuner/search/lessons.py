"""What a failed trial teaches the search: configurations that share the values its cause
follows from are not launched again (`budget.learn_from_failures`).

A failure as `unsupported` or `crash` names a cause. Where the engine's rules know the cause
(tuner/data/engine_rules.yaml `failure_causes`: vLLM's CPU build has no all_gatherv, so any
data parallelism over a MoE model fails) and the failed configuration has its values, it
implicates those values at once. An unknown cause is learned from its second failure: the
structural values (layout, kernels, precision; not sizes) every configuration that failed with
it shares. A lesson that a complete trial contradicts teaches nothing (a batch size can crash a
kernel that serves at another). A sampled configuration that matches every value of some
lesson is recorded as skipped, naming the trial it follows and the cause, and Optuna is told
it is unusable, as for an infeasible sample: no server is started.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tuner.serve.engines.rules import failure_implicates
from tuner.store import TrialRecord

TAUGHT_KINDS = ("unsupported", "crash")
# Parameters that decide which code runs; the others (sizes, limits, draft lengths) do not.
STRUCTURAL = ("tensor_parallel_size", "data_parallel_size", "enable_expert_parallel",
              "expert_parallel_size", "enable_attention_dp", "moe_backend", "moe_activation",
              "kv_cache_dtype", "speculative_method")
# A structural parameter a configuration leaves out has its engine's default.
DEFAULTS: dict[str, Any] = {"tensor_parallel_size": 1, "data_parallel_size": 1,
                            "enable_expert_parallel": False, "expert_parallel_size": 1,
                            "enable_attention_dp": False, "kv_cache_dtype": "auto",
                            "speculative_method": "none"}


@dataclass(frozen=True)
class Lesson:
    trial: int
    kind: str
    reason: str
    values: dict[str, Any]  # parameter -> value, or {"min": N}
    known: bool  # the engine's rules named the cause (else: the failed structural values)

    def matches(self, params: dict[str, Any]) -> bool:
        return _matches(self.values, params)

    def text(self) -> str:
        values = ", ".join(f"{k} >= {v['min']}" if isinstance(v, dict) else f"{k}={v}"
                           for k, v in self.values.items())
        return f"skipped: follows trial {self.trial} ({self.kind}: {self.reason}): {values}"


def lessons(trials: list[TrialRecord], engine: str) -> list[Lesson]:
    """What the study's failures with a cause teach, oldest first. A cause the engine's rules
    know teaches its values where the failed configuration has them; an unknown one, once two
    configurations failed with the same reason, the structural values they share. A lesson that
    a complete trial contradicts (it has every value and served) teaches nothing."""
    ordered = sorted(trials, key=lambda t: t.number)
    failed = [t for t in ordered if t.state == "failed" and t.failure_kind in TAUGHT_KINDS]
    served = [t.params for t in ordered if t.state == "complete"]
    out: list[Lesson] = []
    for t in failed:
        values = failure_implicates(engine, t.failure_reason)
        known = values is not None and _matches(values, t.params)
        if not known:
            same = [f for f in failed if f.failure_reason == t.failure_reason]
            if len(same) < 2 or t is not same[1]:
                continue  # an unknown cause is learned from its second failure, once
            first = {k: same[0].params.get(k, DEFAULTS.get(k)) for k in STRUCTURAL}
            values = {k: v for k, v in first.items() if v is not None
                      and all(f.params.get(k, DEFAULTS.get(k)) == v for f in same)}
        if any(_matches(values, params) for params in served):
            continue
        out.append(Lesson(t.number, t.failure_kind, t.failure_reason or "", values, known))
    return out


def _matches(values: dict[str, Any], params: dict[str, Any]) -> bool:
    """Whether a configuration has every one of these values (a left-out parameter: its
    default; {"min": N}: N or more)."""
    if not values:
        return False
    for name, want in values.items():
        have = params.get(name, DEFAULTS.get(name))
        if isinstance(want, dict):
            if have is None or isinstance(have, bool) or have < want["min"]:
                return False
        elif have != want:
            return False
    return True


def ruled_out(params: dict[str, Any], taught: list[Lesson]) -> Lesson | None:
    """The first lesson this configuration matches; None where none does."""
    return next((lesson for lesson in taught if lesson.matches(params)), None)


_FLAG = re.compile(r"--([A-Za-z0-9][A-Za-z0-9_.-]*)")


def spec_at_fault(kind: str | None, reason: str | None, fixed_args: dict[str, Any]
                  ) -> str | None:
    """The spec's fixed engine argument that the engine rejected (`invalid_argument` naming it:
    `unrecognized arguments: --max-modle-len`), where that is the failure: every trial would
    fail alike, so the study stops instead of paying a server start per trial. None otherwise
    (a sampled value the engine refused is the configuration's failure)."""
    if kind != "invalid_argument" or not reason:
        return None
    fixed = {k.replace("_", "-"): k for k in fixed_args}
    for flag in _FLAG.findall(reason):
        if flag.replace("_", "-") in fixed:
            return fixed[flag.replace("_", "-")]
    return None
