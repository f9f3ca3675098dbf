"""Fitting the free factors to observations (published figures, or a study's trials), with the
leave-one-out errors that give every prediction its uncertainty band."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy.optimize import least_squares

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
        "ttft_p99_ms": lambda: p.ttft_p99_ms,
        "ttft_ms_p99": lambda: p.ttft_p99_ms,
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
    names = ["bw_eff", "kv_bw_eff", "attn_seq_us", "dense_eff", "moe_fill_tokens",
             "layer_overhead_us", "step_overhead_ms", "comm_eff", "comm_latency_us",
             "ep_imbalance"]
    families: dict[str, set[str]] = {}
    for o in obs:
        families.setdefault(o.setup.gpu.arch, set()).add(kernel_family(o.setup))
    for o in obs:
        s = o.setup
        names.append(f"moe_eff.{s.gpu.arch}")
        names.append(f"step_device.{s.gpu.arch}")
        names.append(f"moe_dequant_tb_s.{s.gpu.arch}")
        # A kernel's multiplier is only told apart from its architecture's base where the
        # observations compare kernels on one architecture.
        if len(families[s.gpu.arch]) > 1:
            names.append(f"moe_kernel.{kernel_family(s)}")
        names.append(f"step_engine.{s.engine.name}")
        # A measured acceptance is a fact of the observation, not a factor to fit.
        if s.speculative != "none" and s.acceptance_rate is None:
            names.append(f"acceptance.{s.speculative}")
        if GROUP_OF[o.metric] in ("ttft", "ttft_p99"):
            names += ["request_overhead_ms", f"request_engine.{s.engine.name}",
                      f"admit_steps.{s.engine.name}"]
            if s.layout.attention_dp > 1:
                names.append(f"dp_balance_steps.{s.engine.name}")
        if s.prompts_per_client is not None:
            names.append("drain_cycles")
    priors = facts().priors
    return [n for n in dict.fromkeys(names) if n in priors]


def _robust(r: np.ndarray) -> np.ndarray:
    """Residuals whose squares are the soft-L1 loss of r: quadratic within one sigma, linear
    beyond, so a stray figure pulls the factors less than a square would let it."""
    return np.sign(r) * np.sqrt(2 * (np.sqrt(1 + r * r) - 1))


def _cell_sizes(obs: Sequence[Observation]) -> np.ndarray:
    """How many observations share each one's model, engine, GPU and metric group: a fit weighs
    each by 1 / sqrt of it, so a GPU measured at many levels does not drown one measured once."""
    def cell(o: Observation) -> tuple[str, str, str, str]:
        return o.setup.model.name, o.setup.engine.name, o.setup.gpu.name, GROUP_OF[o.metric]

    counts: dict[tuple[str, str, str, str], int] = {}
    for o in obs:
        counts[cell(o)] = counts.get(cell(o), 0) + 1
    return np.array([counts[cell(o)] for o in obs], dtype=float)


def fit(obs: Sequence[Observation], start: Calibration, *, source: str,
        prior: Calibration | None = None, data_sigma: float | None = None,
        iterations: int = 200) -> Calibration:
    """Maximum a posteriori factors: least squares of log errors (each weighed by its metric
    group's data sigma, tuner/data/perfmodel.yaml `fit`, or `data_sigma`; soft-L1 beyond one
    sigma) plus each factor's distance from its prior in units of its sigma."""
    priors = facts().priors
    prior = prior or prior_calibration()
    names = relevant_factors(obs)
    run = predictor(obs)
    observed = np.log(np.array([o.value for o in obs]))
    scatter = np.array([data_sigma or facts().data_sigma[GROUP_OF[o.metric]] for o in obs])
    scatter = scatter * _cell_sizes(obs) ** 0.5
    z0 = np.array([_to_z(prior[n], priors[n]) for n in names])
    sig = np.array([priors[n].sigma for n in names])

    def calibration(z: np.ndarray) -> Calibration:
        values = dict(start.factors)
        values.update({n: _from_z(float(v), priors[n]) for n, v in zip(names, z, strict=True)})
        return Calibration(values, source, {})

    def residuals(z: np.ndarray) -> np.ndarray:
        pred = np.nan_to_num(run(calibration(z)), nan=1e-12, posinf=1e12)
        data = (np.log(np.maximum(pred, 1e-12)) - observed) / scatter
        return np.concatenate([_robust(data), (z - z0) / sig])

    z = np.array([_to_z(start[n], priors[n]) for n in names])
    if not len(z):
        return calibration(z)
    found = least_squares(residuals, z, method="trf", diff_step=1e-4, max_nfev=iterations,
                          x_scale=1.0)
    return calibration(found.x)


