"""The quality gate: a study's reference answers, computed once before its first trial by the
reference configuration on a server of its own, and each trial's answers on its own server
after its measurement, judged against them (`tuner.measure.quality` compares).

The reference is stored with the study, so a resumed study and every worker on it judge by the
same answers: the first worker to claim the study's reference row computes it, the others wait
for it. A claim whose worker died (on this host) or that outlasted a server's start and a
trial's time is taken over.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tuner.measure.quality import Answer, answer_all, quality_prompts
from tuner.measure.quality_compare import (
    RULE_EXACT,
    compare,
    first_difference,
    gate_rule,
    quality_figures,
    shortfalls,
)
from tuner.measure.quality_tasks import accuracy, read_tasks, task_prompts
from tuner.search.context import StudyContext
from tuner.search.recovery import OTHER_WORKER_POLL_S, worker_alive, worker_id
from tuner.search.serving import server_for
from tuner.serve.engines import LaunchPlan
from tuner.serve.launcher import LaunchFailure, ServerProcess
from tuner.spec.errors import BadInput
from tuner.spec.space import describe
from tuner.store import QualityCheck, QualityReference
from tuner.store.quality import claim_age_s


def reference_params(ctx: StudyContext) -> dict[str, Any]:
    """The reference configuration: the spec's, or the engine's defaults (no parameter set)."""
    return dict(ctx.spec.quality.reference or {})


def lossless_feature(ctx: StudyContext, params: dict[str, Any]) -> str | None:
    """The first parameter of `quality.lossless.parameters` this configuration turns on
    (set, and not none/false, unlike the reference's), as `name=value`; None if none."""
    reference = reference_params(ctx)
    for name in ctx.spec.quality.lossless.parameters:
        value = params.get(name)
        if value not in (None, "none", False) and value != reference.get(name):
            return f"{name}={value}"
    return None


def other_numerics(ctx: StudyContext, params: dict[str, Any]) -> str | None:
    """Where this configuration's numerics differ from the reference's
    (`lossless.same_numerics`: its rank layout or KV-cache dtype), as `name=value`; None where
    they are the same, so that a lossless feature must leave every answer identical."""
    reference, lossless = reference_params(ctx), ctx.spec.quality.lossless
    for name, default in lossless.same_numerics.items():
        value = params.get(name, default)
        if value != reference.get(name, default):
            return f"{name}={value}"
    return None


def _claimant(ctx: StudyContext) -> str:
    return f"{ctx.inventory.host} {worker_id()}"


def _abandoned(ctx: StudyContext, ref: QualityReference) -> bool:
    """A claim whose worker is gone: on this host a dead process; anywhere, a claim older than
    a server start and a whole trial."""
    host, _, worker = ref.claimed_by.partition(" ")
    if host == ctx.inventory.host and not worker_alive(worker):
        return True
    return claim_age_s(ref) > ctx.spec.engine.ready_timeout_s + ctx.spec.budget.trial_timeout_s


def ensure_reference(ctx: StudyContext) -> QualityReference | None:
    """The study's reference answers: stored ones, or computed now by this worker, or (while
    another computes them) waited for. None when the gate is off."""
    q = ctx.spec.quality
    if not q.enabled:
        return None
    said = False
    while True:
        ref = ctx.store.reference(ctx.name)
        if ref is not None and ref.state == "ready":
            return ref
        take_over = None
        if ref is not None:
            if not _abandoned(ctx, ref):
                if not said:
                    ctx.say(f"quality: waiting for {ref.claimed_by} to compute the reference "
                            "answers")
                    said = True
                if ctx.stop.wait(OTHER_WORKER_POLL_S):
                    raise KeyboardInterrupt
                continue
            take_over = ref.claimed_by
        me = _claimant(ctx)
        if ctx.store.claim_reference(ctx.name, claimant=me, params=reference_params(ctx),
                                     settings=q.model_dump(mode="json"), take_over=take_over):
            _compute(ctx, me)


def _prompts(ctx: StudyContext):
    return quality_prompts(ctx.spec.workload, ctx.spec.quality, Path(ctx.settings.model),
                           ctx.shape.vocab_size)


def ask(ctx: StudyContext, plan: LaunchPlan) -> tuple[list[Answer], float]:
    """The gate's prompts answered by the server of `plan`, and the seconds it took."""
    return answer_all(plan.base_url, ctx.spec.workload.api, plan.model, _prompts(ctx),
                      ctx.spec.quality, ctx.spec.workload.request_timeout_s)


def _compute(ctx: StudyContext, me: str) -> None:
    """Serve the reference configuration, ask it, store its answers (the claim is released
    when it fails, so a fixed spec can claim it again)."""
    params = reference_params(ctx)
    what = describe(params) if params else "the engine defaults"
    ctx.say(f"quality: reference answers from {what} ({ctx.spec.quality.prompts} prompts, "
            f"{ctx.spec.quality.max_tokens} tokens each, greedy)")
    devices = list(ctx.inventory.devices)
    plan, server = server_for(ctx, params, devices, f"reference-{worker_id().split(':')[0]}")
    try:
        answers, seconds, version = _serve(ctx, server, plan)
    except LaunchFailure as f:
        ctx.store.release_reference(ctx.name, claimant=me)
        raise BadInput(f"quality.reference: the reference configuration ({what}) failed "
                       f"({f.kind}: {f.reason}): fix it, name another in quality.reference, "
                       "or set quality.enabled false") from f
    except BaseException:
        ctx.store.release_reference(ctx.name, claimant=me)
        raise
    ctx.store.save_reference(ctx.name, claimant=me, answers=[a.to_dict() for a in answers],
                             answer_s=seconds, engine_version=version)
    ctx.say(f"  reference answered in {seconds:.1f} s ({version or '?'}); stored with the study")


def _serve(ctx: StudyContext, server: ServerProcess,
           plan: LaunchPlan) -> tuple[list[Answer], float, str | None]:
    def tick(_: float) -> None:
        if ctx.stop.is_set():
            raise KeyboardInterrupt

    try:
        server.start()
        server.wait_ready(ctx.spec.engine.ready_timeout_s, tick=tick)
        answers, seconds = ask(ctx, plan)
        failed = [a for a in answers if a.error]
        if not server.alive():
            raise server.failure()
        if failed:
            raise server.failure("request_errors", f"{len(failed)} of {len(answers)} requests "
                                 f"failed: {failed[0].error}")
        return answers, seconds, server.engine_version()
    finally:
        if server.proc is not None:
            server.stop()


def check(ctx: StudyContext, plan: LaunchPlan, params: dict[str, Any],
          reference: QualityReference) -> QualityCheck:
    """The trial's server of `plan` answers the gate's prompts; its figures against the
    reference, whether they pass, and the gate's own time (asking and comparing)."""
    t0 = time.perf_counter()
    answers, _ = ask(ctx, plan)
    q = ctx.spec.quality
    ref = [Answer.from_dict(a) for a in reference.answers]
    c = compare(ref, answers, q.near_tie_margin)
    lossless = lossless_feature(ctx, params)
    rule = gate_rule(c, lossless, other_numerics(ctx, params))
    missed = shortfalls(c, q, rule)
    solved = None if q.tasks is None else _task_accuracy(ctx, plan)
    if solved is not None and solved < q.tasks.min_accuracy:
        missed.append(f"task accuracy {solved:.0%} on {Path(q.tasks.file).name} (needs "
                      f"{q.tasks.min_accuracy:.0%})")
    sample = first_difference(ref, answers, c)
    reason = None
    if missed:
        reason = "; ".join(missed) + (f"; first difference: {sample}" if sample else "")
    flips = {"first_near_tie": c.first_near_tie and c.first_near_tie.to_dict(),
             "first_divergence": c.first_divergence and c.first_divergence.to_dict(),
             "worst": c.worst and c.worst.__dict__}
    return QualityCheck(
        passed=not missed, prompts=c.prompts, exact_match_rate=c.exact_match_rate,
        mean_common_prefix=c.mean_common_prefix, common_prefix_share=c.common_prefix_share,
        mean_logprob_divergence=c.mean_logprob_divergence, gate_s=time.perf_counter() - t0,
        answers=[a.to_dict() for a in answers],
        lossless=lossless if rule.name == RULE_EXACT else None, reason=reason,
        sample=sample, task_accuracy=solved, identical=c.identical, near_ties=c.near_ties,
        diverging=c.diverging, failed=c.failed, rule=f"{rule.name}: {rule.why}", flips=flips)


def _task_accuracy(ctx: StudyContext, plan: LaunchPlan) -> float:
    """The share of `quality.tasks` the server of `plan` answers right (greedy, no logprobs)."""
    q, api = ctx.spec.quality, ctx.spec.workload.api
    tasks = read_tasks(Path(q.tasks.file), q.tasks.match)
    asked = q.model_copy(update={"max_tokens": q.tasks.max_tokens, "top_logprobs": 0})
    answers, _ = answer_all(plan.base_url, api, plan.model, task_prompts(tasks, api), asked,
                            ctx.spec.workload.request_timeout_s)
    return accuracy(tasks, answers, q.tasks.match)


def check_line(q: QualityCheck) -> str:
    """The gate's verdict on one trial, as the study prints it: its counts, its figures, the
    rule that judged it and the gate's cost."""
    verdict = "matches the reference" if q.passed else "DIFFERS from the reference"
    return f"  quality: {verdict} ({quality_figures(q)}) in {q.gate_s:.1f} s"
