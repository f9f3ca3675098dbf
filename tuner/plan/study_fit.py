"""`tuner plan --calibrate STUDY`: the performance model refitted to a stored study's measured
levels, with the error on each trial when the factors are fitted without it (held-out trials)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tuner.plan import perfmodel as pm
from tuner.spec.errors import BadInput
from tuner.spec.model_shape import known_shapes
from tuner.spec.study_spec import StudySpec


@dataclass
class Refit:
    calibration: pm.Calibration
    observations: list[pm.Observation]
    before: np.ndarray  # relative errors with the calibration it started from
    after: np.ndarray  # in sample, with the refit factors
    held_out_before: np.ndarray  # per held-out trial's observations: the starting calibration
    held_out_after: np.ndarray  # the same, with factors fitted to the other trials only
    held_out_trials: int


def shape_name(spec: StudySpec, study_name: str) -> str:
    """The model the study measured: its model.shape, or the tiny model it generated."""
    name = spec.model.shape or (spec.model.generate if spec.model.generate
                                in pm.GENERATED_SHAPES else None)
    if not name:
        raise BadInput(f"study {study_name}: its spec names no model.shape, so the performance "
                       f"model cannot tell which model it measured (one of "
                       f"{', '.join([*known_shapes(), *pm.GENERATED_SHAPES])})")
    return name


def study_observations(study: Any, trials: Sequence[Any]) -> list[pm.Observation]:
    """A stored study's measured levels as observations: tok/s per GPU, the median decode speed
    per user and TTFT (median, p90, p99) at each level of every complete trial. Each level's
    measured draft acceptance, where the engine counted one, is part of its setup (not a factor
    to fit)."""
    return [o for _, o in trial_observations(study, trials)]


def trial_observations(study: Any, trials: Sequence[Any]) -> list[tuple[int, pm.Observation]]:
    """(trial number, observation) for every measured figure of the complete and pruned
    trials."""
    from tuner.serve.engines import get_adapter
    from tuner.spec.gpu_types import gpu_type

    spec = StudySpec.model_validate(study.spec)
    model = pm.model_facts(shape_name(spec, study.name))
    gpu = pm.device(gpu_type(study.gpu_type))
    engine = pm.facts().engine(study.engine)
    adapter = get_adapter(study.engine)
    w = spec.workload
    out = []
    for t in trials:
        if t.state not in ("complete", "pruned"):  # a pruned trial's levels were measured
            continue
        for m in t.measurements:
            if m.requests <= m.errors or m.output_tok_s_per_gpu <= 0:
                continue
            k = int(t.params.get("num_speculative_tokens", 0) or 0)
            # Tokens per verification step as the engine counted them, 1 + accepted / drafts,
            # as the rate per drafted position that gives it (drafts may be shorter than k).
            rate = (m.acceptance_length - 1) / k if m.acceptance_length and k else None
            setup = pm.setup_of(t.params, model=model, gpu=gpu, engine=engine,
                                layout=pm.layout_of(t.params, adapter), isl=w.input_len,
                                osl=w.output_len, spread=w.range_ratio,
                                acceptance_rate=rate)
            figures = (("output_tok_s_per_gpu", m.output_tok_s_per_gpu),
                       ("output_tok_s_per_user", m.tok_s_per_user_p50),
                       ("ttft_ms", m.ttft_p50_ms), ("ttft_p90_ms", m.ttft_p90_ms),
                       ("ttft_p99_ms", m.ttft_p99_ms))
            out.extend((t.number, pm.Observation(setup, m.concurrency, metric, float(v)))
                       for metric, v in figures if v)
    return out


def refit(numbered: Sequence[tuple[int, pm.Observation]], start: pm.Calibration,
          source: str) -> Refit:
    """Refit the factors to a study's observations, the current calibration as the prior; and,
    for each trial in turn, refit without it and predict it (held-out trials)."""
    obs = [o for _, o in numbered]
    if not obs:
        raise BadInput("the study has no complete trial with measurements to calibrate on")
    fitted = pm.fit(obs, start, source=source, prior=start)
    before, after = pm.errors(obs, start), pm.errors(obs, fitted)
    numbers = sorted({n for n, _ in numbered})
    ho_before, ho_after = [], []
    for n in numbers if len(numbers) > 1 else []:
        rest = [o for k, o in numbered if k != n]
        mine = [o for k, o in numbered if k == n]
        without = pm.fit(rest, start, source="held out", prior=start)
        ho_before.extend(pm.errors(mine, start))
        ho_after.extend(pm.errors(mine, without))
    summary = {"observations": len(obs), "started_from": start.source,
               "median_abs_error_before": _median(before), "median_abs_error_after": _median(after),
               "held_out_trials": len(numbers) if len(numbers) > 1 else 0,
               "held_out_median_abs_error_before": _median(np.array(ho_before)),
               "held_out_median_abs_error_after": _median(np.array(ho_after)),
               # Bands for plans with this calibration: the held-out errors, else in-sample.
               "bands": pm.band_summary(obs, np.array(ho_after) if ho_after else after)}
    factors = {k: round(v, 6) for k, v in fitted.factors.items()}
    return Refit(pm.Calibration(factors, source, summary), obs, before, after,
                 np.array(ho_before), np.array(ho_after), summary["held_out_trials"])


@dataclass
class LoopPoint:
    """The closed loop after `landed` trials: the factors refitted to them predict the rest."""

    landed: int
    median_abs_error: float  # on the study's trials not landed yet
    observations: int  # of those trials


def closed_loop(numbered: Sequence[tuple[int, pm.Observation]],
                start: pm.Calibration) -> list[LoopPoint]:
    """The study's own trials refitting the model as they land, in trial order: after each
    trial (and before the first), the median error of the refitted model on the trials still to
    come, which it has not seen."""
    numbers = sorted({n for n, _ in numbered})
    out = []
    for k in range(len(numbers)):
        seen = set(numbers[:k])
        landed = [o for n, o in numbered if n in seen]
        ahead = [o for n, o in numbered if n not in seen]
        cal = pm.fit(landed, start, source="closed loop", prior=start) if landed else start
        out.append(LoopPoint(k, float(np.median(np.abs(pm.errors(ahead, cal)))), len(ahead)))
    return out


def factor_lines(start: pm.Calibration, fitted: pm.Calibration) -> list[str]:
    """Each factor a refit moved: its value before and after, and what it explains."""
    priors = pm.facts().priors
    return [f"{k}: {start[k]:.4g} -> {v:.4g} ({' '.join(priors[k].about.split())})"
            for k, v in fitted.factors.items()
            if k in priors and abs(v - start[k]) > 1e-3 * abs(start[k])]


def _median(errors: np.ndarray) -> float | None:
    return round(float(np.median(np.abs(errors))), 4) if len(errors) else None


def measured_acceptance(obs: Sequence[pm.Observation]) -> dict[str, float]:
    """The mean measured acceptance rate per speculative method of a study's observations."""
    rates: dict[str, list[float]] = {}
    for o in obs:
        r = o.setup.acceptance_rate
        if r is not None and not math.isnan(r):
            rates.setdefault(o.setup.speculative, []).append(r)
    return {m: float(np.mean(v)) for m, v in rates.items()}


def write_calibration(calibration: pm.Calibration, path: Path) -> None:
    path.write_text(json.dumps(calibration.to_json(), indent=1) + "\n")
