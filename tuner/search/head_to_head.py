"""The study's finalists head to head: the verdict that survives the machine.

A figure taken at 10:02 and one taken at 10:09 on a shared machine differ by whatever the
machine did in between (bench/README.md records drifts of a quarter); each run's own interval says
nothing of that. So the top candidates' servers are up together and their measurement rounds
alternate (A B, B A, A B, ...), each at the load of its best first-run level: a drift moves the
two rounds of a pair alike and cancels in their ratio. Each challenger's verdict is its ratio to
the leader (the best first run) with the 95% interval of the pairs' log-ratios
(`tuner.measure.stats.paired_ratio`): `ahead`, `behind`, or `tied` where the interval holds 1.
The study picks a challenger only when it is ahead; between tied ones it picks the one on fewer
devices, then the one with a TTFT p90 lower beyond the rounds' noise, else the first measured,
and says why (`tuner.verdict.finalists.pick`).

On a CPU node the finalists' servers share the node (each in its trial's layout; only the one
being measured is loaded). On a GPU node they run together where their devices fit side by side;
where they do not, each gets a fresh server in turn, in a mirrored order (A B, B A) so that a
linear drift cancels (`run_in_turn`), and the pair of servers is the unit of its interval.

Each finalist's rounds are also its confirmation (its figure measured again, in a fresh server,
against its first run), and every round is stored with its time.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

from tuner.measure.loadgen import LevelRun, Repeats, RoundRun, run_sweep
from tuner.measure.metrics import summarize_level
from tuner.measure.prompts import sweep_prompts
from tuner.measure.stats import paired_ratio
from tuner.search.context import StudyContext
from tuner.search.serving import server_for, start_recorded
from tuner.serve.cpu_layout import thread_held_to
from tuner.serve.launcher import LaunchFailure
from tuner.serve.routers import world_size
from tuner.spec.space import describe
from tuner.store import HeadToHead, TrialRecord
from tuner.store.records import LevelMeasurement
from tuner.verdict.finalists import MIN_PAIRS, Finalist, Verdict, pick, settled, verdicts
from tuner.verdict.rules import objective


def placements(ctx: StudyContext, trials: list[TrialRecord]) -> list[list[int]] | None:
    """The devices of each finalist's server when they can be up together: on a CPU node, every
    one in its trial's layout on the node's cores (one is loaded at a time); on a GPU node,
    blocks of their own where they fit side by side; None where they do not."""
    devices = list(ctx.inventory.devices)
    if ctx.inventory.kind == "cpu":
        return [devices for _ in trials]
    out, start = [], 0
    for t in trials:
        n = ctx.inventory.slot_for(world_size(ctx.adapter, t.params))
        if start + n > len(devices):
            return None
        out.append(devices[start:start + n])
        start += n
    return out


def _stopping(ctx: StudyContext) -> None:
    if ctx.stop.is_set():
        raise KeyboardInterrupt


def _round(ctx: StudyContext, f: Finalist, prompts, offset: int, warmup: int) -> None:
    w = ctx.spec.workload
    layout = f.server.layout if f.server is not None else None
    with thread_held_to(None if layout is None else layout.client):
        (run,) = run_sweep(f.plan.base_url, f.plan.model, prompts[offset:], [f.level.concurrency],
                           w.requests_per_level, w.output_len, warmup, w.request_timeout_s,
                           api=w.api, repeats=Repeats(1), seed=w.seed)
    if warmup:  # a warm-up round: its server's first load, not measured
        return
    f.runs.append(run)
    f.rounds.append(summarize_level(run, f.plan.gpus, ctx.spec.sla.to_sla()))


def _confirmation(ctx: StudyContext, f: Finalist) -> LevelMeasurement | None:
    """The finalist's rounds as one level: its figure measured again, with its interval."""
    if not f.runs:
        return None
    # A one-round run keeps its requests as its only round (`LevelRun.rounds` empty).
    rounds = [r for run in f.runs
              for r in (run.rounds or [RoundRun(run.results, run.duration_s)])]
    whole = LevelRun(concurrency=f.level.concurrency,
                     results=[x for run in f.runs for x in run.results],
                     duration_s=sum(run.duration_s for run in f.runs), rounds=rounds)
    return summarize_level(whole, f.plan.gpus, ctx.spec.sla.to_sla(),
                           ci_target=ctx.spec.workload.ci_target)


