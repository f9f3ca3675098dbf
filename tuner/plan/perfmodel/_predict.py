"""Predictions per concurrency level: the batch the server holds, tok/s per GPU and per user, and
TTFT (median and p90) with the prefill/decode interference that sets it under load."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tuner.plan.perfmodel._facts import GB, Calibration
from tuner.plan.perfmodel._roofline import (
    Cases,
    Memory,
    factor_arrays,
    kv_per_sequence,
    memory,
    step_time,
)

RHO_MAX = 0.98  # prefill demand at or above the step's token budget: the queue is unbounded


@dataclass
class Prediction:
    """Arrays shaped like the broadcast of cases and concurrency levels."""

    tok_s_per_gpu: np.ndarray  # output tokens
    tok_s_per_user: np.ndarray  # decode speed one user sees
    ttft_ms: np.ndarray  # median
    ttft_p90_ms: np.ndarray
    batch: np.ndarray  # sequences running on the server
    level_fits: np.ndarray  # KV for the concurrency's sequences fits (and the config does)
    config_fits: np.ndarray  # the weights, activations and the longest sequence's KV fit
    kv_needed: np.ndarray  # bytes per GPU of KV for the level's sequences at full length
    memory: Memory


def expected_tokens(k: np.ndarray, a: np.ndarray, rate: np.ndarray | float = math.nan
                    ) -> np.ndarray:
    """Tokens one step yields with a draft of length k: 1 + rate x k where the acceptance rate
    (accepted / proposed draft tokens) is known, else (1 - a^(k+1)) / (1 - a) for a per-token
    acceptance a (each drafted token accepted only after its predecessors)."""
    a = np.clip(a, 0.0, 0.999)
    geometric = (1 - a ** (k + 1)) / (1 - a)
    rate = np.asarray(rate, dtype=float)
    known = 1 + np.clip(np.nan_to_num(rate), 0.0, 1.0) * k
    return np.where(k > 0, np.where(np.isnan(rate), geometric, known), 1.0)


def longest(c: Cases) -> np.ndarray:
    """The longest prompt + output the workload's length spread draws."""
    return (c.isl + c.osl) * (1 + c.spread)


def _wait_quantile(rho: np.ndarray, theta: np.ndarray, q: float) -> np.ndarray:
    """The q-quantile of an M/D/1-like wait: P(wait > x) ~ rho exp(-x / theta)."""
    tail = 1 - q
    return np.where(rho > tail, theta * np.log(np.maximum(rho, tail) / tail), 0.0)


