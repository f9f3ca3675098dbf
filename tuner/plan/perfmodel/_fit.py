"""Fitting the free factors to observations (published figures, or a study's trials), with the
leave-one-out errors that give every prediction its uncertainty band."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from tuner.plan.perfmodel._facts import Calibration, Prior, facts, prior_calibration
from tuner.plan.perfmodel._figures import GROUP_OF, GROUPS, Observation
from tuner.plan.perfmodel._predict import Prediction, predict
from tuner.plan.perfmodel._roofline import Cases, kernel_family, stack


def metric_values(p: Prediction, c: Cases, metric: str) -> np.ndarray:
    return {
        "output_tok_s_per_gpu": lambda: p.tok_s_per_gpu,
        "total_tok_s_per_gpu": lambda: p.tok_s_per_gpu * (c.isl + c.osl) / c.osl,
        "output_tok_s_per_user": lambda: p.tok_s_per_user,
        "tpot_ms": lambda: 1e3 / p.tok_s_per_user,
        "itl_ms": lambda: 1e3 / p.tok_s_per_user,
        "ttft_ms": lambda: p.ttft_ms,
        "ttft_p90_ms": lambda: p.ttft_p90_ms,
    }[metric]()


def predictor(obs: Sequence[Observation]) -> Callable[[Calibration], np.ndarray]:
    """A function from factors to the observations' predicted values (setups stacked once, as
    a fit evaluates many factor values on the same observations)."""
    c = stack([o.setup for o in obs])
    conc = np.array([o.concurrency for o in obs])
    masks = {m: np.array([o.metric == m for o in obs]) for m in {o.metric for o in obs}}

    def run(cal: Calibration) -> np.ndarray:
        p = predict(c, conc, cal)
        out = np.empty(len(obs))
        for metric, mask in masks.items():
            out[mask] = metric_values(p, c, metric)[mask]
        return out

    return run


def predict_observations(obs: Sequence[Observation], cal: Calibration) -> np.ndarray:
    return predictor(obs)(cal) if obs else np.zeros(0)


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
        names.append(f"step_device.{o.setup.gpu.arch}")
        # A kernel's multiplier is only told apart from its architecture's base where the
        # observations compare kernels on one architecture.
        if len(families[o.setup.gpu.arch]) > 1:
            names.append(f"moe_kernel.{kernel_family(o.setup)}")
        names.append(f"step_engine.{o.setup.engine.name}")
        # A measured acceptance is a fact of the observation, not a factor to fit.
        if o.setup.speculative != "none" and o.setup.acceptance_rate is None:
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
    run = predictor(obs)
    observed = np.log(np.array([o.value for o in obs]))
    z0 = np.array([_to_z(prior[n], priors[n]) for n in names])
    sig = np.array([priors[n].sigma for n in names])

    def calibration(z: np.ndarray) -> Calibration:
        values = dict(start.factors)
        values.update({n: _from_z(float(v), priors[n]) for n, v in zip(names, z, strict=True)})
        return Calibration(values, source, {})

    def residuals(z: np.ndarray) -> np.ndarray:
        pred = run(calibration(z))
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

def leave_one_out(obs: Sequence[Observation], start: Calibration) -> np.ndarray:
    """Each observation's relative error when the factors are fitted to all the others."""
    out = np.empty(len(obs))
    for i in range(len(obs)):
        rest = [o for j, o in enumerate(obs) if j != i]
        out[i] = errors([obs[i]], fit(rest, start, source="leave-one-out"))[0]
    return out


def calibrate(obs: Sequence[Observation], *, source: str) -> Calibration:
    """Factors fitted to `obs` from the priors, with their in-sample and leave-one-out errors,
    and per metric group the RMS leave-one-out log error that sets the uncertainty bands."""
    start = prior_calibration()
    fitted = fit(obs, start, source=source)
    inside = np.abs(errors(obs, fitted))
    loo_signed = leave_one_out(obs, start)
    loo = np.abs(loo_signed)
    summary = {
        "observations": len(obs),
        "in_sample_median_abs_error": round(float(np.median(inside)), 4),
        "in_sample_worst_abs_error": round(float(np.max(inside)), 4),
        "leave_one_out_median_abs_error": round(float(np.median(loo)), 4),
        "leave_one_out_worst_abs_error": round(float(np.max(loo)), 4),
        "bands": band_summary(obs, loo_signed),
    }
    factors = {k: round(v, 6) for k, v in fitted.factors.items()}
    return Calibration(factors, source, summary)


def band_summary(obs: Sequence[Observation], rel_errors: np.ndarray) -> dict[str, dict]:
    """Per metric group: rows and the RMS of their log errors (what `band` reads)."""
    out = {}
    for group in GROUPS:
        logs = [math.log1p(e) for o, e in zip(obs, rel_errors, strict=True)
                if GROUP_OF[o.metric] == group and e > -1]
        if logs:
            out[group] = {"rows": len(logs),
                          "rms_log_error": round(float(np.sqrt(np.mean(np.square(logs)))), 4)}
    return out