def run(ctx: StudyContext, chosen: list[TrialRecord], ends: float | None = None
        ) -> tuple[HeadToHead, dict[int, LevelMeasurement | None]] | None:
    """The head-to-head of `chosen` (the leader first), stored; with each finalist's rounds as
    one level (its confirmation, None where it measured none). None where their servers cannot
    be up together (nothing was started) or one failed. Past its fewest pairs, no pair starts
    that would end after `ends` (a `time.monotonic()`, the study's time limit)."""
    sla = ctx.spec.sla.to_sla()
    where = placements(ctx, chosen)
    if where is None or len(chosen) < 2:
        return None
    finalists = [Finalist(t, objective(t.measurements, sla)[1]) for t in chosen]
    w = ctx.spec.workload
    max_pairs = max(w.max_rounds, MIN_PAIRS)
    prompts = sweep_prompts(w, Path(ctx.settings.model), ctx.shape.vocab_size,
                            w.requests_per_level * max_pairs * len(finalists)
                            + w.warmup_requests * len(finalists) + 8)
    ctx.say(f"head-to-head: {len(finalists)} finalists, servers up together, rounds "
            f"alternating (A B, B A, ...) at each one's best load")
    rounds_out: list[dict[str, Any]] = []
    try:
        for f, devices in zip(finalists, where, strict=True):
            ctx.say(f"  trial {f.trial.number}  {describe(f.trial.params)}  at "
                    f"c={f.level.concurrency} (first run {f.trial.objective:,.0f} tok/s/GPU)")
            f.plan, f.server = server_for(ctx, f.trial.params, devices,
                                          f"trial-{f.trial.number:04d}-h2h")
            start_recorded(ctx, f.server, f.trial.id)
            ready = f.server.wait_ready(ctx.spec.engine.ready_timeout_s,
                                        tick=lambda _: _stopping(ctx))
            ctx.say(f"    server ready in {ready:.1f} s"
                    + (f"; {f.server.layout.line()}" if f.server.layout else ""))
        offset = 0
        for f in finalists:
            _round(ctx, f, prompts, offset, w.warmup_requests)
            offset += w.warmup_requests
        found: list[Verdict] = []
        pair_s = 0.0  # the last pair's time: what one more costs
        for pair in range(max_pairs):
            if pair >= MIN_PAIRS and ends is not None and time.monotonic() + pair_s > ends:
                ctx.say(f"  head-to-head cut at {pair} pairs of rounds by budget.timeout_min")
                break
            began = time.monotonic()
            order = finalists if pair % 2 == 0 else list(reversed(finalists))
            for f in order:
                at = dt.datetime.now(dt.timezone.utc)
                _round(ctx, f, prompts, offset, 0)
                offset += w.requests_per_level
                m = f.rounds[-1]
                rounds_out.append({"trial": f.trial.number, "pair": pair, "at": at.isoformat(),
                                   "tok_s_per_gpu": m.output_tok_s_per_gpu,
                                   "ttft_p90_ms": m.ttft_p90_ms})
                if not f.server.alive():
                    raise f.server.failure()
            found = verdicts(finalists[0], finalists[1:])
            pair_s = time.monotonic() - began
            _stopping(ctx)
            if pair + 1 >= MIN_PAIRS and settled(found, w.ci_target):
                break
    except LaunchFailure as e:
        ctx.say(f"  head-to-head stopped: a finalist's server failed ({e.kind}: {e.reason})")
        return None
    finally:
        for f in finalists:
            if f.server is not None and f.server.proc is not None:
                f.server.stop()
                ctx.store.mark_server_stopped(f.trial.id)
    return _decided(ctx, finalists, found, rounds_out, together=True)


