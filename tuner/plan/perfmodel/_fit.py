"""Published figures as observations, and fitting the free factors to observations."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from tuner.plan.perfmodel._facts import (
    Calibration,
    Prior,
    facts,
    gpu_for_model,
    model_facts,
    prior_calibration,
)
from tuner.plan.perfmodel._roofline import (
    MAX,
    Cases,
    Prediction,
    Setup,
    default_backend,
    kernel_family,
    parse_parallelism,
    predict,
    stack,
)
from tuner.spec.errors import BadInput
from tuner.spec.space import known_shapes

DEFAULT_LENGTH = 1024  # ISL/OSL assumed for a published figure that does not give them



METRICS = {
    "output_tok_s_per_gpu": "output tokens per second per GPU",
    "total_tok_s_per_gpu": "input + output tokens per second per GPU",
    "output_tok_s_per_user": "decode tokens per second one user sees",
    "tpot_ms": "time per output token",
    "itl_ms": "inter-token latency",
    "ttft_ms": "time to first token",
}


@dataclass(frozen=True)
class Figure:
    """One row of a published-figures CSV (the columns of tuner/data/published.csv)."""

    model: str
    engine: str
    gpu: str
    gpus: str
    parallelism: str
    isl: str
    osl: str
    concurrency: str
    speculative: str
    metric: str
    value: str
    source: str


def read_figures(path: Path) -> list[Figure]:
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        names = [f.name for f in fields(Figure)]
        missing = [n for n in names if n not in (reader.fieldnames or [])]
        if missing:
            raise BadInput(f"{path}: missing columns {', '.join(missing)} (expected "
                           f"{','.join(names)})")
        return [Figure(**{n: (row[n] or "").strip() for n in names}) for row in reader]


@dataclass(frozen=True)
class Observation:
    """A figure the model can predict: its setup, concurrency, metric and value."""

    setup: Setup
    concurrency: float
    metric: str
    value: float
    notes: tuple[str, ...] = ()


def observation(fig: Figure) -> Observation:
    """The figure as an Observation; ValueError(reason) when the model cannot predict it."""
    f = facts()
    if fig.metric not in METRICS:
        raise ValueError(f"metric {fig.metric!r} is not one the model predicts "
                         f"({', '.join(METRICS)})")
    try:
        value = float(fig.value)
    except ValueError:
        raise ValueError(f"value {fig.value!r} is not a number") from None
    if fig.model not in known_shapes():
        raise ValueError(f"model {fig.model!r} has no shape in tuner/data/models.yaml")
    if fig.engine not in f.engines:
        raise ValueError(f"engine {fig.engine!r} has no facts in tuner/data/perfmodel.yaml")
    try:
        gpu = gpu_for_model(fig.gpu)
    except BadInput as e:
        raise ValueError(str(e)) from None
    engine = f.engine(fig.engine)
    if gpu.arch not in engine.moe_backend_default:
        raise ValueError(f"{fig.engine} has no default MoE backend for {gpu.arch} in "
                         "tuner/data/perfmodel.yaml")
    layout = parse_parallelism(fig.parallelism)
    gpus = int(fig.gpus) if fig.gpus.isdigit() else layout.world
    if gpus % layout.world:
        raise ValueError(f"{gpus} GPUs are not a whole number of {fig.parallelism} servers")
    notes = []
    lengths = []
    for name, text in (("isl", fig.isl), ("osl", fig.osl)):
        if text.isdigit():
            lengths.append(int(text))
        else:
            lengths.append(DEFAULT_LENGTH)
            notes.append(f"{name} {DEFAULT_LENGTH} assumed")
    method = fig.speculative.lower() or "none"
    if method not in ("none", *f.drafts):
        raise ValueError(f"speculative method {fig.speculative!r} has no draft facts")
    k = 0 if method == "none" else f.default_draft_len
    if k:
        notes.append(f"draft length {k} assumed")
    if fig.concurrency.lower() == "max":
        conc = MAX
    elif fig.concurrency.isdigit() and int(fig.concurrency) > 0:
        conc = float(fig.concurrency)
    else:
        raise ValueError(f"concurrency {fig.concurrency!r} is neither a number nor 'max'")
    setup = Setup(model=model_facts(fig.model), gpu=gpu, engine=engine, layout=layout,
                  moe_backend=default_backend(engine, gpu), max_batch_size=engine.max_batch_size,
                  max_num_tokens=engine.max_num_tokens, kv_cache_dtype="auto",
                  memory_fraction=0.9, speculative=method, draft_len=k, isl=lengths[0],
                  osl=lengths[1], replicas=gpus // layout.world)
    return Observation(setup, conc, fig.metric, value, tuple(notes))


def metric_values(p: Prediction, c: Cases, metric: str) -> np.ndarray:
    return {
        "output_tok_s_per_gpu": lambda: p.tok_s_per_gpu,
        "total_tok_s_per_gpu": lambda: p.tok_s_per_gpu * (c.isl + c.osl) / c.osl,
        "output_tok_s_per_user": lambda: p.tok_s_per_user,
        "tpot_ms": lambda: 1e3 / p.tok_s_per_user,
        "itl_ms": lambda: 1e3 / p.tok_s_per_user,
        "ttft_ms": lambda: p.ttft_ms,
    }[metric]()


def predict_observations(obs: Sequence[Observation], cal: Calibration) -> np.ndarray:
    if not obs:
        return np.zeros(0)
    c = stack([o.setup for o in obs])
    p = predict(c, np.array([o.concurrency for o in obs]), cal)
    out = np.empty(len(obs))
    for metric in {o.metric for o in obs}:
        mask = np.array([o.metric == metric for o in obs])
        out[mask] = metric_values(p, c, metric)[mask]
    return out


# ---------------------------------------------------------------- fitting the free factors


def _to_z(value: float, prior: Prior) -> float:
    if prior.transform == "logit":
        v = min(max(value, 1e-4), 1 - 1e-4)
        return math.log(v / (1 - v))
    return math.log(value)


def _from_z(z: float, prior: Prior) -> float:
    return 1 / (1 + math.exp(-z)) if prior.transform == "logit" else math.exp(z)


def relevant_factors(obs: Sequence[Observation]) -> list[str]:
    """The factors that can move a prediction of these observations."""
    names = ["bw_eff", "dense_eff", "moe_fill_tokens", "layer_overhead_us",
             "step_overhead_ms", "comm_eff", "comm_latency_us", "ep_imbalance"]
    families: dict[str, set[str]] = {}
    for o in obs:
        families.setdefault(o.setup.gpu.arch, set()).add(kernel_family(o.setup))
    for o in obs:
        names.append(f"moe_eff.{o.setup.gpu.arch}")
        # A kernel's multiplier is only told apart from its architecture's base where the
        # observations compare kernels on one architecture.
        if len(families[o.setup.gpu.arch]) > 1:
            names.append(f"moe_kernel.{kernel_family(o.setup)}")
        names.append(f"step_engine.{o.setup.engine.name}")
        if o.setup.speculative != "none":
            names.append(f"acceptance.{o.setup.speculative}")
    priors = facts().priors
    return [n for n in dict.fromkeys(names) if n in priors]


def fit(obs: Sequence[Observation], start: Calibration, *, source: str,
        prior: Calibration | None = None, data_sigma: float = 0.15,
        iterations: int = 60) -> Calibration:
    """Maximum a posteriori factors: least squares of log errors (each weighed by data_sigma)
    plus each factor's distance from its prior in units of its sigma (Levenberg-Marquardt)."""
    priors = facts().priors
    prior = prior or prior_calibration()
    names = relevant_factors(obs)
    observed = np.log(np.array([o.value for o in obs]))
    z0 = np.array([_to_z(prior[n], priors[n]) for n in names])
    sig = np.array([priors[n].sigma for n in names])

    def calibration(z: np.ndarray) -> Calibration:
        values = dict(start.factors)
        values.update({n: _from_z(float(v), priors[n]) for n, v in zip(names, z, strict=True)})
        return Calibration(values, source, {})

    def residuals(z: np.ndarray) -> np.ndarray:
        pred = predict_observations(obs, calibration(z))
        data = (np.log(np.maximum(pred, 1e-12)) - observed) / data_sigma
        return np.concatenate([data, (z - z0) / sig])

    z = np.array([_to_z(start[n], priors[n]) for n in names])
    r = residuals(z)
    damping = 1e-2
    for _ in range(iterations):
        jac = np.empty((len(r), len(z)))
        for j in range(len(z)):
            dz = np.zeros_like(z)
            dz[j] = 1e-4
            jac[:, j] = (residuals(z + dz) - r) / 1e-4
        grad = jac.T @ r
        hess = jac.T @ jac
        improved = False
        while damping < 1e8:
            step = np.linalg.solve(hess + damping * np.diag(np.diag(hess) + 1e-9), -grad)
            trial = residuals(z + step)
            if trial @ trial < r @ r:
                z, r, damping, improved = z + step, trial, damping / 3, True
                break
            damping *= 4
        if not improved or np.max(np.abs(step)) < 1e-5:
            break
    return calibration(z)


