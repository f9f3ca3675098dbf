"""`tuner plan`: the performance model's predictions for every configuration of a search space.

It enumerates the space for one GPU type and engine, applies the engine rules, predicts tok/s per
GPU, tok/s per user and TTFT (median, p90, p99) at each of the spec's concurrency levels, each
with its 80% band, marks what cannot fit in memory and why, and ranks: the study's objective
(the best tok/s per GPU among levels predicted to meet the SLA) and the Pareto front of tok/s per
GPU against tok/s per user. The warm start ranks by the levels whose band reaches the SLA.
Predictions are stored as predictions (source "perfmodel"), never as measurements; the model
itself stores nothing. Refitting to a study is in study_fit.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from tuner.plan import perfmodel as pm
from tuner.search.loop import WarmStart
from tuner.serve.hardware import Inventory
from tuner.spec.errors import BadInput
from tuner.spec.feasibility import Check
from tuner.spec.gpu_types import GpuType
from tuner.spec.model_shape import ModelShape, known_shapes
from tuner.spec.sla import SLA
from tuner.spec.space import SearchSpace, describe
from tuner.spec.study_spec import StudySpec
from tuner.verdict.rules import config_key

SOURCE = "perfmodel"  # the store's source tag of every prediction


class PlanTarget(Protocol):
    """What a plan needs of a study: an OfflineStudy (plans, dry runs) or a StudyContext."""

    spec: StudySpec
    space: SearchSpace
    adapter: Any
    gpu: GpuType
    shape: ModelShape
    inventory: Inventory

    def infeasible(self, config: dict[str, Any]) -> str | None: ...


def model_for(spec: StudySpec, shape: ModelShape) -> pm.ModelFacts:
    """The model's facts: the spec's named shape, else the known shape the checkpoint matches."""
    if spec.model.shape:
        return pm.model_facts(spec.model.shape)
    for name, s in known_shapes().items():
        if (s["num_hidden_layers"], s["hidden_size"], s["num_experts"], s["vocab_size"]) == (
                shape.num_hidden_layers, shape.hidden_size, shape.num_experts, shape.vocab_size):
            return pm.model_facts(name)
    raise BadInput("the performance model needs a model shape it knows: set model.shape in the "
                   f"spec to one of {', '.join(known_shapes())}")


def gpu_for(gpu: GpuType) -> GpuType:
    if gpu.hbm_tb_s is None or gpu.bf16_dense_tflops is None:
        raise BadInput(f"the performance model needs a GPU type with datasheet figures in "
                       f"tuner/data/gpus.csv; {gpu.name} has none: pass --gpu (e.g. H200)")
    return gpu


# ---------------------------------------------------------------- the plan


class Point(NamedTuple):
    config: int  # index into Plan.modeled
    level: int  # index into Plan.levels


@dataclass
class Plan:
    name: str
    engine: str
    gpu: GpuType
    space: SearchSpace
    devices: int
    levels: list[int]
    isl: int
    osl: int
    sla: SLA
    calibration: pm.Calibration
    configs: list[dict[str, Any]]  # every configuration of the space
    rule_reasons: list[str | None]  # why a configuration breaks an engine rule
    modeled: list[int]  # indices into configs that pass the rules
    cases: pm.Cases  # one row per modeled configuration
    prediction: pm.Prediction  # (modeled, levels)
    band: pm.Band  # 80% bands of the prediction
    acceptance: float | None = None  # the acceptance rate given for speculative configurations

    def _sla(self, ttft_p90: np.ndarray, per_user: np.ndarray) -> np.ndarray:
        ok = self.prediction.level_fits.copy()
        if self.sla.ttft_p90_ms is not None:
            ok &= ttft_p90 <= self.sla.ttft_p90_ms
        if self.sla.min_tok_s_per_user_p90 is not None:
            ok &= per_user >= self.sla.min_tok_s_per_user_p90
        return ok

    @cached_property  # whole arrays, read per level by the export's rows
    def meets_sla(self) -> np.ndarray:
        """Levels whose predicted p90 TTFT and per-user speed meet the SLA (and that fit)."""
        return self._sla(self.prediction.ttft_p90_ms, self.prediction.tok_s_per_user)

    @cached_property
    def reaches_sla(self) -> np.ndarray:
        """Levels whose band reaches the SLA: its optimistic edge (low TTFT, high speed) meets it,
        so a measurement could show the level meeting it."""
        return self._sla(self.band.ttft_p90_ms[0], self.band.tok_s_per_user[1])

    @property
    def objective(self) -> np.ndarray:
        """Per modeled configuration: the best tok/s per GPU among its levels predicted to meet
        the SLA (and fit), or 0 where none does: what the study maximizes."""
        return np.where(self.meets_sla, self.prediction.tok_s_per_gpu, 0.0).max(axis=1)

    @property
    def reachable(self) -> np.ndarray:
        """Per modeled configuration: the best predicted tok/s per GPU among its levels whose band
        reaches the SLA, or 0: what the warm start ranks by."""
        return np.where(self.reaches_sla, self.prediction.tok_s_per_gpu, 0.0).max(axis=1)

    def params(self, m: int) -> dict[str, Any]:
        return self.configs[self.modeled[m]]

    def memory_reason(self, m: int) -> str | None:
        if self.prediction.config_fits[m, 0]:
            return None
        return pm.memory_reason(self.cases, self.prediction, (m, 0), level=False)

    def level_reason(self, m: int, j: int) -> str | None:
        if self.prediction.level_fits[m, j]:
            return None
        if not self.prediction.config_fits[m, 0]:
            return self.memory_reason(m)
        return pm.memory_reason(self.cases, self.prediction, (m, j), level=True)

    def ranked(self, by_band: bool = False) -> list[int]:
        """Modeled configurations that fit, best predicted objective first (stable); with
        `by_band`, configurations whose band reaches the SLA first, by `reachable`."""
        fits = np.flatnonzero(self.prediction.config_fits[:, 0])
        key = self.reachable if by_band else self.objective
        order = np.argsort(-key[fits], kind="stable")
        return [int(i) for i in fits[order]]

    def front(self) -> list[Point]:
        """The Pareto front of (tok/s per GPU, tok/s per user) over levels that fit."""
        p = self.prediction
        m, j = np.nonzero(p.level_fits)
        x, y = p.tok_s_per_gpu[m, j], p.tok_s_per_user[m, j]
        order = np.lexsort((-y, -x))
        out: list[Point] = []
        best_y = -np.inf
        for i in order:
            if y[i] > best_y * (1 + 1e-9):
                out.append(Point(int(m[i]), int(j[i])))
                best_y = y[i]
        return out

    def fit_check(self) -> Check:
        """A feasibility check: the reason a configuration cannot fit in memory, or None."""
        reasons = {config_key(self.params(m)): self.memory_reason(m)
                   for m in np.flatnonzero(~self.prediction.config_fits[:, 0])}
        return lambda config: reasons.get(config_key(config))


@dataclass
class Screened:
    """A space's configurations with the engine rules applied (the costly, model-free part)."""

    configs: list[dict[str, Any]]
    rule_reasons: list[str | None]


