"""Predictions per concurrency level: the batch the server holds, tok/s per GPU and per user, and
TTFT (median, p90, p99) with the prefill/decode interference and the waits that set it under
load."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tuner.plan.perfmodel._facts import GB, Calibration
from tuner.plan.perfmodel._roofline import (
    Cases,
    Factors,
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
    ttft_p99_ms: np.ndarray
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


@dataclass
class _Load:
    """One server at one level: its batch, its steps and the prompts they carry."""

    b: np.ndarray  # sequences decoding on the busiest attention rank
    seqs: np.ndarray  # on the whole server
    want: np.ndarray  # clients per server (MAX: what the server holds)
    e: np.ndarray  # tokens a sequence gains per step
    budget: np.ndarray  # prompt tokens a step may carry beside its decodes (per rank)
    t: np.ndarray  # mean step, the prompts' chunks included (seconds)
    t_user: np.ndarray  # mean step one user sees: the other users' prompts only
    prompt_load: np.ndarray  # prompt tokens per step per rank (steady state)
    t_full: np.ndarray  # a step whose prompt chunk fills the budget
    t_burst: np.ndarray  # a step of the start burst: every rank prefills, half the batch decodes
    burst_tokens: np.ndarray  # the start burst's prompt tokens per rank


def _load(c: Cases, f: Factors, mem: Memory, conc: np.ndarray) -> _Load:
    per_rank = np.maximum(np.floor(np.maximum(mem.kv_budget, 0) / kv_per_sequence(
        c, mem, c.isl + c.osl / 2)), 0)
    per_rank = np.maximum(np.minimum(c.max_batch, per_rank), 1)
    room = c.adp * per_rank
    want = np.where(np.isinf(conc), room, conc / c.replicas)
    seqs = np.minimum(want, room)
    b = np.maximum(np.minimum(np.ceil(seqs / c.adp - 1e-9), per_rank), 1)
    e = expected_tokens(c.draft_len, f.acceptance, c.acc_rate)
    budget = np.maximum(c.max_tokens - b * (1 + c.draft_len), 1)
    # Decode steps, and steps that also prefill a prompt chunk (chunked prefill). In steady state
    # each rank replaces its b e / OSL finishing sequences per step, ISL prompt tokens each: a
    # prompt's chunk in the step that carries it (more than a prompt per step pack into one
    # chunk); ranks step in lock-step, so any rank's chunk holds them all.
    prompt_load = b * e * c.isl / c.osl
    chunk = np.minimum(np.maximum(c.isl, prompt_load), budget)
    t_dec = step_time(c, f, b, seqs, 0.0 * b, 0.0 * b)
    extra = step_time(c, f, b, seqs, chunk, chunk) - t_dec
    chunks = c.adp * prompt_load / chunk
    others = (seqs - 1) / np.maximum(seqs, 1)
    burst_tokens = seqs / c.adp * c.isl
    per_step = np.minimum(burst_tokens, c.max_tokens)
    half = np.maximum(b / 2, 1)  # the burst's started sequences decode beside it
    return _Load(b, seqs, want, e, budget, t_dec + chunks * extra,
                 t_dec + chunks * others * extra, prompt_load,
                 step_time(c, f, b, seqs, budget, budget),
                 step_time(c, f, half, half * c.adp, per_step, per_step * c.adp), burst_tokens)


def predict(c: Cases, conc: np.ndarray, cal: Calibration) -> Prediction:
    """Predictions at client concurrency `conc` (MAX: as many as the server holds), broadcast
    against the cases (use `c.column()` with a row of levels for every case x level)."""
    f = factor_arrays(c, cal)
    mem = memory(c)
    conc = np.asarray(conc, dtype=float)
    kv_full = kv_per_sequence(c, mem, c.isl + c.osl)
    config_fits = mem.kv_budget >= kv_per_sequence(c, mem, longest(c))
    ld = _load(c, f, mem, conc)
    tok_user = ld.e / ld.t_user
    ttft = {q: _ttft(c, f, ld, q) for q in (0.5, 0.9, 0.99)}
    # A slot's cycle: its prompt's prefill, the decode of the rest, and (closed loop, each
    # client waiting for its own answer) the request's time outside the steps; clients queued
    # above what the server holds, and an offline batch (MAX), refill a slot at once.
    waiting, service = ttft[0.5]
    refill = (ld.want > ld.seqs) | np.isinf(conc)
    cycle = service + np.where(refill, 0.0, waiting) + (c.osl - 1) * ld.t_user / ld.e
    # Timed from every client's start to its last completion, the run also holds its last wave
    # draining with fewer requests in flight: drain_cycles more than its prompts_per_client.
    m = c.prompts_per_client
    stretch = np.where(np.isnan(m), 1.0, 1 + f.drain_cycles / np.where(np.isnan(m), 1.0, m))
    tok_gpu = ld.seqs * c.osl / (cycle * stretch) / c.world
    # Closed loop above capacity: the clients the server cannot hold queue (Little's law).
    queue = np.where(ld.want > ld.seqs, np.maximum(ld.want * cycle / ld.seqs - cycle, 0), 0)
    held = np.minimum(np.ceil(np.minimum(ld.want, c.adp * c.max_batch) / c.adp - 1e-9),
                      c.max_batch)
    kv_needed = np.maximum(held, 1) * kv_full
    return Prediction(
        tok_s_per_gpu=tok_gpu, tok_s_per_user=tok_user,
        ttft_ms=(queue + sum(ttft[0.5])) * 1e3, ttft_p90_ms=(queue + sum(ttft[0.9])) * 1e3,
        ttft_p99_ms=(queue + sum(ttft[0.99])) * 1e3, batch=ld.seqs,
        level_fits=config_fits & (kv_needed <= mem.kv_budget), config_fits=config_fits,
        kv_needed=kv_needed, memory=mem,
    )


def _ttft(c: Cases, f: Factors, ld: _Load, q: float) -> tuple[np.ndarray, np.ndarray]:
    """(waiting, prefill) seconds of the time to first token at quantile q.

    Prefill: the prompt's own chunks (the budget's tokens each, then the rest), each a step that
    also carries the running batch's decodes.
    Waiting: the request's overhead outside the steps; the wait for the step that starts its
    prefill; under attention DP, the wait for the other ranks' prompts; an M/D/1-like wait for
    room in the steps' token budget behind other prompts. Where the figures are timed from
    every client's start, the start burst: all clients' prompts arrive at once and the one at
    quantile q of them waits for those ahead, at the budget's tokens per step (the burst holds
    1 / prompts_per_client of the requests, so it sets the high quantiles)."""
    prompt = c.isl * (1 + (2 * q - 1) * c.spread)
    full = np.floor(prompt / ld.budget + 1e-9)  # chunks that fill a step's budget
    rest = prompt - full * ld.budget
    service = full * ld.t_full + np.where(rest > 0, step_time(c, f, ld.b, ld.seqs, rest, rest),
                                          0.0)
    rho = np.minimum(ld.prompt_load / ld.budget, RHO_MAX)
    theta = service / (2 * (1 - rho))  # mean M/D/1 wait over rho
    boundary = np.maximum(f.admit_steps - 0.5 + q, 0.0) * ld.t
    balance = f.dp_balance_steps * (1 - 1 / c.adp) * ld.t
    steady = boundary + balance + _wait_quantile(rho, theta, q)
    m = c.prompts_per_client
    place = np.where(np.isnan(m), 0.0, 1 - (1 - q) * np.nan_to_num(m))
    steps = np.ceil(place * np.maximum(ld.burst_tokens / c.max_tokens, 1) - 1e-9)
    burst = np.where(place > 0, boundary + steps * ld.t_burst, 0.0)
    waited = np.maximum(steady + service, burst) - service
    return f.request_s + waited, service


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
