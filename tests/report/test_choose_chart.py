"""Which levels the Choose page's chart draws: all of them while a browser draws them quickly;
beyond its limit, every level on a GPU type's front and an even sample of the rest (SYNTHETIC
ROWS: made-up figures, never a measurement)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tuner.report import dashboard_data as dd


def levels(n: int, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        dd.HARDWARE: rng.choice(["H200 · vllm", "B200 · trtllm"], n),
        dd.USER_P90: rng.uniform(10, 500, n),
        dd.USD_MTOK: rng.uniform(0.05, 3.0, n),
        dd.TOK_GPU: rng.uniform(100, 9000, n),
        "meets SLA": rng.random(n) < 0.3,
    })


def on_front(points: pd.DataFrame, y: str, lower_is_better: bool) -> set[int]:
    """By hand: a level no level of its hardware beats on both per-user speed and `y`."""
    front = set()
    for i, p in points.iterrows():
        same = points[points[dd.HARDWARE] == p[dd.HARDWARE]]
        better_y = same[y] < p[y] if lower_is_better else same[y] > p[y]
        if not ((same[dd.USER_P90] > p[dd.USER_P90]) & better_y).any():
            front.add(i)
    return front


def test_every_level_is_drawn_up_to_the_limit():
    points = levels(300)
    drawn = dd.drawn_points(points, dd.USD_MTOK, limit=300)
    assert len(drawn.points) == 300 and drawn.left_out == 0 and drawn.sampled == 0


def test_beyond_the_limit_every_front_level_is_drawn_and_an_even_sample_of_the_rest():
    points = levels(3000)
    for y, lower in ((dd.USD_MTOK, True), (dd.TOK_GPU, False)):
        drawn = dd.drawn_points(points, y, limit=400)
        kept = set(drawn.points.index)
        front = on_front(points, y, lower) | on_front(points[points["meets SLA"]], y, lower)
        assert front <= kept, y
        assert drawn.front == len(front)
        assert len(kept) == 400 == drawn.front + drawn.sampled
        assert drawn.front + drawn.sampled + drawn.left_out == 3000
        # Both GPU types stay on the chart in about their share of the sample.
        share = (drawn.points[dd.HARDWARE] == "H200 · vllm").mean()
        assert 0.4 < share < 0.6
        # The same levels on every rerun: the chart does not flicker.
        assert kept == set(dd.drawn_points(points, y, limit=400).points.index)


def test_a_level_without_both_figures_is_not_drawn():
    points = levels(10)
    points.loc[3, dd.USER_P90] = np.nan
    drawn = dd.drawn_points(points, dd.USD_MTOK, limit=100)
    assert 3 not in drawn.points.index and len(drawn.points) == 9