def screen(target: PlanTarget) -> Screened:
    configs = target.space.enumerate()
    return Screened(configs, [target.infeasible(c) for c in configs])


def make_plan(target: PlanTarget, calibration: pm.Calibration | None = None,
              screened: Screened | None = None, acceptance: float | None = None) -> Plan:
    """Predictions for every configuration of the target's space that passes the engine rules;
    `acceptance` (accepted / proposed draft tokens) replaces the fitted acceptance of
    speculative configurations."""
    spec = target.spec
    gpu = gpu_for(target.gpu)
    model = model_for(spec, target.shape)
    engine = pm.facts().engine(spec.engine.name)
    calibration = calibration or pm.load_calibration()
    screened = screened or screen(target)
    w = spec.workload
    configs, reasons = screened.configs, screened.rule_reasons
    modeled = [i for i, r in enumerate(reasons) if r is None]
    setups = [pm.setup_of(configs[i], model=model, gpu=gpu, engine=engine,
                          layout=pm.layout_of(configs[i], target.adapter), isl=w.input_len,
                          osl=w.output_len, spread=w.range_ratio, acceptance_rate=acceptance)
              for i in modeled]
    if not setups:
        raise BadInput(f"no configuration of search space {target.space.name} passes the engine "
                       f"rules on {gpu.name}: nothing to plan")
    cases = pm.stack(setups).column()
    levels = w.plan_levels()
    prediction = pm.predict(cases, np.array(levels, dtype=float)[None, :], calibration)
    return Plan(name=spec.name, engine=spec.engine.name, gpu=gpu, space=target.space,
                devices=len(target.inventory.devices), levels=levels, isl=w.input_len,
                osl=w.output_len, sla=spec.sla.to_sla(), calibration=calibration,
                configs=configs, rule_reasons=reasons, modeled=modeled, cases=cases,
                prediction=prediction, band=pm.band(prediction, calibration),
                acceptance=acceptance)


