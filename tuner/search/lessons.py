"""What a failed trial teaches the search: configurations that share the values its cause
follows from are not launched again (`budget.learn_from_failures`).

A failure as `unsupported` or `crash` names a cause. Where the engine's rules know the cause
(tuner/data/engine_rules.yaml `failure_causes`: vLLM's CPU build has no all_gatherv, so any
data parallelism over a MoE model fails), it implicates those values; otherwise it implicates
the failed configuration's structural values (its layout, kernels and precision, not its sizes:
a batch limit does not make a kernel exist). A sampled configuration that matches every value
of some failure's lesson is recorded as skipped, naming the trial it follows and the cause, and
Optuna is told it is unusable, as for an infeasible sample: no server is started.
"""

from __future__ import annotations

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
        for name, want in self.values.items():
            have = params.get(name, DEFAULTS.get(name))
            if isinstance(want, dict):
                if have is None or have is True or have is False or have < want["min"]:
                    return False
            elif have != want:
                return False
        return True

    def text(self) -> str:
        values = ", ".join(f"{k} >= {v['min']}" if isinstance(v, dict) else f"{k}={v}"
                           for k, v in self.values.items())
        return f"skipped: follows trial {self.trial} ({self.kind}: {self.reason}): {values}"


def lessons(trials: list[TrialRecord], engine: str) -> list[Lesson]:
    """One lesson per failure with a cause, oldest first."""
    out = []
    for t in sorted(trials, key=lambda t: t.number):
        if t.state != "failed" or t.failure_kind not in TAUGHT_KINDS:
            continue
        values = failure_implicates(engine, t.failure_reason)
        known = values is not None
        if values is None:
            values = {k: t.params.get(k, DEFAULTS.get(k)) for k in STRUCTURAL
                      if k in t.params or k in DEFAULTS}
        out.append(Lesson(t.number, t.failure_kind, t.failure_reason or "", values, known))
    return out


def ruled_out(params: dict[str, Any], taught: list[Lesson]) -> Lesson | None:
    """The first lesson this configuration matches; None where none does."""
    return next((lesson for lesson in taught if lesson.matches(params)), None)
