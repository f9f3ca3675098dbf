"""The startup trials: before TPE models the space, configurations that spread over every
parameter's values.

A random startup of three trials can leave a value that decides the study unmeasured (the demo's
`max_batch_size: 64`, 2.5 times the throughput of batch 4 at c=16), and TPE then refines whatever
the best of the three happened to be: which configuration a study ends on depended on noise in
its first minutes. Each startup trial here is one of the untried configurations that measures
the most parameter values no measured (or running) trial has had yet; the seeded generator
breaks ties, so a study's startup is the same from run to run whatever its figures.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any


def covered(measured: Iterable[dict[str, Any]]) -> set[tuple[str, Any]]:
    """Every (parameter, value) that a measured or running trial has had."""
    return {(name, value) for params in measured for name, value in params.items()}


def spread_choice(untried: list[dict[str, Any]], measured: Iterable[dict[str, Any]],
                  rng: random.Random) -> dict[str, Any]:
    """The untried configuration with the most values not measured yet (seeded ties)."""
    seen = covered(measured)
    score = [sum((name, value) not in seen for name, value in c.items()) for c in untried]
    top = max(score)
    return rng.choice([c for c, s in zip(untried, score, strict=True) if s == top])