# ---------------------------------------------------------------- what `tuner plan` prints


def summary_lines(plan: Plan, examples: int = 3) -> list[str]:
    """Counts, and examples of what cannot fit with the reason (pure; the CLI prints them)."""
    p = plan.prediction
    n_rules = len(plan.configs) - len(plan.modeled)
    no_fit = np.flatnonzero(~p.config_fits[:, 0])
    lines = [f"{len(plan.configs):,} configurations: {n_rules:,} break an engine rule, "
             f"{len(no_fit):,} cannot fit in memory, {len(plan.modeled) - len(no_fit):,} "
             f"predicted at concurrency {', '.join(map(str, plan.levels))}"]
    for m in no_fit[:examples]:
        lines.append(f"  does not fit: {describe(plan.params(m))}\n    {plan.memory_reason(m)}")
    fits = p.config_fits[:, 0]
    for j, c in enumerate(plan.levels):
        short = np.flatnonzero(fits & ~p.level_fits[:, j])
        if len(short):
            m = int(short[0])
            lines.append(f"  at c={c}, {len(short):,} configurations do not fit, e.g. "
                         f"{describe(plan.params(m))}\n    {plan.level_reason(m, j)}")
    lines.append(f"{int(plan.meets_sla.any(axis=1).sum()):,} configurations are predicted to "
                 f"meet the SLA at some level; the 80% band of "
                 f"{int(plan.reaches_sla.any(axis=1).sum()):,} reaches it")
    lines.append("bands (80%): " + "; ".join(
        f"{label} x/÷ {np.exp(pm.BAND_Z * pm.sigma(plan.calibration, g)[0]):.2f} "
        f"({pm.sigma(plan.calibration, g)[1]})" for g, label in (
            ("tok_s_per_gpu", "tok/s per GPU"), ("tok_s_per_user", "per user"),
            ("ttft", "TTFT median and p90"), ("ttft_p99", "TTFT p99"))))
    if plan.acceptance is not None:
        lines.append(f"speculative configurations at acceptance rate {plan.acceptance:.0%} "
                     "(--acceptance)")
    return lines


def _span(band: tuple[np.ndarray, np.ndarray], m: int, j: int) -> str:
    lo, hi = float(band[0][m, j]), float(band[1][m, j])
    return f"{lo:,.0f}-{hi:,.0f}" if hi >= 100 else f"{lo:,.1f}-{hi:,.1f}"


