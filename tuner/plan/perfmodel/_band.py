"""Uncertainty bands: how far a prediction may be off, from how far the calibration's own
leave-one-out predictions were off (per metric group), or a stated prior where it has too few."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tuner.plan.perfmodel._facts import Calibration, facts
from tuner.plan.perfmodel._predict import Prediction

BAND_Z = 1.2816  # a two-sided 80% band of a normal log error
MIN_ROWS = 3  # fewer calibration rows of a group than this: its prior sigma applies


@dataclass
class Band:
    """80% bands, arrays shaped like the prediction's."""

    tok_s_per_gpu: tuple[np.ndarray, np.ndarray]
    tok_s_per_user: tuple[np.ndarray, np.ndarray]
    ttft_ms: tuple[np.ndarray, np.ndarray]
    ttft_p90_ms: tuple[np.ndarray, np.ndarray]
    ttft_p99_ms: tuple[np.ndarray, np.ndarray]
    sources: dict[str, str]  # group -> where its sigma came from


def sigma(cal: Calibration, group: str) -> tuple[float, str]:
    """The log-error sigma of a metric group, and where it came from: the half-width that held
    80% of the calibration's leave-one-out log errors (over BAND_Z, so the band is that
    half-width), or their RMS where the calibration recorded no half-width."""
    stats = (cal.summary.get("bands") or {}).get(group)
    if stats and stats.get("rows", 0) >= MIN_ROWS:
        width = stats.get("log_halfwidth_80")
        value = width / BAND_Z if width is not None else float(stats["rms_log_error"])
        return value, f"{stats['rows']} leave-one-out rows of {cal.source}"
    rows = stats.get("rows", 0) if stats else 0
    return facts().band_sigma[group], (f"prior (calibration has {rows} row(s) of it)")


def band(p: Prediction, cal: Calibration) -> Band:
    def around(value: np.ndarray, group: str) -> tuple[np.ndarray, np.ndarray]:
        w = np.exp(BAND_Z * sigma(cal, group)[0])
        return value / w, value * w

    return Band(
        tok_s_per_gpu=around(p.tok_s_per_gpu, "tok_s_per_gpu"),
        tok_s_per_user=around(p.tok_s_per_user, "tok_s_per_user"),
        ttft_ms=around(p.ttft_ms, "ttft"), ttft_p90_ms=around(p.ttft_p90_ms, "ttft"),
        ttft_p99_ms=around(p.ttft_p99_ms, "ttft_p99"),
        sources={g: sigma(cal, g)[1] for g in ("tok_s_per_gpu", "tok_s_per_user", "ttft",
                                                 "ttft_p99")},
    )
