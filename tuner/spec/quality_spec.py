"""The study spec's quality gate: the reference answers, the thresholds a trial's answers are
held to, the lossless features, and optional task checks (see tuner.search.quality_gate)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# The tie-aware rule's defaults, chosen from the near-tie bench's measurements (bench/README.md,
# bench/quality_near_ties.py): what another rank layout flips against what a fault flips.
NEAR_TIE_MARGIN = 0.1
MAX_DIVERGING = 0.15
MAX_LOGPROB_DIVERGENCE = 0.1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LosslessSpec(_Strict):
    """Features that must not change what the model says: under greedy decoding, speculative
    decoding gives the tokens the model alone would (vLLM's docs: lossless up to the numerics
    of batching and kernels), so a configuration that turns one on is held to exact match."""

    parameters: list[str] = Field(
        default_factory=lambda: ["speculative_method"], description="Canonical parameters whose "
        "values other than none/false must leave greedy outputs unchanged."
    )
    min_exact_match: float = Field(
        1.0, ge=0, le=1, description="The share of answers such a configuration must match "
        "exactly (1: every one)."
    )
    # A greedy answer is exact only while the arithmetic is: another rank layout reduces in
    # another order, another KV-cache dtype rounds otherwise, and on near-ties either flips
    # tokens the lossless feature did not. The rule holds where these equal the reference's.
    same_numerics: dict[str, Any] = Field(
        default_factory=lambda: {"tensor_parallel_size": 1, "data_parallel_size": 1,
                                 "enable_expert_parallel": False, "kv_cache_dtype": "auto"},
        description="Canonical parameters that change the numerics, each with its value when "
        "neither the configuration nor quality.reference sets it: a configuration whose value "
        "differs from the reference's is judged by the gate's thresholds, not held to exact "
        "match for its lossless feature.",
    )


class TaskCheckSpec(_Strict):
    """Task checks: prompts with known answers, answered greedily by each trial's server."""

    file: str = Field(description='JSONL, one {"prompt" | "messages", "answer"} a line; '
                      "relative to the spec file.")
    match: Literal["exact", "regex"] = Field(
        "exact", description="exact: the answer text, trimmed, equals it; regex: the pattern "
        "is found in the answer."
    )
    min_accuracy: float = Field(0.8, ge=0, le=1, description="The share of tasks answered "
                                "right, at least.")
    max_tokens: int = Field(64, ge=1, le=4096, description="Tokens generated per answer.")


class QualitySpec(_Strict):
    """The quality gate: before the first trial a reference configuration answers a fixed set
    of prompts greedily, once per study; after its measurement each trial's own server answers
    the same prompts the same way, and a configuration whose answers drift from the reference's
    past these thresholds fails as `quality` (it never wins, and is never exported)."""

    enabled: bool = Field(True, description="false: no reference, no gate.")
    reference: dict[str, Any] | None = Field(
        None, description="The reference configuration, in the space's canonical parameters; "
        "default: the engine's defaults under the spec's fixed engine.args (one rank, no "
        "speculation, default precision)."
    )
    prompts: int = Field(32, ge=1, le=1000, description="Prompts answered, from the "
                         "workload's prompt source with the gate's own seed.")
    input_len: int = Field(32, gt=0, le=4096, description="Prompt tokens "
                           "(synthetic and corpus; a prompt file's prompts are its own).")
    max_tokens: int = Field(32, ge=1, le=4096, description="Tokens generated per answer, "
                            "greedily (temperature 0).")
    seed: int = Field(0, description="Seed of the prompts and of every request.")
    # One at a time, each answer is decoded alone: its numerics never depend on which other
    # answers shared its batches, which follows timing (8 at a time on a busy machine, the
    # reference's own configuration matched 14 of its 16 answers).
    concurrency: int = Field(1, ge=1, le=1024, description="Answers requested at once; above "
                             "1, batch composition (timing) can flip near-tied tokens.")
    top_logprobs: int = Field(5, ge=0, le=20, description="Top log-probabilities asked per "
                              "token (the OpenAI API's logprobs), 0: none.")
    near_tie_margin: float = Field(
        NEAR_TIE_MARGIN, gt=0, description="Nats: where a trial's answer first differs from the "
        "reference's, the flip is a near-tie (numerics, not an error) when each token is in "
        "the other side's top log-probabilities and each side ranked the two within this."
    )
    max_diverging: float = Field(
        MAX_DIVERGING, ge=0, le=1, description="The share of answers that may diverge (differ "
        "by more than a near-tie), at most; near-ties alone never fail a configuration."
    )
    max_logprob_divergence: float = Field(
        MAX_LOGPROB_DIVERGENCE, gt=0, description="The mean absolute difference, in nats, "
        "between the reference's and the trial's log-probability of the reference's tokens "
        "where both saw the same text, at most."
    )
    # Without log-probabilities a near-tie cannot be told from a wrong answer: these judge.
    min_exact_match: float = Field(0.5, ge=0, le=1, description="Where the engine returns no "
                                   "log-probabilities: the share of answers that must equal "
                                   "the reference's, at least.")
    min_common_prefix: float = Field(
        0.75, ge=0, le=1, description="Where the engine returns no log-probabilities: the "
        "mean share of each reference answer a trial's answer repeats before it first "
        "differs, at least."
    )
    lossless: LosslessSpec = Field(default_factory=LosslessSpec)
    tasks: TaskCheckSpec | None = Field(None, description="Optional task checks, scored on "
                                        "each trial (no reference needed).")
