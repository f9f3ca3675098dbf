"""Two studies in one database, an H200-like and a B200-like one, for `tuner choose` and the
dashboard's Choose page. SYNTHETIC ROWS: made-up figures written through the Store and Optuna
APIs (tests.report.test_dashboard_data.StudyWriter), never a measurement.

At a target of 150 tok/s per user (p90), with the example prices of tuner/data/gpu_prices.csv
(H200 1.60, B200 2.90 USD per GPU-hour):

- h200 trial 0 (TP1) at c=8: 2,400 tok/s/GPU, 160 per user -> 1.60 / (2,400 x 3600) x 1e6
  = 0.185 USD per million output tokens: the cheapest meeting the target;
- b200 trial 0 (TP1) at c=8: 4,000 tok/s/GPU, 170 per user -> 0.201: the fastest per GPU
  meeting it. Its c=32 level is cheaper still (0.090) but reaches 90 tok/s per user only;
- h200 trial 1 (TP2) at c=8: 1,500 tok/s/GPU on 2 GPUs, 200 per user -> 0.296;
- b200 trial 1 (TP2) reaches 120 tok/s per user at best: it never meets the target.
"""

from __future__ import annotations

from dataclasses import replace

from tests.report.test_dashboard_data import BASE, P, StudyWriter
from tuner.store.records import LevelMeasurement

TARGET = 150.0
H200_PRICE, B200_PRICE = 1.60, 2.90
CHEAPEST = ("h200", 0, 8)  # study, trial, concurrency
FASTEST = ("b200", 0, 8)


def synthetic_level(c: int, per_gpu: float, user_p90: float, gpus: int, *,
                    ttft_p90_ms: float = 30.0, meets: bool = True) -> LevelMeasurement:
    """A made-up level of a server on `gpus` devices: its total output tok/s is per GPU x
    gpus, as the load generator divides it."""
    return replace(BASE, concurrency=c, output_tok_s=per_gpu * gpus,
                   output_tok_s_per_gpu=per_gpu, tok_s_per_user_p90=user_p90,
                   ttft_p90_ms=ttft_p90_ms, meets_sla=meets)


def h200_and_b200(url: str) -> tuple[StudyWriter, StudyWriter]:
    h200 = StudyWriter(url, "h200", gpu_type="H200")
    h200.complete(0, P(1), [synthetic_level(2, 900.0, 300.0, 1),
                            synthetic_level(8, 2400.0, 160.0, 1)])
    h200.complete(1, P(2), [synthetic_level(2, 600.0, 320.0, 2),
                            synthetic_level(8, 1500.0, 200.0, 2)])
    b200 = StudyWriter(url, "b200", gpu_type="B200")
    b200.complete(0, P(1), [synthetic_level(8, 4000.0, 170.0, 1),
                            synthetic_level(32, 9000.0, 90.0, 1)])
    b200.complete(1, P(2), [synthetic_level(8, 5000.0, 120.0, 2, ttft_p90_ms=60.0)])
    return h200, b200


def usd_per_mtok(price: float, gpus: int, per_gpu: float) -> float:
    """The hand computation: a server-hour over the millions of tokens it serves in an hour."""
    return price * gpus / (per_gpu * gpus * 3600) * 1e6