def errors(obs: Sequence[Observation], cal: Calibration) -> np.ndarray:
    """Relative errors (predicted - observed) / observed."""
    pred = predict_observations(obs, cal)
    return pred / np.array([o.value for o in obs]) - 1


def usable(figures: Sequence[Figure]) -> tuple[list[Observation], list[tuple[Figure, str]]]:
    """The figures the model can predict, and the others with the reason."""
    obs: list[Observation] = []
    skipped: list[tuple[Figure, str]] = []
    for fig in figures:
        try:
            obs.append(observation(fig))
        except ValueError as e:
            skipped.append((fig, str(e)))
    return obs, skipped


def leave_one_out(obs: Sequence[Observation], start: Calibration) -> np.ndarray:
    """Each observation's relative error when the factors are fitted to all the others."""
    out = np.empty(len(obs))
    for i in range(len(obs)):
        rest = [o for j, o in enumerate(obs) if j != i]
        out[i] = errors([obs[i]], fit(rest, start, source="leave-one-out"))[0]
    return out


def calibrate(obs: Sequence[Observation], *, source: str) -> Calibration:
    """Factors fitted to `obs` from the priors, with their in-sample and leave-one-out errors."""
    start = prior_calibration()
    fitted = fit(obs, start, source=source)
    inside = np.abs(errors(obs, fitted))
    loo = np.abs(leave_one_out(obs, start))
    summary = {
        "observations": len(obs),
        "in_sample_median_abs_error": round(float(np.median(inside)), 4),
        "in_sample_worst_abs_error": round(float(np.max(inside)), 4),
        "leave_one_out_median_abs_error": round(float(np.median(loo)), 4),
        "leave_one_out_worst_abs_error": round(float(np.max(loo)), 4),
    }
    factors = {k: round(v, 6) for k, v in fitted.factors.items()}
    return Calibration(factors, source, summary)