def _point(plan: Plan, m: int, j: int) -> dict[str, Any]:
    p, b = plan.prediction, plan.band
    sla = ("met" if plan.meets_sla[m, j] else "in band" if plan.reaches_sla[m, j]
           else "missed")
    return {"config": describe(plan.params(m)), "c": plan.levels[j],
            "tok/s/GPU": float(p.tok_s_per_gpu[m, j]), "80% band": _span(b.tok_s_per_gpu, m, j),
            "tok/s/user": float(p.tok_s_per_user[m, j]),
            "user band": _span(b.tok_s_per_user, m, j),
            "TTFT p90 ms": float(p.ttft_p90_ms[m, j]), "TTFT band": _span(b.ttft_p90_ms, m, j),
            "SLA": sla}


def front_frame(plan: Plan) -> Any:
    import pandas as pd

    return pd.DataFrame([_point(plan, m, j) for m, j in plan.front()])


def top_frame(plan: Plan, n: int) -> Any:
    """The n best configurations by the study's objective, each at its best level; of
    configurations with identical predictions, only the first."""
    import pandas as pd

    rows = []
    for m in top_distinct(plan, n):
        ok = plan.meets_sla[m]
        values = np.where(ok, plan.prediction.tok_s_per_gpu[m], -1.0)
        if not ok.any():
            break
        rows.append(_point(plan, m, int(np.argmax(values))))
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- rows: export and store


ROW_FIELDS = ("concurrency", "fits", "output_tok_s_per_gpu", "output_tok_s_per_gpu_lo",
              "output_tok_s_per_gpu_hi", "tok_s_per_user", "tok_s_per_user_lo",
              "tok_s_per_user_hi", "ttft_ms", "ttft_p90_ms", "ttft_p90_ms_lo", "ttft_p90_ms_hi",
              "ttft_ms_lo", "ttft_ms_hi", "ttft_p99_ms", "ttft_p99_ms_lo", "ttft_p99_ms_hi",
              "meets_sla", "band_reaches_sla", "reason")


def level_row(plan: Plan, m: int, j: int) -> dict[str, Any]:
    p, b = plan.prediction, plan.band

    def r(v) -> float:
        return round(float(v[m, j]), 1)

    return {
        "concurrency": plan.levels[j],
        "fits": bool(p.level_fits[m, j]),
        "output_tok_s_per_gpu": r(p.tok_s_per_gpu),
        "output_tok_s_per_gpu_lo": r(b.tok_s_per_gpu[0]),
        "output_tok_s_per_gpu_hi": r(b.tok_s_per_gpu[1]),
        "tok_s_per_user": r(p.tok_s_per_user),
        "tok_s_per_user_lo": r(b.tok_s_per_user[0]), "tok_s_per_user_hi": r(b.tok_s_per_user[1]),
        "ttft_ms": r(p.ttft_ms),  # median
        "ttft_p90_ms": r(p.ttft_p90_ms),
        "ttft_p90_ms_lo": r(b.ttft_p90_ms[0]), "ttft_p90_ms_hi": r(b.ttft_p90_ms[1]),
        "ttft_ms_lo": r(b.ttft_ms[0]), "ttft_ms_hi": r(b.ttft_ms[1]),
        "ttft_p99_ms": r(p.ttft_p99_ms),
        "ttft_p99_ms_lo": r(b.ttft_p99_ms[0]), "ttft_p99_ms_hi": r(b.ttft_p99_ms[1]),
        "meets_sla": bool(plan.meets_sla[m, j]),
        "band_reaches_sla": bool(plan.reaches_sla[m, j]),
        "reason": plan.level_reason(m, j),
    }


def plan_rows(plan: Plan) -> list[dict[str, Any]]:
    """Every configuration: one row per level when modeled, one row with the rule otherwise."""
    modeled = {i: m for m, i in enumerate(plan.modeled)}
    rows = []
    for i, params in enumerate(plan.configs):
        if i not in modeled:
            rows.append({"params": params, **dict.fromkeys(ROW_FIELDS), "fits": False,
                         "meets_sla": False, "band_reaches_sla": False,
                         "reason": plan.rule_reasons[i]})
            continue
        rows.extend({"params": params, **level_row(plan, modeled[i], j)}
                    for j in range(len(plan.levels)))
    return rows


