"""One client's figures from one run of the cross-check (bench/loadgen_vs_vllm_bench.py), and the
cross-check's table and verdicts over its rounds."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np
from scipy import stats

from tuner.measure.loadgen import MIN_ROUNDS
from tuner.measure.stats import CONFIDENCE

REFERENCE = "vllm bench"
AGREE = 0.05  # the bar for output tok/s and median TTFT
COLUMNS = (("output tok/s", "output_tok_s"), ("TTFT p50 ms", "ttft_p50_ms"),
           ("ITL p50 ms", "itl_p50_ms"), ("TPOT p50 ms", "tpot_p50_ms"))


@dataclass(frozen=True)
class Figures:
    output_tok_s: float
    ttft_p50_ms: float
    itl_p50_ms: float | None  # each gap between token chunks, pooled over requests
    tpot_p50_ms: float | None  # each request's mean gap after its first token
    input_tokens: float  # per request, as the server's usage counted them
    requests: int  # in the latency sample


def beside(kind: str) -> str:
    """The row of the vllm bench run that ran at the same time as guidellm's (together, each
    other client is paired with a vllm bench run of its own)."""
    return f"{REFERENCE} beside {kind}"


def is_reference(who: str) -> bool:
    return who.partition(" · ")[0].startswith(REFERENCE)


def reference_of(who: str, row: dict[str, Figures]) -> str:
    """The row a client's ratios are taken to: the vllm bench run on the same prompts that ran
    beside it (together), or vllm bench on the same prompts (in turns); a vllm bench row is its
    own."""
    if is_reference(who):
        return who
    kind, sep, prompts = who.partition(" · ")
    paired = beside(kind) + sep + prompts
    return paired if paired in row else REFERENCE + sep + prompts


def round_line(r: int, got: dict[str, Figures]) -> str:
    parts = [f"{who} {f.output_tok_s:,.0f} tok/s, TTFT {f.ttft_p50_ms:.1f} ms"
             for who, f in got.items()]
    return f"round {r}: " + " | ".join(parts)


def _fmt(value: float | None, width: int, spec: str = ",.1f") -> str:
    return f"{'—':>{width}}" if value is None else f"{value:>{width}{spec}}"


def table(rows: list[dict[str, Figures]]) -> list[str]:
    """One row per client: the medians over rounds, then each figure's ratio to vllm bench's
    as the median of the per-round ratios with their range."""
    clients = list(rows[0])
    width = max(len(c) for c in clients) + 2
    head = (f"{'client':<{width}}" + "".join(f"{name:>13}" for name, _ in COLUMNS)
            + f"{'in tok/req':>11}")
    head += "".join(f"{'÷ ' + name.split()[0]:>20}" for name, _ in COLUMNS)
    lines = [head]
    for who in clients:
        cells = []
        for _, field in COLUMNS:
            values = [getattr(row[who], field) for row in rows]
            cells.append(_fmt(None if None in values else statistics.median(values), 13))
        line = f"{who:<{width}}" + "".join(cells)
        line += _fmt(statistics.median(row[who].input_tokens for row in rows), 11, ".1f")
        for _, field in COLUMNS:
            ratios = [getattr(row[who], field) / getattr(row[reference_of(who, row)], field)
                      for row in rows if getattr(row[who], field) is not None]
            line += (f"{'—':>20}" if not ratios else
                     f"{statistics.median(ratios):>9.3f} [{min(ratios):.2f}–{max(ratios):.2f}]")
        lines.append(line)
    return lines


def median_interval(ratios: list[float]) -> tuple[float, float]:
    """A bootstrap interval of the median of the per-round ratios at tuner's confidence (95%;
    percentile method: BCa's jackknife is degenerate for a median of a few rounds)."""
    if len(ratios) < MIN_ROUNDS or len(set(ratios)) == 1:
        return min(ratios), max(ratios)
    ci = stats.bootstrap((ratios,), np.median, confidence_level=CONFIDENCE, method="percentile",
                         n_resamples=9999, random_state=np.random.default_rng(0)
                         ).confidence_interval
    return float(ci.low), float(ci.high)


def verdicts(rows: list[dict[str, Figures]]) -> list[str]:
    """Within the bar only when the whole 95% interval of the median ratio is; outside it only
    when the whole interval is; otherwise this run's rounds vary too much to tell."""
    out = []
    for who in rows[0]:
        if is_reference(who):
            continue
        ref = reference_of(who, rows[0])
        for name, field in COLUMNS[:2]:
            ratios = [getattr(row[who], field) / getattr(row[ref], field) for row in rows]
            ratio = statistics.median(ratios)
            low, high = median_interval(ratios)
            if len(rows) < MIN_ROUNDS:
                mark = (f"undecided: fewer than {MIN_ROUNDS} rounds give no interval (pass "
                        f"--rounds {MIN_ROUNDS} or more)")
            elif 1 - AGREE <= low and high <= 1 + AGREE:
                mark = f"within {AGREE:.0%}"
            elif high < 1 - AGREE or low > 1 + AGREE:
                mark = f"NOT within {AGREE:.0%}"
            else:
                mark = (f"undecided: the rounds vary too much to tell {AGREE:.0%} "
                        "(more --rounds narrow the interval)")
            out.append(f"{who} {name}: {ratio:.3f} of {ref}'s [{CONFIDENCE:.0%} interval "
                       f"{low:.3f}–{high:.3f}], {mark}")
    return out