def errors(obs: Sequence[Observation], cal: Calibration) -> np.ndarray:
    """Relative errors (predicted - observed) / observed."""
    pred = predict_observations(obs, cal)
    return pred / np.array([o.value for o in obs]) - 1

def configuration_key(o: Observation) -> tuple[str, float]:
    """What one measured configuration is: its setup and concurrency (every metric of it)."""
    return repr(o.setup), o.concurrency


def leave_one_out(obs: Sequence[Observation], start: Calibration) -> np.ndarray:
    """Each observation's relative error when the factors are fitted to every other
    configuration: all the metrics of its configuration (and of any figure of the same setup and
    concurrency, as two engine versions measured alike) are held out together. Each fit starts
    from `start` and is drawn to the priors."""
    groups: dict[tuple[str, float], list[int]] = {}
    for i, o in enumerate(obs):
        groups.setdefault(configuration_key(o), []).append(i)
    out = np.empty(len(obs))
    for members in groups.values():
        held = set(members)
        rest = [o for j, o in enumerate(obs) if j not in held]
        without = fit(rest, start, source="leave-one-out")
        out[members] = errors([obs[i] for i in members], without)
    return out


def calibrate(obs: Sequence[Observation], *, source: str) -> Calibration:
    """Factors fitted to `obs` from the priors, with their in-sample and leave-one-out errors,
    and per metric group the leave-one-out log errors that set the uncertainty bands."""
    fitted = fit(obs, prior_calibration(), source=source)
    inside = np.abs(errors(obs, fitted))
    loo_signed = leave_one_out(obs, fitted)
    loo = np.abs(loo_signed)
    summary = {
        "observations": len(obs),
        "configurations": len({configuration_key(o) for o in obs}),
        "in_sample_median_abs_error": round(float(np.median(inside)), 4),
        "in_sample_worst_abs_error": round(float(np.max(inside)), 4),
        "leave_one_out_median_abs_error": round(float(np.median(loo)), 4),
        "leave_one_out_worst_abs_error": round(float(np.max(loo)), 4),
        "bands": band_summary(obs, loo_signed),
    }
    factors = {k: round(v, 6) for k, v in fitted.factors.items()}
    return Calibration(factors, source, summary)


def band_summary(obs: Sequence[Observation], rel_errors: np.ndarray) -> dict[str, dict]:
    """Per metric group: rows, the median and worst absolute error, the RMS of the log errors
    and the log half-width that holds 80% of them (what `band` reads)."""
    out = {}
    for group in GROUPS:
        errs = np.array([e for o, e in zip(obs, rel_errors, strict=True)
                         if GROUP_OF[o.metric] == group and e > -1])
        if len(errs):
            logs = np.abs(np.log1p(errs))
            out[group] = {"rows": len(errs),
                          "median_abs_error": round(float(np.median(np.abs(errs))), 4),
                          "worst_abs_error": round(float(np.max(np.abs(errs))), 4),
                          "rms_log_error": round(float(np.sqrt(np.mean(logs ** 2))), 4),
                          "log_halfwidth_80": round(float(np.quantile(logs, 0.8)), 4)}
    return out