def export(plan: Plan, path: Path) -> int:
    """Write the plan as CSV (one column per parameter) or JSON; returns the rows written."""
    rows = plan_rows(plan)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".json"):
        raise BadInput(f"--export {path}: give a .csv or .json file name")
    if not path.parent.is_dir():
        raise BadInput(f"--export {path}: directory {path.parent} does not exist")
    if suffix == ".json":
        doc = {"schema_version": 1, "source": SOURCE, "study": plan.name, "engine": plan.engine,
               "gpu_type": plan.gpu.name, "devices": plan.devices,
               "workload": {"input_len": plan.isl, "output_len": plan.osl,
                            "concurrency": plan.levels},
               "calibration": plan.calibration.source, "acceptance_rate": plan.acceptance,
               "rows": rows}
        path.write_text(json.dumps(doc, indent=1) + "\n")
        return len(rows)
    names = list(plan.space.parameters)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([*names, *ROW_FIELDS])
        for r in rows:
            writer.writerow([r["params"].get(n, "") for n in names]
                            + ["" if r[k] is None else r[k] for k in ROW_FIELDS])
    return len(rows)


def stored_rows(plan: Plan, modeled: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Rows for Store.save_predictions: every level of the given modeled configurations."""
    picked = range(len(plan.modeled)) if modeled is None else modeled
    return [{"params": plan.params(m), "config_key": key_digest(plan.params(m)),
             **level_row(plan, m, j)} for m in picked for j in range(len(plan.levels))]


def key_digest(params: dict[str, Any]) -> str:
    """The stored form of a configuration's key (`config_key`), fixed-length for an index."""
    return hashlib.sha1(config_key(params).encode()).hexdigest()  # an identity, not a secret


def save(plan: Plan, store: Any, study_name: str,
         modeled: Sequence[int] | None = None) -> int:
    """Store the plan's predictions (all, or these configurations) under source "perfmodel"."""
    rows = stored_rows(plan, modeled)
    store.save_predictions(study_name, rows, source=SOURCE, engine=plan.engine,
                           gpu_type=plan.gpu.name, calibration=plan.calibration.source,
                           replace_all=modeled is None)
    return len(rows)


# ---------------------------------------------------------------- warm start


def warm_start(target: PlanTarget, k: int, *, store: Any, study_name: str) -> WarmStart:
    """The model's top k configurations that fit, as the study's first trials, ranked by the
    best predicted tok/s per GPU among the levels whose 80% band reaches the SLA (so a
    configuration the point prediction puts just past an SLA boundary is still tried, and one
    whose whole band misses it comes last). The search calls `choose` with the configurations
    already finished (they are skipped) and stores those predictions, and rejects before launch
    what the model's memory check says cannot fit."""
    plan = make_plan(target)

    def choose(done: set[str]) -> list[dict[str, Any]]:
        picked = top_distinct(plan, k, skip=done, by_band=True)
        if picked:
            save(plan, store, study_name, picked)
        return [plan.params(m) for m in picked]

    return WarmStart(check=plan.fit_check(), choose=choose)


def top_distinct(plan: Plan, k: int, skip: Collection[str] = (), *,
                 by_band: bool = False) -> list[int]:
    """The k best configurations by predicted objective (`by_band`: by `Plan.reachable`),
    skipping those whose predictions equal one already picked (the model cannot tell them
    apart: one trial speaks for them all)."""
    seen: set[tuple[float, ...]] = set()
    picked: list[int] = []
    p = plan.prediction
    for m in plan.ranked(by_band=by_band):
        if len(picked) >= k:
            break
        if config_key(plan.params(m)) in skip:
            continue
        signature = tuple(np.round(np.concatenate([p.tok_s_per_gpu[m], p.tok_s_per_user[m]]), 3))
        if signature in seen:
            continue
        seen.add(signature)
        picked.append(m)
    return picked
