"""Prompt sources for the load generator: lists of token ids, sent to the server as-is.

Token ids (not text) make the prompt length exact whatever the tokenizer. Only synthetic prompts
exist so far; natural-text corpora will be further functions here returning the same shape.
"""

from __future__ import annotations

import random
from collections.abc import Iterable


def synthetic_token_prompts(
    n: int, input_len: int, vocab_size: int, seed: int, avoid_ids: Iterable[int] = ()
) -> list[list[int]]:
    """`n` prompts of exactly `input_len` token ids drawn uniformly from [0, vocab_size).

    `avoid_ids` (special tokens: BOS, EOS, chat markers) are never drawn, so a prompt cannot end
    early or change the chat format. The same arguments give the same prompts on every run.
    Random ids also keep distinct prompts from sharing prefixes, so the server's prefix cache does
    not shorten prefill, as long as no prompt is sent twice.
    """
    if n < 0 or input_len < 1 or vocab_size < 1:
        raise ValueError(
            f"need n >= 0, input_len >= 1, vocab_size >= 1: {n}, {input_len}, {vocab_size}")
    avoid = set(avoid_ids)
    allowed = [i for i in range(vocab_size) if i not in avoid]
    if not allowed:
        raise ValueError(f"avoid_ids exclude every id of a vocabulary of {vocab_size}")
    rng = random.Random(seed)
    return [rng.choices(allowed, k=input_len) for _ in range(n)]
