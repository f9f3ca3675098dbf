"""Prompt sources for the load generator: lists of token ids, sent to the server as-is.

Token ids (not text) make the prompt length exact whatever the tokenizer. Two sources: random
token ids (synthetic) and natural text that ships with tuner (corpus), cut into windows by the
served model's own tokenizer.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path


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


CORPUS = Path(__file__).parent / "data" / "corpus.txt"


def corpus_token_prompts(n: int, input_len: int, tokenizer_json: Path, seed: int,
                         corpus: Path = CORPUS) -> list[list[int]]:
    """n prompts of exactly input_len tokens cut from natural text that ships with tuner,
    tokenized by the served model's own tokenizer (its tokenizer.json), at seeded offsets.

    Natural text repeats phrases, as real traffic does; random token ids never do, which makes
    n-gram and draft-model speculation look useless (their acceptance collapses)."""
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(tokenizer_json)).encode(corpus.read_text()).ids
    if len(ids) < input_len:
        raise ValueError(f"the corpus has {len(ids)} tokens, fewer than input_len {input_len}")
    rng = random.Random(seed)
    doubled = ids + ids  # windows may wrap around the end of the text
    return [doubled[(start := rng.randrange(len(ids))):start + input_len] for _ in range(n)]