def predict(c: Cases, conc: np.ndarray, cal: Calibration) -> Prediction:
    """Predictions at client concurrency `conc` (MAX: as many as the server holds), broadcast
    against the cases (use `c.column()` with a row of levels for every case x level)."""
    f = factor_arrays(c, cal)
    mem = memory(c)
    conc = np.asarray(conc, dtype=float)
    kv_full = kv_per_sequence(c, mem, c.isl + c.osl)
    config_fits = mem.kv_budget >= kv_per_sequence(c, mem, longest(c))
    per_rank = np.maximum(np.floor(np.maximum(mem.kv_budget, 0) / kv_per_sequence(
        c, mem, c.isl + c.osl / 2)), 0)
    per_rank = np.maximum(np.minimum(c.max_batch, per_rank), 1)
    room = c.adp * per_rank
    want = np.where(np.isinf(conc), room, conc / c.replicas)
    seqs = np.minimum(want, room)
    b = np.minimum(np.ceil(seqs / c.adp - 1e-9), per_rank)
    b = np.maximum(b, 1)
    e = expected_tokens(c.draft_len, f.acceptance, c.acc_rate)
    # Chunked prefill: in steady state every step also carries the prompts of the sequences that
    # replace finished ones (b e / OSL of them per step): decode slows by that interference.
    p_rank = b * e * c.isl / c.osl
    p_all = seqs * e * c.isl / c.osl
    t = step_time(c, f, b, seqs, p_rank, p_all)
    others = (b - 1) / b
    t_user = step_time(c, f, b, seqs, p_rank * others, p_all * others)
    tok_gpu = seqs * e / t / c.world
    tok_user = e / t_user
    # Closed loop above capacity: the clients the server cannot hold queue (Little's law).
    budget = np.maximum(c.max_tokens - b * (1 + c.draft_len), 1)
    rate = seqs * e / (c.osl * t)  # requests per second per server
    median = _ttft(c, f, b, seqs, t, p_rank, p_all, budget, c.isl, 0.5)
    p90 = _ttft(c, f, b, seqs, t, p_rank, p_all, budget, c.isl * (1 + 0.8 * c.spread), 0.9)
    cycle = median + (c.osl - 1) / tok_user
    queue = np.where(want > seqs, np.maximum(want / rate - cycle, 0), 0)
    held = np.minimum(np.ceil(np.minimum(want, c.adp * c.max_batch) / c.adp - 1e-9), c.max_batch)
    kv_needed = np.maximum(held, 1) * kv_full
    return Prediction(
        tok_s_per_gpu=tok_gpu, tok_s_per_user=tok_user, ttft_ms=(queue + median) * 1e3,
        ttft_p90_ms=(queue + p90) * 1e3, batch=seqs,
        level_fits=config_fits & (kv_needed <= mem.kv_budget), config_fits=config_fits,
        kv_needed=kv_needed, memory=mem,
    )


def _ttft(c: Cases, f, b, seqs, t, p_rank, p_all, budget, prompt, q: float) -> np.ndarray:
    """Seconds to the first token at quantile q for a prompt of `prompt` tokens: the wait for the
    next step boundary, the wait for room in the steps' token budget behind other prompts (the
    prefill/decode interference: decodes take their tokens first), and the prompt's own chunks,
    each a step that also carries the running batch's decodes."""
    chunks = np.ceil(prompt / budget)
    chunk = np.minimum(prompt, budget)
    t_chunk = step_time(c, f, b, seqs, p_rank + chunk, p_all + chunk)
    service = chunks * t_chunk
    rho = np.minimum(p_rank / budget, RHO_MAX)
    theta = service / (2 * (1 - rho))  # mean M/D/1 wait over rho
    return q * t + service + _wait_quantile(rho, theta, q)


def memory_reason(c: Cases, p: Prediction, i: int | tuple[int, ...], *, level: bool) -> str:
    """Why case i (and level, for `level=True`) does not fit, as one sentence."""
    mem = p.memory

    def at(v) -> float:
        return float(np.broadcast_to(v, np.broadcast(v, p.kv_needed).shape)[i])

    budget = at(mem.kv_budget)
    frac = at(c.memory_fraction)
    of = "of" if at(c.fraction_of_total) else "of what is free on"
    used = (f"weights {at(mem.weights) / GB:.1f} GB + activations {at(mem.activations) / GB:.1f}"
            f" GB + reserve {mem.reserved / GB:.1f} GB")
    where = f"memory fraction {frac:g} {of} {at(c.memory) / GB:.0f} GB"
    if budget <= 0:
        limit = where if at(c.fraction_of_total) else f"{at(c.memory) / GB:.0f} GB of the GPU"
        return f"{used} exceed the {limit}"
    if not level:
        return (f"{used} leave {budget / GB:.1f} GB for the KV cache at {where}: less than one "
                f"{at(longest(c)):,.0f}-token sequence")
    per_rank = at(p.kv_needed)
    seqs = per_rank / max(at(kv_per_sequence(c, mem, c.isl + c.osl)), 1)
    return (f"KV cache for {seqs:,.0f} sequences of {at(c.isl) + at(c.osl):,.0f} tokens needs "
            f"{per_rank / GB:.1f} GB per GPU; {used} leave {budget / GB:.1f} GB at {where}")