def _decided(ctx: StudyContext, finalists: list[Finalist], found: list[Verdict],
             rounds_out: list[dict[str, Any]], *, together: bool
             ) -> tuple[HeadToHead, dict[int, LevelMeasurement | None]]:
    """The pick from the verdicts, said and stored, with each finalist's confirmation."""
    chosen_one, why = pick(finalists[0], finalists[1:], found)
    for v in found:
        ctx.say(f"  {v.line(finalists[0].trial.number)}")
    ctx.say(f"  -> pick: trial {chosen_one.trial.number} ({why})")
    h = HeadToHead(leader=finalists[0].trial.number, pick=chosen_one.trial.number, reason=why,
                   together=together, ratios=[v.to_dict() for v in found], rounds=rounds_out)
    ctx.store.record_head_to_head(ctx.name, h)
    return h, {f.trial.number: _confirmation(ctx, f) for f in finalists}


def run_in_turn(ctx: StudyContext, chosen: list[TrialRecord]
                ) -> tuple[HeadToHead, dict[int, LevelMeasurement | None]] | None:
    """The head-to-head of finalists that cannot be up together: a fresh server each, one at a
    time on the node's devices, in a mirrored order (A B, B A; A B C, C B A) so that a drift
    linear in time moves both halves alike and cancels in each pair of servers. Each server
    measures MIN_PAIRS rounds at the finalist's best load after a warm-up round; a challenger's
    verdict is its ratio to the leader over the two pairs of servers (the unit is the server:
    its rounds share whatever that server got, so its interval is wide, honestly). None where
    a server failed."""
    sla = ctx.spec.sla.to_sla()
    finalists = [Finalist(t, objective(t.measurements, sla)[1]) for t in chosen]
    order = finalists + finalists[::-1]
    w = ctx.spec.workload
    prompts = sweep_prompts(w, Path(ctx.settings.model), ctx.shape.vocab_size,
                            (w.requests_per_level * MIN_PAIRS + w.warmup_requests) * len(order)
                            + 8)
    letters = " ".join("ABCDEFGH"[finalists.index(f)] for f in order)
    ctx.say(f"head-to-head: {len(finalists)} finalists cannot be up together here: a fresh "
            f"server each, in turn ({letters}), {MIN_PAIRS} rounds each at its best load")
    figures: dict[int, list[float]] = {f.trial.number: [] for f in finalists}
    rounds_out: list[dict[str, Any]] = []
    offset = 0
    for turn, f in enumerate(order):
        ctx.say(f"  trial {f.trial.number}  {describe(f.trial.params)}  at "
                f"c={f.level.concurrency} (server {turn + 1} of {len(order)})")
        f.plan, f.server = server_for(ctx, f.trial.params, list(ctx.inventory.devices),
                                      f"trial-{f.trial.number:04d}-h2h-{turn}")
        try:
            start_recorded(ctx, f.server, f.trial.id)
            ready = f.server.wait_ready(ctx.spec.engine.ready_timeout_s,
                                        tick=lambda _: _stopping(ctx))
            ctx.say(f"    server ready in {ready:.1f} s")
            _round(ctx, f, prompts, offset, w.warmup_requests)
            offset += w.warmup_requests
            mine = []
            for _ in range(MIN_PAIRS):
                at = dt.datetime.now(dt.timezone.utc)
                _round(ctx, f, prompts, offset, 0)
                offset += w.requests_per_level
                m = f.rounds[-1]
                mine.append(m.output_tok_s_per_gpu)
                rounds_out.append({"trial": f.trial.number, "pair": turn, "at": at.isoformat(),
                                   "tok_s_per_gpu": m.output_tok_s_per_gpu,
                                   "ttft_p90_ms": m.ttft_p90_ms})
                if not f.server.alive():
                    raise f.server.failure()
            figures[f.trial.number].append(sum(mine) / len(mine))
        except LaunchFailure as e:
            ctx.say(f"  head-to-head stopped: a finalist's server failed ({e.kind}: {e.reason})")
            return None
        finally:
            if f.server.proc is not None:
                f.server.stop()
                ctx.store.mark_server_stopped(f.trial.id)
    base = figures[finalists[0].trial.number]
    found = [Verdict(c.trial.number, *paired_ratio(base, figures[c.trial.number]), len(base),
                     unit="servers") for c in finalists[1:]
             if all(base) and all(figures[c.trial.number])]
    return _decided(ctx, finalists, found, rounds_out, together=False)
